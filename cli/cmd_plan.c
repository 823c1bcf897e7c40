/* cmd_plan.c — `requantfs plan SRC --scheme S [...]` (or the Laguna fix with
 * --calib): builds the plan that mount and export would use, without
 * mounting or quantizing, and prints what it costs: the modules quantized
 * (by role), the source and presented sizes, the cache it fills, the bytes
 * served unchanged from SRC and the largest job's memory. Every figure
 * follows from shard headers alone (rq_plan_build reads no tensor data), so
 * it works on shape-only checkpoints (tools/golden/shape_ckpt.py). A time is given
 * only when measured: --measure N runs the N largest jobs on the quantizer
 * device (reading SRC's bytes) and scales their rate to all jobs. */
#include "cli/cli.h"
#include "cli/cli_scheme.h"
#include "cli/cli_hf.h"
#include "cli/cli_hf_cache.h"
#include "base/err.h"
#include "base/grow.h"
#include "job/job.h"
#include "plan/plan.h"
#include "qdev/qdev.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
	fprintf(f,
	"usage: requantfs plan SRC --scheme S [--targets T]... [--ignore I]... [--recipe R] [--json]\n"
	"                      [--endpoint URL] [--cache DIR] [--remote-verify file|none]\n"
	"       requantfs plan SRC --calib CALIB [--drop-ignore RULE] [--rule-scheme S]\n"
	"                      [--recipe R] [--json]\n"
	"                      [--measure N [--device D] [--threads N]]\n\n"
	"Decides what `requantfs mount` / `export` would present for SRC, without mounting\n"
	"or quantizing anything, and prints what it costs: the modules quantized (count,\n"
	"by role), the source size, the presented size, the cache it fills (the jobs'\n"
	"output bytes; with passthrough, the requantized shards kept whole), the bytes\n"
	"served unchanged from SRC and the largest job's memory. Only headers are read,\n"
	"so a shape-only checkpoint (tools/golden/shape_ckpt.py) gives exact figures.\n\n"
	"  SRC                a checkpoint directory, hub snapshot or repo id ORG/NAME[@REV]\n"
	"                     in the local hub cache, or hf://ORG/NAME[@REV] on the hub itself:\n"
	"                     REV (default main) pinned to its commit, only the small files and\n"
	"                     the shards' headers fetched (range requests), never the weights\n"
	"  --calib hf://ORG/NAME[@REV]  the scales fetched as `calib fetch` does\n"
	"  --endpoint URL     for hf://: the hub or mirror to ask (default $HF_ENDPOINT, else\n"
	"                     https://huggingface.co); token: $HF_TOKEN or huggingface_hub's file\n"
	"  --remote-verify M  for hf://: file (default): as the mount's default, refuse a SRC\n"
	"                     file the model API lists with no sha256 and no git blob id (its\n"
	"                     bytes cannot be verified); none: plan it (as a mount with\n"
	"                     --remote-verify none would serve it)\n"
	"  --cache DIR        for hf:// with HF_HUB_OFFLINE=1: answer from the cache of a mount\n"
	"                     that saw the revision (its file list, small files and shard\n"
	"                     headers; nothing is fetched); default: the mount's default cache\n"
	"                     ($XDG_CACHE_HOME/requantfs, else ~/.cache/requantfs). Online it is\n"
	"                     not read: the plan asks the hub, as without it\n"
	"  --scheme S         nvfp4 (W4A4, with --calib from `calib run`), nvfp4a16,\n"
	"                     fp8-dynamic, w8a16, w4a16 (see `requantfs export --help`)\n"
	"  --targets T        a module to quantize (name, re:PATTERN, Linear); repeatable\n"
	"  --ignore I         a module to leave alone; repeatable (default: lm_head,\n"
	"                     re:.*embed_tokens$, re:.*\\.gate$; see `requantfs export --help`)\n"
	"  --calib CALIB      alone: the Laguna fix (its 2026-07-22 checkpoint, a `calib\n"
	"                     extract`/`fetch` file or a `calib run SRC` file); with --scheme\n"
	"                     nvfp4: a `calib run` file\n"
	"  --drop-ignore RULE Laguna fix: the ignore entry to drop (default: detected)\n"
	"  --rule-scheme S    Laguna fix: what the rule's modules become: nvfp4 (default,\n"
	"                     with CALIB's input scales), nvfp4a16 or fp8-dynamic (no CALIB\n"
	"                     needed); the presented size of all three is printed\n"
	"  --recipe V         fp32, bf16, fp32div (default: the scheme's)\n"
	"  --observer O       minmax (default), mse, expanded-mse (see `requantfs export\n"
	"                     --help`); an MSE observer's extra CPU time is estimated\n"
	"  --measure N        quantize the N largest jobs now (reading SRC; nothing is written)\n"
	"                     and give the time of all jobs at their measured rate; without\n"
	"                     it no time is estimated (a shape-only SRC reads as zeros: its\n"
	"                     rate says little about real weights)\n"
	"  --device D         for --measure: auto (default), cpu, cuda, cuda:N\n"
	"  --threads N        for --measure: CPU quantizer threads (default: all cores)\n"
	"  --json             one JSON object on stdout instead of the table\n");
}

