#!/usr/bin/env python3
"""tools/test-report.py on made-up meson logs (TAP output).

Usage: test_report.py SRCROOT

A log with a passing, a skipped, a TAP-failing, a crashing and a timed-out
test: the counts line, a "why" block per failure with the "not ok" lines and
the "#" lines under them (not the "#" lines under passing ones), the
traceback of the crash from its stderr, the last lines of the timed-out
test, the path of the whole log, exit 1; a log where all pass: no "why"
block, exit 0; failures without a log (the first argument) are counted."""
import json, os, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from rqtap import ok, finish  # noqa: E402

REPORT = os.path.join(sys.argv[1], "tools", "test-report.py")


def log(path, tests):
    with open(path, "w") as f:
        for t in tests:
            f.write(json.dumps(t) + "\n")


def report(*args):
    p = subprocess.run([sys.executable, REPORT, *args], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    tmp = tempfile.mkdtemp(prefix="rq-report-")
    mixed = os.path.join(tmp, "testlog.json")
    log(mixed, [
        {"name": "fs / ok", "result": "OK", "returncode": 0, "duration": 1.0,
         "stdout": "ok 1 - fine\n# chatter under a pass\n1..1\n"},
        {"name": "fs / skip", "result": "SKIP", "returncode": 77, "duration": 0.1,
         "stdout": "1..0 # SKIP no /dev/fuse\n"},
        {"name": "fs / deploy", "result": "FAIL", "returncode": 1, "duration": 9.3,
         "stdout": "ok 1 - mkckpt\nnot ok 2 - non-root mount\n#   runuser: failed to execute "
                   "/root/requantfs/build/requantfs: Permission denied\nok 3 - later\n"
                   "# note after a pass\nnot ok 4 - umount\n#   still mounted\n1..4\n"},
        {"name": "unit / crash", "result": "ERROR", "returncode": 1, "duration": 0.5,
         "stdout": "ok 1 - started\n",
         "stderr": "Traceback (most recent call last):\n  File \"x.py\", line 3\n"
                   "ValueError: boom in x.py\n"},
        {"name": "fs / slow", "result": "TIMEOUT", "returncode": -15, "duration": 600.0,
         "stdout": "".join(f"ok {i} - step {i}\n" for i in range(1, 40)) + "waiting for umount\n"},
    ])
    rc, out = report("0", mixed)
    ok(rc == 1 and out.rstrip().endswith("1 passed, 3 failed, 1 skipped"),
       "the counts line last, exit 1", out)
    ok("== why 3 tests failed ==" in out, "a 'why' block for the failures", out)
    ok("FAIL fs / deploy (fail, exit 1, 9.3 s)" in out and "not ok 2 - non-root mount" in out
       and "Permission denied" in out and "not ok 4 - umount" in out and "still mounted" in out,
       "a TAP failure: its 'not ok' lines and the '#' lines under them", out)
    ok("chatter under a pass" not in out and "note after a pass" not in out
       and "ok 3 - later" not in out, "nothing from passing lines or passing tests", out)
    ok("ValueError: boom in x.py" in out and "(stderr, last lines:)" in out,
       "a crash: the end of its stderr", out)
    ok("FAIL fs / slow (timeout" in out and "waiting for umount" in out and "step 38" in out
       and "step 2\n" not in out, "no 'not ok' line (time-out): the last lines of its output", out)
    ok(out.count("(whole output: " + os.path.join(tmp, "testlog.txt") + ")") == 3,
       "each block names the whole log", out)

    good = os.path.join(tmp, "good.json")
    log(good, [{"name": "a", "result": "OK", "stdout": "ok 1\n1..1\n"},
               {"name": "b", "result": "EXPECTEDFAIL", "stdout": ""}])
    rc, out = report("0", good)
    ok(rc == 0 and out.strip() == "2 passed, 0 failed, 0 skipped", "all pass: the counts only, exit 0", out)
    rc, out = report("1", good, mixed)
    ok(rc == 1 and out.rstrip().endswith("3 passed, 4 failed, 1 skipped"),
       "several logs and failures without a log are counted together", out)
    for f in (mixed, good):
        os.unlink(f)
    os.rmdir(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
