#!/usr/bin/env bash
# test_gpu_check.sh SRCROOT — tools/gpu-check on a machine without a GPU (TAP).
#
# A fake nvidia-smi that finds no device comes first on PATH, so the result is
# the same on a CPU box and on a GPU box: every step is listed with its command
# and "not run: no CUDA device" (never a pass), the step limits fit the budget
# and the budget fits the device tool's 10-minute command, a budget that does
# not fit is refused, a real run without a device ends INCOMPLETE (exit 1) with
# every gpu step NOT RUN, and the script passes bash -n and shellcheck.
set -u
SRC=${1:?usage: test_gpu_check.sh SRCROOT}
GC=$SRC/tools/gpu-check
FIG=$SRC/tools/gpu-check-figures.sh
# shellcheck source=tap.sh
. "$(dirname "$0")/tap.sh"
printf '#!/bin/sh\necho "NVIDIA-SMI has failed (test: no device)" >&2\nexit 9\n' >"$T/bin/nvidia-smi"
chmod +x "$T/bin/nvidia-smi"
export PATH="$T/bin:$PATH"

bash -n "$GC" 2>"$T/n.txt" && bash -n "$FIG" 2>>"$T/n.txt" && bash -n "$SRC/tools/gpu-check-build.sh" 2>>"$T/n.txt"
ok $? "bash -n tools/gpu-check and the files it sources" "$(cat "$T/n.txt")"
if command -v shellcheck >/dev/null; then
	(cd "$SRC" && shellcheck -x -s bash tools/gpu-check tools/gpu-check-figures.sh tools/gpu-check-build.sh) \
		>"$T/sc.txt" 2>&1
	ok $? "shellcheck tools/gpu-check and the files it sources" "$(cat "$T/sc.txt")"
else
	n=$((n + 1))
	echo "ok $n - shellcheck tools/gpu-check and the files it sources # SKIP shellcheck not installed"
fi

# the step table, from the script itself: NAME LIMIT
grep -E '^add_step ' "$GC" | awk '{ print $2, $3 }' >"$T/steps.txt"
nsteps=$(wc -l <"$T/steps.txt")
[ "$nsteps" -ge 10 ]
ok $? "the script declares its steps ($nsteps)"

"$GC" --dry-run >"$T/dry.txt" 2>&1
rc=$?
ok $rc "--dry-run exits 0" "$(cat "$T/dry.txt")"

# every step: listed, with a command, then "not run: no CUDA device"
bad=""
while read -r name limit; do
	awk -v s="$name" -v l="$limit" '
		$1 == "step" && $2 == s { found = 1; lim = ($4 == l "s"); next }
		found == 1 && /^    command: ./ { cmd = 1; found = 2; next }
		found == 2 { nr = ($0 == "    not run: no CUDA device"); found = 3 }
		END { exit !(lim && cmd && nr) }' "$T/dry.txt" || bad="$bad $name"
done <"$T/steps.txt"
[ -z "$bad" ]
ok $? "every step is listed with its limit and command and says 'not run: no CUDA device'" \
	"bad:$bad"
! grep -qE 'PASS|^ok' "$T/dry.txt"
ok $? "--dry-run reports nothing as passed"
grep -c '^    not run: no CUDA device$' "$T/dry.txt" | grep -qx "$nsteps"
ok $? "as many 'not run' lines as steps"

# budget arithmetic: limits <= budget <= 600 s - margin, and the script agrees
sum=$(awk '{ s += $2 } END { print s }' "$T/steps.txt")
budget=$(sed -nE 's/^BUDGET=\$\{RQ_GPU_BUDGET:-([0-9]+)\}$/\1/p' "$GC")
grace=$(sed -nE 's/^KILL_GRACE=([0-9]+) .*/\1/p' "$GC")
worst=$((${budget:-9999} + ${grace:-9999} * nsteps))
[ -n "$budget" ] && [ -n "$grace" ] && [ "$sum" -le "$budget" ] && [ "$worst" -le 590 ]
ok $? "step limits ${sum}s <= budget ${budget}s; + ${grace}s kill grace x $nsteps steps = ${worst}s <= 590s (one 600 s command)"
grep -q "^budget: sum of step limits ${sum}s <= budget ${budget}s; worst case .* ${worst}s <= command limit 600s - 10s: fits$" "$T/dry.txt"
ok $? "--dry-run prints the same arithmetic and 'fits'" "$(grep '^budget' "$T/dry.txt")"
# the check can fail: a smaller budget does not fit
RQ_GPU_BUDGET=$((sum - 1)) "$GC" --dry-run >"$T/dry2.txt" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q 'DOES NOT FIT' "$T/dry2.txt"
ok $? "a budget of $((sum - 1))s is reported as not fitting (exit $rc)"
RQ_GPU_BUDGET=$((590 - ${grace:-0} * nsteps + 1)) "$GC" --dry-run >/dev/null 2>&1
[ $? -eq 2 ]
ok $? "a budget whose worst case passes the 10-minute command is refused (exit 2)"
"$GC" --no-such-option >/dev/null 2>&1
[ $? -eq 2 ]
ok $? "an unknown option is a usage error (exit 2)"

