/* test_quant_peer.c — our recipes against the real compressed-tensors (TAP).
 *
 * tests/data/quant_peer.bin holds BF16 inputs and what compressed-tensors
 * produced for them (tools/golden/gen_quant_peer.py, run once with torch): on the
 * BF16 weight it must equal our `bf16` recipe, on the weight widened to FP32
 * our `fp32` recipe — global scale, scales and packed bytes, exactly.
 * Usage: test_quant_peer [FILE]  (default $RQ_SOURCE_ROOT/tests/data/quant_peer.bin) */
#include "quant/quant.h"
#include "quant/quant_int.h"
#include "base/pool.h"
#include "tests/tap.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* first differing index of two byte arrays, or -1 */
static long first_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (a[i] != b[i])
			return (long)i;
	return -1;
}

int main(int argc, char **argv)
{
	char path[4096];
	if (argc > 1) {
		snprintf(path, sizeof path, "%s", argv[1]);
	} else {
		const char *root = getenv("RQ_SOURCE_ROOT");
		snprintf(path, sizeof path, "%s/tests/data/quant_peer.bin", root ? root : ".");
	}
	FILE *f = fopen(path, "rb");
	if (!f) {
		/* the file is committed: its absence is a failure, not a skip */
		TAP_OK(0, "open %s (regenerate: /work/venv-ref/bin/python tools/golden/gen_quant_peer.py)", path);
		return tap_done();
	}
	fseek(f, 0, SEEK_END);
	long size = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *buf = malloc(size > 0 ? (size_t)size : 1);
	size_t got = buf ? fread(buf, 1, (size_t)size, f) : 0;
	fclose(f);
	TAP_OK(buf && size >= 20 && got == (size_t)size && !memcmp(buf, "RQPEER01", 8) &&
	       !memcmp(buf + size - 4, "END!", 4), "%s: header and end marker", path);
	if (!buf || size < 20 || got != (size_t)size || memcmp(buf, "RQPEER01", 8))
		return tap_done();

	struct rq_pool *pool = NULL;
	rq_pool_create(2, &pool);
	uint32_t ncases = rd32(buf + 8);
	size_t off = 16;
	int cases_ok = 0;
	for (uint32_t k = 0; k < ncases; k++) {
		if (off + 32 > (size_t)size) {
			TAP_OK(0, "case %u: file truncated", k);
			break;
		}
		char name[25];
		memcpy(name, buf + off, 24);
		name[24] = 0;
		size_t rows = rd32(buf + off + 24), cols = rd32(buf + off + 28), n = rows * cols;
		off += 32;
		size_t need = n * 2 + 2 * (4 + n / 2 + n / 16);
		if (cols % 16 || off + need > (size_t)size) {
			TAP_OK(0, "case %u (%s): bad shape %zux%zu or truncated", k, name, rows, cols);
			break;
		}
		uint16_t *w = malloc(n * 2);
		uint8_t *p = malloc(n / 2), *s = malloc(n / 16);
		for (size_t i = 0; i < n; i++)
			w[i] = (uint16_t)(buf[off + 2 * i] | buf[off + 2 * i + 1] << 8);
		off += n * 2;
		static const enum rq_recipe variants[2] = {RQ_RECIPE_BF16, RQ_RECIPE_FP32};
		for (int v = 0; v < 2; v++) {
			enum rq_recipe r = variants[v];
			uint32_t want_gs = rd32(buf + off);
			const uint8_t *want_p = buf + off + 4, *want_s = buf + off + 4 + n / 2;
			off += 4 + n / 2 + n / 16;

			float gs = 0;
			int bad = -1;
			struct rq_qmod m = {w, rows, cols, p, s};
			int rc = rq_quantize_job(r, &m, 1, &gs, &bad, pool);
			long dp = first_diff(p, want_p, n / 2), ds = first_diff(s, want_s, n / 16);
			int ok = rc == 0 && rq_f2u(gs) == want_gs && dp < 0 && ds < 0;
			/* and the oracle agrees with the library too */
			if (ok) {
				rq_quantize_ref(r, w, rows, cols, gs, p, s);
				ok = !memcmp(p, want_p, n / 2) && !memcmp(s, want_s, n / 16);
			}
			TAP_OK(ok, "%s %zux%zu %s == compressed-tensors (gs %08X)", name, rows, cols,
			       rq_recipe_name(r), want_gs);
			if (!ok) {
				printf("#   ours: rc %d gs %08X; first packed diff %ld, first scale diff %ld\n",
				       rc, rq_f2u(gs), dp, ds);
				if (ds >= 0)
					printf("#   scale[%ld]: ours %02X, peer %02X\n", ds, s[ds], want_s[ds]);
				if (dp >= 0)
					printf("#   packed[%ld]: ours %02X, peer %02X (w %04X %04X)\n", dp, p[dp],
					       want_p[dp], w[2 * dp], w[2 * dp + 1]);
			}
			cases_ok += ok;
		}
		free(w);
		free(p);
		free(s);
	}
	TAP_OK(ncases >= 50 && off + 4 == (size_t)size, "%u cases (>= 50), all of the file read",
	       ncases);
	printf("# %d of %u case-variants match compressed-tensors\n", cases_ok, 2 * ncases);
	rq_pool_destroy(pool);
	free(buf);
	return tap_done();
}
