/* mkckpt.c — `requantfs mkckpt`: deterministic synthetic checkpoints with
 * Laguna S 2.1's names, structure and file set, small enough for tests.
 *
 * What is written (OUT, or a hub-cache snapshot with --hub):
 *   model-0000K-of-0000N.safetensors   tensors in name order, split by size,
 *       with one forced boundary between gate_proj and up_proj of an expert
 *       in the first BF16 layer (fused partners in different shards);
 *       headers from st_layout, __metadata__ {"format":"pt"}
 *   model.safetensors.index.json, config.json, generation_config.json,
 *   tokenizer files (mkckpt_tokenizer.c) unless --no-tokenizer.
 *
 * The forms (SPEC.md §1): the 2026-08-01 revision (default): routed experts of
 * layers A..B (--bf16-layers) are BF16 `<m>.weight` and the ignore rule is in
 * config.json; every other routed expert projection is NVFP4 (weight_packed,
 * weight_scale, weight_global_scale, input_global_scale), quantized with
 * quant/ (RQ_RECIPE_FP32, gate/up share one global scale). The 2026-07-22
 * twin (--calib-out): the same weights, every expert NVFP4, no rule; each
 * tensor goes to the shard that holds it (or its module's weight) in OUT, so
 * both have the same file names. --dense: every tensor BF16, no
 * quantization_config.
 *
 * What the tensors hold is mkckpt_plan.c's business; this file writes them
 * (streamed: one tensor, or 1M elements of it, in memory at a time).
 *
 * The order of this folder (held by tests/tools/test_layout.py): each file
 * calls only the files below it.
 *
 *   mkckpt.c            `requantfs mkckpt`: writes the checkpoint, streamed
 *   mkckpt_config.c     its JSON files, byte for byte
 *   mkckpt_plan.c       what it holds: the tensor list, Laguna S shapes
 *   mkckpt_tokenizer.c  its tokenizer: a real, small byte-level BPE
 */
#include "tools/mkckpt/mkckpt.h"

#include "base/err.h"
#include "st/st.h"
#include "cli/cli.h"
#include "base/sha256.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "mkckpt writes host-order floats: safetensors is little-endian"
#endif

#define HUB_REPO "models--synthetic--laguna-s-2.1-nvfp4"

/* ---- files -------------------------------------------------------------- */

struct wr {
	int fd;
	const char *path;
	uint8_t buf[1 << 20];
	size_t n;
	int err;             /* first errno */
};

static void wr_flush(struct wr *w)
{
	size_t off = 0;
	while (!w->err && off < w->n) {
		ssize_t r = write(w->fd, w->buf + off, w->n - off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			w->err = errno;
		else
			off += (size_t)r;
	}
	w->n = 0;
}

static void wr_put(struct wr *w, const void *data, size_t n)
{
	const uint8_t *p = data;
	while (n) {
		size_t take = sizeof w->buf - w->n < n ? sizeof w->buf - w->n : n;
		memcpy(w->buf + w->n, p, take);
		w->n += take, p += take, n -= take;
		if (w->n == sizeof w->buf)
			wr_flush(w);
	}
}

static int write_text(const char *dir, const char *name, const struct jt_buf *b,
                      struct rq_err *err)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	if (!f)
		return rq_errf(err, -errno, "%s: %s", path, strerror(errno));
	int bad = b->len && fwrite(b->p, 1, b->len, f) != b->len;
	if (fclose(f))
		bad = 1;
	if (bad)
		return rq_errf(err, -EIO, "%s: write failed: %s", path, strerror(errno));
	return 0;
}

struct ctx {
	uint64_t seed;
	struct mk_qcache qc;
	struct cli_progress *prog;
	uint16_t *chunk;     /* [CHUNK] scratch for streamed BF16 tensors */
};
#define CHUNK (1u << 20)

