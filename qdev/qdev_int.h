/* qdev_int.h — the quantizer device's state, shared by qdev.c (the state
 * machine and jobs; see the top of qdev.c) and qdev_stage.c (staging
 * buffers). Internal to qdev/. */
#ifndef RQ_QDEV_INT_H
#define RQ_QDEV_INT_H

#include <pthread.h>
#include <stddef.h>
#include <time.h>

#include "qdev/qdev.h"

struct kq_ctx;

#define QD_BACKOFF_FIRST_S 5.0
#define QD_BACKOFF_MAX_S 300.0
#define QD_TIMEOUT_S 10.0                    /* + 1 s per GB of input */
#define QD_PIN_MAX ((size_t)512 << 20)       /* pinned staging per context */
#define QD_PIN_ROUND ((size_t)1 << 20)

enum qstate { Q_CPU, Q_READY, Q_OPENING, Q_IDLE, Q_BACKOFF, Q_DISABLED };

struct qgen;

struct qbuf {                 /* a staging buffer, lent or on a context's free list */
	void *p;
	size_t cap;               /* bytes allocated */
	struct qgen *gen;         /* pinned memory of this context; NULL: malloc'd */
	struct qbuf *next;
};

struct qgen {                 /* one CUDA context */
	struct kq_ctx *k;
	int lent;                 /* its pinned buffers handed out (q->mu) */
	struct qbuf *free;        /* its returned pinned buffers, for reuse (q->mu) */
	size_t pinned;            /* bytes of its pinned buffers, lent or free (q->mu) */
	struct qgen *next;        /* on q->retired */
};

struct rq_quantizer {
	struct rq_quantizer_opts o;
	struct rq_pool *pool;     /* CPU jobs (also rq_quantizer_run_scheme's) */
	int cuda_index;           /* -1: CPU only */
	pthread_mutex_t mu;       /* everything below */
	pthread_cond_t cv;        /* state, busy, lent, closing changed; wakes the reaper */
	enum qstate state;
	struct qgen *cur;         /* READY: the open context, else NULL */
	int busy;                 /* a GPU job runs on cur */
	struct qgen *retired;     /* contexts to close once nothing is lent from them */
	int closing;              /* the reaper is closing one (outside mu) */
	struct qbuf *lent;        /* staging buffers handed out */
	int fails;                /* consecutive transient failures */
	int why_rc;               /* the last failure's errno (for the hint) */
	double t_fail, retry_at;  /* now() of the last failure; when to try again */
	time_t wall_fail;         /* wall clock of the last failure */
	char why[400];            /* the last failure, "" when none */
	double last_use;          /* now() at the end of the last GPU job */
	int stop;
	int reaper_on;
	pthread_t reaper;
	struct rq_quantizer_stats st;
	char dev_gpu[192];        /* "cuda:0 NVIDIA H200": written before the first READY */
	char dev_cpu[3][96];      /* "cpu (N threads)", "...; GPU backing off)", "...; GPU off)" */
	char fallback[768];       /* the open's fallback line, "" when none */
};

/* qdev.c, for the scheme jobs (qdev_scheme.c). qd_gpu_take (mu held on entry
 * and exit): waits for the GPU, opening it when due; the context with
 * q->busy set, or NULL when jobs run on the CPU now (what: the call, for the
 * log). qd_gpu_give (mu not held) ends the call that returned rc: failed NULL
 * when the GPU did its part (fails back to 0, gpu_jobs added to the stats),
 * else the failure ("searching ...") that retires the context and backs off
 * (or disables the GPU) with msg; copied: bytes the call memcpy'd into
 * staging. qd_timeout: the watchdog's seconds for a call reading in_bytes. */
struct qgen *qd_gpu_take(struct rq_quantizer *q, const char *what);
void qd_gpu_give(struct rq_quantizer *q, struct qgen *g, int rc, const char *failed,
                 const char *msg, int gpu_jobs, unsigned long long copied);
double qd_timeout(const struct rq_quantizer *q, double in_bytes);

/* Bit i set when m[i].w lies in a pinned buffer of g that is lent out
 * (q->mu held): kquant may DMA straight from it. */
unsigned qd_pinned_mask(struct rq_quantizer *q, struct qgen *g, const struct rq_qmod *m, int n);

#endif