# priority order: build first, then the correctness suite, then the figures
pos() { grep -n "^$1 " "$T/steps.txt" | cut -d: -f1; }
[ "$(pos build)" -lt "$(pos test-gpu)" ] && [ "$(pos test-gpu)" -lt "$(pos bench-quant)" ] &&
	[ "$(pos bench-quant)" -lt "$(pos bench-engine)" ] && [ "$(pos bench-engine)" -lt "$(pos ncu)" ]
ok $? "steps in priority order (build, test-gpu, bench-quant, bench-engine ... ncu)"

"$GC" --dry-run --only bench-quant >"$T/only.txt" 2>&1
grep -A2 '^step bench-engine' "$T/only.txt" | grep -q 'not run: not in --only'
ok $? "--only: the other gpu steps are marked 'not in --only'"

# a real run without a device: nothing passes, the summary says why
OUT=$T/out timeout 60 "$GC" >"$T/run.txt" 2>&1
rc=$?
[ $rc -eq 1 ]
ok $? "a run without a device exits 1 (got $rc)" "$(cat "$T/run.txt")"
s=$T/out/summary.txt
bad=""
while read -r name _; do
	[ "$name" = env ] && continue
	grep -qE "^step $name +NOT RUN: no CUDA device$" "$s" 2>/dev/null || bad="$bad $name"
done <"$T/steps.txt"
[ -f "$s" ] && [ -z "$bad" ]
ok $? "every step but env is NOT RUN: no CUDA device in summary.txt" "bad:$bad
$(cat "$s" 2>/dev/null)"
grep -q 'INCOMPLETE (steps not run)$' "$s" 2>/dev/null && ! grep -qE '^figure .*PASS$' "$s"
ok $? "the run ends INCOMPLETE, with no figure passed" "$(tail -3 "$s" 2>&1)"
nfiles=$(find "$T/out" -type f 2>/dev/null | wc -l)
badname=$(find "$T/out" -type f 2>/dev/null | sed 's#.*/##' | grep -cvE '^[A-Za-z0-9._-]+$')
[ -d "$T/out" ] && [ "$nfiles" -le 8 ] && [ "$badname" -eq 0 ] && [ -z "$(find "$T/out" -mindepth 2 -type f)" ]
ok $? "\$OUT holds $nfiles files (<= 8), plain names, no folders"

