/* cache_index.c — what one process knows about a cache directory: a hash
 * index of entries by key, a recency list (oldest first) for LRU eviction,
 * the directory scan that rebuilds both, and eviction.
 *
 * The directory is shared: other processes publish, touch and delete entries
 * behind our back. The index is therefore only a view. It is corrected
 * (1) at open, by a full scan; (2) on lookup, which learns a file it did not
 * know or forgets one that vanished; (3) at eviction, which re-stats each
 * victim before unlinking it (gone: forget it; used by someone since: move it
 * to its new place in the recency order) and rescans the whole directory at
 * most every RQC_RESCAN_NS. Deleting an entry another process holds open is
 * harmless on POSIX: its fd keeps the bytes alive.
 *
 * Recency on disk is the file's atime, set explicitly (ns) by every hit and
 * put of every process, so the order survives restarts and is shared.
 *
 * Whole files (files/<hex>.bin, cache_file.c) are records of the same index
 * (kind RQC_FILE), counted by their size, ordered and evicted with the
 * entries; evicting one removes its sidecar first, then its data. Pins are
 * this process's only (in memory, on the record): a pinned file is never
 * evicted, and its record outlives the file (a placeholder) so that a pin
 * taken before the file is written, or held across its removal, still holds.
 *
 * The scan never opens an entry: it lstat()s names (AT_SYMLINK_NOFOLLOW)
 * and lists regular files only, so a FIFO, device or symlink planted at an
 * entry's name cannot block or redirect it (lookup then judges and deletes
 * such a name). Subdirectories are opened O_NOFOLLOW and must not be
 * writable by anyone but us. */
#include "base/grow.h"
#include "cache/cache_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int64_t rqc_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t rqc_tick(struct rq_cache *c)
{
	int64_t t = rqc_now_ns();
	if (t <= c->clock)
		t = c->clock + 1;
	c->clock = t;
	return t;
}

void rqc_hex(const struct rq_cache_key *k, char out[33])
{
	static const char hx[] = "0123456789abcdef";
	for (int i = 0; i < 16; i++) {
		out[2 * i] = hx[k->b[i] >> 4];
		out[2 * i + 1] = hx[k->b[i] & 15];
	}
	out[32] = 0;
}

void rqc_rel_path(const struct rq_cache_key *k, char out[RQC_REL_MAX])
{
	char h[33];
	rqc_hex(k, h);
	memcpy(out, h, 2);
	out[2] = '/';
	memcpy(out + 3, h, 32);
	memcpy(out + 35, ".rqc", 5);
}

void rqc_file_rel(const struct rq_cache_key *k, char bin[RQC_REL_MAX], char sum[RQC_REL_MAX])
{
	char h[33];
	rqc_hex(k, h);
	memcpy(bin, RQC_FILES_DIR "/", 6);
	memcpy(bin + 6, h, 32);
	memcpy(bin + 38, ".bin", 5);
	memcpy(sum, bin, 38);
	memcpy(sum + 38, ".sum", 5);
}

static size_t bucket(const struct rq_cache *c, const struct rq_cache_key *k)
{
	uint64_t h;
	memcpy(&h, k->b + 8, 8);   /* keys are hashes already: any 8 bytes will do */
	return (size_t)h & (c->ntab - 1);
}

struct rqc_ent *rqc_find(struct rq_cache *c, const struct rq_cache_key *k)
{
	if (!c->ntab)
		return NULL;
	for (struct rqc_ent *e = c->tab[bucket(c, k)]; e; e = e->hnext)
		if (!memcmp(e->key.b, k->b, 16))
			return e;
	return NULL;
}

/* Recency list. */
static void list_unlink(struct rq_cache *c, struct rqc_ent *e)
{
	if (e->older)
		e->older->younger = e->younger;
	else
		c->oldest = e->younger;
	if (e->younger)
		e->younger->older = e->older;
	else
		c->youngest = e->older;
	e->older = e->younger = NULL;
}

