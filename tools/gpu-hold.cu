/* gpu-hold.cu — hold all but N MiB of a GPU's memory, as another process
 * would (an inference server that took the card), for tools/gpu-check:
 *
 *   gpu-hold [--device N] [--leave-mib M] [--seconds S] [-- CMD ARGS...]
 *
 * Allocates device memory (plain cudaMalloc, in shrinking chunks) until at
 * most M MiB (default 256) are free, touches it, prints one line
 *   "gpu-hold: holding H MiB, free F MiB of T MiB"
 * and then either runs CMD (its exit status is gpu-hold's; the memory is held
 * until it ends) or, without CMD, waits S seconds (default 60) or until
 * stdin closes. Exit 1 when the device cannot be opened or held, 2 on usage.
 * A tool, not the product: it prints and exits. */
#include <cuda_runtime.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB (1024.0 * 1024.0)
#define MAX_CHUNKS 4096

static int usage(FILE *f, int rc)
{
	fprintf(f, "usage: gpu-hold [--device N] [--leave-mib M] [--seconds S] [-- CMD ARGS...]\n"
	           "Holds all but M MiB (default 256) of device N's memory while CMD runs\n"
	           "(or for S seconds, default 60, or until stdin closes).\n");
	return rc;
}

static int run_child(char **argv)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "gpu-hold: fork: %s\n", strerror(errno));
		return 1;
	}
	if (pid == 0) {
		execvp(argv[0], argv);
		fprintf(stderr, "gpu-hold: cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0) {
		if (errno != EINTR)
			return 1;
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void wait_or_stdin(double secs)
{
	/* stdin closing (the script killing our pipe) or the time ends the hold */
	double left = secs;
	while (left > 0) {
		fd_set r;
		FD_ZERO(&r);
		FD_SET(0, &r);
		struct timeval tv = {1, 0};
		int n = select(1, &r, NULL, NULL, &tv);
		if (n > 0) {
			char b[64];
			if (read(0, b, sizeof b) <= 0)
				return;
		}
		left -= 1;
	}
}

int main(int argc, char **argv)
{
	int dev = 0, i;
	double leave = 256, secs = 60;
	char **cmd = NULL;
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--") && i + 1 < argc) {
			cmd = argv + i + 1;
			break;
		} else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
			dev = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--leave-mib") && i + 1 < argc) {
			leave = atof(argv[++i]);
		} else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
			secs = atof(argv[++i]);
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			return usage(stdout, 0);
		} else {
			return usage(stderr, 2);
		}
	}
	if (leave < 0 || secs < 0)
		return usage(stderr, 2);
	signal(SIGPIPE, SIG_IGN);

	cudaError_t e = cudaSetDevice(dev);
	if (e == cudaSuccess)
		e = cudaFree(0);    /* create the context first: it takes memory too */
	size_t fr = 0, tot = 0;
	if (e == cudaSuccess)
		e = cudaMemGetInfo(&fr, &tot);
	if (e != cudaSuccess) {
		fprintf(stderr, "gpu-hold: device %d: %s\n", dev, cudaGetErrorString(e));
		return 1;
	}
	static void *chunks[MAX_CHUNKS];
	int n = 0;
	size_t held = 0, want = (size_t)(leave * MIB), chunk = (size_t)1 << 30;
	while (fr > want && n < MAX_CHUNKS && chunk >= ((size_t)1 << 20)) {
		size_t ask = fr - want < chunk ? fr - want : chunk;
		ask &= ~(((size_t)1 << 20) - 1);     /* whole MiB */
		if (ask == 0)
			break;
		if (cudaMalloc(&chunks[n], ask) != cudaSuccess) {
			cudaGetLastError();
			chunk /= 2;
		} else {
			cudaMemset(chunks[n], 0x5A, ask);    /* really backed */
			held += ask;
			n++;
		}
		if (cudaMemGetInfo(&fr, &tot) != cudaSuccess)
			break;
	}
	cudaDeviceSynchronize();
	cudaMemGetInfo(&fr, &tot);
	printf("gpu-hold: holding %.0f MiB, free %.0f MiB of %.0f MiB\n", held / MIB, fr / MIB,
	       tot / MIB);
	fflush(stdout);
	int rc = 0;
	if (fr > want + ((size_t)64 << 20)) {
		fprintf(stderr, "gpu-hold: could not hold enough: %.0f MiB still free (wanted <= %.0f)\n",
		        fr / MIB, leave);
		rc = 1;
	} else if (cmd) {
		rc = run_child(cmd);
	} else {
		wait_or_stdin(secs);
	}
	for (i = 0; i < n; i++)
		cudaFree(chunks[i]);
	return rc;
}