/* A module's role: its name with every numeric component written "*". */
static void role_of(const char *name, char *out, size_t cap)
{
	size_t o = 0;
	for (const char *p = name; *p && o + 2 < cap;) {
		const char *e = strchr(p, '.');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		int num = l > 0 && strspn(p, "0123456789") == l;
		if (num) {
			out[o++] = '*';
		} else {
			size_t c = l < cap - o - 2 ? l : cap - o - 2;
			memcpy(out + o, p, c);
			o += c;
		}
		if (!e)
			break;
		out[o++] = '.';
		p = e + 1;
	}
	out[o] = 0;
}

struct role {
	char name[256];
	size_t count;
	uint64_t in_bytes, out_bytes;
};

struct summary {
	uint64_t source, presented, cache_jobs, cache_files, unchanged, mem, job_bytes;
	size_t changed_files, largest_job;
	uint64_t largest_mem;
	size_t nroles, cap;
	struct role *roles;
	uint64_t in_total;         /* weight bytes all jobs read */
	/* --measure */
	size_t measured_jobs;      /* 0: nothing measured */
	uint64_t measured_in;      /* weight bytes those jobs read */
	double measured_s;         /* their wall time, reads included */
	char device[128];
	/* the Laguna fix: the presented size with each --rule-scheme */
	int nrule;                 /* 0: not the Laguna fix */
	enum rq_scheme rule[3];
	uint64_t rule_size[3];
};

/* The Laguna fix's --rule-scheme choices, in the order plan prints them. */
static const enum rq_scheme rule_choices[3] = {RQ_SCHEME_NVFP4, RQ_SCHEME_NVFP4A16,
                                               RQ_SCHEME_FP8_DYNAMIC};

static const char *rule_name(enum rq_scheme r)
{
	return r == RQ_SCHEME_NVFP4 ? "nvfp4" : rq_scheme_name(r);
}

/* A remote SRC read through a memo: plan's extra plans (the --rule-scheme
 * choices) read the same config, index and header ranges, answered from
 * memory so that the hub sees each byte once. */
struct memo_read {
	size_t i;
	uint64_t off, len;
	void *buf;
};
struct memo {
	const struct rq_src_reader *under;
	struct rq_src_reader self;
	struct memo_read *r;
	size_t n, cap;
};

static int memo_read(void *ctx, size_t i, uint64_t off, uint64_t len, void *buf,
                     struct rq_err *err)
{
	struct memo *m = ctx;
	for (size_t k = 0; k < m->n; k++)
		if (m->r[k].i == i && m->r[k].off == off && m->r[k].len == len) {
			memcpy(buf, m->r[k].buf, len);
			return 0;
		}
	int rc = m->under->read(m->under->ctx, i, off, len, buf, err);
	void *copy = rc ? NULL : malloc(len ? len : 1);
	if (copy && !RQ_GROW(m->r, m->n, m->cap, 64)) {
		memcpy(copy, buf, len);
		m->r[m->n++] = (struct memo_read){i, off, len, copy};
	} else {
		free(copy);       /* not kept: a later plan reads it again */
	}
	return rc;
}

static void memo_init(struct memo *m, const struct rq_src_reader *under)
{
	memset(m, 0, sizeof *m);
	m->under = under;
	m->self = *under;
	m->self.ctx = m;
	m->self.read = memo_read;
}

static void memo_free(struct memo *m)
{
	for (size_t k = 0; k < m->n; k++)
		free(m->r[k].buf);
	free(m->r);
}

/* The presented size of each --rule-scheme choice: the plan p has its own,
 * the others are planned again without reading CALIB (sizes only). */