/* Inserts e at its place by last_use, searching from the young end (where
 * almost every insertion lands). */
static void list_insert(struct rq_cache *c, struct rqc_ent *e)
{
	struct rqc_ent *p = c->youngest;
	while (p && p->last_use > e->last_use)
		p = p->older;
	e->older = p;
	e->younger = p ? p->younger : c->oldest;
	if (e->younger)
		e->younger->older = e;
	else
		c->youngest = e;
	if (p)
		p->younger = e;
	else
		c->oldest = e;
}

static int grow(struct rq_cache *c)
{
	size_t nt = c->ntab ? c->ntab * 2 : 1024;
	struct rqc_ent **t = calloc(nt, sizeof *t);
	if (!t)
		return -ENOMEM;
	struct rqc_ent **old = c->tab;
	size_t on = c->ntab;
	c->tab = t;
	c->ntab = nt;
	for (size_t i = 0; i < on; i++) {
		for (struct rqc_ent *e = old[i], *nx; e; e = nx) {
			nx = e->hnext;
			size_t b = bucket(c, &e->key);
			e->hnext = t[b];
			t[b] = e;
		}
	}
	free(old);
	return 0;
}

struct rqc_ent *rqc_add(struct rq_cache *c, const struct rq_cache_key *k)
{
	if (c->n >= c->ntab && grow(c) < 0 && !c->ntab)
		return NULL;
	struct rqc_ent *e = calloc(1, sizeof *e);
	if (!e)
		return NULL;
	e->key = *k;
	size_t b = bucket(c, k);
	e->hnext = c->tab[b];
	c->tab[b] = e;
	c->n++;
	c->nplace++;
	e->last_use = c->clock;
	list_insert(c, e);
	return e;
}

/* Takes e's bytes out of the totals: it no longer stands for a file. */
static void set_absent(struct rq_cache *c, struct rqc_ent *e)
{
	if (!e->present)
		return;
	c->bytes -= e->payload;
	if (e->kind == RQC_FILE) {
		c->files--;
		c->file_bytes -= e->payload;
	}
	e->payload = 0;
	e->present = false;
	e->verified = false;
	c->nplace++;
}

void rqc_del(struct rq_cache *c, struct rqc_ent *e)
{
	set_absent(c, e);
	if (e->pins > 0)
		return;   /* a placeholder: the pin outlives the file */
	struct rqc_ent **pp = &c->tab[bucket(c, &e->key)];
	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	list_unlink(c, e);
	c->n--;
	c->nplace--;
	free(e);
}

void rqc_use(struct rq_cache *c, struct rqc_ent *e, int64_t when)
{
	list_unlink(c, e);
	if (when > e->last_use)
		e->last_use = when;
	list_insert(c, e);
}

void rqc_set_present(struct rq_cache *c, struct rqc_ent *e, int kind, uint64_t payload)
{
	if (e->present && e->kind != kind)
		set_absent(c, e);   /* a key changing kind: never, but keep the sums right */
	if (!e->present) {
		e->present = true;
		c->nplace--;
		e->kind = (uint8_t)kind;
		if (kind == RQC_FILE)
			c->files++;
	}
	c->bytes = c->bytes - e->payload + payload;
	if (kind == RQC_FILE)
		c->file_bytes = c->file_bytes - e->payload + payload;
	e->payload = payload;
}

void rqc_free_all(struct rq_cache *c)
{
	for (struct rqc_ent *e = c->oldest, *nx; e; e = nx) {
		nx = e->younger;
		free(e);
	}
	free(c->tab);
	c->tab = NULL;
	c->oldest = c->youngest = NULL;
	c->ntab = c->n = c->nplace = 0;
	c->bytes = c->files = c->file_bytes = 0;
}

/* --- the directory scan --- */

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	return -1;
}

static bool parse_hex(const char *s, size_t n, uint8_t *out)
{
	for (size_t i = 0; i < n; i += 2) {
		int hi = hexval(s[i]), lo = hexval(s[i + 1]);
		if (hi < 0 || lo < 0)
			return false;
		out[i / 2] = (uint8_t)(hi << 4 | lo);
	}
	return true;
}

