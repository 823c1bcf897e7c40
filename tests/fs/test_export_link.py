#!/usr/bin/env python3
"""export --link (issue 22), on mkckpt checkpoints:

  symbolic    files identical to SRC are links (relative: SRC and DST share a
              parent), the rewritten ones real files; every byte through the
              links equals a full export's; the engine reads both alike
  hub         a hub snapshot's files link to its blobs
  hard        inodes shared with SRC; DST on another file system is refused
              (EXDEV, says what to do) and leaves no file and no temporary
  cache       after a warmed mount, export --link --cache takes the
              materialized shards: 0 jobs quantized, the same bytes
  plan        `plan` gives the bytes --link writes and links, as export does
  verify      verify DST passes; SRC touched or removed afterwards: verify
              names the files and fails; a full export has no manifest
  faults      a checkpoint file that is a link out of SRC, or a dangling
              one, is refused at export time, naming it

usage: test_export_link.py REQUANTFS      (standard library only; root for tmpfs)
"""
import filecmp, json, os, re, shutil, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap
from rqtap import ok, run


def same_tree(a, b):
    """Names and bytes (links followed) of a and b's files, manifest aside."""
    na = sorted(n for n in os.listdir(a) if not n.startswith("."))
    nb = sorted(n for n in os.listdir(b) if not n.startswith("."))
    if na != nb:
        return False, f"names differ: {na} vs {nb}"
    for n in na:
        if not filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False):
            return False, f"{n} differs"
    return True, ""


def summary(out):
    m = re.search(r"wrote (\d+) files .*?linked (\d+) files .*?; (\d+) jobs quantized, (\d+) jobs and (\d+) files "
                  r"taken from the cache", out)
    return tuple(int(x) for x in m.groups()) if m else None