# the parsers: figures from the benches' own output formats, verdicts on the bars
mkdir -p "$T/fig"
cat >"$T/fig/bench-quant.txt" <<'EOF'
requantfs bench quant --device cuda: NVIDIA H200, [3072 x 1024] BF16 = 6.0 MiB, recipe fp32, best of 10
device, 85 copies (510 MiB)            0.300   2450.5  D2D memcpy of the input     4300.0   0.57  yes
host->host, fused pair                 3.000      6.5  cudaMemcpy H2D + D2H          13.0   0.50  yes
requantfs bench quant --device cuda: NVIDIA H200, [1024 x 3072] BF16 = 6.0 MiB, recipe fp32, best of 10
device, 85 copies (510 MiB)            0.300   1900.5  D2D memcpy of the input     4300.0   0.44  yes
requantfs bench quant --device cuda: NVIDIA H200, [2048 x 2048] BF16 = 8.0 MiB, recipe fp32, best of 10
device, 64 copies (512 MiB)            0.300   3000.0  D2D memcpy of the input     4300.0   0.70  NO
3072x1024 nvfp4a16 observer mse on GPU+CPU     9.876 ms    0.637 GB/s, CPU job    40.000 ms (16 threads): x4.05; the search on the GPU: yes; same bytes: yes
3072x1024 nvfp4a16 observer expanded-mse on GPU+CPU    20.000 ms    0.315 GB/s, CPU job   100.000 ms (16 threads): x5.00; the search on the GPU: no cuda:0 out of memory; same bytes: yes
EOF
cat >"$T/fig/engine-48.txt" <<'EOF'
copy bandwidth: device->device 4301 GB/s (read + write), host->device 50.1 GB/s
prefill  1024 tokens:     12345 tokens/s
decode at position 1024: 2.900 ms/token, 344.8 tokens/s; 10.10 GB weights + 0.017 GB KV per token = 3489 GB/s, 81% of the device copy bandwidth (4301 GB/s)
EOF
cat >"$T/fig/bench-engine.txt" <<'EOF'
copy bandwidth: device->device 4301 GB/s (read + write), host->device 50.1 GB/s
decode at position 1024: 3.456 ms/token, 289.4 tokens/s; 2.10 GB weights + 0.017 GB KV per token = 612 GB/s, 14% of the device copy bandwidth (4301 GB/s)
extrapolated to 48 layers: 4.000 ms/token (0.100 ms + 48 x 0.081 ms), 250.0 tokens/s; 10.12 GB per token: 2530 GB/s, 59% of copy bandwidth; roofline at copy bandwidth 425 tokens/s
decode GEMV per weight format (T = 1, cold weights, median of 20 graph replays; device->device copy 4290 GB/s, read + write, this run):
format bf16   [11336 x 3072]: 69.65 MB of weights per call, 25.00 us, 2786 GB/s of weights, 64.9% of the copy (4290 GB/s)
format nvfp4  [11336 x 3072]: 19.60 MB of weights per call, 9.80 us, 2000 GB/s of weights, 46.6% of the copy (4290 GB/s)
format fp8    [11336 x 3072]: 34.87 MB of weights per call, 14.00 us, 2491 GB/s of weights, 58.1% of the copy (4290 GB/s)
format int8   [11336 x 3072]: 35.91 MB of weights per call, 15.00 us, 2394 GB/s of weights, 55.8% of the copy (4290 GB/s)
format int4   [11336 x 3072]: 18.50 MB of weights per call, 10.00 us, 1850 GB/s of weights, 43.1% of the copy (4290 GB/s)
EOF
# shellcheck disable=SC2034,SC2317  # TMPD, note and figure are the sourced file's inputs
(
	TMPD=$T/fig
	note() { echo "$*" >>"$T/fig/summary"; }
	figure() { note "figure $1: $2 | $3 | $4 | $5 | $6"; }
	# shellcheck source=/dev/null
	. "$FIG"
	quant_figures
	engine_figures engine-48 48
	engine_figures bench-engine 4
	: >"$T/fig/empty.txt"
	engine_figures empty 4
)
f=$T/fig/summary
grep -q '^figure quant-gpu 3072x1024: 2450.5 GB/s.* | D2D copy 4300.0 GB/s (read + write) | 0.57 | >= 0.50 of HBM | PASS$' "$f"
ok $? "quant figure: 2450.5 GB/s against the same run's 4300.0 GB/s copy is 0.57, PASS" "$(cat "$f")"
grep -q '^figure quant-gpu 1024x3072: .* | 0.44 | >= 0.50 of HBM | FAIL$' "$f"
ok $? "quant figure: a ratio of 0.44 FAILS the 0.50 bar"
grep -q '^figure quant-gpu 2048x2048: .* | 0.70 | .* | FAIL (bytes differ)$' "$f"
ok $? "quant figure: fast but not bit-exact FAILS"
grep -q '^figure quant-gpu observer mse nvfp4a16 3072x1024: 9.876 ms (search on the GPU: yes; same bytes: yes) | CPU job 40.000 ms (16 threads) | 4.05 | no bar | INFO$' "$f" &&
	grep -q '^figure quant-gpu observer expanded-mse nvfp4a16 3072x1024: .* | 5.00 | no bar | FAIL$' "$f"
