#!/usr/bin/env bash
# test_setup.sh SRCROOT — tools/setup's reporting, without installing
# anything (TAP): bash -n and shellcheck of tools/setup, tools/test and
# tools/demo; its progress filter on made-up apt and pip output (a line at
# each quarter of the packages, pip's own "Collecting" lines without their
# "(from ...)"; every line kept in the log); a run of one phase (fuse) ends
# with the phase's time; an unknown phase fails.
set -u
SRC=${1:?usage: test_setup.sh SRCROOT}
# shellcheck source=tap.sh
. "$(dirname "$0")/tap.sh"

bad=""
for f in setup test demo; do
	bash -n "$SRC/tools/$f" 2>>"$T/n.txt" || bad+=" $f"
done
[ -z "$bad" ]
ok $? "bash -n tools/setup, tools/test, tools/demo" "$(cat "$T/n.txt")"
if command -v shellcheck >/dev/null; then
	(cd "$SRC" && shellcheck -s bash tools/setup tools/test tools/demo) >"$T/sc.txt" 2>&1
	ok $? "shellcheck tools/setup, tools/test, tools/demo" "$(cat "$T/sc.txt")"
else
	n=$((n + 1))
	echo "ok $n - shellcheck tools/setup, tools/test, tools/demo # SKIP shellcheck not installed"
fi

# the progress filter, taken from tools/setup itself
sed -n '/^progress() {/,/^}/p' "$SRC/tools/setup" >"$T/progress.sh"
say() { :; }
# shellcheck disable=SC1091
. "$T/progress.sh"
export SETUP_LOG="$T/tool.log"
for i in 1 2 3 4 5 6 7 8; do echo "Get:$i http://deb.debian.org/debian bookworm/main p$i"; done >"$T/apt.txt"
for i in 1 2 3 4 5 6 7 8; do echo "Unpacking p$i (1.0) ..."; echo "Setting up p$i (1.0) ..."; done >>"$T/apt.txt"
progress packages 8 downloaded=^Get: unpacked=^Unpacking set-up=^Setting.up <"$T/apt.txt" 2>"$T/p.txt"
want="setup: packages: downloaded 2/8
setup: packages: downloaded 4/8
setup: packages: downloaded 6/8
setup: packages: downloaded 8/8"
[ "$(grep downloaded "$T/p.txt")" = "$want" ] && [ "$(grep -c 'unpacked [2468]/8' "$T/p.txt")" = 4 ] &&
	[ "$(grep -c 'set-up [2468]/8' "$T/p.txt")" = 4 ] && [ "$(wc -l <"$T/p.txt")" = 12 ]
ok $? "apt: a line per quarter of the packages, for download, unpack and set-up" "$(cat "$T/p.txt")"
cmp -s "$T/apt.txt" "$T/tool.log"
ok $? "every line of the tool's output is kept in the log (shown when it fails)"
printf 'Collecting numpy>=1.24 (from -r tools/requirements-test.txt (line 4))\nnoise\nCollecting MarkupSafe>=2.0 (from jinja2)\n' |
	progress venv 0 collecting=^Collecting 2>"$T/v.txt"
[ "$(cat "$T/v.txt")" = "setup: venv: collecting numpy>=1.24 (1)
setup: venv: collecting markupsafe>=2.0 (2)" ]
ok $? "pip: each Collecting line, counted, without its (from ...)" "$(cat "$T/v.txt")"

(cd "$SRC" && SETUP_PHASES=fuse bash tools/setup) >"$T/f.txt" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q '^setup: fuse: ' "$T/f.txt" &&
	grep -qE '^setup: done in [0-9]+\.[0-9] s \(fuse [0-9]+\.[0-9] s\)$' "$T/f.txt"
ok $? "one phase: what it does, then 'done in T s (fuse t s)'" "$(cat "$T/f.txt")"
! (cd "$SRC" && SETUP_PHASES=nosuch bash tools/setup) >"$T/x.txt" 2>&1
grep -q "no phase 'nosuch' (phases: packages fuse venv build" "$T/x.txt"
ok $? "an unknown phase fails, naming the phases there are" "$(cat "$T/x.txt")"
echo "1..$n"
[ "$failed" -eq 0 ]