static int64_t ts_ns(struct timespec t)
{
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* "<anything>.tmp.<pid>.<n>" (a writer's temp file) or ".rqprobe.<pid>.<n>"
 * (open's write probe): returns the pid, or 0 when the name is neither. */
static long tmp_pid(const char *name)
{
	const char *p = strstr(name, ".tmp.");
	if (p)
		p += 5;
	else if (!strncmp(name, ".rqprobe.", 9))
		p = name + 9;
	else
		return 0;
	char *end;
	long pid = strtol(p, &end, 10);
	if (end == p || *end != '.' || pid <= 0)
		return 0;
	return pid;
}

/* Removes a crashed writer's temp file when it is old, or its writer is dead
 * and it is past the grace period. A live writer whose file is removed gets
 * ENOENT at rename: its put fails cleanly, nothing wrong is ever visible. */
static void maybe_clean_tmp(int dfd, const char *name, long pid, int64_t now)
{
	struct stat st;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
		return;
	int64_t age = now - ts_ns(st.st_mtim);
	bool dead = pid != getpid() && kill((pid_t)pid, 0) < 0 && errno == ESRCH;
	if (age >= RQC_TMP_MAX_AGE_NS || (dead && age >= RQC_TMP_DEAD_GRACE_NS))
		unlinkat(dfd, name, 0);
}

static int push_found(struct rqc_found **v, size_t *n, size_t *cap, const struct rqc_found *f)
{
	if (RQ_GROW(*v, *n, *cap, 256))
		return -ENOMEM;
	(*v)[(*n)++] = *f;
	return 0;
}

bool rqc_dir_unsafe(const struct stat *st)
{
	/* Sticky directories too (mode 1777): others may still create entries
	 * under names that are missing, i.e. feed the next lookup. */
	return (st->st_mode & (S_IWGRP | S_IWOTH)) ||
	       (st->st_uid != geteuid() && st->st_uid != 0);
}

/* Lists f (its key set) as a file of this kind with this stat. */
static int push_stat(struct rqc_found **v, size_t *n, size_t *cap, struct rqc_found *f,
                     int kind, const struct stat *st)
{
	f->kind = kind;
	f->dev = st->st_dev;
	f->ino = st->st_ino;
	f->fsize = st->st_size;
	f->mtime = ts_ns(st->st_mtim);
	f->ctime = ts_ns(st->st_ctim);
	f->atime = ts_ns(st->st_atim);
	return push_found(v, n, cap, f);
}

/* Takes sfd (a subdirectory of the cache): -EPERM when others may write it,
 * 0 when it cannot be listed (nothing to list), 1 with *d open on it. */
static int open_scan_dir(int sfd, DIR **d)
{
	struct stat dst;
	if (fstat(sfd, &dst) == 0 && rqc_dir_unsafe(&dst)) {
		close(sfd);
		return -EPERM;
	}
	if (!(*d = fdopendir(sfd))) {
		close(sfd);
		return 0;
	}
	return 1;
}

static int scan_sub(int sfd, const char *sub, int64_t now,
                    struct rqc_found **v, size_t *n, size_t *cap)
{
	DIR *d;
	int rd = open_scan_dir(sfd, &d);
	if (rd <= 0)
		return rd;
	int r = 0;
	struct dirent *de;
	while (r == 0 && (de = readdir(d))) {
		const char *nm = de->d_name;
		size_t len = strlen(nm);
		if (len == 36 && !strcmp(nm + 32, ".rqc") && !memcmp(nm, sub, 2)) {
			struct rqc_found f;
			struct stat st;
			if (!parse_hex(nm, 32, f.key.b) ||
			    fstatat(dirfd(d), nm, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
				continue;
			r = push_stat(v, n, cap, &f, RQC_ENTRY, &st);
		} else {
			long pid = tmp_pid(nm);
			if (pid)
				maybe_clean_tmp(dirfd(d), nm, pid, now);
		}
	}
	closedir(d);
	return r;
}

/* A .bin or .sum whose twin is missing: a writer between its two renames
 * (for milliseconds), a crash there, or a crash amid a removal. Removed
 * when its ctime (the rename) is RQC_TMP_MAX_AGE_NS old. true: removed. */
static bool clean_orphan(int dfd, const char *name, const struct stat *st, int64_t now)
{
	char twin[40];
	memcpy(twin, name, 33);
	memcpy(twin + 33, !strcmp(name + 32, ".bin") ? "sum" : "bin", 4);
	struct stat ts;
	if (fstatat(dfd, twin, &ts, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT)
		return false;
	if (now - ts_ns(st->st_ctim) < RQC_TMP_MAX_AGE_NS)
		return false;
	return unlinkat(dfd, name, 0) == 0;
}

/* files/: lists <hex>.bin (regular files only; a .bin without a sidecar is
 * listed too while young: its bytes are on disk), cleans temps and orphans. */
static int scan_files(int sfd, int64_t now, struct rqc_found **v, size_t *n, size_t *cap)
{
	DIR *d;
	int rd = open_scan_dir(sfd, &d);
	if (rd <= 0)
		return rd;
	int r = 0;
	struct dirent *de;
	while (r == 0 && (de = readdir(d))) {
		const char *nm = de->d_name;
		size_t len = strlen(nm);
		bool bin = len == 36 && !strcmp(nm + 32, ".bin");
		if (bin || (len == 36 && !strcmp(nm + 32, ".sum"))) {
			struct rqc_found f;
			struct stat st;
			if (!parse_hex(nm, 32, f.key.b) ||
			    fstatat(dirfd(d), nm, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
			    clean_orphan(dirfd(d), nm, &st, now) || !bin)
				continue;
			r = push_stat(v, n, cap, &f, RQC_FILE, &st);
		} else {
			long pid = tmp_pid(nm);
			if (pid)
				maybe_clean_tmp(dirfd(d), nm, pid, now);
		}
	}
	closedir(d);
	return r;
}

int rqc_scan(struct rq_cache *c, struct rqc_found **out, size_t *nout, char bad_sub[8])
{
	int64_t now = rqc_now_ns();
	int tfd = openat(c->dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (tfd < 0)
		return -errno;
	DIR *top = fdopendir(tfd);
	if (!top) {
		int r = -errno;
		close(tfd);
		return r;
	}
	struct rqc_found *v = NULL;
	size_t n = 0, cap = 0;
	int r = 0;
	struct dirent *de;
	while (r == 0 && (de = readdir(top))) {
		const char *nm = de->d_name;
		if (strlen(nm) == 2 && hexval(nm[0]) >= 0 && hexval(nm[1]) >= 0) {
			int sfd = openat(dirfd(top), nm, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
			if (sfd >= 0)
				r = scan_sub(sfd, nm, now, &v, &n, &cap);
			if (r == -EPERM && bad_sub)
				memcpy(bad_sub, nm, 3);
		} else if (!strcmp(nm, RQC_FILES_DIR)) {
			int sfd = openat(dirfd(top), nm, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
			if (sfd >= 0)
				r = scan_files(sfd, now, &v, &n, &cap);
			if (r == -EPERM && bad_sub)
				memcpy(bad_sub, RQC_FILES_DIR, sizeof RQC_FILES_DIR);
		} else {
			long pid = tmp_pid(nm);
			if (pid)
				maybe_clean_tmp(dirfd(top), nm, pid, now);
		}
	}
	closedir(top);
	if (r < 0) {
		free(v);
		return r;
	}
	*out = v;
	*nout = n;
	return 0;
}

static int by_last_use(const void *a, const void *b)
{
	const struct rqc_ent *x = *(struct rqc_ent *const *)a, *y = *(struct rqc_ent *const *)b;
	return (x->last_use > y->last_use) - (x->last_use < y->last_use);
}

void rqc_merge(struct rq_cache *c, const struct rqc_found *f, size_t n, int64_t scan_start)
{
	/* Mark: an entry is kept if the scan saw it or it was used since. */
	for (struct rqc_ent *e = c->oldest; e; e = e->younger)
		e->seen = false;
	for (size_t i = 0; i < n; i++) {
		struct rqc_ent *e = rqc_find(c, &f[i].key);
		if (!e && !(e = rqc_add(c, &f[i].key)))
			continue;
		if (e->dev != f[i].dev || e->ino != f[i].ino || e->fsize != f[i].fsize ||
		    e->mtime != f[i].mtime || e->ctime != f[i].ctime) {
			e->verified = false;
			e->dev = f[i].dev;
			e->ino = f[i].ino;
			e->fsize = f[i].fsize;
			e->mtime = f[i].mtime;
			e->ctime = f[i].ctime;
		}
		if (f[i].kind == RQC_FILE)
			rqc_set_present(c, e, RQC_FILE, (uint64_t)f[i].fsize);
		else
			rqc_set_present(c, e, RQC_ENTRY, f[i].fsize >= RQC_OVERHEAD ?
			                (uint64_t)f[i].fsize - RQC_OVERHEAD : 0);
		if (f[i].atime > e->last_use)
			e->last_use = f[i].atime;
		e->seen = true;
	}
	/* Sweep and re-sort. */
	struct rqc_ent **all = malloc((c->n ? c->n : 1) * sizeof *all);
	size_t m = 0;
	for (struct rqc_ent *e = c->oldest, *nx; e; e = nx) {
		nx = e->younger;
		if (!e->seen && e->last_use < scan_start) {
			bool pinned = e->pins > 0;
			rqc_del(c, e);   /* a pinned one stays, as a placeholder */
			if (!pinned)
				continue;
		}
		if (all)
			all[m++] = e;
	}
	if (all) {
		qsort(all, m, sizeof *all, by_last_use);
		c->oldest = c->youngest = NULL;
		for (size_t i = 0; i < m; i++) {
			all[i]->older = c->youngest;
			all[i]->younger = NULL;
			if (c->youngest)
				c->youngest->younger = all[i];
			else
				c->oldest = all[i];
			c->youngest = all[i];
		}
	} else {
		/* No memory to sort: fix the order one entry at a time. */
		for (struct rqc_ent *e = c->oldest, *nx; e; e = nx) {
			nx = e->younger;
			list_unlink(c, e);
			list_insert(c, e);
		}
	}
	free(all);
	c->last_scan = scan_start;
}

/* A victim picked for eviction. */
struct victim {
	struct rq_cache_key key;
	uint8_t kind;
};

/* Picks up to `max` victims, oldest first, and drops them from the index
 * (so no other thread picks them too) until bytes <= limit. Never `keep`,
 * a pinned file or a placeholder. mu held. */
static size_t pick_victims(struct rq_cache *c, const struct rq_cache_key *keep, uint64_t limit,
                           struct victim *out, size_t max)
{
	size_t n = 0;
	/* An entry moves only when someone touched it since we last looked; the
	 * bound only guards against a directory being hammered meanwhile. */
	size_t budget = 2 * c->n + 16;
	struct rqc_ent *v = c->oldest;
	while (c->bytes > limit && v && n < max && budget--) {
		struct rqc_ent *nx = v->younger;
		if (!memcmp(v->key.b, keep->b, 16) || v->pins > 0 || !v->present) {
			v = nx;
			continue;
		}
		char rel[RQC_REL_MAX], sum[RQC_REL_MAX];
		if (v->kind == RQC_FILE)
			rqc_file_rel(&v->key, rel, sum);
		else
			rqc_rel_path(&v->key, rel);
		struct stat st;
		if (fstatat(c->dfd, rel, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				rqc_del(c, v);   /* someone else removed it: not ours to count */
			v = nx;
			continue;
		}
		int64_t at = ts_ns(st.st_atim);
		if (at > v->last_use) {
			rqc_use(c, v, at);       /* used by another process since */
			v = nx;
			continue;
		}
		out[n].key = v->key;
		out[n++].kind = v->kind;
		rqc_del(c, v);
		v = nx;
	}
	return n;
}

/* Evicts least-recently-used records (never keep, never a pinned file)
 * until c->bytes <= limit; the payload bytes dropped from the index. */
static uint64_t evict_to(struct rq_cache *c, const struct rq_cache_key *keep, uint64_t limit)
{
	pthread_mutex_lock(&c->mu);
	if (c->bytes <= limit) {
		pthread_mutex_unlock(&c->mu);
		return 0;
	}
	int64_t now = rqc_now_ns();
	if (now - c->last_scan >= RQC_RESCAN_NS) {
		pthread_mutex_unlock(&c->mu);
		struct rqc_found *f = NULL;
		size_t n = 0;
		int r = rqc_scan(c, &f, &n, NULL);
		pthread_mutex_lock(&c->mu);
		if (r == 0)
			rqc_merge(c, f, n, now);
		free(f);
	}
	/* Unlinking a large file can take a while: do it without the lock, in
	 * batches. A file we fail to unlink (EACCES...) is forgotten until the
	 * next scan. A whole file loses its sidecar first (a .bin alone is a
	 * miss), then its data. A process still reading it (an open fd, the
	 * kernel's passthrough) keeps its bytes alive. */
	uint64_t dropped = 0;
	for (;;) {
		struct victim vict[64];
		uint64_t b0 = c->bytes;
		size_t n = pick_victims(c, keep, limit, vict, 64);
		dropped += b0 > c->bytes ? b0 - c->bytes : 0;
		bool more = n == 64 && c->bytes > limit;
		pthread_mutex_unlock(&c->mu);
		uint64_t gone = 0;
		for (size_t i = 0; i < n; i++) {
			char rel[RQC_REL_MAX], sum[RQC_REL_MAX];
			if (vict[i].kind == RQC_FILE) {
				rqc_file_rel(&vict[i].key, rel, sum);
				unlinkat(c->dfd, sum, 0);
			} else {
				rqc_rel_path(&vict[i].key, rel);
			}
			gone += unlinkat(c->dfd, rel, 0) == 0;
		}
		pthread_mutex_lock(&c->mu);
		c->st.evicted += gone;
		if (!more)
			break;
	}
	pthread_mutex_unlock(&c->mu);
	return dropped;
}

void rqc_evict(struct rq_cache *c, const struct rq_cache_key *keep, uint64_t room)
{
	pthread_mutex_lock(&c->mu);
	uint64_t max = c->max_bytes, own = c->bytes + c->writing, writing = c->writing;
	struct rq_cache_peer p = c->peer;
	pthread_mutex_unlock(&c->mu);
	if (!max)
		return;
	/* The neighbour's bytes share the limit; it frees the excess first. */
	uint64_t other = p.bytes ? p.bytes(p.ctx) : 0;
	if (other && p.trim && own + other + room > max) {
		uint64_t over = own + other + room - max;
		uint64_t got = p.trim(p.ctx, over < other ? over : other);
		other -= got < other ? got : other;
	}
	evict_to(c, keep, max > room + other + writing ? max - room - other - writing : 0);
}

void rq_cache_set_peer(struct rq_cache *c, const struct rq_cache_peer *p)
{
	pthread_mutex_lock(&c->mu);
	c->peer = p ? *p : (struct rq_cache_peer){0};
	pthread_mutex_unlock(&c->mu);
}

uint64_t rq_cache_trim(struct rq_cache *c, uint64_t n)
{
	struct rq_cache_key none = { { 0 } };
	pthread_mutex_lock(&c->mu);
	uint64_t limit = c->bytes > n ? c->bytes - n : 0;
	pthread_mutex_unlock(&c->mu);
	return evict_to(c, &none, limit);
}
