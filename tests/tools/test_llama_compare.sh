#!/usr/bin/env bash
# test_llama_compare.sh SRCROOT — tools/llama-compare against stand-ins (TAP).
#
# The real run builds llama.cpp (tens of minutes); this runs every step in
# seconds with small scripts for cmake, the converter's python, llama-bench,
# llama-quantize, requantfs and mountpoint: the portable build's flags and
# targets, the GGUFs made once and reused, the rounds interleaved (ours,
# llama.cpp, ours, ...) with the same thread count on both sides, the table
# (best of the rounds and of llama-bench's repetitions, the ratios), every
# mount unmounted on success, on a failing step and on SIGTERM, bad arguments
# refused (exit 2), and the report refusing an output it cannot read.
set -u
SRC=${1:?usage: test_llama_compare.sh SRCROOT}
LC=$SRC/tools/llama-compare
REPORT=$SRC/tools/llama_compare_report.py
# shellcheck source=tap.sh
. "$(dirname "$0")/tap.sh"

bash -n "$LC" 2>"$T/n.txt"
ok $? "bash -n tools/llama-compare" "$(cat "$T/n.txt")"
if command -v shellcheck >/dev/null; then
	(cd "$SRC" && shellcheck -s bash tools/llama-compare) >"$T/sc.txt" 2>&1
	ok $? "shellcheck tools/llama-compare" "$(cat "$T/sc.txt")"
else
	n=$((n + 1))
	echo "ok $n - shellcheck tools/llama-compare # SKIP shellcheck not installed"
fi
"$LC" --help >"$T/help.txt" 2>&1 && grep -q -- '--rounds N' "$T/help.txt" && grep -q 'GGML_NATIVE=OFF' "$T/help.txt"
ok $? "--help prints the usage, the options and the portable build" "$(cat "$T/help.txt")"
for a in "--bogus" "--threads 0" "--rounds x" "--reps" "--threads -1"; do
	# shellcheck disable=SC2086  # the words of $a are the arguments
	"$LC" $a >"$T/bad.txt" 2>&1
	rc=$?
	[ $rc -eq 2 ] && grep -q "llama-compare: ${a%% *}" "$T/bad.txt"
	ok $? "'$a' is refused, naming the option (exit $rc)" "$(cat "$T/bad.txt")"
done

# ---- the stand-ins ---------------------------------------------------------
F=$T/fake
W=$T/work
M=$T/model
mkdir -p "$F" "$W/llama_cpp_python-0.3.36/vendor/llama.cpp" "$M"
: >"$W/llama_cpp_python-0.3.36/vendor/llama.cpp/convert_hf_to_gguf.py"
echo '{}' >"$M/config.json"
echo weights >"$M/model.safetensors"
export CALLS=$T/calls.log FAKE=$F
: >"$CALLS"
# llama-bench: prefill 200+10*call, decode 50+call; samples [x-5, x] (best: x)
cat >"$F/llama-bench" <<'EOF'
#!/bin/bash
echo "llama $*" >>"$CALLS"
[ "${1:-}" = --version ] && { echo "version: 1 (fake)"; exit 0; }
c=$(grep -c '^llama -m' "$CALLS")
[ -n "${FAIL_AT:-}" ] && [ "$c" -ge "$FAIL_AT" ] && { echo "fake llama-bench: failing" >&2; exit 1; }
[ -n "${SLEEP_AT:-}" ] && [ "$c" -ge "$SLEEP_AT" ] && { touch "$FAKE/sleeping"; sleep 30; }
p=$((200 + 10 * c)); d=$((50 + c))
printf '[{"n_prompt":128,"n_gen":0,"avg_ts":%d,"samples_ts":[%d,%d]},' $((p - 2)) $((p - 5)) "$p"
printf '{"n_prompt":0,"n_gen":64,"avg_ts":%d,"samples_ts":[%d,%d]}]\n' $((d - 2)) $((d - 5)) "$d"
EOF
cat >"$F/llama-quantize" <<'EOF'
#!/bin/bash
echo "quantize $*" >>"$CALLS"
cp "$1" "$2"
EOF
cat >"$T/bin/cmake" <<'EOF'
#!/bin/bash
echo "cmake $*" >>"$CALLS"
if [ "$1" = --build ]; then mkdir -p "$2/bin"; cp "$FAKE/llama-bench" "$FAKE/llama-quantize" "$2/bin/"; fi
exit 0
EOF
# the converter's venv: imports fine, the converter writes a "GGUF"
mkdir -p "$W/venv/bin"
cat >"$W/venv/bin/python" <<'EOF'
#!/bin/bash
[ "$1" = -c ] && exit 0
echo "convert $*" >>"$CALLS"
while [ $# -gt 0 ]; do [ "$1" = --outfile ] && echo GGUF >"$2"; shift; done
EOF
# requantfs: a mount is a marker file; bench engine prints its two lines,
# prefill 100+10*call and decode 40+call
cat >"$F/requantfs" <<'EOF'
#!/bin/bash
echo "rq $*" >>"$CALLS"
case "$1 ${2:-}" in
"mount "*) mkdir -p "$3"; touch "$3/.fake-mounted"; echo '{}' >"$3/config.json" ;;
"umount "*) rm -f "$2/.fake-mounted" "$2/config.json" ;;
"bench engine")
	c=$(grep -c '^rq bench engine' "$CALLS")
	printf 'engine (CPU, 2 threads); baselines: memcpy 9.00 GB/s\n'
	printf '%-10s prefill %4d tokens: %9.1f tok/s (best of 3)\n' "" 128 $((100 + 10 * c))
	printf '%-10s decode  %4d tokens: %9.2f tok/s (best of 3), 1 MB\n' "" 64 $((40 + c)) ;;