static int write_tensor(struct ctx *c, const struct mk_plan *p, const struct mk_tensor *t,
                        struct wr *w, struct rq_err *err)
{
	int rc;
	float f;
	switch (t->kind) {
	case MK_LINEAR:
	case MK_NORM:
	case MK_QWEIGHT: {
		uint64_t n = t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1);
		const struct mk_module *md = t->kind == MK_QWEIGHT ? &p->mods[t->mod] : NULL;
		struct mk_rng r = mk_rng_for(c->seed, t->name);
		for (uint64_t done = 0; done < n;) {
			size_t k = n - done < CHUNK ? (size_t)(n - done) : CHUNK;
			if (md && md->zero)
				memset(c->chunk, 0, k * 2);
			else
				mk_gen_bf16(&r, t->kind, t->std, c->chunk, k);
			wr_put(w, c->chunk, k * 2);
			done += k;
		}
		return 0;
	}
	case MK_BIAS: {
		struct mk_rng r = mk_rng_for(c->seed, t->name);
		for (uint64_t i = 0; i < t->shape[0]; i++) {
			f = mk_rng_normal(&r) * t->std;
			wr_put(w, &f, 4);
		}
		return 0;
	}
	case MK_IGS:
		f = mk_input_global_scale(c->seed, &p->mods[t->mod]);
		wr_put(w, &f, 4);
		return 0;
	case MK_WGS:
	case MK_PACKED:
	case MK_SCALE:
		if ((rc = mk_qcache_get(&c->qc, p, c->seed, t->mod, err)))
			return rc;
		int i = c->qc.mods[0] == t->mod ? 0 : 1;
		if (t->kind == MK_WGS)
			wr_put(w, &c->qc.gs, 4);
		else if (t->kind == MK_PACKED)
			wr_put(w, c->qc.packed[i], mk_tensor_bytes(t));
		else
			wr_put(w, c->qc.scales[i], mk_tensor_bytes(t));
		return 0;
	}
	return -EINVAL;
}

static int write_shard(struct ctx *c, const struct mk_plan *p, int s, const char *path,
                       struct rq_err *err)
{
	size_t n = 0;
	for (size_t i = 0; i < p->n; i++)
		n += p->t[i].shard == s;
	struct st_spec *spec = calloc(n, sizeof *spec);
	const struct mk_tensor **tt = calloc(n, sizeof *tt);
	size_t *order = calloc(n, sizeof *order);
	struct wr *w = malloc(sizeof *w);
	uint8_t *hdr = NULL;
	size_t hlen;
	int rc = -ENOMEM;
	if (!spec || !tt || !order || !w) {
		rq_errf(err, rc, "out of memory");
		goto out;
	}
	n = 0;
	for (size_t i = 0; i < p->n; i++)
		if (p->t[i].shard == s) {
			const struct mk_tensor *t = &p->t[i];
			tt[n] = t;
			spec[n++] = (struct st_spec){t->name, t->dtype, t->ndim, {t->shape[0], t->shape[1]}};
		}
	if ((rc = st_layout(spec, n, "{\"format\":\"pt\"}", &hdr, &hlen, order, NULL, NULL, err)))
		goto out;
	w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	w->path = path;
	w->n = 0;
	w->err = 0;
	if (w->fd < 0) {
		rc = rq_errf(err, -errno, "%s: %s", path, strerror(errno));
		goto out;
	}
	wr_put(w, hdr, hlen);
	for (size_t i = 0; i < n && !rc; i++) {
		rc = write_tensor(c, p, tt[order[i]], w, err);
		cli_progress_add(c->prog, 1, mk_tensor_bytes(tt[order[i]]));
	}
	wr_flush(w);
	if (!rc && w->err)
		rc = rq_errf(err, -w->err, "%s: %s", path, strerror(w->err));
	if (close(w->fd) && !rc)
		rc = rq_errf(err, -errno, "%s: %s", path, strerror(errno));
out:
	free(hdr);
	free(spec);
	free(tt);
	free(order);
	free(w);
	return rc;
}

static int mkdir_p(const char *path)
{
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s", path);
	for (char *p = tmp + 1; *p; p++)
		if (*p == '/') {
			*p = 0;
			if (mkdir(tmp, 0755) && errno != EEXIST)
				return -errno;
			*p = '/';
		}
	if (mkdir(tmp, 0755) && errno != EEXIST)
		return -errno;
	return 0;
}

/* Removes from dir every file (all = 1), or only shard files named
 * model-*-of-*.safetensors whose count is not nshards, so that an earlier run
 * with other options leaves no stray shard behind. */
