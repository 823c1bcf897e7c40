/* test_qdev_gpu.c — qdev/ on a real GPU while another process holds it
 * (suite gpu; SKIP with the reason without CUDA or a device).
 *
 * usage: test_qdev_gpu GPU_HOLD (tools/gpu-hold.cu: holds all but N MiB until its stdin closes)
 * With a fake clock for the back-off (the watchdog never fires: the clock
 * stands still during jobs), every job's bytes against rq_quantize_job:
 *   1. a staged pair on the GPU: same bytes, no host memcpy; the CUDA
 *      context's own memory as NVML measured it (printed);
 *   2. gpu-hold takes all but 64 MiB; a job needing bigger buffers: out of
 *      memory -> CPU, same bytes, back-off, the context released (libcuda
 *      says the primary context is gone);
 *   3. held again, the retry after 5 s fails too: CPU, back-off 10 s;
 *   4. gpu-hold exits; after the back-off the GPU again, same bytes;
 *   5. idle release: the primary context goes away after gpu_idle_s. */
#include "qdev/qdev.h"
#include "base/err.h"
#include "kernels/kquant.h"
#include "quant/quant.h"
#include "tests/kernels/kq_testdata.h"
#include "tests/tap.h"
#include "tests/kernels/test_cuda_ctx.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static double clk = 100;

static double fake_now(void)
{
	return clk;
}

static void log_line(void *arg, const char *line)
{
	(void)arg;
	printf("# log: %s\n", line);
}

static int wait_inactive(void)
{
	for (int i = 0; i < 1000; i++) {
		int a = primary_active();
		if (a <= 0)
			return a == 0;
		usleep(10000);
	}
	return 0;
}

/* ---- the other process ---- */

struct hold {
	pid_t pid;
	int in;          /* its stdin: closing it ends it */
};

static int hold_start(const char *exe, int keep_mib, struct hold *h, char *line, size_t len)
{
	int to[2], from[2];
	if (pipe(to) || pipe(from))
		return -1;
	h->pid = fork();
	if (h->pid == 0) {
		char arg[32];
		snprintf(arg, sizeof arg, "%d", keep_mib);
		dup2(to[0], 0);
		dup2(from[1], 1);
		close(to[1]);
		close(from[0]);
		execl(exe, exe, "--leave-mib", arg, "--seconds", "3600", (char *)NULL);
		_exit(127);
	}
	close(to[0]);
	close(from[1]);
	h->in = to[1];
	FILE *f = fdopen(from[0], "r");
	int ok = f && fgets(line, (int)len, f) && !strncmp(line, "gpu-hold: holding ", 18);
	if (f)
		fclose(f);
	return ok ? 0 : -1;
}

static void hold_stop(struct hold *h)
{
	if (h->pid <= 0)
		return;
	close(h->in);
	waitpid(h->pid, NULL, 0);
	h->pid = 0;
}

/* ---- jobs ---- */

static uint64_t seed = 0x243F6A8885A308D3ull;

/* A fused pair [rows, cols] x 2 through q, inputs staged; 1 when the bytes
 * are the CPU's. */
static int pair_same(struct rq_quantizer *q, size_t rows, size_t cols, const char *name)
{
	size_t e = rows * cols;
	uint16_t *w[2];
	uint8_t *ref[2], *out[2];
	struct rq_qmod mc[2], mg[2];
	int ok = 1;
	for (int i = 0; i < 2; i++) {
		w[i] = rq_quantizer_stage(q, e * 2);
		ref[i] = malloc(e * 9 / 16);
		out[i] = malloc(e * 9 / 16);
		if (!w[i] || !ref[i] || !out[i])
			return 0;
		kq_fill(w[i], rows, cols, (enum kq_dist)i, &seed);
		memset(out[i], 0xA5, e * 9 / 16);
		mc[i] = (struct rq_qmod){.w = w[i], .rows = rows, .cols = cols, .packed = ref[i],
		                         .scales = ref[i] + e / 2};
		mg[i] = mc[i];
		mg[i].packed = out[i];
		mg[i].scales = out[i] + e / 2;
	}
	float gc = -1, gg = -2;
	int bad = -1;
	ok = rq_quantize_job(RQ_RECIPE_FP32, mc, 2, &gc, &bad, NULL) == 0 &&
	     rq_quantizer_run_named(q, RQ_RECIPE_FP32, mg, 2, name, &gg, &bad) == 0 &&
	     !memcmp(&gc, &gg, 4);
	for (int i = 0; i < 2; i++) {
		ok = ok && !memcmp(ref[i], out[i], e * 9 / 16);
		rq_quantizer_unstage(q, w[i]);
		free(ref[i]);
		free(out[i]);
	}
	return ok;
}

