# tests/tools/tap.sh — TAP helpers for the shell tests here (sourced).
# ok STATUS DESCRIPTION [DETAIL]: "ok N" when STATUS is 0, else "not ok N"
# with the last lines of DETAIL as comments; $failed counts the failures.
# T is a fresh temp dir (removed on exit) with T/bin first on PATH for the
# stand-ins, and gpu-check's own environment knobs are cleared.
n=0
failed=0
ok() {
	n=$((n + 1))
	if [ "$1" -eq 0 ]; then
		echo "ok $n - $2"
	else
		echo "not ok $n - $2"
		failed=$((failed + 1))
		[ -n "${3:-}" ] && printf '%s\n' "$3" | tail -20 | sed 's/^/#   /'
	fi
}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/bin"
unset RQ_GPU_BUDGET RQ_GPU_CPU_BUILD RQ_GPU_DIRECT OUT
