/* rstore_standin.c — THROWAWAY stand-in for remote/rstore.c (h20a): every
 * read is one range request under a mutex; nothing is cached, nothing is
 * assembled. Only so that the mount side can be built and tried first. */
#include "remote/rstore.h"
#include "base/err.h"
#include "hub/hub.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct rq_rs {
	pthread_mutex_t mu;
	struct rq_hub *hub;
	char *repo, *commit;
	struct rq_rs_file *f;
	size_t n;
	int offline;
	struct rq_rs_stats st;
};

int rq_rs_open(const struct rq_rs_opts *o, struct rq_rs **out, struct rq_err *err)
{
	struct rq_rs *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->mu, NULL);
	s->repo = strdup(o->repo);
	s->commit = strdup(o->commit);
	s->f = calloc(o->nfiles ? o->nfiles : 1, sizeof *s->f);
	s->n = o->nfiles;
	s->offline = o->offline;
	int rc = !s->repo || !s->commit || !s->f ? -ENOMEM : 0;
	for (size_t i = 0; i < o->nfiles && !rc; i++) {
		s->f[i] = o->files[i];
		if (!(s->f[i].name = strdup(o->files[i].name)))
			rc = -ENOMEM;
	}
	if (!rc && !o->offline)
		rc = rq_hub_open(o->endpoint, &s->hub, err);
	if (rc) {
		rq_rs_close(s);
		return rc;
	}
	*out = s;
	return 0;
}

void rq_rs_close(struct rq_rs *s)
{
	if (!s)
		return;
	for (size_t i = 0; s->f && i < s->n; i++)
		free((char *)s->f[i].name);
	free(s->f);
	rq_hub_close(s->hub);
	free(s->repo);
	free(s->commit);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

int rq_rs_read(struct rq_rs *s, size_t i, uint64_t off, uint64_t len, void *buf,
               unsigned flags, struct rq_err *err)
{
	if (s->offline)
		return rq_errf(err, -ENETUNREACH, "%s bytes %llu-%llu: not in the cache and "
		               "HF_HUB_OFFLINE=1", s->f[i].name, (unsigned long long)off,
		               (unsigned long long)(off + len - 1));
	pthread_mutex_lock(&s->mu);
	int rc = rq_hub_fetch_range(s->hub, s->repo, s->commit, s->f[i].name, off, len, buf, NULL,
	                            err);
	if (!rc) {
		s->st.fetched_bytes += len;
		s->st.fetched_chunks++;
	} else {
		s->st.failures++;
	}
	pthread_mutex_unlock(&s->mu);
	return rc == -EACCES ? rc : rc ? -EIO : 0;
}

const char *rq_rs_path(struct rq_rs *s, size_t i)
{
	return NULL;
}

int rq_rs_fetch_file(struct rq_rs *s, size_t i, void (*progress)(void *ctx, uint64_t bytes),
                     void *ctx, struct rq_err *err)
{
	return rq_errf(err, -ENOTSUP, "the stand-in store does not assemble files");
}

void rq_rs_drop(struct rq_rs *s, size_t i)
{
}

void rq_rs_stats(struct rq_rs *s, struct rq_rs_stats *out)
{
	pthread_mutex_lock(&s->mu);
	*out = s->st;
	pthread_mutex_unlock(&s->mu);
}
