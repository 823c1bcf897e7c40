#!/usr/bin/env bash
# test_gpu_check_mock.sh SRCROOT [REQUANTFS] — tools/gpu-check's whole run,
# every step, against stand-ins for the GPU machine's tools (TAP).
#
# nvidia-smi, meson, ninja, compute-sanitizer and ncu are small scripts here,
# and "ninja" builds a fake requantfs that prints what the real benches print
# (their formats as of this commit). The real run is one 10-minute command on
# a lent GPU; a typo in a step would cost that run, so this test runs every
# step in a few seconds: the good machine must PASS with its figures in
# summary.txt; a wrong byte must FAIL; a sanitizer that refuses the device
# must end "not run", never "pass"; a hung step must be cut at its limit.
# With REQUANTFS (the real binary, built here), the fake one first hands every
# command line to it: one that the real CLI rejects as a usage error (exit 2)
# fails the test, so a renamed option shows here and not on the lent GPU.
set -u
SRC=${1:?usage: test_gpu_check_mock.sh SRCROOT [REQUANTFS]}
REAL=${2:-}
GC=$SRC/tools/gpu-check
# shellcheck source=tap.sh
. "$(dirname "$0")/tap.sh"
B=$T/build
mkdir -p "$T/fake"

# ---- the machine's tools -------------------------------------------------
cat >"$T/bin/nvidia-smi" <<'EOF'
#!/bin/bash
case "$*" in
-L) echo "GPU 0: NVIDIA H200 (UUID: GPU-mock)" ;;
dmon*) echo "# mock dmon"; while sleep 1; do echo "mock 0 100"; done ;;
*query-gpu=name*) echo "NVIDIA H200, 580.00" ;;
*) echo "mock nvidia-smi $*" ;;
esac
EOF
cat >"$T/bin/meson" <<'EOF'
#!/bin/bash
case $1 in
--version) echo 1.0.1 ;;
setup) b=${2:-}; [ "$b" = --reconfigure ] && b=$3; mkdir -p "$b"; : >"$b/build.ninja"; echo "mock meson setup" ;;
introspect)
	b=$(cd "$3" && pwd)
	printf '[{"name":"kquant","suite":["requantfs:gpu"],"cmd":["%s/tests/kernels/test_kquant"]},' "$b"
	printf '{"name":"ek-gpu","suite":["requantfs:gpu"],"cmd":["%s/tests/kernels/test_ek_gpu"]}]\n' "$b" ;;