static const char *reason(struct rq_quantizer *q)
{
	static char buf[1024];
	return rq_quantizer_reason(q, buf, sizeof buf);
}

int main(int argc, char **argv)
{
	char msg[1100] = "";
	if (!kq_compiled())
		TAP_SKIP_ALL("built without CUDA");
	if (kq_device_count() == 0)
		TAP_SKIP_ALL("no CUDA device");
	if (argc != 2)
		TAP_SKIP_ALL("usage: test_qdev_gpu GPU_HOLD");
	struct rq_quantizer_opts o = {.device = "cuda", .gpu_idle_s = 30, .now = fake_now,
	                              .log = log_line};
	struct rq_quantizer *q = NULL;
	struct rq_err err;
	memset(&err, 0, sizeof err);
	int rc = rq_quantizer_open(&o, &q, &err);
	TAP_OK(rc == 0 && !strcmp(rq_quantizer_state(q), "gpu"), "open --device cuda: %s",
	       rc ? err.msg : rq_quantizer_device(q));
	if (rc)
		return tap_done();
	struct rq_quantizer_stats s;

	int ok = pair_same(q, 2048, 4096, "t.pair");
	rq_quantizer_get_stats(q, &s);
	TAP_OK(ok && s.gpu_jobs == 1 && s.host_copied == 0 && s.staged_pinned == 2,
	       "staged pair [2048, 4096] x 2 on the GPU: same bytes, no host memcpy (copied %llu)",
	       s.host_copied);
	printf("# CUDA context: %llu bytes (%.0f MiB) measured by NVML at open, beyond --gpu-mem\n",
	       s.context_bytes, s.context_bytes / 1048576.0);
	TAP_OK(1, "context cost reported: %llu bytes (0 = NVML could not tell)", s.context_bytes);

	struct hold h = {0, -1};
	char line[128] = "";
	rc = hold_start(argv[1], 64, &h, line, sizeof line);
	TAP_OK(rc == 0, "gpu-hold takes all but 64 MiB: %s", line);
	ok = pair_same(q, 8192, 4096, "model.layers.40.mlp.experts.0.gate_proj");
	rq_quantizer_get_stats(q, &s);
	TAP_OK(ok && s.cpu_jobs == 1 && s.gpu_failures == 1 &&
	       !strcmp(rq_quantizer_state(q), "backoff") && strstr(reason(q), "out of memory"),
	       "card held: a job needing bigger buffers runs on the CPU, same bytes: %s", reason(q));
	TAP_OK(wait_inactive(), "card held: the failed context is released (primary context gone)");
	hold_stop(&h);
	rc = hold_start(argv[1], 64, &h, line, sizeof line);    /* what we gave back too */
	clk += 6;
	ok = pair_same(q, 8192, 4096, "t.retry");
	TAP_OK(rc == 0 && ok && strstr(reason(q), "retrying the GPU in 10 s (failure 2)"),
	       "still held at the retry: CPU, same bytes: %s", reason(q));
	wait_inactive();
	hold_stop(&h);
	clk += 11;
	ok = pair_same(q, 8192, 4096, "t.free");
	rq_quantizer_get_stats(q, &s);
	TAP_OK(ok && !strcmp(rq_quantizer_state(q), "gpu") && s.gpu_jobs == 2,
	       "memory back: the GPU again after the back-off, same bytes (gpu jobs %llu)",
	       s.gpu_jobs);
	clk += 31;
	int released = 0;
	for (int i = 0; i < 500 && !released; i++) {
		released = !strcmp(rq_quantizer_state(q), "gpu-idle");
		usleep(10000);
	}
	TAP_OK(released && wait_inactive(), "idle: the primary context is released after 30 s");
	ok = pair_same(q, 256, 1024, "t.reopen");
	TAP_OK(ok && !strcmp(rq_quantizer_state(q), "gpu"), "idle: the next job reopens it");
	rq_quantizer_close(q);
	(void)msg;
	return tap_done();
}
