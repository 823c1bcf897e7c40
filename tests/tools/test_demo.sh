#!/usr/bin/env bash
# test_demo.sh SRCROOT REQUANTFS — tools/demo, whole, in a directory whose
# name needs quoting (a space and a '), TAP output. Every command the demo
# prints is what it runs (eval of the printed line), so its passing proves
# the lines paste; also: each "$ " line parses (bash -n) and splits back
# (shlex) into the paths it was made of; the glob is printed as typed, no
# /dev/fd/ from process substitution; the output is valid UTF-8; status after
# the full read says the shards are about to be materialized; nothing is
# left mounted. Needs /dev/fuse (suite fs).
set -u
SRC=${1:?usage: test_demo.sh SRCROOT REQUANTFS}
RQ=$(realpath "${2:?usage: test_demo.sh SRCROOT REQUANTFS}")
# shellcheck source=tap.sh
. "$(dirname "$0")/tap.sh"
if [ ! -e /dev/fuse ]; then
	echo "1..0 # SKIP /dev/fuse is missing (modprobe fuse)"
	exit 0
fi
D="$T/demo dir's"
mkdir -p "$D"
# as a user runs it: without meson's MALLOC_PERTURB_ (it fills every large buffer: 10x slower)
env -u MALLOC_PERTURB_ DEMO_NO_SETUP=1 DEMO_RQ="$RQ" DEMO_DIR="$D/out" timeout 540 bash "$SRC/tools/demo" >"$T/out.txt" 2>&1
rc=$?
ok $rc "tools/demo in a directory named with a space and a ' exits 0" "$(tail -30 "$T/out.txt")"
grep -q '^demo: done' "$T/out.txt"
ok $? "it ends with 'demo: done'" "$(tail -5 "$T/out.txt")"

grep '^\$ ' "$T/out.txt" | cut -c3- >"$T/lines.txt"
nl=$(wc -l <"$T/lines.txt")
[ "$nl" -ge 10 ]
ok $? "it prints its commands ($nl)" "$(cat "$T/lines.txt")"
bad=""
while IFS= read -r line; do
	bash -n -c "$line" 2>/dev/null || bad+="$line"$'\n'
done <"$T/lines.txt"
[ -z "$bad" ]
ok $? "every printed command parses as a shell line" "$bad"
! grep -q '/dev/fd/' "$T/out.txt"
ok $? "no /dev/fd/ path (process substitution) in what it prints" "$(grep '/dev/fd/' "$T/out.txt")"

python3 - "$D/out/mnt" "$T/lines.txt" >"$T/glob.txt" 2>&1 <<'PY'
import shlex, sys
mnt, lines = sys.argv[1], open(sys.argv[2]).read().splitlines()
tail = "/*.safetensors | wc -c"
hit = [l for l in lines if l.startswith("cat ") and l.endswith(tail)
       and shlex.split(l[4:-len(tail)]) == [mnt]]
print("\n".join(lines))
sys.exit(0 if hit else 1)
PY
ok $? "the glob is printed as typed: cat MNT/*.safetensors | wc -c (MNT quoted)" "$(cat "$T/glob.txt")"
python3 - "$D/out" "$RQ" "$T/lines.txt" >"$T/split.txt" 2>&1 <<'PY'
import shlex, sys
d, rq, lines = sys.argv[1], sys.argv[2], open(sys.argv[3]).read().splitlines()
want = [[rq, "mkckpt", d + "/src", "--calib-out", d + "/calib"],
        [rq, "mount", d + "/src", d + "/mnt", "--calib", d + "/calib", "--cache", d + "/cache"],
        [rq, "verify", d + "/mnt", "--against", d + "/calib", "--tensors",
         "layers\\.4[0-7]\\.mlp\\.experts", "--quiet"],
        [rq, "generate", d + "/real-mnt", "--chat", "--prompt", "What is the capital of France?",
         "--temperature", "0", "--max-tokens", "32"],
        [rq, "compare", ".models/SmolLM2-135M-Instruct", d + "/real-mnt", "--text",
         "/usr/share/common-licenses/GPL-3", "--tokens", "512"]]
got = [shlex.split(l) for l in lines]
miss = [w for w in want if w not in got]
print("\n".join(map(repr, miss)))
sys.exit(1 if miss else 0)
PY
ok $? "printed commands split back into the very paths and arguments (shlex)" "$(cat "$T/split.txt")"
python3 -c 'import sys; open(sys.argv[1], "rb").read().decode("utf-8")' "$T/out.txt" 2>"$T/u8.txt"
ok $? "everything printed (generate's text included) is valid UTF-8" "$(cat "$T/u8.txt")"
grep -q 'about to be materialized\|0 requantized shards pending' "$T/out.txt"
ok $? "status after the full read says the shards are about to be materialized" \
	"$(sed -n '/what the mount did/,/SRC/p' "$T/out.txt")"
sed -n '/ask it, through the mount/,/^== /p' "$T/out.txt" | grep -q 'Paris'
ok $? "the real model answers from its NVFP4 mount: Paris" "$(sed -n '/ask it, through the mount/,/^== /p' "$T/out.txt")"
grep -Eq '^ppl A [0-9.]+ B [0-9.]+$' "$T/out.txt"
ok $? "compare prints the perplexity of the source and of the mount" "$(grep -A3 '^ppl' "$T/out.txt")"
! mountpoint -q "$D/out/mnt" && ! mountpoint -q "$D/out/real-mnt"
ok $? "nothing left mounted"
mountpoint -q "$D/out/mnt" && fusermount3 -u -z "$D/out/mnt"
mountpoint -q "$D/out/real-mnt" && fusermount3 -u -z "$D/out/real-mnt"
echo "1..$n"
[ "$failed" -eq 0 ]
