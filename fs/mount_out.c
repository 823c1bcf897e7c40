/* mount_out.c — the objects a read holds: a job's output (struct mout: a
 * cache entry fd or bytes in memory, reference counted so that a reply in
 * progress keeps them alive while the job is evicted), a parked read's
 * holds on the outputs of the jobs it touches, and who answers a read that
 * waits: its server or an interrupt. A leaf. */
#include "base/grow.h"
#include "fs/mount_int.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

/* ---- outputs and holds ------------------------------------------------ */

struct mout *rq_mout_new(int fd, uint64_t fd_off, const struct rq_cache_ident *id, uint8_t *mem)
{
	struct mout *o = calloc(1, sizeof *o);
	if (!o)
		return NULL;
	atomic_init(&o->refs, 1);
	o->fd = fd;
	o->fd_off = fd_off;
	if (id)
		o->id = *id;
	o->mem = mem;
	return o;
}

void rq_mout_unref(struct mout *o)
{
	if (!o || atomic_fetch_sub(&o->refs, 1) != 1)
		return;
	if (o->fd >= 0)
		close(o->fd);
	free(o->mem);
	free(o);
}

int rq_mnt_hold(struct mread *rd, int j, struct mout *o)
{
	if (RQ_GROW(rd->held, rd->nheld, rd->capheld, 4))
		return -ENOMEM;
	atomic_fetch_add(&o->refs, 1);
	rd->held[rd->nheld++] = (struct mhold){.job = j, .o = o};
	return 0;
}

struct mout *rq_mnt_held(struct mread *rd, int j)
{
	/* Reads walk jobs mostly in order: start where the last lookup hit. */
	for (int k = 0; k < rd->nheld; k++) {
		int i = (rd->hcur + k) % rd->nheld;
		if (rd->held[i].job == j) {
			rd->hcur = i;
			return rd->held[i].o;
		}
	}
	return NULL;
}

int rq_mnt_serve_begin(struct rq_mount *m, struct mread *rd)
{
	pthread_mutex_lock(&m->lock);
	if (rd->err || atomic_load(&rd->answered)) {
		pthread_mutex_unlock(&m->lock);
		rq_mnt_read_fail(rd, rd->err ? -rd->err : EINTR);
		return 0;
	}
	rd->pending = 0;
	return 1;
}

void rq_mnt_read_free(struct mread *rd)
{
	if (!rd)
		return;
	for (int i = 0; i < rd->nheld; i++)
		rq_mout_unref(rd->held[i].o);
	free(rd->held);
	free(rd);
}

int rq_mnt_held_fd(const struct mread *rd)
{
	for (int i = 0; i < rd->nheld; i++)
		if (rd->held[i].o->fd >= 0 && rd->held[i].job >= 0)
			return 1;     /* (job < 0: a remote SRC's verified copy, spliced) */
	return 0;
}

/* ---- interrupts ------------------------------------------------------------
 * A read that waits (parked on a job, on a file's verification or a remote
 * fetch, or handed to the remote pool) may wait minutes: a quantization, or
 * a stalled hub the store retries for five. Its reader is then in the
 * kernel's request_wait_answer(): once the request reached us, even SIGKILL
 * only makes the kernel send FUSE_INTERRUPT and wait, uninterruptibly, for
 * our answer -- a killed `warm` or `cat` in D state, its mount pinned.
 *
 * So every read that may wait honours FUSE_INTERRUPT (the kernel's protocol:
 * answer the original request EINTR; what gcsfuse and JuiceFS do): the
 * callback answers EINTR at once, unless a thread already claimed the
 * answer. The work the read waited for is not cancelled (other readers may
 * share it; its result lands in the cache): the read's struct stays where it
 * is parked and is freed, unanswered, by whoever serves it later.
 *
 * Who answers: both sides take `answered` 0 -> 1; the winner replies.
 * Lifetime: libfuse calls the callback with the request's lock held and
 * keeps the request alive meanwhile; the server, once it won, unregisters
 * the callback (fuse_req_interrupt_func(req, NULL, NULL) takes that lock:
 * it waits for a callback in progress, and none runs after it), so rd is
 * never freed under a running callback, and the callback touches rd no more
 * after its exchange. Page-cache readahead is not concerned: the kernel
 * sends it as background requests, which a killed reader does not wait for. */

static void on_interrupt(fuse_req_t req, void *data)
{
	struct mread *rd = data;
	if (!atomic_exchange(&rd->answered, 1))
		fuse_reply_err(req, EINTR);    /* rd is the server's to free */
}

void rq_mnt_read_watch(struct mread *rd)
{
	rd->watched = 1;
	fuse_req_interrupt_func(rd->req, on_interrupt, rd);
}

int rq_mnt_read_claim(struct mread *rd)
{
	if (atomic_exchange(&rd->answered, 1))
		return 0;
	if (rd->watched)
		fuse_req_interrupt_func(rd->req, NULL, NULL);
	return 1;
}

void rq_mnt_read_fail(struct mread *rd, int err)
{
	if (rq_mnt_read_claim(rd))
		fuse_reply_err(rd->req, err);
	rq_mnt_read_free(rd);
}