static int rule_sizes(const struct rq_plan *p, const struct rq_plan_opts *po,
                      struct summary *s, struct rq_err *err)
{
	if (p->scheme != RQ_SCHEME_NVFP4)
		return 0;
	for (int k = 0; k < 3; k++) {
		s->rule[k] = rule_choices[k];
		if (rule_choices[k] == p->mod_scheme) {
			s->rule_size[k] = p->total_size;
			continue;
		}
		struct rq_plan_opts o = *po;
		struct rq_plan *q;
		o.rule_scheme = rule_choices[k];
		o.no_scales = 1;
		o.observer = RQ_OBSERVER_MINMAX;   /* sizes do not depend on it; nvfp4 takes no other */
		int rc = rq_plan_build(&o, &q, err);
		if (rc)
			return rc;
		s->rule_size[k] = q->total_size;
		rq_plan_free(q);
	}
	s->nrule = 3;
	return 0;
}

/* An MSE observer's extra time, an ESTIMATE (nothing is run): its search's rate on one
 * thread as `requantfs bench quant [--scheme S] --observer O --threads 1 --rows 512 --cols
 * 2048` measured it (docs/benchmarks.md, 2-core x86-64 AVX-512 dev machine, 2026-12-06 22:17
 * UTC, the middle of 3 runs): NVFP4's groups of 16 (nvfp4a16, nvfp4 W4A4; the bounded search
 * of quant/observer_g16.c) mse 140 MB/s of BF16 in (1/19 of minmax), expanded-mse 72.8 MB/s
 * (1/36); the other schemes as w4a16's groups of 128 (one run): mse 102 MB/s (1/42),
 * expanded-mse 42.9 MB/s (1/98). Scaled to every online CPU: the CPU's time (a GPU, when the
 * quantizer has one, runs the search; no GPU figure exists yet). */
struct obs_estimate {
	double per_thread;         /* bytes/s, 0: minmax (no extra time) */
	int ratio;                 /* ~N x minmax per byte */
	long threads;
	double seconds;            /* in_total / (per_thread * threads) */
};

static void observer_estimate(const struct rq_plan *p, uint64_t in_total, struct obs_estimate *e)
{
	memset(e, 0, sizeof *e);
	if (p->observer == RQ_OBSERVER_MINMAX)
		return;
	int g16 = rq_scheme_group(p->scheme) == 16, mse = p->observer == RQ_OBSERVER_MSE;
	e->per_thread = g16 ? (mse ? 140e6 : 72.8e6) : (mse ? 102e6 : 42.9e6);
	e->ratio = g16 ? (mse ? 19 : 36) : (mse ? 42 : 98);
	e->threads = sysconf(_SC_NPROCESSORS_ONLN);
	if (e->threads < 1)
		e->threads = 1;
	e->seconds = (double)in_total / (e->per_thread * (double)e->threads);
}

