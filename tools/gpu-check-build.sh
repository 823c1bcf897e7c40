# tools/gpu-check-build.sh — sourced by tools/gpu-check: what its deps and
# build steps need on a GPU box that may lack the -dev packages: s_deps
# (.debs/ unpacked into $DEPS, only what the system lacks) and build_direct
# (when meson cannot configure the project: the quantizer's test and
# benchmark and gpu-hold, with nvcc + cc directly). Uses ROOT, TMPD, DEPS,
# ARCH and DIRECT from the caller.
# shellcheck shell=bash

missing_pc() {
	local m=()
	command -v "${PKG_CONFIG:-pkg-config}" >/dev/null || { echo pkg-config; return; }
	for p in fuse3 libcjson libxxhash libcurl libpcre2-8; do
		"${PKG_CONFIG:-pkg-config}" --exists "$p" || m+=("$p")
	done
	echo "${m[@]:-}"
}
# Unpacks .debs/ into $DEPS, never into / (that can break the image), keeps
# of the run-time libraries only those whose soname the system lacks, points
# the .pc files at $DEPS and writes the variables to $TMPD/env.sh.
s_deps() {
	local miss; miss=$(missing_pc)
	echo "missing: ${miss:-none}; meson: $(type -t meson || echo no); ninja: $(type -t ninja || echo no)"
	[ -z "$miss" ] && return 0
	if [ ! -d .debs ]; then
		echo "no .debs/ (make it with tools/gpu-check --fetch-debs where there is network, carry it)"
		return 1
	fi
	rm -rf "$DEPS" && mkdir -p "$DEPS" || return 1
	local d
	for d in .debs/*.deb; do
		if command -v dpkg-deb >/dev/null; then
			dpkg-deb -x "$d" "$DEPS"
		else
			(cd "$DEPS" && ar p "$ROOT/$d" "$(ar t "$ROOT/$d" | grep '^data\.tar')" | tar -x -a -f - 2>/dev/null ||
			 ar p "$ROOT/$d" data.tar.xz | tar -xJ)
		fi || echo "  cannot unpack $d"
	done
	local sys; sys=$(ldconfig -p 2>/dev/null)
	local lib so
	for lib in "$DEPS"/usr/lib/x86_64-linux-gnu "$DEPS"/lib/x86_64-linux-gnu; do
		[ -d "$lib" ] || continue
		for so in "$lib"/lib*.so.[0-9]*; do
			local n; n=$(basename "$so")
			[[ "$n" =~ ^lib.*\.so\.[0-9]+$ ]] || continue     # a soname: libfoo.so.N
			if grep -q "^[[:space:]]*$n " <<<"$sys"; then
				[ -L "$so" ] && rm -f "$lib/$(readlink "$so")"
				rm -f "$so"                                   # the system's copy wins
			else
				echo "  using $n from .debs/"
			fi
		done
	done
	# dev links (libfoo.so) to a removed or absolute target: the system's or ours
	for so in "$DEPS"/usr/lib/x86_64-linux-gnu/lib*.so; do
		[ -L "$so" ] || continue
		local t; t=$(readlink "$so")
		[[ $t == /* ]] && [ -e "$DEPS$t" ] && { ln -sf "$DEPS$t" "$so"; continue; }
		[ -e "$so" ] && continue
		local b; b=$(basename "$so")
		t=$(grep -m1 -o "/[^ ]*/$b\.[0-9]*$" <<<"$sys")
		[ -n "$t" ] && ln -sf "$t" "$so"
	done
	sed -i -E "s#^(prefix|exec_prefix|libdir|includedir)=/usr#\\1=$DEPS/usr#" \
		"$DEPS"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc
	{
		echo "export PKG_CONFIG_PATH=$DEPS/usr/lib/x86_64-linux-gnu/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}"
		echo "export LD_LIBRARY_PATH=\${LD_LIBRARY_PATH:+\$LD_LIBRARY_PATH:}$DEPS/usr/lib/x86_64-linux-gnu:$DEPS/lib/x86_64-linux-gnu"
		echo "export LIBRARY_PATH=$DEPS/usr/lib/x86_64-linux-gnu:$DEPS/lib/x86_64-linux-gnu"
		command -v pkg-config >/dev/null || echo "export PKG_CONFIG=$DEPS/usr/bin/pkgconf"
	} >>"$TMPD/env.sh"
	# shellcheck disable=SC1091
	. "$TMPD/env.sh"
	miss=$(missing_pc)
	echo "still missing: ${miss:-none}"
	[ -z "$miss" ]
}