static void clear_stale(const char *dir, int all, int nshards)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	char path[4500];
	while ((e = readdir(d))) {
		int k, total;
		char tail[32];
		if (e->d_name[0] == '.')
			continue;
		if (!all && (sscanf(e->d_name, "model-%5d-of-%5d.%31s", &k, &total, tail) != 3 ||
		             strcmp(tail, "safetensors") || total == nshards))
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		unlink(path);
	}
	closedir(d);
}

/* Shards, index, config and generation config of one form into dir. */
static int write_form(struct ctx *c, const struct mk_model *m, const struct mk_plan *p,
                      const char *dir, struct rq_err *err)
{
	char path[4096];
	char **files = calloc((size_t)p->nshards, sizeof *files);
	const char **names = calloc(p->n, sizeof *names);
	int *shard = calloc(p->n, sizeof *shard);
	struct jt_buf b = {0};
	uint64_t total = 0;
	int rc = -ENOMEM;
	if (!files || !names || !shard)
		goto out;
	for (int s = 0; s < p->nshards; s++) {
		files[s] = malloc(64);
		if (!files[s])
			goto out;
		snprintf(files[s], 64, "model-%05d-of-%05d.safetensors", s + 1, p->nshards);
	}
	for (size_t i = 0; i < p->n; i++) {
		names[i] = p->t[i].name;
		shard[i] = p->t[i].shard;
		total += mk_tensor_bytes(&p->t[i]);
	}
	clear_stale(dir, 0, p->nshards);
	for (int s = 0; s < p->nshards; s++) {
		snprintf(path, sizeof path, "%s/%s", dir, files[s]);
		if ((rc = write_shard(c, p, s, path, err)))
			goto out;
	}
	if ((rc = mk_index_json(names, shard, p->n, (const char *const *)files, total, &b)) ||
	    (rc = write_text(dir, "model.safetensors.index.json", &b, err)))
		goto out;
	b.len = 0;
	if ((rc = mk_config_json(m, &b)) || (rc = write_text(dir, "config.json", &b, err)))
		goto out;
	b.len = 0;
	if ((rc = mk_generation_config_json(&b)) ||
	    (rc = write_text(dir, "generation_config.json", &b, err)))
		goto out;
out:
	if (rc == -ENOMEM)
		rq_errf(err, rc, "out of memory writing %s", dir);
	for (int s = 0; files && s < p->nshards; s++)
		free(files[s]);
	free(files);
	free(names);
	free(shard);
	free(b.p);
	return rc;
}

/* ---- hub cache ---------------------------------------------------------- */

static int by_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The regular files of dir, sorted; at most cap. */
static int list_dir(const char *dir, char **names, int cap)
{
	DIR *d = opendir(dir);
	if (!d)
		return -errno;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (n == cap || !(names[n] = strdup(e->d_name))) {
			while (n > 0)
				free(names[--n]);
			closedir(d);
			return -ENOMEM;
		}
		n++;
	}
	closedir(d);
	qsort(names, (size_t)n, sizeof *names, by_str);
	return n;
}

/* Moves every file of stage into repo/blobs/<sha256> and links it from
 * repo/snapshots/<rev>/; rev = the first 40 hex digits of a SHA-256 over the
 * names and blob hashes (a stand-in for the git commit), so equal content
 * gives an equal revision. */