static int summarize(const struct rq_plan *p, struct summary *s)
{
	memset(s, 0, sizeof *s);
	for (size_t i = 0; i < p->nfiles; i++) {
		const struct rq_vfile *f = &p->files[i];
		s->source += p->srcs[f->src].size;
		s->presented += f->size;
		int has_job = 0;
		for (size_t k = 0; k < f->nseg; k++) {
			const struct rq_seg *g = &f->seg[k];
			if (g->kind == RQ_SEG_SRC)
				s->unchanged += g->len;
			else if (g->kind == RQ_SEG_MEM)
				s->mem += g->len;
			else
				s->job_bytes += g->len;
			has_job |= g->kind == RQ_SEG_JOB;
		}
		s->changed_files += f->changed != 0;
		if (has_job)
			s->cache_files += f->size;   /* materialized whole with passthrough */
	}
	for (size_t j = 0; j < p->njobs; j++) {
		const struct rq_job *job = &p->jobs[j];
		s->cache_jobs += job->out_size;
		s->in_total += job->in_size;
		if (job->in_size + job->out_size > s->largest_mem) {
			s->largest_mem = job->in_size + job->out_size;
			s->largest_job = j;
		}
	}
	for (size_t i = 0; i < p->nmods; i++) {
		char r[256];
		role_of(p->mods[i].name, r, sizeof r);
		size_t k = 0;
		while (k < s->nroles && strcmp(s->roles[k].name, r))
			k++;
		if (k == s->nroles) {
			if (RQ_GROW(s->roles, s->nroles, s->cap, 16))
				return -ENOMEM;
			memset(&s->roles[k], 0, sizeof s->roles[k]);
			snprintf(s->roles[k].name, sizeof s->roles[k].name, "%s", r);
			s->nroles++;
		}
		s->roles[k].count++;
		s->roles[k].in_bytes += rq_mod_in_bytes(&p->mods[i]);
		s->roles[k].out_bytes += p->mods[i].out_size;
	}
	return 0;
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static const struct rq_plan *sort_plan;

static int by_size_desc(const void *a, const void *b)
{
	uint64_t x = sort_plan->jobs[*(const size_t *)a].in_size;
	uint64_t y = sort_plan->jobs[*(const size_t *)b].in_size;
	return x < y ? 1 : x > y ? -1 : 0;
}

/* Runs the n largest jobs (their outputs are thrown away) and records the
 * wall time, SRC reads included. */
static int measure(const struct rq_plan *p, const struct rq_quantizer_opts *qo, size_t n,
                   struct summary *s, struct rq_err *err)
{
	size_t *order = malloc((p->njobs ? p->njobs : 1) * sizeof *order);
	int *fds = malloc((p->nsrcs ? p->nsrcs : 1) * sizeof *fds);
	struct rq_quantizer *q = NULL;
	uint8_t *out = NULL;
	int rc = order && fds ? 0 : -ENOMEM;
	for (size_t i = 0; fds && i < p->nsrcs; i++)
		fds[i] = -1;
	if (!rc)
		rc = rq_quantizer_open(qo, &q, err);
	if (rc)
		goto out;
	snprintf(s->device, sizeof s->device, "%s", rq_quantizer_device(q));
	for (size_t j = 0; j < p->njobs; j++)
		order[j] = j;
	sort_plan = p;
	qsort(order, p->njobs, sizeof *order, by_size_desc);
	if (n > p->njobs)
		n = p->njobs;
	for (size_t i = 0; i < n && !rc; i++) {
		const struct rq_job *job = &p->jobs[order[i]];
		for (int k = 0; k < job->nmod && !rc; k++) {
			int src = p->mods[job->mod[k]].src;
			if (fds[src] < 0 && (fds[src] = rq_src_open(&p->srcs[src])) < 0)
				rc = rq_errf(err, fds[src], "%s: cannot open: %s", p->srcs[src].path,
				             strerror(-fds[src]));
		}
		uint8_t *o = rc ? NULL : realloc(out, job->out_size ? job->out_size : 1);
		if (!rc && !o)
			rc = -ENOMEM;
		if (rc)
			break;
		out = o;
		double t0 = now_s();
		rc = rq_job_run(q, p, order[i], fds, out, err);
		s->measured_s += now_s() - t0;
		s->measured_in += job->in_size;
		s->measured_jobs++;
	}
out:
	for (size_t i = 0; fds && i < p->nsrcs; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	rq_quantizer_close(q);
	free(out);
	free(fds);
	free(order);
	return rc;
}

static void gb(uint64_t b, char *buf, size_t len)
{
	snprintf(buf, len, "%.2f GB", b / 1e9);
}

static void print_json_string(const char *s)
{
	cJSON str = {.type = cJSON_String, .valuestring = (char *)s};
	char *t = cJSON_PrintUnformatted(&str);
	fputs(t ? t : "null", stdout);
	free(t);
}

/* Item i of a JSON list of objects, opened with its first member key: val. */
static void json_item(size_t i, const char *key, const char *val)
{
	printf(i ? ",\n  {\"%s\": " : "\n  {\"%s\": ", key);
	print_json_string(val);
}

/* A remote SRC: what a mount would download (--remote-verify file, the
 * default, and export: every SRC file whole, as its sha256 is checked
 * before a byte of it is used; none: only the SRC bytes presented
 * unchanged and the weights its jobs read), what its cache would hold
 * (everything presented, once: the replaced weights never), and what this
 * plan fetched. */
struct remote {
	const char *commit;
	uint64_t download, lazy, cache, requests, fetched;
};

static void remote_figures(const struct rq_plan *p, struct cli_hf *hf, struct remote *r)
{
	memset(r, 0, sizeof *r);
	r->commit = cli_hf_commit(hf);
	for (size_t i = 0; i < p->nfiles; i++)
		for (size_t k = 0; k < p->files[i].nseg; k++)
			if (p->files[i].seg[k].kind == RQ_SEG_SRC)
				r->lazy += p->files[i].seg[k].len;
	for (size_t j = 0; j < p->njobs; j++)
		r->lazy += p->jobs[j].in_size;
	for (size_t s = 0; s < p->nsrcs; s++)
		r->download += p->srcs[s].size;
	r->cache = p->total_size;
	cli_hf_traffic(hf, &r->requests, &r->fetched);
}

/* Bytes of the files that differ from SRC (changed = 1: what `export --link`
 * writes) or are identical to it (0: what it links). */
static unsigned long long link_bytes(const struct rq_plan *p, int changed)
{
	unsigned long long b = 0;
	for (size_t i = 0; i < p->nfiles; i++)
		if (!p->files[i].changed == !changed)
			b += p->files[i].size;
	return b;
}

static void print_json(const struct rq_plan *p, const struct summary *s, const char *src,
                       const struct remote *r)
{
	const struct rq_job *lj = p->njobs ? &p->jobs[s->largest_job] : NULL;
	printf("{\"src\": ");
	print_json_string(src);
	printf(", \"scheme\": \"%s\", \"recipe\": \"%s\", \"files\": %zu, \"changed_files\": %zu, "
	       "\"modules\": %zu, \"jobs\": %zu,\n \"source_bytes\": %llu, \"presented_bytes\": %llu, "
	       "\"cache_job_bytes\": %llu, \"cache_materialized_bytes\": %llu, "
	       "\"unchanged_bytes\": %llu, \"memory_bytes\": %llu, \"quantized_bytes\": %llu, "
	       "\"largest_job_bytes\": %llu, \"link_written_bytes\": %llu, "
	       "\"link_linked_bytes\": %llu, \"largest_job_module\": ",
	       rq_scheme_name(p->scheme), rq_recipe_name(p->recipe), p->nfiles, s->changed_files,
	       p->nmods, p->njobs, (unsigned long long)s->source, (unsigned long long)s->presented,
	       (unsigned long long)s->cache_jobs, (unsigned long long)s->cache_files,
	       (unsigned long long)s->unchanged, (unsigned long long)s->mem,
	       (unsigned long long)s->job_bytes, (unsigned long long)s->largest_mem,
	       link_bytes(p, 1), link_bytes(p, 0));
	if (lj)
		print_json_string(p->mods[lj->mod[0]].name);
	else
		printf("null");
	printf(", \"weight_bytes_read\": %llu,\n \"observer\": \"%s\", \"observer_llmc\": \"%s\", "
	       "\"calib_observer\": ", (unsigned long long)s->in_total, rq_observer_name(p->observer),
	       rq_observer_llmc(p->observer));
	if (p->calib_observer)
		print_json_string(p->calib_observer);
	else
		printf("null");
	struct obs_estimate oe;
	observer_estimate(p, s->in_total, &oe);
	if (oe.per_thread > 0)
		printf(", \"observer_estimate\": {\"seconds\": %.1f, \"threads\": %ld, "
		       "\"bytes_per_second_per_thread\": %.0f, \"times_minmax\": %d}", oe.seconds,
		       oe.threads, oe.per_thread, oe.ratio);
	printf(",\n \"measured\": ");
	if (s->measured_jobs) {
		printf("{\"jobs\": %zu, \"bytes\": %llu, \"seconds\": %.6f, \"device\": ",
		       s->measured_jobs, (unsigned long long)s->measured_in, s->measured_s);
		print_json_string(s->device);
		printf(", \"all_jobs_seconds\": %.6f}", s->measured_in ?
		       s->measured_s * (double)s->in_total / (double)s->measured_in : 0.0);
	} else {
		printf("null");
	}
	if (s->nrule) {
		printf(",\n \"rule_scheme\": \"%s\", \"rule_scheme_presented_bytes\": {",
		       rule_name(p->mod_scheme));
		for (int k = 0; k < s->nrule; k++)
			printf("%s\"%s\": %llu", k ? ", " : "", rule_name(s->rule[k]),
			       (unsigned long long)s->rule_size[k]);
		printf("}");
	}
	printf(",\n \"dropped_ignore\": [");
	size_t nd = p->dropped_rule ? 1 : p->ndropped;
	for (size_t i = 0; i < nd; i++) {
		printf(i ? ", " : "");
		print_json_string(p->dropped_rule ? p->dropped_rule : p->dropped[i]);
	}
	printf("],\n \"roles\": [");
	for (size_t k = 0; k < s->nroles; k++) {
		json_item(k, "role", s->roles[k].name);
		printf(", \"count\": %zu, \"source_bytes\": %llu, \"output_bytes\": %llu}",
		       s->roles[k].count, (unsigned long long)s->roles[k].in_bytes,
		       (unsigned long long)s->roles[k].out_bytes);
	}
	printf("],\n \"file_list\": [");
	for (size_t i = 0; i < p->nfiles; i++) {
		json_item(i, "name", p->files[i].name);
		printf(", \"size\": %llu, \"source_size\": %llu, \"changed\": %s}",
		       (unsigned long long)p->files[i].size,
		       (unsigned long long)p->srcs[p->files[i].src].size,
		       p->files[i].changed ? "true" : "false");
	}
	printf("]");
	if (r)
		printf(",\n \"remote\": {\"commit\": \"%s\", \"download_bytes\": %llu, "
		       "\"download_bytes_verify_none\": %llu, "
		       "\"cache_bytes\": %llu, \"plan_requests\": %llu, \"plan_fetched_bytes\": %llu}",
		       r->commit, (unsigned long long)r->download, (unsigned long long)r->lazy,
		       (unsigned long long)r->cache,
		       (unsigned long long)r->requests, (unsigned long long)r->fetched);
	printf("}\n");
}

static void print_table(const struct rq_plan *p, const struct summary *s, const char *src,
                        const struct remote *r)
{
	char a[32], b[32];
	if (p->scheme == RQ_SCHEME_NVFP4)
		printf("requantfs plan %s: the Laguna fix, recipe %s, dropping ignore rule %s, its "
		       "modules %s\n", src, rq_recipe_name(p->recipe),
		       p->dropped_rule ? p->dropped_rule : "(none)", rule_name(p->mod_scheme));
	else
		printf("requantfs plan %s: scheme %s, recipe %s\n", src, rq_scheme_name(p->scheme),
		       rq_recipe_name(p->recipe));
	if (p->observer == RQ_OBSERVER_MINMAX)
		printf("observer: weights minmax (the default: each group's max |w|)");
	else
		printf("observer: weights %s (llm-compressor %s)", rq_observer_name(p->observer),
		       rq_observer_llmc(p->observer));
	if (p->calib_observer)
		printf("; input scales %s (--calib's __metadata__)", p->calib_observer);
	printf("\n");
	struct obs_estimate oe;
	observer_estimate(p, s->in_total, &oe);
	if (oe.per_thread > 0) {
		gb(s->in_total, a, sizeof a);
		printf("observer time: ESTIMATE, not measured: %s costs ~%dx minmax per byte (%.1f MB/s "
		       "per CPU thread: bench quant --observer, %s, 2-core dev machine); %s of "
		       "weights on %ld CPU thread(s): ~%.0f s on the CPU (a GPU, when there is one, runs "
		       "the search instead)\n",
		       rq_observer_name(p->observer), oe.ratio, oe.per_thread / 1e6,
		       rq_scheme_group(p->scheme) == 16 ? "nvfp4a16" : "w4a16", a, oe.threads,
		       oe.seconds);
	}
	printf("modules quantized: %zu in %zu jobs\n", p->nmods, p->njobs);
	printf("  %-52s %7s %12s %12s\n", "role", "count", "source", "output");
	for (size_t k = 0; k < s->nroles; k++) {
		gb(s->roles[k].in_bytes, a, sizeof a);
		gb(s->roles[k].out_bytes, b, sizeof b);
		printf("  %-52s %7zu %12s %12s\n", s->roles[k].name, s->roles[k].count, a, b);
	}
	for (size_t i = 0; i < p->ndropped; i++)
		printf("ignore entry removed: %s\n", p->dropped[i]);
#define LINE(label, v) do { gb(v, a, sizeof a); \
	printf("%-34s %12s  (%llu bytes)\n", label, a, (unsigned long long)(v)); } while (0)
	LINE("source size:", s->source);
	LINE("presented size:", s->presented);
	for (int k = 0; k < s->nrule; k++) {   /* "(this)" last: the labels stay aligned */
		char label[64];
		snprintf(label, sizeof label, "  with --rule-scheme %s:", rule_name(s->rule[k]));
		gb(s->rule_size[k], a, sizeof a);
		printf("%-34s %12s  (%llu bytes)%s\n", label, a, (unsigned long long)s->rule_size[k],
		       s->rule[k] == p->mod_scheme ? " (this)" : "");
	}
	LINE("cache, job entries:", s->cache_jobs);
	LINE("cache, materialized (passthrough):", s->cache_files);
	LINE("unchanged (served from SRC):", s->unchanged);
	LINE("rewritten headers/config/index:", s->mem);
	LINE("quantized tensor bytes:", s->job_bytes);
	LINE("export --link writes:", link_bytes(p, 1));
	LINE("export --link links to SRC:", link_bytes(p, 0));
	if (p->njobs) {
		const struct rq_job *lj = &p->jobs[s->largest_job];
		gb(s->largest_mem, a, sizeof a);
		printf("%-34s %12s  (%llu bytes: %s%s, weights read + output)\n", "largest job memory:",
		       a, (unsigned long long)s->largest_mem, p->mods[lj->mod[0]].name,
		       lj->nmod > 1 ? " and its fused partners" : "");
	}
	if (r) {
		printf("remote SRC at commit %s:\n", r->commit);
		LINE("  a mount downloads:", r->download);
		LINE("  ... with --remote-verify none:", r->lazy);
		LINE("  its cache holds:", r->cache);
		LINE("  fetched for this plan:", r->fetched);
	}
#undef LINE
	printf("files: %zu, %zu changed\n", p->nfiles, s->changed_files);
	gb(s->in_total, a, sizeof a);
	if (s->measured_jobs && s->measured_in && s->measured_s > 0) {
		double rate = s->measured_in / s->measured_s;
		printf("time: measured %zu job(s), %.3f GB in %.2f s on %s: %.2f GB/s; all jobs (%s "
		       "in) at that rate: %.0f s\n", s->measured_jobs, s->measured_in / 1e9,
		       s->measured_s, s->device, rate / 1e9, a, s->in_total / rate);
	} else {
		printf("time: not estimated (--measure N quantizes the N largest jobs and scales their "
		       "rate to the %s the jobs read)\n", a);
	}
}

static int plan_remote(const struct rq_plan_opts *cpo, struct cli_hf *hf, long nmeasure,
                       const struct rq_quantizer_opts *qo, int json, const char *src);
static int plan_remote_memo(const struct rq_plan_opts *cpo, struct cli_hf *hf, long nmeasure,
                            const struct rq_quantizer_opts *qo, int json, const char *src);

/* HF_HUB_OFFLINE=1: spec from the cache dir (NULL: the mount's default),
 * which must exist: its kept model API answer (cli_hf_open_cached) and what a
 * mount left there (cli_hf_cache). 0 or -errno with a message. */
static int open_offline(const char *spec, const char *endpoint, const char *dir,
                        struct cli_hf **hf, struct cli_hf_cache **hc, struct rq_err *err)
{
	char *def = dir ? NULL : cli_default_cache();
	const char *d = dir ? dir : def;
	struct stat st;
	int rc;
	if (!d)
		return -ENOMEM;
	if (stat(d, &st) || !S_ISDIR(st.st_mode))
		rc = rq_errf(err, -ENOENT, "%s: HF_HUB_OFFLINE=1 and %s cache %s does not exist: give "
		             "--cache DIR of a mount that saw this revision, or unset HF_HUB_OFFLINE "
		             "to ask the hub", spec, dir ? "the" : "the default", d);
	else if (!(rc = cli_hf_open_cached(spec, endpoint, d, hf, err)) &&
	         (rc = cli_hf_cache_open(*hf, d, hc, err))) {
		cli_hf_close(*hf);
		*hf = NULL;
	}
	free(def);
	return rc;
}

/* sc: the scheme options, freed by cmd_plan. */
static int plan_main(int argc, char **argv, struct cli_scheme *sc)
{
	static const struct option opts[] = {
		CLI_SCHEME_OPTIONS, {"json", no_argument, 0, 'j'},
		{"measure", required_argument, 0, 'm'}, {"device", required_argument, 0, 'D'},
		{"threads", required_argument, 0, 't'}, {"endpoint", required_argument, 0, 'e'},
		{"cache", required_argument, 0, 'C'}, {"remote-verify", required_argument, 0, 'V'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	const char *endpoint = NULL, *cache = NULL, *rverify = NULL;
	struct rq_plan_opts po = {0};
	struct rq_quantizer_opts qo = {.device = "auto"};
	int c, rc, json = 0;
	long nmeasure = 0;
	char *end;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if ((rc = cli_scheme_option(sc, "plan", c, optarg)) >= 0) {
			if (rc)
				return rc;
			continue;
		}
		switch (c) {
		case 'j': json = 1; break;
		case 'm':
			nmeasure = strtol(optarg, &end, 10);
			if (*end || nmeasure < 1)
				return cli_fail(2, "plan", "--measure %s: expected a job count >= 1", optarg);
			break;
		case 'D': qo.device = optarg; break;
		case 't': qo.threads = atoi(optarg); break;
		case 'e': endpoint = optarg; break;
		case 'C': cache = optarg; break;
		case 'V':
			if (strcmp(optarg, "file") && strcmp(optarg, "none"))
				return cli_fail(2, "plan", "--remote-verify must be file or none (got '%s')",
				                optarg);
			rverify = optarg;
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (argc - optind != 1) {
		usage(stderr);
		return 2;
	}
	if ((rc = cli_scheme_check(sc, "plan", "give --scheme S (nvfp4 with --calib, nvfp4a16, "
	                           "fp8-dynamic, w8a16, w4a16), or --calib CALIB for the Laguna "
	                           "fix (or --rule-scheme nvfp4a16|fp8-dynamic)")) >= 0)
		return rc;
	CLI_SCHEME_TO(&po, sc);
	po.src = argv[optind];
	const char *src = argv[optind];
	struct rq_err err = {0};
	struct cli_hf *hf = NULL;
	struct cli_hf_cache *hc = NULL;
	if (cli_hf_is(src)) {
		if (nmeasure)
			return cli_fail(2, "plan", "--measure needs the weights on disk; not with an "
			                "hf:// SRC");
		if (cli_hf_offline())
			rc = open_offline(src, endpoint, cache, &hf, &hc, &err);
		else
			rc = cli_hf_open(src, endpoint, &hf, &err);
		if (!rc && (!rverify || !strcmp(rverify, "file")) &&
		    (rc = cli_hf_check_verifiable(hf, "a mount (--remote-verify file, the default) "
		                                  "and export refuse it; plan --remote-verify none "
		                                  "plans what a mount accepting unverified bytes "
		                                  "would serve", &err))) {
			cli_hf_cache_close(hc);
			cli_hf_close(hf);
		}
		if (rc)
			return cli_fail(1, "plan", "%s", err.msg);
		po.reader = hc ? cli_hf_cache_reader(hc) : cli_hf_reader(hf);
		po.src = src = po.reader->label;   /* the pinned commit is what was planned */
		if (cli_hf_skipped(hf))
			fprintf(stderr, "requantfs plan: warning: %s: %zu file(s) in subdirectories are "
			        "not part of SRC\n", po.src, cli_hf_skipped(hf));
	} else if (endpoint && !cli_hf_is(po.calib)) {
		return cli_fail(2, "plan", "--endpoint is for an hf://ORG/NAME[@REV] SRC or --calib");
	} else if (cache) {
		return cli_fail(2, "plan", "--cache %s is for an hf://ORG/NAME[@REV] SRC (planned "
		                "offline from a mount's cache)", cache);
	} else if (rverify) {
		return cli_fail(2, "plan", "--remote-verify is for an hf://ORG/NAME[@REV] SRC: %s is "
		                "read from disk, leave it out", src);
	}
	char *calib_tmp = NULL;
	if (cli_hf_is(po.calib)) {
		if ((rc = cli_hf_calib(po.calib, endpoint, &calib_tmp, &err))) {
			cli_hf_cache_close(hc);
			cli_hf_close(hf);
			return cli_fail(1, "plan", "%s", err.msg);
		}
		po.calib = calib_tmp;
	}
	rc = plan_remote(&po, hf, nmeasure, &qo, json, src);
	if (calib_tmp)
		unlink(calib_tmp);
	free(calib_tmp);
	cli_hf_cache_close(hc);
	cli_hf_close(hf);
	return rc;
}

static int plan_remote(const struct rq_plan_opts *cpo, struct cli_hf *hf, long nmeasure,
                       const struct rq_quantizer_opts *qo, int json, const char *src)
{
	struct rq_plan_opts po = *cpo;
	struct memo memo;
	int rc;
	if (po.reader) {            /* outlives every plan built on it */
		memo_init(&memo, po.reader);
		po.reader = &memo.self;
	}
	rc = plan_remote_memo(&po, hf, nmeasure, qo, json, src);
	if (po.reader)
		memo_free(&memo);
	return rc;
}

static int plan_remote_memo(const struct rq_plan_opts *cpo, struct cli_hf *hf, long nmeasure,
                            const struct rq_quantizer_opts *qo, int json, const char *src)
{
	struct rq_plan_opts po = *cpo;
	struct rq_plan *p;
	int rc;
	if ((rc = cli_scheme_plan("plan", &po, &p)) >= 0)
		return rc;
	struct rq_err err = {0};
	struct remote r;
	if (hf)
		remote_figures(p, hf, &r);
	struct summary s;
	if (summarize(p, &s)) {
		free(s.roles);
		rq_plan_free(p);
		return cli_fail(1, "plan", "out of memory");
	}
	if (rule_sizes(p, &po, &s, &err)) {
		free(s.roles);
		rq_plan_free(p);
		return cli_fail(1, "plan", "sizes of the --rule-scheme choices: %s", err.msg);
	}
	if (nmeasure && measure(p, qo, (size_t)nmeasure, &s, &err)) {
		free(s.roles);
		rq_plan_free(p);
		return cli_fail(1, "plan", "--measure: %s", err.msg);
	}
	if (json)
		print_json(p, &s, src, hf ? &r : NULL);
	else
		print_table(p, &s, src, hf ? &r : NULL);
	free(s.roles);
	rq_plan_free(p);
	return 0;
}

int cmd_plan(int argc, char **argv)
{
	struct cli_scheme sc = {0};
	int rc = plan_main(argc, argv, &sc);
	cli_scheme_free(&sc);
	return rc;
}