# Fallback without meson: the quantizer's test and bench, gpu-hold, with nvcc + cc.
build_direct() {
	local CF=(-std=gnu11 -O2 -g -Wall -Wno-unused-parameter -Wno-sign-compare
	          -ffp-contract=off -fno-fast-math -D_GNU_SOURCE -pthread -I. -I"$DIRECT")
	local a GC=() list=""
	for a in ${ARCH//[;,]/ }; do
		GC+=("-gencode=arch=compute_$a,code=sm_$a")
		list=${list:+$list,}$a
	done
	GC+=("-gencode=arch=compute_${list%%,*},code=compute_${list%%,*}")
	local NF=(-O3 -std=c++17 -I. -fmad=false -prec-div=true -prec-sqrt=true -ftz=false
	          --resource-usage "${GC[@]}" "-DKQ_GPU_ARCH=\"$list\"" -Xcompiler=-fno-exceptions)
	local cudalib; cudalib=$(dirname "$(command -v nvcc)")/../lib64
	mkdir -p "$DIRECT" || return 1
	local objs=() f o
	for f in kernels/kquant*.cu; do
		nvcc "${NF[@]}" -c "$f" -o "$DIRECT/$(basename "$f").o" || return 1
		objs+=("$DIRECT/$(basename "$f").o")
	done
	local bobjs=()
	for f in base/*.c quant/*.c tools/bench/bench_quant_cuda.c; do
		o=$DIRECT/$(echo "$f" | tr / _).o
		cc "${CF[@]}" -c "$f" -o "$o" || return 1
		case $f in
		tools/*) bobjs+=("$o") ;;
		*) objs+=("$o") ;;
		esac
	done
	local LIBS=("$cudalib/libcudart_static.a" -ldl -lrt -lpthread -lm -lstdc++)
	cc "${CF[@]}" tests/kernels/test_kquant.c "${objs[@]}" -o "$DIRECT/test_kquant" "${LIBS[@]}" ||
		return 1
	nvcc -O2 tools/gpu-hold.cu -o "$DIRECT/gpu-hold" || return 1
	cat >"$DIRECT/bench_main.c" <<'EOF'
/* gpu-check's stand-in for `requantfs bench quant --device cuda` (no CLI). */
#include "tools/bench/bench.h"
#include "cli/cli.h"
#include "quant/quant.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
double bench_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}
int cli_fail(int code, const char *what, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "requantfs %s: ", what);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	return code;
}
int main(int argc, char **argv)
{
	size_t shapes[2][2] = {{3072, 1024}, {1024, 3072}};
	int reps = argc > 1 ? atoi(argv[1]) : 10, bad = 0;
	uint64_t s = 88172645463325252ull;
	for (int k = 0; k < 2; k++) {
		size_t n = shapes[k][0] * shapes[k][1];
		uint16_t *w = malloc(n * 2);
		for (size_t i = 0; i < n; i++) {
			float u = 0;
			for (int j = 0; j < 4; j++) {
				s ^= s << 13, s ^= s >> 7, s ^= s << 17;
				u += (float)(s >> 40) / 16777216.0f;
			}
			w[i] = rq_f32_to_bf16((u - 2.0f) * 0.03f);
		}
		bad |= bench_quant_cuda(w, shapes[k][0], shapes[k][1], RQ_RECIPE_FP32, reps);
		free(w);
	}
	return bad ? 1 : 0;
}
EOF
	# the lifecycle needs qdev; the direct build has none: link a CPU-less stub
	cat >"$DIRECT/qdev_none.c" <<'EOF'
#include "qdev/qdev.h"
#include "base/err.h"
#include <errno.h>
int rq_quantizer_open(const struct rq_quantizer_opts *o, struct rq_quantizer **out, struct rq_err *err)
{ (void)o; (void)out; return rq_errf(err, -ENOSYS, "not in the direct build (meson failed)"); }
void rq_quantizer_close(struct rq_quantizer *q) { (void)q; }
const char *rq_quantizer_device(struct rq_quantizer *q) { (void)q; return ""; }
const char *rq_quantizer_fallback_reason(struct rq_quantizer *q) { (void)q; return 0; }
int rq_quantizer_run(struct rq_quantizer *q, enum rq_recipe r, const struct rq_qmod *m, int n, float *gs, int *bad)
{ (void)q; (void)r; (void)m; (void)n; (void)gs; (void)bad; return -ENOSYS; }
EOF
	cc "${CF[@]}" "$DIRECT/bench_main.c" "$DIRECT/qdev_none.c" "${bobjs[@]}" "${objs[@]}" \
		-o "$DIRECT/bench_quant_cuda" "${LIBS[@]}" || return 1
}
