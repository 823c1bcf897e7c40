/* mount_out.c — the objects a read holds: a job's output (struct mout: a
 * cache entry fd or bytes in memory, reference counted so that a reply in
 * progress keeps them alive while the job is evicted), and a parked read's
 * holds on the outputs of the jobs it touches. A leaf. */
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
	if (rd->err) {
		pthread_mutex_unlock(&m->lock);
		fuse_reply_err(rd->req, -rd->err);
		rq_mnt_read_free(rd);
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
