/* vread.c — verify's coalesced reads of a remote checkpoint (vread.h). */
#include "offline/vread.h"
#include "base/err.h"
#include "base/grow.h"
#include "plan/ckpt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct need {
	int shard;
	uint64_t a, b;             /* bytes [a, b) of the shard's data section */
	int fetched;               /* a span held all of it once */
};

struct span {
	int shard;
	uint64_t a, b;             /* bytes [a, b) of the shard's data section, in buf */
	uint8_t *buf;              /* [b - a]; NULL: the slot is free */
	uint64_t used;             /* tick of its last hit (LRU) */
};

struct vread {
	struct rq_ckpt *c;
	int remote;
	struct need *need;         /* [n], sorted by (shard, a) before the first span */
	size_t n, cap;
	int sorted;
	struct span sp[VREAD_SPANS];
	uint64_t mem, tick;        /* bytes in spans; LRU clock */
	uint64_t requests, bytes;  /* reads of the checkpoint made, bytes they asked for */
};

int vread_open(struct rq_ckpt *c, int remote, struct vread **out)
{
	struct vread *v = calloc(1, sizeof *v);
	if (!v)
		return -ENOMEM;
	v->c = c;
	v->remote = remote;
	*out = v;
	return 0;
}

void vread_close(struct vread *v)
{
	if (!v)
		return;
	for (int i = 0; i < VREAD_SPANS; i++)
		free(v->sp[i].buf);
	free(v->need);
	free(v);
}

int vread_need(struct vread *v, int shard, const struct st_tensor *t)
{
	if (!v->remote || t->end == t->begin)
		return 0;
	if (RQ_GROW(v->need, v->n, v->cap, 256))
		return -ENOMEM;
	v->need[v->n++] = (struct need){.shard = shard, .a = t->begin, .b = t->end};
	v->sorted = 0;
	return 0;
}

static int cmp_need(const void *x, const void *y)
{
	const struct need *p = x, *q = y;
	if (p->shard != q->shard)
		return p->shard < q->shard ? -1 : 1;
	return p->a < q->a ? -1 : p->a > q->a;
}

/* The first need at or after (shard, a). */
static size_t lower_bound(const struct vread *v, int shard, uint64_t a)
{
	size_t lo = 0, hi = v->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct need *m = &v->need[mid];
		if (m->shard < shard || (m->shard == shard && m->a < a))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static void drop(struct vread *v, struct span *s)
{
	v->mem -= s->b - s->a;
	free(s->buf);
	s->buf = NULL;
}

/* A free slot with room for n more bytes: least recently used spans go. */
static struct span *slot(struct vread *v, uint64_t n)
{
	for (;;) {
		struct span *free_one = NULL, *lru = NULL;
		for (int i = 0; i < VREAD_SPANS; i++) {
			struct span *s = &v->sp[i];
			if (!s->buf)
				free_one = free_one ? free_one : s;
			else if (!lru || s->used < lru->used)
				lru = s;
		}
		if (free_one && v->mem + n <= VREAD_MEM)
			return free_one;
		if (!lru)
			return free_one;       /* (n <= VREAD_SPAN <= VREAD_MEM) */
		drop(v, lru);
	}
}

int vread_pread(struct vread *v, int shard, const struct st_tensor *t, uint64_t off, void *buf,
                uint64_t len, struct rq_err *err)
{
	if (off + len > t->end - t->begin)
		return rq_errf(err, -EINVAL, "%s: read past the end of %s",
		               rq_ckpt_shard_path(v->c, shard), t->name);
	if (!len)
		return 0;
	uint64_t a0 = t->begin + off, b0 = a0 + len;
	if (v->remote) {
		for (int i = 0; i < VREAD_SPANS; i++) {
			struct span *s = &v->sp[i];
			if (s->buf && s->shard == shard && s->a <= a0 && b0 <= s->b) {
				memcpy(buf, s->buf + (a0 - s->a), len);
				s->used = ++v->tick;
				return 0;
			}
		}
	}
	if (!v->remote || len > VREAD_SPAN) {   /* direct: local, or a read as large as a span */
		v->requests += v->remote;
		v->bytes += v->remote ? len : 0;
		return rq_ckpt_pread(v->c, shard, t, off, buf, len, err);
	}
	if (!v->sorted) {
		if (v->n)
			qsort(v->need, v->n, sizeof *v->need, cmp_need);
		v->sorted = 1;
	}
	/* The span: the rest of this tensor (its next pieces), then the next
	 * tensors needed, while near enough and the span not too large; and
	 * back over needed tensors just before it that no span held yet (a
	 * module whose tensors straddle two places is read out of order). */
	uint64_t b = t->end - a0 <= VREAD_SPAN ? t->end : a0 + VREAD_SPAN;
	size_t k0 = lower_bound(v, shard, a0), k1 = k0;
	for (; k1 < v->n; k1++) {
		const struct need *nd = &v->need[k1];
		if (nd->shard != shard || (nd->a > b && nd->a - b > VREAD_GAP) ||
		    nd->b - a0 > VREAD_SPAN)
			break;
		if (nd->b > b)
			b = nd->b;
	}
	while (k0 > 0) {
		const struct need *nd = &v->need[k0 - 1];
		if (nd->shard != shard || nd->fetched || nd->b > a0 ||
		    a0 - nd->b > VREAD_GAP || b - nd->a > VREAD_SPAN)
			break;
		a0 = nd->a;
		k0--;
	}
	for (size_t k = k0; k < k1; k++)
		v->need[k].fetched |= v->need[k].a >= a0 && v->need[k].b <= b;
	struct span *s = slot(v, b - a0);
	uint8_t *p = s ? malloc(b - a0) : NULL;
	if (!p)
		return rq_errf(err, -ENOMEM, "%s: no memory for %llu bytes around %s",
		               rq_ckpt_shard_path(v->c, shard), (unsigned long long)(b - a0), t->name);
	v->requests++;
	v->bytes += b - a0;
	int rc = rq_ckpt_pread_data(v->c, shard, a0, b - a0, p, t->name, err);
	if (rc) {
		free(p);
		return rc;
	}
	*s = (struct span){.shard = shard, .a = a0, .b = b, .buf = p, .used = ++v->tick};
	v->mem += b - a0;
	memcpy(buf, p + (t->begin + off - a0), len);
	return 0;
}

void vread_stats(const struct vread *v, uint64_t *requests, uint64_t *bytes)
{
	*requests = v ? v->requests : 0;
	*bytes = v ? v->bytes : 0;
}