test)
	shift; b=$2; shift 2
	if [[ " $* " == *" --list "* ]]; then echo "requantfs:gpu / kquant"; echo "requantfs:gpu / ek-gpu"; exit 0; fi
	name=${*: -1}
	t=$b/tests/kernels/test_${name//-/_}
	out=$("$t"); rc=$?
	echo "$out"
	mkdir -p "$b/meson-logs"; echo "$out" >"$b/meson-logs/testlog.txt"; echo '{}' >"$b/meson-logs/testlog.json"
	echo " 1/1 requantfs:gpu / $name $([ $rc = 0 ] && echo OK || echo FAIL)   0.50s"
	exit $rc ;;
esac
EOF
cat >"$T/bin/ninja" <<'EOF'
#!/bin/bash
[ "$1" = --version ] && { echo 1.11.1; exit 0; }
b=; while [ $# -gt 0 ]; do case $1 in -C) b=$2; shift ;; -k) shift ;; -t) echo "tests/kernels/test_kquant: phony"; echo "tests/kernels/test_ek_gpu: phony"; exit 0 ;; -n) echo "ninja: no work to do."; exit 0 ;; esac; shift; done
mkdir -p "$b/tools" "$b/tests/kernels"
cp "$MOCK_FAKE/requantfs" "$b/requantfs"; cp "$MOCK_FAKE/gpu-hold" "$b/tools/gpu-hold"
cp "$MOCK_FAKE/test" "$b/tests/kernels/test_kquant"; cp "$MOCK_FAKE/test" "$b/tests/kernels/test_ek_gpu"
echo "ptxas info    : Used 40 registers, used 0 barriers"
EOF
cat >"$T/bin/compute-sanitizer" <<'EOF'
#!/bin/bash
[ "${MOCK_SAN:-}" = refuse ] && { echo "========= Error: Device not supported"; exit 1; }
bin=${*: -1}; "$bin"; echo "========= ERROR SUMMARY: 0 errors"
EOF
cat >"$T/bin/ncu" <<'EOF'
#!/bin/bash
if [[ " $* " == *" --csv "* ]]; then
	echo '"ID","Process ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'
	echo '"0","1","void k_fill_bf16(int)","gpu__time_duration.sum","ns","900000"'
	for i in 1 2 3; do
		echo "\"$i\",\"1\",\"void k_gemv_nvfp4<4>(float const*)\",\"gpu__time_duration.sum\",\"ns\",\"5000\""
		echo "\"$i\",\"1\",\"k_attn_split(int)\",\"gpu__time_duration.sum\",\"ns\",\"3000\""
		echo "\"$i\",\"1\",\"void k_gemv_bf16<2>(float const*)\",\"gpu__time_duration.sum\",\"ns\",\"4000\""
		echo "\"$i\",\"1\",\"k_add(int)\",\"gpu__time_duration.sum\",\"ns\",\"10\""
	done
else
	echo "  Section: GPU Speed Of Light Throughput"; echo "    Memory Throughput   %   91.2"
fi
EOF
# ---- what the build makes ------------------------------------------------
cat >"$T/fake/test" <<'EOF'
#!/bin/bash
echo "ok 1 - mock case"; echo "1..1"
EOF
cat >"$T/fake/gpu-hold" <<'EOF'
#!/bin/bash
echo "gpu-hold: holding 139000 MiB, free 250 MiB of 143771 MiB"; shift 3; exec "$@"
EOF
cat >"$T/fake/requantfs" <<'EOF'
#!/bin/bash
if [ -n "${MOCK_REAL:-}" ]; then       # the real CLI must accept this command line
	timeout 60 "$MOCK_REAL" "$@" >/dev/null 2>&1 </dev/null
	r=$?
	echo "$r $*" >>"$MOCK_USAGE"
fi
a=" $* "
[ -n "${MOCK_HANG:-}" ] && [[ $a == *" $MOCK_HANG "* ]] && exec sleep 1000
if [[ $a == *" quant "* ]]; then
	if [ -n "${RQ_BENCH_QUANT_LIFECYCLE:-}" ]; then
		if [ "${RQ_BENCH_QUANT_DEVICE:-}" = auto ]; then
			echo "lifecycle: opened on cpu (16 threads); fallback: no usable GPU (out of memory)"
			echo "lifecycle-check job1-bytes ok: job 1 on cpu (16 threads) in 9.0 ms, identical to the CPU's"
		else
			echo "lifecycle-check job1-bytes ok: job 1 on cuda:0 NVIDIA H200 in 3.0 ms, identical to the CPU's"
			echo "lifecycle-check held-after-job1 ok: nvidia-smi lists pid 7 (520 MiB)"
			echo "lifecycle-check released-when-idle ok: nvidia-smi does not list pid 7 (0 MiB)"
		fi
		exit 0
	fi
	ex=yes; [ "${MOCK_BAD:-}" = quant ] && ex=NO
	if [[ $a == *" --observer "* ]]; then
		o=${a#* --observer }; o=${o%% *}
		echo "3072x1024 nvfp4a16 observer $o on GPU+CPU     9.876 ms    0.637 GB/s, CPU job    40.000 ms (16 threads): x4.05; the search on the GPU: yes; same bytes: $ex"
		[ $ex = yes ]; exit
	fi
	for s in "3072 x 1024" "1024 x 3072"; do
		echo "requantfs bench quant --device cuda: NVIDIA H200, [$s] BF16 = 6.0 MiB, recipe fp32, best of 10"
		echo "device, 85 copies (510 MiB)            0.300   2450.5  D2D memcpy of the input     4300.0   0.57  $ex"
		echo "host->host, fused pair                 3.000      6.5  cudaMemcpy H2D + D2H          13.0   0.50  yes"
	done
	[ $ex = yes ]; exit
fi
if [[ $a == *" --help "* ]]; then echo "usage: ... --op NAME ... --decode-at P,P [--logits-out FILE] ..."; exit 0; fi
if [[ $a == *" --op "* ]]; then
	ops=${a#* --op }; ops=${ops%% *}
	for o in ${ops//,/ }; do
		echo "{\"op\":\"$o\",\"shape\":\"x\",\"us\":10.0,\"bytes\":1,\"gbs\":3000.0,\"d2d_gbs\":4300.0,\"ratio\":0.70,\"pdl\":1,\"copies\":2}"
	done
	exit 0
fi
if [[ $a == *" --decode-at "* ]]; then
	f=${a#* --logits-out }; f=${f%% *}
	[[ $a == *" --logits-out "* ]] && printf 'logitslogits' >"$f"
	echo "decode at position 128: 1.000 ms/token, 1000.0 tokens/s (graph replay, device time)"
	echo "decode at position 4096: 1.200 ms/token, 833.3 tokens/s (graph replay, device time)"
	exit 0
fi
echo "copy bandwidth: device->device 4300 GB/s (read + write), host->device 50.1 GB/s"
if [[ $a == *" --layers 48 "* ]]; then
	echo "prefill  1024 tokens:     12000 tokens/s"
	echo "decode at position 1024: 2.900 ms/token, 344.8 tokens/s; 10.10 GB weights + 0.017 GB KV per token = 3489 GB/s, 81% of the device copy bandwidth (4300 GB/s)"
else
	echo "prefill  1024 tokens:     12345 tokens/s"
	echo "prefill  8192 tokens:      9876 tokens/s"
	echo "decode at position 1024: 3.456 ms/token, 289.4 tokens/s; 2.10 GB weights + 0.017 GB KV per token = 612 GB/s, 14% of the device copy bandwidth (4300 GB/s)"
	echo "extrapolated to 48 layers: 2.600 ms/token (0.100 ms + 48 x 0.052 ms), 384.6 tokens/s; 10.12 GB per token: 3892 GB/s, 91% of copy bandwidth; roofline at copy bandwidth 425 tokens/s"
fi
EOF
chmod +x "$T"/bin/* "$T"/fake/*
export PATH="$T/bin:$PATH" MOCK_FAKE=$T/fake MOCK_USAGE=$T/usage.txt
[ -n "$REAL" ] && export MOCK_REAL=$REAL

run() {    # run NAME [VAR=VALUE...]: one whole gpu-check run into $T/NAME
	local name=$1
	shift
	env "$@" OUT="$T/$name" RQ_GPU_BUILD="$B" timeout 200 "$GC" >"$T/$name.txt" 2>&1
}

run good
rc=$?
s=$T/good/summary.txt
[ $rc -eq 0 ] && grep -q 'total .*s; PASS$' "$s"
ok $? "a good machine: exit 0 and PASS (got $rc)" "$(cat "$s" 2>/dev/null || cat "$T/good.txt")"
bad=""
while read -r name; do
	grep -qE "^step $name +PASS " "$s" || bad="$bad $name"
done < <(grep -E '^add_step ' "$GC" | awk '{ print $2 }')
[ -z "$bad" ]
ok $? "every step ran and passed" "failed or missing:$bad"
grep -q '^figure quant-gpu 3072x1024: .* | 0.57 | >= 0.50 of HBM | PASS$' "$s" &&
	grep -q '^figure engine decode 48 layers: *344.8 tok/s.* | 0.81 | >= 0.75 of HBM | PASS$' "$s" &&
	grep -q '^figure engine decode 48 (extrap.): *384.6 tok/s.* | 0.91 | >= 0.75 of HBM | PASS$' "$s" &&
	grep -q '^figure engine prefill 8192 L4: *9876 tok/s' "$s" &&
	grep -q '^figure quant-gpu observer expanded-mse nvfp4a16 3072x1024: .* | 4.05 | no bar | INFO$' "$s"
ok $? "the headline figures: quantizer vs copy, the MSE search on the GPU vs the CPU job, decode at 48 layers, prefill"
grep -q '^figure op moe: *10.0 us, 3000.0 GB/s' "$s" && grep -q '^figure op attn_full@16383: .* | 0.70 | >= 0.60 of copy | PASS$' "$s" &&
	grep -q '^figure op qkvg PDL gain: ' "$s"
ok $? "per-op figures, attention by position, PDL gain"
grep -q '^figure decode EK_PDL=0 pos 4096: *1.200 ms/token' "$s" && grep -q '^figure logits PDL off vs on: *identical .* | PASS$' "$s" &&
	grep -q '^figure logits norms fused vs unfused: *identical .* | PASS$' "$s"
ok $? "decode at 128 and 4096 with PDL off and on, logits identical"
grep -q '^figure jit test kquant: *OK' "$s" && grep -q '^figure jit all kernels (eager): ' "$s"
ok $? "the JIT figures: tests under forced PTX JIT, JIT time"
grep -q '^  lifecycle-check released-when-idle ok' "$s" && grep -q '^  lifecycle-check held-job1-bytes ok: job 1 on cpu' "$s"
ok $? "the life cycle: released when idle; with the card held, the CPU's bytes"
[ "$(grep -c '^  sanitize .*: ok' "$s")" -eq 6 ]
ok $? "memcheck, racecheck and synccheck on both tests"
grep -q '^  hot kernel (name, us in the ranked run, launches): k_gemv_nvfp4 15.0 3$' "$s" &&
	[ "$(grep -c '^  ncu .*: sections written above' "$s")" -eq 3 ] && ! grep -q 'k_fill' "$s"
ok $? "ncu: the three hottest kernels (the weight fill left out), sections for each"
grep -q '40 registers' "$T/good/build.log" && [ -s "$T/good/dmon.log" ]
ok $? "ptxas resource usage in build.log, nvidia-smi dmon in dmon.log"
nf=$(find "$T/good" -type f | wc -l)
[ "$nf" -le 8 ] && [ -z "$(find "$T/good" -mindepth 2)" ] && [ -s "$T/good/tests.log" ] && [ -s "$T/good/bench.log" ]
ok $? "\$OUT: $nf files (<= 8), no folders, the logs filled"

if [ -n "$REAL" ]; then
	nu=$(wc -l <"$T/usage.txt")
	bad=$(awk '$1 == 2' "$T/usage.txt")
	[ "$nu" -ge 15 ] && [ -z "$bad" ]
	ok $? "the real requantfs accepts all $nu command lines of the run (none is a usage error)" "$bad"
else
	n=$((n + 1))
	echo "ok $n - the real requantfs accepts the command lines # SKIP no REQUANTFS given"
fi

run badbytes MOCK_BAD=quant
rc=$?
s=$T/badbytes/summary.txt
[ $rc -eq 1 ] && grep -qE '^step bench-quant +FAIL' "$s" && grep -q '^figure quant-gpu 3072x1024: .*FAIL (bytes differ)$' "$s" &&
	grep -q 'total .*s; FAIL$' "$s"
ok $? "GPU bytes that differ from the CPU's: the step and the figure FAIL, exit 1" "$(cat "$s")"

run refuse MOCK_SAN=refuse
rc=$?
s=$T/refuse/summary.txt
[ $rc -eq 1 ] && grep -qE '^step sanitize +NOT RUN .*no sanitizer run completed' "$s" &&
	grep -q '^  sanitize memcheck test_kquant: not run: compute-sanitizer refused the device' "$s" &&
	grep -q 'INCOMPLETE (steps not run)$' "$s"
ok $? "a sanitizer that refuses the device: not run, never a pass; the run is INCOMPLETE" "$(cat "$s")"

# bench-engine hangs; a 20 s budget: it is cut at what is left, the rest not run
run hang "MOCK_HANG=--prefill 1024,8192" RQ_GPU_BUDGET=20
rc=$?
s=$T/hang/summary.txt
[ $rc -eq 1 ] && grep -qE '^step bench-engine +FAIL .*timed out after' "$s" &&
	grep -qE '^step ncu +NOT RUN: time budget spent' "$s" && grep -q 'total .*s; FAIL$' "$s"
ok $? "a hung bench is cut at the time left; the steps after it say the budget is spent" "$(cat "$s")"
t=$(sed -nE 's/^total ([0-9]+)s.*/\1/p' "$s")
[ -n "$t" ] && [ "$t" -le 24 ]
ok $? "... and the whole run keeps to RQ_GPU_BUDGET=20 plus the kill grace (took ${t:-?}s)"

echo "1..$n"
[ $failed -eq 0 ]