ok $? "quant figures: the MSE job with the search on the GPU vs the same run's CPU job; a search that fell back to the CPU FAILS" "$(grep observer "$f")"
grep -q '^figure engine decode 48 layers: 344.8 tok/s, 3489 GB/s.* | D2D copy 4301 GB/s | 0.81 | >= 0.75 of HBM | PASS$' "$f"
ok $? "engine figure: 48 layers at 3489 of 4301 GB/s is 0.81, PASS" "$(grep engine "$f")"
grep -q '^figure engine decode 48 (extrap.): 250.0 tok/s, 2530 GB/s .* | 0.59 | >= 0.75 of HBM | FAIL$' "$f"
ok $? "engine figure: the 48-layer extrapolation at 0.59 FAILS the 0.75 bar"
grep -q '^figure engine decode 4 layers: .* | 0.14 | no bar' "$f" && grep -q 'engine prefill 1024 L48: 12345 tok/s' "$f"
ok $? "engine figures: 4 layers have no bar; prefill tok/s reported"
grep -q '^figure engine decode GEMV bf16: 2786 GB/s of bf16 weights (\[11336x3072\], T = 1, cold) | D2D copy 4290 GB/s | 0.65 | no bar | INFO$' "$f" &&
	grep -q '^figure engine decode GEMV nvfp4: 2000 GB/s .* | D2D copy 4290 GB/s | 0.47 | no bar | INFO$' "$f" &&
	grep -q '^figure engine decode GEMV int4: 1850 GB/s of int4 weights (\[11336x3072\], T = 1, cold) | D2D copy 4290 GB/s | 0.43 | no bar | INFO$' "$f" &&
	[ "$(grep -c '^figure engine decode GEMV' "$f")" = 5 ]
ok $? "engine figures: decode GEMV weight GB/s per format against the same run's copy" "$(grep GEMV "$f")"
grep -q 'no figures parsed' "$f"
ok $? "an engine run without its lines says so instead of a figure"

cat >"$T/fig/ops.txt" <<'EOF'
pdl {"op":"qkvg","shape":"3072 -> 9512","us":14.5,"bytes":58490880,"gbs":4033.9,"d2d_gbs":4300.0,"ratio":0.94,"pdl":1,"copies":4}
@128 {"op":"attn_sliding","shape":"x","us":5.0,"bytes":1,"gbs":500.0,"d2d_gbs":4300.0,"ratio":0.12,"pdl":1,"copies":2}
nopdl {"op":"qkvg","shape":"x","us":16.0,"bytes":1,"gbs":3600.0,"d2d_gbs":4300.0,"ratio":0.84,"pdl":0,"copies":4}
EOF
cat >"$T/fig/pdl.txt" <<'EOF'
=== EK_PDL=0
decode at position 4096: 1.300 ms/token, 769.2 tokens/s (graph replay, device time)
=== EK_PDL=1
decode at position 4096: 1.200 ms/token, 833.3 tokens/s (graph replay, device time)
logits PDL off vs on: identical (802816 bytes)
logits norms fused vs unfused FAIL: max|a-b|/max|a| = 0.1 (bar 1e-5)
EOF
# shellcheck disable=SC2034,SC2317
(
	TMPD=$T/fig
	SUMMARY=$T/fig/summary2
	note() { echo "$*" >>"$SUMMARY"; }
	figure() { note "figure $1: $2 | $3 | $4 | $5 | $6"; }
	# shellcheck source=/dev/null
	. "$FIG"
	ops_figures
	pdl_figures
)
f=$T/fig/summary2
grep -q '^figure op qkvg: 14.5 us, 4033.9 GB/s | D2D copy 4300.0 GB/s | 0.94 | no bar | INFO$' "$f" &&
	grep -q '^figure op attn_sliding@128: 5.0 us' "$f" && grep -q '^figure op qkvg nopdl: 16.0 us' "$f"
ok $? "op figures: us and GB/s against the same run's copy, per position and without PDL" "$(cat "$f")"
grep -q '^figure op qkvg PDL gain: 14.5 us with PDL | 16.0 us with EK_PDL=0 | 1.10 |' "$f" &&
	grep -q '^figure decode pos 4096 PDL gain: 1.200 ms/token with PDL | 1.300 ms/token with EK_PDL=0 | 1.08 |' "$f"
ok $? "PDL gain figures: the same op and position without and with PDL"
grep -q '^figure logits PDL off vs on: identical (802816 bytes) | .* | PASS$' "$f" &&
	grep -q '^figure logits norms fused vs unfused: .* | FAIL$' "$f"
ok $? "logits figures: identical passes, a 0.1 difference fails"

echo "1..$n"
[ $failed -eq 0 ]