*) echo "fake requantfs: $*" >&2; exit 2 ;;
esac
EOF
cat >"$T/bin/mountpoint" <<'EOF'
#!/bin/bash
[ -e "${!#}/.fake-mounted" ]
EOF
chmod +x "$F"/* "$T/bin"/* "$W/venv/bin/python"
export REQUANTFS=$F/requantfs PATH="$T/bin:$PATH"

if ! grep -qw avx2 /proc/cpuinfo || ! grep -qw fma /proc/cpuinfo || ! grep -qw f16c /proc/cpuinfo; then
	n=$((n + 1))
	echo "ok $n - the whole run against stand-ins # SKIP this CPU lacks AVX2/FMA/F16C, which the script requires"
	echo "1..$n"
	exit 0
fi

# ---- a whole run: 2 rounds, 2 threads --------------------------------------
"$LC" --work "$W" --model "$M" --threads 2 --rounds 2 --reps 2 >"$T/run.txt" 2>&1
rc=$?
ok $rc "a whole run exits 0" "$(cat "$T/run.txt")"
cmake_has() { grep '^cmake -S' "$CALLS" | grep -q -- "$1"; }
cmake_has -DGGML_NATIVE=OFF && cmake_has -DGGML_AVX2=ON && cmake_has -DGGML_FMA=ON &&
	cmake_has -DGGML_F16C=ON && grep -q '^cmake --build .* --target llama-bench llama-quantize' "$CALLS"
ok $? "cmake: portable (GGML_NATIVE=OFF, AVX2/FMA/F16C on), targets llama-bench llama-quantize only" \
	"$(grep '^cmake' "$CALLS")"
grep -q "^convert .*convert_hf_to_gguf.py $M --outtype bf16 --outfile $W/gguf/model-bf16.gguf.tmp" "$CALLS" &&
	grep -q "^quantize $W/gguf/model-bf16.gguf $W/gguf/model-q4_0.gguf.tmp Q4_0" "$CALLS" &&
	grep -q "^quantize $W/gguf/model-bf16.gguf $W/gguf/model-q8_0.gguf.tmp Q8_0" "$CALLS"
ok $? "the converter makes the BF16 GGUF, llama-quantize Q4_0 and Q8_0" "$(grep -E '^(convert|quantize)' "$CALLS")"
grep -q "^rq mount $M $W/last-run/mnt/nvfp4a16 --scheme nvfp4a16" "$CALLS" &&
	grep -q "^rq mount $M $W/last-run/mnt/fp8-dynamic --scheme fp8-dynamic" "$CALLS"
ok $? "mounts --scheme nvfp4a16 and --scheme fp8-dynamic" "$(grep '^rq mount' "$CALLS")"

# the order: ours then llama.cpp, per format, round after round
grep -E '^(rq bench|llama -m)' "$CALLS" | sed -E 's#^rq bench engine --model ([^ ]*).*#ours \1#; s#^llama -m ([^ ]*).*#llama \1#' |
	sed "s#$W/last-run/mnt/##; s#$W/gguf/##; s#$M#model#" >"$T/order.txt"
printf '%s\n' "ours model" "llama model-bf16.gguf" "ours nvfp4a16" "llama model-q4_0.gguf" \
	"ours fp8-dynamic" "llama model-q8_0.gguf" "ours model" "llama model-bf16.gguf" \
	"ours nvfp4a16" "llama model-q4_0.gguf" "ours fp8-dynamic" "llama model-q8_0.gguf" >"$T/want.txt"
diff "$T/want.txt" "$T/order.txt" >"$T/d.txt"
ok $? "interleaved: ours, llama.cpp, per format, 2 rounds" "$(cat "$T/d.txt")"
bad=$(grep '^rq bench engine' "$CALLS" | grep -vc -- '--threads 2 --prompt-tokens 128 --decode-tokens 64$')
bad2=$(grep '^llama -m' "$CALLS" | grep -vc -- '-p 128 -n 64 -t 2 -r 2 -o json$')
[ "$bad" = 0 ] && [ "$bad2" = 0 ]
ok $? "the same threads, 128 + 64 tokens on both sides; llama-bench -r 2" "$(grep -E '^(rq bench|llama -m)' "$CALLS")"

# the table: best of the 2 rounds. ours call c: prefill 100+10c, decode 40+c;
# llama call c: best sample prefill 200+10c, decode 50+c. Round 2 is c = 4, 5, 6.
row() { grep -F "| $1" "$T/run.txt"; }
row "BF16 (the HF directory) / BF16 | 140.0 / 240.0 | 0.58 | 44.0 / 54.0 | 0.81 |" >/dev/null &&
	row "NVFP4 (\`--scheme nvfp4a16\` mount) / Q4_0 | 150.0 / 250.0 | 0.60 | 45.0 / 55.0 | 0.82 |" >/dev/null &&
	row "FP8 (\`--scheme fp8-dynamic\` mount) / Q8_0 | 160.0 / 260.0 | 0.62 | 46.0 / 56.0 | 0.82 |" >/dev/null
ok $? "the table: best of the rounds and of the repetitions, ratios ours / llama.cpp" "$(grep '^|' "$T/run.txt")"
grep -q '^machine: .*, [0-9]* cores; load average [0-9.]* [0-9.]* [0-9.]* at the start, ' "$T/run.txt" &&
	grep -q '^date: 20[0-9-]* .*; 2 threads both; best of 2 interleaved rounds' "$T/run.txt" &&
	cmp -s <(sed -n '/^machine:/,/^| FP8/p' "$T/run.txt") "$W/last-run/table.md"
ok $? "the machine, load average and date are printed; the table is saved in last-run/table.md" \
	"$(sed -n '/^machine:/,$p' "$T/run.txt")"
[ "$(grep -c '^rq umount' "$CALLS")" = 2 ] && [ -z "$(find "$W/last-run" -name .fake-mounted)" ]
ok $? "both mounts unmounted at the end" "$(grep '^rq umount' "$CALLS")"
R=$T/rep                        # round 1's outputs, for the report's refusals below
mkdir -p "$R"
cp "$W"/last-run/r1-* "$R/"

# ---- a second run reuses the build and the GGUFs ---------------------------
: >"$CALLS"
"$LC" --work "$W" --model "$M" --threads 2 --rounds 1 --reps 2 >"$T/run2.txt" 2>&1
rc=$?
[ $rc = 0 ] && ! grep -qE '^(cmake|convert|quantize)' "$CALLS" && grep -q 'built before, reused' "$T/run2.txt"
ok $? "a second run rebuilds and reconverts nothing (exit $rc)" "$(cat "$CALLS" "$T/run2.txt")"
touch -d '+1 min' "$M/model.safetensors"
: >"$CALLS"
"$LC" --work "$W" --model "$M" --threads 2 --rounds 1 --reps 2 >"$T/run3.txt" 2>&1
[ "$(grep -cE '^(convert|quantize)' "$CALLS")" = 3 ]
ok $? "newer weights: the GGUFs are made again" "$(cat "$CALLS")"

# ---- a failing step: exit 1, named, mounts unmounted -----------------------
: >"$CALLS"
FAIL_AT=2 "$LC" --work "$W" --model "$M" --threads 2 --rounds 1 >"$T/fail.txt" 2>&1
rc=$?
[ $rc = 1 ] && grep -q 'FAILED: llama-bench -m .*model-q4_0.gguf failed: see .*r1-nvfp4-llama.err' "$T/fail.txt" &&
	[ "$(grep -c '^rq umount' "$CALLS")" = 2 ] && [ -z "$(find "$W/last-run" -name .fake-mounted)" ]
ok $? "llama-bench failing: exit 1 naming it and its log, both mounts unmounted (exit $rc)" \
	"$(cat "$T/fail.txt"; grep '^rq umount' "$CALLS")"

# ---- SIGTERM mid-run: mounts unmounted ---------------------------------------
: >"$CALLS"
rm -f "$F/sleeping"
# its own process group, as a terminal's Ctrl-C signals the script and the tool it waits for
SLEEP_AT=1 setsid "$LC" --work "$W" --model "$M" --threads 2 --rounds 1 >"$T/term.txt" 2>&1 &
pid=$!
for _ in $(seq 1 100); do [ -e "$F/sleeping" ] && break; sleep 0.1; done
kill -TERM -- "-$pid"
wait "$pid"
rc=$?
[ $rc = 130 ] && [ "$(grep -c '^rq umount' "$CALLS")" = 2 ] && [ -z "$(find "$W/last-run" -name .fake-mounted)" ]
ok $? "SIGTERM while llama-bench runs: exit 130, both mounts unmounted" "$(cat "$T/term.txt")"

# ---- a machine without cmake: told what to apt-get install ------------------
mkdir -p "$T/nocmake"
for f in /usr/local/bin/* /usr/bin/* /bin/*; do
	b=${f##*/}
	case $b in cmake) continue ;; esac
	[ -e "$T/nocmake/$b" ] || ln -s "$f" "$T/nocmake/$b"