static int hub_publish(const char *repo, const char *stage, int set_main, char *snap,
                       size_t snap_cap, struct rq_err *err)
{
	char path[4096], blob[4096], (*sha)[65] = NULL;
	char *names[64];
	int rc = 0, n = list_dir(stage, names, 64);
	if (n < 0)
		return rq_errf(err, n, "%s: %s", stage, strerror(-n));
	struct sha256 rev;
	sha256_init(&rev);
	snprintf(path, sizeof path, "%s/blobs", repo);
	sha = calloc((size_t)n + 1, sizeof *sha);
	if (!sha) {
		rc = rq_errf(err, -ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = mkdir_p(path))) {
		rq_errf(err, rc, "%s: %s", path, strerror(-rc));
		goto out;
	}
	for (int i = 0; i < n; i++) {
		snprintf(path, sizeof path, "%s/%s", stage, names[i]);
		if ((rc = sha256_file(path, sha[i]))) {
			rq_errf(err, rc, "%s: %s", path, strerror(-rc));
			goto out;
		}
		snprintf(blob, sizeof blob, "%s/blobs/%s", repo, sha[i]);
		if (access(blob, F_OK) == 0 ? unlink(path) : rename(path, blob)) {
			rc = rq_errf(err, -errno, "%s: %s", blob, strerror(errno));
			goto out;
		}
		sha256_update(&rev, names[i], strlen(names[i]) + 1);
		sha256_update(&rev, sha[i], 64);
	}
	uint8_t d[32];
	char hex[65];
	sha256_final(&rev, d);
	sha256_hex(d, hex);
	hex[40] = 0;
	snprintf(snap, snap_cap, "%s/snapshots/%s", repo, hex);
	if ((rc = mkdir_p(snap))) {
		rq_errf(err, rc, "%s: %s", snap, strerror(-rc));
		goto out;
	}
	for (int i = 0; i < n; i++) {
		snprintf(path, sizeof path, "%s/%s", snap, names[i]);
		snprintf(blob, sizeof blob, "../../blobs/%s", sha[i]);
		if ((unlink(path) && errno != ENOENT) || symlink(blob, path)) {
			rc = rq_errf(err, -errno, "%s: %s", path, strerror(errno));
			goto out;
		}
	}
	rmdir(stage);
	if (set_main) {
		struct jt_buf b = {0};
		snprintf(path, sizeof path, "%s/refs", repo);
		jt_puts(&b, hex);    /* huggingface_hub writes the bare hash */
		if ((rc = mkdir_p(path)))
			rq_errf(err, rc, "%s: %s", path, strerror(-rc));
		else
			rc = write_text(path, "main", &b, err);
		free(b.p);
	}
out:
	free(sha);
	for (int i = 0; i < n; i++)
		free(names[i]);
	return rc;
}

