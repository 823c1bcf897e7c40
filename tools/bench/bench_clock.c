/* bench_clock.c — the clock every bench times with and the memcpy baseline
 * the quant and engine benches report against. It calls nothing of the
 * folder. */
#include "tools/bench/bench.h"

#include <string.h>
#include <time.h>

double bench_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double bench_memcpy_bw(void *dst, const void *src, unsigned long long bytes, int reps)
{
	double best = 1e30;
	for (int i = 0; i < reps; i++) {
		double t = bench_now();
		memcpy(dst, src, bytes);
		t = bench_now() - t;
		if (t < best)
			best = t;
	}
	return best > 0 ? bytes / best : 0;
}
