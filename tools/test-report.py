#!/usr/bin/env python3
"""tools/test-report.py EXTRA_FAILED TESTLOG.json... — the end of tools/test:
for each test that did not pass, the lines that say why, then one line
"N passed, N failed, N skipped" (EXTRA_FAILED adds failures that have no log,
e.g. a build that did not run). Exit 1 when anything failed.

Why a test failed, from meson's testlog.json (each test's stdout, and its
stderr when meson kept it apart): its TAP "not ok" lines with the "#" lines
under them and any "Bail out!"; a test that printed none of those (a crash,
a time-out, a short plan, a test that is not TAP) shows the last lines of
its output instead. meson's own --print-errorlogs shows only "exited with
status code 1" for a TAP test, and the reason stays in testlog.txt."""
import json, sys

PASS = ("OK", "EXPECTEDFAIL")
SKIP = ("SKIP",)
PER_FAILURE = 25     # lines kept under one "not ok"
PER_TEST = 80        # lines kept for one test
TAIL = 15            # last lines shown when there is no "not ok"


def reasons(out, err):
    """The lines of one test's output that say why it failed."""
    keep, collect, under = [], False, 0
    for line in out.splitlines():
        if line.startswith(("not ok", "Bail out!")):
            keep.append(line)
            collect, under = True, 0
        elif collect and line.startswith("#"):
            if under < PER_FAILURE:
                keep.append(line)
            under += 1
        else:
            collect = False
    if not keep:
        keep = ['(no "not ok" line; the last lines of its output:)']
        keep += ["  " + l for l in out.splitlines()[-TAIL:]]
    errs = [l for l in err.splitlines()      # (meson's own line says only the exit code)
            if l.strip() and not l.startswith("(test program exited with status code")]
    fresh = [l for l in errs[-TAIL:] if l not in keep]
    if fresh:
        keep += ["(stderr, last lines:)"] + ["  " + l for l in fresh]
    if len(keep) > PER_TEST:
        keep = keep[:PER_TEST] + [f"... {len(keep) - PER_TEST} more lines"]
    return keep


def main(argv):
    extra = int(argv[1]) if len(argv) > 1 else 0
    passed, failed, skipped = 0, extra, 0
    report = []
    for log in argv[2:]:
        txt = log[:-len(".json")] + ".txt" if log.endswith(".json") else log
        for line in open(log, errors="replace"):
            t = json.loads(line)
            r = t.get("result", "")
            if r in PASS:
                passed += 1
            elif r in SKIP:
                skipped += 1
            else:
                failed += 1
                head = (f"FAIL {t.get('name', '?')} ({r.lower()}, exit "
                        f"{t.get('returncode', '?')}, {t.get('duration', 0):.1f} s)")
                body = reasons(t.get("stdout") or "", t.get("stderr") or "")
                report.append((head, body, txt))
    if report:
        print(f"\n== why {len(report)} test{'s' if len(report) > 1 else ''} failed ==")
        for head, body, txt in report:
            print(head)
            for l in body:
                print("    " + l)
            print(f"    (whole output: {txt})")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
