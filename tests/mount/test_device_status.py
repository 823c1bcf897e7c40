#!/usr/bin/env python3
"""The quantizer device in a real mount's status (qdev/ through
fs/mount_ctl.c and `requantfs status`). TAP output.

Usage: test_device_status.py REQUANTFS
Mounts one mkckpt checkpoint twice, --device cpu and --device auto, each with
its own cache, warms both and checks: the status JSON's device_state,
device_reason, gpu_jobs/cpu_jobs/gpu_failures agree with the device (auto is
"gpu" on a machine with a usable GPU, else "disabled" with the reason, e.g.
a build without CUDA); `requantfs status` prints the reason; and every file
of the two mounts is identical byte for byte (on a GPU machine: the GPU's
bytes through the mount equal the CPU's). Needs root and /dev/fuse."""
import json, os, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402
from rqtap import ok, run  # noqa: E402

rqtap.init(sys.argv[1])


def status(mnt):
    with open(os.path.join(mnt, ".requantfs", "status")) as f:
        return json.load(f)


def files_of(mnt):
    out = {}
    for name in sorted(os.listdir(mnt)):
        with open(os.path.join(mnt, name), "rb") as f:
            out[name] = f.read()
    return out


def body(T):
    mnts = {}
    for dev in ("cpu", "auto"):
        mnt = os.path.join(T["tmp"], "mnt-" + dev)
        rc, out = rqtap.mount(T["src"], mnt, T["cal"], os.path.join(T["tmp"], "cache-" + dev),
                              "--device", dev)
        if not ok(rc == 0, f"mount --device {dev}", out):
            return 1
        mnts[dev] = mnt
        rc, out = run("warm", mnt)
        ok(rc == 0, f"warm --device {dev}", out)

    st = status(mnts["cpu"])
    ok(st.get("device_state") == "cpu" and st.get("device_reason") == "--device cpu" and
       st.get("device", "").startswith("cpu (") and st.get("gpu_jobs") == 0 and
       st.get("cpu_jobs", 0) > 0 and st.get("gpu_failures") == 0,
       "--device cpu: state cpu, reason '--device cpu', jobs on the CPU",
       json.dumps({k: st.get(k) for k in ("device", "device_state", "device_reason",
                                          "gpu_jobs", "cpu_jobs", "gpu_failures")}))
    rc, out = run("status", mnts["cpu"])
    ok(rc == 0 and "--device cpu" in out, "requantfs status prints the reason (cpu)", out)

    st = status(mnts["auto"])
    state, why = st.get("device_state"), st.get("device_reason", "")
    if state == "gpu":
        ok(why == "" and st.get("device", "").startswith("cuda:") and st.get("gpu_jobs", 0) > 0
           and st.get("gpu_failures") == 0 and st.get("gpu_context_bytes", -1) >= 0,
           "--device auto with a usable GPU: state gpu, no reason, jobs on the GPU",
           json.dumps(st, indent=1))
        rc, out = run("status", mnts["auto"])
        ok(rc == 0 and "jobs on the GPU" in out and "beyond --gpu-mem" in out,
           "requantfs status counts GPU jobs and the context", out)
    else:
        ok(state == "disabled" and why.startswith("no usable GPU (") and
           "quantizing on the CPU" in why and st.get("device", "").startswith("cpu (") and
           st.get("gpu_jobs") == 0 and st.get("cpu_jobs", 0) > 0,
           "--device auto without a usable GPU: state disabled with the reason", why)
        rc, out = run("status", mnts["auto"])
        ok(rc == 0 and "no usable GPU (" in out, "requantfs status prints the reason (auto)",
           out)
    a, b = files_of(mnts["cpu"]), files_of(mnts["auto"])
    ok(a == b and len(a) > 0, f"--device cpu and --device auto ({state}) mounts are identical "
       f"byte for byte ({len(a)} files)", [n for n in a if a.get(n) != b.get(n)])
    for mnt in mnts.values():
        rc, out = run("umount", mnt)
        ok(rc == 0, f"umount {mnt}", out)
    return 0


sys.exit(rqtap.root_main("rq-devstatus-", body))