done
PATH=$T/nocmake "$LC" --work "$W" --model "$M" >"$T/nocm.txt" 2>&1
rc=$?
[ $rc = 1 ] && grep -q 'FAILED: missing cmake: apt-get install cmake$' "$T/nocm.txt"
ok $? "no cmake: exit 1, 'apt-get install cmake' (exit $rc)" "$(cat "$T/nocm.txt")"

# ---- the report refuses what it cannot read ----------------------------------
echo 'error: model not found' >"$R/r1-fp8-llama.json"
python3 "$REPORT" "$R" --prompt 128 --gen 64 --threads 2 --reps 2 >/dev/null 2>"$T/rep.txt"
rc=$?
[ $rc = 1 ] && grep -q "r1-fp8-llama.json: not llama-bench's JSON" "$T/rep.txt"
ok $? "report: a llama-bench output that is not JSON is named (exit $rc)" "$(cat "$T/rep.txt")"
python3 "$REPORT" "$R" --prompt 256 --gen 64 --threads 2 --reps 2 >/dev/null 2>"$T/rep2.txt"
grep -q 'r1-bf16-ours.txt: prefill of 128 tokens, expected 256' "$T/rep2.txt"
ok $? "report: a bench engine output of other lengths is refused" "$(cat "$T/rep2.txt")"

echo "1..$n"
[ "$failed" = 0 ]