def main():
    rqtap.init(sys.argv[1])
    work = tempfile.mkdtemp(prefix="rq-exlink-", dir="/var/tmp")
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(work, "xdg"))
    try:
        src, cal = os.path.join(work, "src"), os.path.join(work, "cal")
        rc, out = run("mkckpt", src, "--calib-out", cal)
        if not ok(rc == 0, "mkckpt", out):
            return rqtap.finish()
        full = os.path.join(work, "full")
        rc, out = run("export", src, full, "--calib", cal, "--no-cache", env=env)
        ok(rc == 0, "full export", out)

        # symbolic links
        dl = os.path.join(work, "dl")
        rc, out = run("export", src, dl, "--calib", cal, "--link", env=env)
        s = summary(out)
        ok(rc == 0 and s and s[0] == 5 and s[1] == 9, "export --link: 5 files written, 9 linked", out)
        kinds = {n: os.path.islink(os.path.join(dl, n)) for n in os.listdir(dl) if not n.startswith(".")}
        changed = sorted(n for n, l in kinds.items() if not l)
        ok("config.json" in changed and "model.safetensors.index.json" in changed and
           all(filecmp.cmp(os.path.join(src, n), os.path.join(dl, n), shallow=False)
               for n, l in kinds.items() if l),
           "only config, index and the rewritten shards are real files; the links show SRC's bytes", changed)
        t = os.readlink(os.path.join(dl, "tokenizer.json"))
        ok(t == "../src/tokenizer.json", "a relative link where SRC and DST share a parent", t)
        good, why = same_tree(full, dl)
        ok(good, "every file through the links equals the full export", why)
        rc, out = run("compare", full, dl, "-n", "4")
        ok(rc == 0 and re.search(r"overall.*KL mean 0\.000e\+00", out), "the engine reads the linked export "
           "exactly as the full one (KL 0)", out)
        ok(os.path.isfile(os.path.join(dl, ".requantfs-export.json")), "the manifest is there")

        # plan says the same bytes
        rc, out = run("plan", src, "--calib", cal, "--json")
        try:
            pj = json.loads(out)
            wb = sum(os.path.getsize(os.path.join(dl, n)) for n in changed)
            lb = sum(os.path.getsize(os.path.join(src, n)) for n, l in kinds.items() if l)
            ok(pj["link_written_bytes"] == wb and pj["link_linked_bytes"] == lb,
               "plan --json: link_written_bytes / link_linked_bytes as export made them",
               f"{pj['link_written_bytes']} {pj['link_linked_bytes']} vs {wb} {lb}")
        except ValueError:
            ok(False, "plan --json parses", out)

        # hub snapshot: links to blobs
        hub = os.path.join(work, "hub")
        rc, out = run("mkckpt", hub, "--hub")
        snap = out.strip().splitlines()[-1] if rc == 0 else hub
        dh = os.path.join(work, "dhub")
        rc, out = run("export", snap, dh, "--calib", cal, "--link", env=env)
        links = [os.readlink(os.path.join(dh, n)) for n in os.listdir(dh) if os.path.islink(os.path.join(dh, n))]
        ok(rc == 0 and links and all("/blobs/" in l for l in links), "hub snapshot: the links lead to its blobs",
           out + "\n" + "\n".join(links))

        # hard links
        dhd = os.path.join(work, "dhard")
        rc, out = run("export", src, dhd, "--calib", cal, "--link=hard", env=env)
        ok(rc == 0 and os.stat(os.path.join(dhd, "tokenizer.json")).st_ino ==
           os.stat(os.path.join(src, "tokenizer.json")).st_ino, "--link=hard shares SRC's inodes", out)
        other = "/dev/shm" if os.stat("/dev/shm").st_dev != os.stat(work).st_dev else None
        tmpfs = None
        if other is None:
            tmpfs = os.path.join(work, "tmpfs")
            os.mkdir(tmpfs)
            subprocess.run(["mount", "-t", "tmpfs", "tmpfs", tmpfs], check=True)
            other = tmpfs
        xd = tempfile.mkdtemp(prefix="rq-exlink-x-", dir=other)
        try:
            dx = os.path.join(xd, "d")
            rc, out = run("export", src, dx, "--calib", cal, "--link=hard", env=env)
            ok(rc == 1 and "another file system" in out and "--link" in out,
               "--link=hard across file systems is refused, saying what to do", out)
            left = os.listdir(dx) if os.path.isdir(dx) else []
            ok(left == [], "nothing left in DST, not even a temporary", left)
        finally:
            shutil.rmtree(xd, ignore_errors=True)
            if tmpfs:
                subprocess.run(["umount", tmpfs])

        # after a warmed mount: no quantization
        cache, mnt = os.path.join(work, "cache"), os.path.join(work, "mnt")
        os.mkdir(mnt)
        rc, out = run("mount", src, mnt, "--calib", cal, "--cache", cache)
        if ok(rc == 0, "mount", out):
            rqtap.MOUNTS.append(mnt)
            rc, out = run("warm", mnt)
            ok(rc == 0, "warm", out)
            rc, out = run("umount", mnt)
        dc = os.path.join(work, "dcache")
        rc, out = run("export", src, dc, "--calib", cal, "--link", "--cache", cache, env=env)
        s = summary(out)
        ok(rc == 0 and s and s[2] == 0 and s[4] == 3, "after warm: 0 jobs quantized, 3 shards from the cache", out)
        good, why = same_tree(full, dc)
        ok(good, "and the same bytes as the full export", why)

        # verify
        rc, out = run("verify", dl)
        ok(rc == 0 and "9 of 9 linked files" in out, "verify DST: every link shows what was exported", out)
        rc, out = run("verify", dl, "--against", full, "--quiet")
        ok(rc == 0, "verify DST --against the full export", out)
        rc, out = run("verify", full)
        ok(rc == 2 and "--against" in out, "verify of a full export without --against: usage, says why", out)
        os.utime(os.path.join(src, "model-00001-of-00007.safetensors"))
        os.rename(os.path.join(src, "tokenizer.json"), os.path.join(work, "tokenizer.json"))
        rc, out = run("verify", dl)
        ok(rc == 1 and "CHANGED model-00001-of-00007.safetensors" in out and "CHANGED tokenizer.json" in out
           and "7 of 9" in out, "SRC touched and a file removed: verify names both and fails", out)
        os.rename(os.path.join(work, "tokenizer.json"), os.path.join(src, "tokenizer.json"))

        # faults: a checkpoint file linking out of SRC, a dangling one
        bad = os.path.join(work, "bad")
        shutil.copytree(src, bad, symlinks=True)
        out_file = os.path.join(work, "outside.json")
        shard = "model-00003-of-00007.safetensors"
        shutil.copy(os.path.join(src, shard), out_file)
        os.unlink(os.path.join(bad, shard))
        os.symlink(out_file, os.path.join(bad, shard))
        rc, out = run("export", bad, os.path.join(work, "dbad"), "--calib", cal, "--link", env=env)
        ok(rc != 0 and shard in out, "a shard linking out of SRC is refused, named", out)
        os.unlink(os.path.join(bad, shard))
        shutil.copy(out_file, os.path.join(bad, shard))
        os.symlink(os.path.join(work, "nowhere.json"), os.path.join(bad, "config.json.bak"))
        os.unlink(os.path.join(bad, "model-00002-of-00007.safetensors"))
        os.symlink(os.path.join(work, "gone.safetensors"), os.path.join(bad, "model-00002-of-00007.safetensors"))
        rc, out = run("export", bad, os.path.join(work, "dbad2"), "--calib", cal, "--link", env=env)
        ok(rc != 0 and "model-00002-of-00007.safetensors" in out, "a dangling shard link is refused, named", out)
    finally:
        for m in list(rqtap.MOUNTS):
            subprocess.run([rqtap.RQ, "umount", m], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    return rqtap.finish()


if __name__ == "__main__":
    sys.exit(main())