/* ---- the command -------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
"usage: requantfs mkckpt OUT [options]\n"
"\n"
"Writes a deterministic synthetic checkpoint with Laguna S 2.1's tensor names,\n"
"structure and file set: the 2026-08-01 form, whose routed experts in the\n"
"--bf16-layers are BF16 and listed by an ignore rule in config.json, every\n"
"other routed expert NVFP4 (compressed-tensors nvfp4-pack-quantized, recipe fp32).\n"
"Same options and seed give the same bytes. Prints the model directory (and the\n"
"twin's) on stdout.\n"
"\n"
"options:\n"
"  --calib-out DIR      also write the 2026-07-22 twin to DIR: same weights, every\n"
"                       expert NVFP4 (same input_global_scale values), no rule,\n"
"                       same file names\n"
"  --hub                write OUT (and DIR) as a Hugging Face hub cache:\n"
"                       OUT/" HUB_REPO "/{blobs,snapshots,refs};\n"
"                       the snapshot path is printed\n"
"  --real-dims          Laguna S 2.1 widths: hidden 3072, head_dim 128, 48/72 query\n"
"                       heads, 8 KV heads, expert and shared width 1024, dense\n"
"                       width 12288; defaults --layers 4 --experts 32 --top-k 10\n"
"  --layers N           number of layers (default 48; 4 with --real-dims)\n"
"  --bf16-layers A-B    layers whose experts stay BF16 (default 40-47 for 48\n"
"                       layers: the last sixth; 2-3 for 4 layers)\n"
"  --experts E          routed experts per MoE layer (default 8)\n"
"  --top-k K            experts per token (default 2)\n"
"  --seed S             weight seed (default 1)\n"
"  --shard-size BYTES   shard size limit, e.g. 512K, 2G (default: a sixth of the total)\n"
"  --dense              every tensor BF16, no quantization_config\n"
"  --no-tokenizer       skip tokenizer files (vocabulary 512)\n"
"  -h, --help           this text\n"
"\n"
"Tiny default: hidden 64, head_dim 16, 4/6 query heads, 2 KV heads, expert and\n"
"shared width 32, dense width 128, sliding window 16. The expert-1 down_proj of\n"
"layer A+2 is all zeros; a shard boundary splits gate_proj from up_proj of\n"
"expert E/2 in layer A.\n");
}

int cmd_mkckpt(int argc, char **argv)
{
	static const struct option opts[] = {
		{"calib-out", required_argument, NULL, 'c'},
		{"hub", no_argument, NULL, 'H'},
		{"real-dims", no_argument, NULL, 'R'},
		{"layers", required_argument, NULL, 'l'},
		{"bf16-layers", required_argument, NULL, 'b'},
		{"experts", required_argument, NULL, 'e'},
		{"top-k", required_argument, NULL, 'k'},
		{"seed", required_argument, NULL, 's'},
		{"shard-size", required_argument, NULL, 'S'},
		{"dense", no_argument, NULL, 'D'},
		{"no-tokenizer", no_argument, NULL, 'T'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	const char *calib = NULL, *bf16 = NULL;
	int hub = 0, real = 0, dense = 0, no_tok = 0, layers = -1, experts = -1, top_k = -1;
	unsigned long long seed = 1, shard_size = 0;
	char *end;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': calib = optarg; break;
		case 'H': hub = 1; break;
		case 'R': real = 1; break;
		case 'D': dense = 1; break;
		case 'T': no_tok = 1; break;
		case 'b': bf16 = optarg; break;
		case 'l':
		case 'e':
		case 'k': {
			long v = strtol(optarg, &end, 10);
			if (*end || end == optarg || v < 1 || v > 100000)
				return cli_fail(2, "mkckpt", "--%s: '%s' is not a positive integer",
				                c == 'l' ? "layers" : c == 'e' ? "experts" : "top-k", optarg);
			*(c == 'l' ? &layers : c == 'e' ? &experts : &top_k) = (int)v;
			break;
		}
		case 's':
			seed = strtoull(optarg, &end, 0);
			if (*end || end == optarg)
				return cli_fail(2, "mkckpt", "--seed: '%s' is not an integer", optarg);
			break;
		case 'S':
			if (cli_parse_size(optarg, &shard_size) || !shard_size)
				return cli_fail(2, "mkckpt", "--shard-size: '%s' is not a size", optarg);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc - 1) {
		usage(stderr);
		return 2;
	}
	const char *out = argv[optind];

	struct mk_model m = {0};
	m.layers = layers > 0 ? layers : real ? 4 : 48;
	m.hidden = real ? 3072 : 64;
	m.head_dim = real ? 128 : 16;
	m.heads_full = real ? 48 : 4;
	m.heads_sliding = real ? 72 : 6;
	m.kv_heads = real ? 8 : 2;
	m.expert_w = real ? 1024 : 32;
	m.shared_w = real ? 1024 : 32;
	m.dense_w = real ? 12288 : 128;
	m.sliding_window = real ? 512 : 16;
	m.experts = experts > 0 ? experts : real ? 32 : 8;
	m.top_k = top_k > 0 ? top_k : real ? (m.experts >= 10 ? 10 : 2) : 2;
	m.quantized = !dense;
	m.with_rule = 1;
	int k = m.layers >= 12 ? m.layers / 6 : (m.layers / 2 > 1 ? m.layers / 2 : 1);
	m.bf16_a = m.layers - k;
	m.bf16_b = m.layers - 1;
	if (bf16 && (sscanf(bf16, "%d-%d%c", &m.bf16_a, &m.bf16_b, &(char){0}) != 2))
		return cli_fail(2, "mkckpt", "--bf16-layers: '%s' is not A-B", bf16);
	if (m.layers < 2)
		return cli_fail(2, "mkckpt", "--layers: need at least 2 (layer 0 is dense)");
	if (m.bf16_a < 1 || m.bf16_b < m.bf16_a || m.bf16_b >= m.layers)
		return cli_fail(2, "mkckpt", "--bf16-layers %d-%d: need 1 <= A <= B < %d (layer 0 has "
		                "no experts)", m.bf16_a, m.bf16_b, m.layers);
	if (m.experts < 2 || m.top_k > m.experts)
		return cli_fail(2, "mkckpt", "need --experts >= 2 and --top-k <= --experts");
	if (calib && dense)
		return cli_fail(2, "mkckpt", "--calib-out makes no sense with --dense");

	struct rq_err err = {0};
	struct ctx cx = {.seed = seed, .qc = {.job = -1}};
	struct mk_plan main_p = {0}, twin_p = {0};
	char dir[4200], cdir[4200], repo[4000], snap[4200], csnap[4200];
	int rc = 0;
	cx.chunk = malloc(CHUNK * sizeof *cx.chunk);
	if (!cx.chunk)
		return cli_fail(1, "mkckpt", "out of memory");

	/* where files go first: OUT itself, or a stage inside the hub repo */
	snprintf(repo, sizeof repo, "%s/%s", out, HUB_REPO);
	snprintf(dir, sizeof dir, hub ? "%s/.mkckpt-stage" : "%s", hub ? repo : out);
	if (calib) {
		if (hub)
			snprintf(cdir, sizeof cdir, "%s/%s/.mkckpt-stage-calib", calib, HUB_REPO);
		else
			snprintf(cdir, sizeof cdir, "%s", calib);
	}
	if ((rc = mkdir_p(dir))) {
		rq_errf(&err, rc, "cannot create %s: %s", dir, strerror(-rc));
		goto fail;
	}
	if (calib && (rc = mkdir_p(cdir))) {
		rq_errf(&err, rc, "cannot create %s: %s", cdir, strerror(-rc));
		goto fail;
	}
	if (hub) {   /* a stage left by an interrupted run must not leak into a snapshot */
		clear_stale(dir, 1, 0);
		if (calib)
			clear_stale(cdir, 1, 0);
	}

	m.vocab = 512;
	if (!no_tok) {
		if ((rc = mk_write_tokenizer(dir, &m.vocab, &err)))
			goto fail;
		if (calib && (rc = mk_write_tokenizer(cdir, &m.vocab, &err)))
			goto fail;
	}

	if ((rc = mk_plan_build(&m, 0, &main_p)))
		goto oom;
	uint64_t total = 0;
	for (size_t i = 0; i < main_p.n; i++)
		total += mk_tensor_bytes(&main_p.t[i]);
	char force[96];
	snprintf(force, sizeof force, "model.layers.%d.mlp.experts.%d.up_proj.", m.bf16_a,
	         m.experts / 2);
	mk_shard_by_size(&main_p, shard_size ? shard_size : (total + 5) / 6, force);
	if (calib) {
		if ((rc = mk_plan_build(&m, 1, &twin_p)))
			goto oom;
		if ((rc = mk_shard_like(&twin_p, &main_p))) {
			rq_errf(&err, -EINVAL, "internal: a twin tensor has no shard");
			goto fail;
		}
		for (size_t i = 0; i < twin_p.n; i++)
			total += mk_tensor_bytes(&twin_p.t[i]);
	}

	cx.prog = cli_progress_start("mkckpt", main_p.n + twin_p.n, total, 0);
	if ((rc = write_form(&cx, &m, &main_p, dir, &err)))
		goto fail;
	if (calib) {
		struct mk_model tm = m;
		tm.with_rule = 0;
		cx.qc.job = -1;
		if ((rc = write_form(&cx, &tm, &twin_p, cdir, &err)))
			goto fail;
	}
	cli_progress_end(cx.prog);
	cx.prog = NULL;

	if (hub) {
		if ((rc = hub_publish(repo, dir, 1, snap, sizeof snap, &err)))
			goto fail;
		printf("%s\n", snap);
		if (calib) {
			char crepo[4000];
			snprintf(crepo, sizeof crepo, "%s/%s", calib, HUB_REPO);
			/* the twin is an older revision: it sets refs/main only in its own repo */
			if ((rc = hub_publish(crepo, cdir, strcmp(crepo, repo) != 0, csnap, sizeof csnap,
			                      &err)))
				goto fail;
			printf("%s\n", csnap);
		}
	} else {
		printf("%s\n", out);
		if (calib)
			printf("%s\n", calib);
	}
	if (isatty(STDERR_FILENO))   /* stdout carries only the paths */
		fprintf(stderr, "mkckpt: %d layers, %d experts (top-%d), hidden %d, vocab %d, %d "
		        "shards, experts of layers %d-%d %s\n", m.layers, m.experts, m.top_k, m.hidden,
		        m.vocab, main_p.nshards, m.bf16_a, m.bf16_b,
		        dense ? "(dense: all BF16)" : "in BF16");
	goto done;
oom:
	rq_errf(&err, -ENOMEM, "out of memory");
fail:
	cli_progress_end(cx.prog);
	rc = cli_fail(1, "mkckpt", "%s", err.msg);
done:
	mk_qcache_free(&cx.qc);
	free(cx.chunk);
	mk_plan_free(&main_p);
	mk_plan_free(&twin_p);
	return rc;
}
