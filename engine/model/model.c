/* model.c — open a decoder checkpoint directory: map the shards, bind the
 * tensors of the family's layers (one Linear at a time: model_linear.c).
 *
 * Steps of lg_model_open(), each failing with a message that names the file
 * or tensor:
 *   1. config.json → lg_config (arch.c), generation_config.json → defaults
 *   2. the shard set: the files named by model.safetensors.index.json (a
 *      name with '/', ".", ".." or none is refused), else every
 *      *.safetensors in the directory
 *   3. each shard: header parsed and validated by st/st.h, file mmap'd
 *   4. one sorted name index over all shards (a name twice is an error)
 *   5. every tensor the forward pass needs bound with dtype and shape checks,
 *      each Linear in the form its tensors say (BF16, F16, F32, NVFP4, FP8, INT:
 *      model.h), names from the family's row (arch.c)
 *   6. any tensor left unbound is refused: it means a feature we would
 *      silently skip (attention sinks, biases, ...)
 *
 * The folder is one straight line: each file calls only the files below it.
 *
 *   seam      backend.c            lg_backend: one forward over cpu and cuda
 *   cuda      forward_cuda.c       the forward of every family on the device
 *             forward_cuda_obs.c   the calibration observer on the device
 *             forward_cuda_load.c  the device memory plan, weight upload
 *   cpu       forward.c            the forward of every family on the CPU
 *             state.c              a forward state's buffers (KV cache, ...)
 *   loader    model.c              a checkpoint directory: shards, tensors
 *             model_linear.c       one tensor / one Linear bound by name
 *   config    arch.c               the families as data; lg_config_parse
 *             config.c             Laguna's reader, quantization_config,
 *                                  generation_config.json
 *             rope.c               rotary frequencies as transformers'
 *             cfg_json.c           config.json value readers
 *   leaves    fastattn.c           the fast mode's attention (never the oracle)
 *             fastmm.c             the fast mode's FMA products (never the oracle)
 *             fastdot.c            the fast mode's quantized decode dots
 *             ops.c                CPU kernels (matmul, RMSNorm, ...)
 *             qdot.c               decode's quantized dots in registers
 *             torch_bf16.c         torch's CPU summation orders and exp
 *             observe.c            the observer's slots and names
 *             sampler.c            greedy / temperature / top-k / top-p
 */
#include "engine/model/model_int.h"
#include "base/err.h"
#include "base/file.h"
#include "base/grow.h"
#include "st/st.h"
#include "st/jcheck.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static char *join(const char *dir, const char *name)
{
	size_t a = strlen(dir), b = strlen(name);
	char *p = malloc(a + b + 2);
	if (p) {
		memcpy(p, dir, a);
		p[a] = '/';
		memcpy(p + a + 1, name, b + 1);
	}
	return p;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The shard file names: the index's weight_map values, else *.safetensors. */
/* Appends a copy of name to v[cnt] (of cap). -ENOMEM. */
static int push_name(char ***v, size_t *cnt, size_t *cap, const char *name)
{
	if (RQ_GROW(*v, *cnt, *cap, 64))
		return -ENOMEM;
	if (!((*v)[*cnt] = strdup(name)))
		return -ENOMEM;
	(*cnt)++;
	return 0;
}

static int list_shards(const char *dir, char ***names, size_t *n, int *from_index,
                       struct rq_err *err)
{
	char **v = NULL;
	size_t cnt = 0, cap = 0;
	int rc, oom = 0;
	char *ipath = join(dir, "model.safetensors.index.json");
	if (!ipath)
		return rq_errf(err, -ENOMEM, "out of memory");
	/* No index: the directory's *.safetensors. An index that is there but
	 * cannot be read (a FIFO, too large, no access) is an error, never a
	 * silent fallback to a listing that may hold other shards. */
	char *text = NULL;
	size_t tlen = 0;
	rc = rq_file_read(ipath, LG_INDEX_MAX, &text, &tlen, err);
	if (rc && rc != -ENOENT) {
		free(ipath);
		return rc;
	}
	if (rc && err)
		*err = (struct rq_err){0};   /* no index is no error */
	*from_index = text != NULL;
	if (text) {
		cJSON *root = jc_parse(text, tlen, ipath, err), *e;
		free(text);
		const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
		if (!cJSON_IsObject(wm)) {
			cJSON_Delete(root);
			rc = root || !err ? rq_errf(err, -EPROTO, "%s: no \"weight_map\" object", ipath) : err->code;
			free(ipath);
			return rc;
		}
		cJSON_ArrayForEach(e, wm) {
			/* A shard is a file of this directory: a name that could
			 * leave it, or that is no name at all, is refused (as the
			 * mount and export refuse it) rather than skipped. */
			const char *sv = cJSON_IsString(e) ? e->valuestring : NULL;
			if (!sv || !*sv || strchr(sv, '/') || !strcmp(sv, ".") || !strcmp(sv, "..")) {
				rc = rq_errf(err, -EPROTO, "%s: weight_map maps %s to %s%s%s, which is not "
				             "a file name of this directory", ipath, e->string,
				             sv ? "'" : "", sv ? sv : "a non-string", sv ? "'" : "");
				cJSON_Delete(root);
				free(ipath);
				for (size_t i = 0; i < cnt; i++)
					free(v[i]);
				free(v);
				return rc;
			}
			int dup = 0;
			for (size_t i = 0; i < cnt && !dup; i++)
				dup = !strcmp(v[i], e->valuestring);
			if (!dup && push_name(&v, &cnt, &cap, e->valuestring))
				oom = 1;
		}
		cJSON_Delete(root);
	} else {
		DIR *d = opendir(dir);
		if (!d) {
			rc = -errno;
			free(ipath);
			return rq_errf(err, rc, "%s: cannot open directory: %s", dir, strerror(-rc));
		}
		struct dirent *de;
		while ((de = readdir(d))) {
			size_t l = strlen(de->d_name);
			if (l > 12 && !strcmp(de->d_name + l - 12, ".safetensors") &&
			    push_name(&v, &cnt, &cap, de->d_name))
				oom = 1;
		}
		closedir(d);
	}
	free(ipath);
	if (oom) {   /* never a silently shorter list */
		for (size_t i = 0; i < cnt; i++)
			free(v[i]);
		free(v);
		return rq_errf(err, -ENOMEM, "%s: out of memory listing the shards", dir);
	}
	if (cnt == 0) {
		free(v);
		return rq_errf(err, -ENOENT, "%s: no *.safetensors files", dir);
	}
	qsort(v, cnt, sizeof *v, cmp_str);
	*names = v;
	*n = cnt;
	return 0;
}

static int map_file(struct lg_file *f, struct rq_err *err)
{
	int fd = rq_file_open(f->path, NULL, err);   /* a FIFO or device is refused */
	if (fd < 0)
		return fd;
	int rc = st_parse_fd(fd, f->path, &f->h, err);
	if (rc) {
		close(fd);
		return rc;
	}
	f->size = f->h->file_size;
	void *p = mmap(NULL, f->size, PROT_READ, MAP_SHARED, fd, 0);
	rc = p == MAP_FAILED ? -errno : 0;
	close(fd);
	if (rc)
		return rq_errf(err, rc, "%s: mmap: %s", f->path, strerror(-rc));
	f->map = p;
	return 0;
}

static int bind_layer(struct loader *L, int i, struct lg_layer *ly)
{
	const struct lg_config *c = &L->m->cfg;
	char mod[256], name[256];
	int rc, hd = c->head_dim, nq = ly->n_heads * hd, nkv = c->n_kv_heads * hd;
#define P(...) (snprintf(mod, sizeof mod, __VA_ARGS__), mod)
	const struct lg_arch *A = c->arch;
	if ((rc = ld_vec(L, P("model.layers.%d.input_layernorm.weight", i), c->hidden, &ly->attn_norm)) ||
	    (rc = ld_vec(L, P("model.layers.%d.post_attention_layernorm.weight", i), c->hidden,
	                   &ly->mlp_norm)) ||
	    (rc = ld_lin(L, P("model.layers.%d.self_attn.q_proj", i), nq, c->hidden, c->qkv_bias, &ly->q)) ||
	    (rc = ld_lin(L, P("model.layers.%d.self_attn.k_proj", i), nkv, c->hidden, c->qkv_bias, &ly->k)) ||
	    (rc = ld_lin(L, P("model.layers.%d.self_attn.v_proj", i), nkv, c->hidden, c->qkv_bias, &ly->v)) ||
	    (rc = ld_lin(L, P("model.layers.%d.self_attn.o_proj", i), c->hidden, nq, c->o_bias, &ly->o)))
		return rc;
	if (A->qk_norm &&
	    ((rc = ld_vec(L, P("model.layers.%d.self_attn.q_norm.weight", i), hd, &ly->q_norm)) ||
	     (rc = ld_vec(L, P("model.layers.%d.self_attn.k_norm.weight", i), hd, &ly->k_norm))))
		return rc;
	if (c->gate != LG_GATE_NONE &&
	    (rc = ld_linear(L, P("model.layers.%d.self_attn.g_proj", i),
	                      c->gate == LG_GATE_PER_HEAD ? ly->n_heads : nq, c->hidden, &ly->g)))
		return rc;
	if (!ly->moe) {
		int mb = c->mlp_bias;
		if ((rc = ld_lin(L, P("model.layers.%d.mlp.gate_proj", i), c->inter, c->hidden, mb, &ly->gate)) ||
		    (rc = ld_lin(L, P("model.layers.%d.mlp.up_proj", i), c->inter, c->hidden, mb, &ly->up)) ||
		    (rc = ld_lin(L, P("model.layers.%d.mlp.down_proj", i), c->hidden, c->inter, mb, &ly->down)))
			return rc;
		return 0;
	}
	int E = c->n_experts;
	const char *blk = A->moe_block;
	if ((rc = ld_linear(L, P("model.layers.%d.%s.gate", i, blk), E, c->hidden, &ly->router)))
		return rc;
	snprintf(name, sizeof name, "model.layers.%d.mlp.experts.e_score_correction_bias", i);
	if (!ld_find(L, name))
		snprintf(name, sizeof name, "model.layers.%d.mlp.gate.e_score_correction_bias", i);
	if (A->router == LG_ROUTER_SIGMOID && ld_find(L, name)) {
		if ((rc = ld_vec(L, name, E, &ly->bias)))
			return rc;
	} else if (!(ly->bias = calloc(E, sizeof *ly->bias))) {
		return rq_errf(L->err, -ENOMEM, "out of memory");
	}
	ly->eg = calloc(E, sizeof *ly->eg);
	ly->eu = calloc(E, sizeof *ly->eu);
	ly->ed = calloc(E, sizeof *ly->ed);
	if (!ly->eg || !ly->eu || !ly->ed)
		return rq_errf(L->err, -ENOMEM, "out of memory");
	for (int e = 0; e < E; e++)
		if ((rc = ld_linear(L, P("model.layers.%d.%s.experts.%d.%s", i, blk, e, A->expert[0]),
		                      c->moe_inter, c->hidden, &ly->eg[e])) ||
		    (rc = ld_linear(L, P("model.layers.%d.%s.experts.%d.%s", i, blk, e, A->expert[1]),
		                      c->moe_inter, c->hidden, &ly->eu[e])) ||
		    (rc = ld_linear(L, P("model.layers.%d.%s.experts.%d.%s", i, blk, e, A->expert[2]),
		                      c->hidden, c->moe_inter, &ly->ed[e])))
			return rc;
	if (c->shared_inter > 0) {
		/* vLLM and the checkpoints say shared_expert; transformers shared_experts */
		const char *sn = "shared_expert";
		snprintf(name, sizeof name, "model.layers.%d.mlp.shared_experts.gate_proj.weight", i);
		if (ld_find(L, name)) {
			sn = "shared_experts";
			ly->shared_plural = 1;
		}
		if ((rc = ld_linear(L, P("model.layers.%d.mlp.%s.gate_proj", i, sn), c->shared_inter,
		                      c->hidden, &ly->sg)) ||
		    (rc = ld_linear(L, P("model.layers.%d.mlp.%s.up_proj", i, sn), c->shared_inter,
		                      c->hidden, &ly->su)) ||
		    (rc = ld_linear(L, P("model.layers.%d.mlp.%s.down_proj", i, sn), c->hidden,
		                      c->shared_inter, &ly->sd)))
			return rc;
		if (A->shared_gate &&
		    (rc = ld_linear(L, P("model.layers.%d.mlp.shared_expert_gate", i), 1, c->hidden, &ly->sgate)))
			return rc;
	}
#undef P
	return 0;
}

/* Tensors a checkpoint may carry that the forward pass does not read. */
static int ignorable(const char *name)
{
	static const char *const suffix[] = {".input_global_scale", ".input_scale", "rotary_emb.inv_freq"};
	size_t l = strlen(name);
	for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
		size_t s = strlen(suffix[i]);
		if (l >= s && !strcmp(name + l - s, suffix[i]))
			return 1;
	}
	return 0;
}

static int bind_all(struct loader *L)
{
	struct lg_model *m = L->m;
	const struct lg_config *c = &m->cfg;
	int rc = 0;
	/* the embedding in any form a Linear may take: model_free_ptq quantizes
	 * it too unless it is ignored (it is not counted among the Linears) */
	int counts[4] = {m->n_bf16, m->n_nvfp4, m->n_fp8, m->n_int};
	if ((rc = ld_linear(L, "model.embed_tokens", c->vocab, c->hidden, &m->embed_q)))
		return rc;
	m->n_bf16 = counts[0], m->n_nvfp4 = counts[1], m->n_fp8 = counts[2], m->n_int = counts[3];
	m->embed = m->embed_q.kind == LG_W_BF16 ? m->embed_q.w : NULL;
	if ((rc = ld_vec(L, "model.norm.weight", c->hidden, &m->final_norm)))
		return rc;
	if (c->tie_embeddings) {
		m->lm_head = m->embed_q;
		struct tref *lh = ld_find(L, "lm_head.weight");
		if (lh)
			lh->used = 1;   /* transformers ties it to the embedding */
	} else if ((rc = ld_linear(L, "lm_head", c->vocab, c->hidden, &m->lm_head))) {
		return rc;
	}
	for (int i = 0; i < c->n_layers; i++)
		if ((rc = bind_layer(L, i, &m->layers[i])))
			return rc;
	ld_fuse_acts(m);
	for (size_t i = 0; i < L->n; i++)
		if (!L->t[i].used && !ignorable(L->t[i].name))
			return rq_errf(L->err, -ENOTSUP, "%s: tensor %s is not used by this engine (a feature it "
			               "does not implement, or a config that does not match the weights)",
			               m->files[L->t[i].file].path, L->t[i].name);
	return 0;
}

double lg_model_token_bytes(const struct lg_model *m)
{
	const struct lg_config *c = &m->cfg;
	double b = (double)c->hidden * 2 + lg_linear_bytes(&m->lm_head);
	for (int i = 0; i < c->n_layers; i++) {
		const struct lg_layer *l = &m->layers[i];
		b += lg_linear_bytes(&l->q) + lg_linear_bytes(&l->k) + lg_linear_bytes(&l->v) +
		     lg_linear_bytes(&l->o);
		if (c->gate != LG_GATE_NONE)
			b += lg_linear_bytes(&l->g);
		if (!l->moe) {
			b += lg_linear_bytes(&l->gate) + lg_linear_bytes(&l->up) + lg_linear_bytes(&l->down);
			continue;
		}
		b += lg_linear_bytes(&l->router);
		if (c->shared_inter > 0)
			b += lg_linear_bytes(&l->sg) + lg_linear_bytes(&l->su) + lg_linear_bytes(&l->sd) +
			     (c->arch->shared_gate ? lg_linear_bytes(&l->sgate) : 0);
		double ex = 0;
		for (int e = 0; e < c->n_experts; e++)
			ex += lg_linear_bytes(&l->eg[e]) + lg_linear_bytes(&l->eu[e]) + lg_linear_bytes(&l->ed[e]);
		b += ex / c->n_experts * c->top_k;
	}
	return b;
}

void lg_model_close(struct lg_model *m)
{
	if (!m)
		return;
	if (m->layers) {
		for (int i = 0; i < m->cfg.n_layers; i++) {
			struct lg_layer *l = &m->layers[i];
			free(l->attn_norm);
			free(l->mlp_norm);
			free(l->q_norm);
			free(l->k_norm);
			free(l->bias);
			free(l->eg);
			free(l->eu);
			free(l->ed);
		}
		free(m->layers);
	}
	for (size_t i = 0; i < m->n_files; i++) {
		struct lg_file *f = &m->files[i];
		if (f->map)
			munmap((void *)f->map, f->size);
		st_header_free(f->h);
		free(f->path);
	}
	free(m->files);
	for (size_t i = 0; i < m->n_owned; i++)
		free(m->owned[i]);
	free(m->owned);
	free(m->final_norm);
	free(m->dir);
	free(m);
}

int lg_model_open(const char *dir, struct lg_model **out, struct rq_err *err)
{
	struct loader L = {.err = err};
	enum lg_attn_type *types = NULL;
	int *heads = NULL, *moe = NULL, rc, from_index = 0;
	char **shards = NULL;
	size_t nshards = 0;
	char *path = NULL, *text = NULL;
	size_t tlen = 0;
	struct lg_model *m = calloc(1, sizeof *m);
	if (!m || !(m->dir = strdup(dir))) {
		free(m);
		return rq_errf(err, -ENOMEM, "out of memory");
	}
	L.m = m;

	/* 1. config */
	if (!(path = join(dir, "config.json"))) {
		rc = rq_errf(err, -ENOMEM, "out of memory");
		goto fail;
	}
	if ((rc = rq_file_read(path, LG_CONFIG_MAX, &text, &tlen, err)))
		goto fail;
	if ((rc = lg_config_parse(text, path, &m->cfg, &types, &heads, &moe, err)))
		goto fail;
	free(text);
	free(path);
	text = NULL;
	if (!(path = join(dir, "generation_config.json"))) {
		rc = rq_errf(err, -ENOMEM, "out of memory");
		goto fail;
	}
	rc = rq_file_read(path, LG_CONFIG_MAX, &text, &tlen, err);
	if (rc && rc != -ENOENT)
		goto fail;
	if (rc && err)
		*err = (struct rq_err){0};   /* optional: transformers' defaults */
	if ((rc = lg_gen_parse(text, &m->cfg, &m->gen, err)))
		goto fail;
	m->layers = calloc(m->cfg.n_layers, sizeof *m->layers);
	if (!m->layers) {
		rc = rq_errf(err, -ENOMEM, "out of memory");
		goto fail;
	}
	for (int i = 0; i < m->cfg.n_layers; i++) {
		m->layers[i].type = types[i];
		m->layers[i].n_heads = heads[i];
		m->layers[i].moe = moe[i];
	}

	/* 2-3. shards */
	if ((rc = list_shards(dir, &shards, &nshards, &from_index, err)))
		goto fail;
	m->files = calloc(nshards, sizeof *m->files);
	if (!m->files) {
		rc = rq_errf(err, -ENOMEM, "out of memory");
		goto fail;
	}
	size_t ntensors = 0;
	for (size_t i = 0; i < nshards; i++) {
		struct lg_file *f = &m->files[m->n_files];
		if (!(f->path = join(dir, shards[i]))) {
			rc = rq_errf(err, -ENOMEM, "out of memory");
			goto fail;
		}
		m->n_files++;
		if ((rc = map_file(f, err))) {
			/* the index chose this file: say so, it is where to look */
			if (from_index)
				rq_err_prefix(err, "model.safetensors.index.json names shard '%s'",
				              shards[i]);
			goto fail;
		}
		ntensors += f->h->n;
	}

	/* 4. name index */
	L.t = calloc(ntensors ? ntensors : 1, sizeof *L.t);
	if (!L.t) {
		rc = rq_errf(err, -ENOMEM, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < m->n_files; i++)
		for (size_t j = 0; j < m->files[i].h->n; j++)
			L.t[L.n++] = (struct tref){.name = m->files[i].h->t[j].name, .file = (int)i, .idx = (int)j};
	qsort(L.t, L.n, sizeof *L.t, ld_cmp_tref);
	for (size_t i = 1; i < L.n; i++)
		if (!strcmp(L.t[i].name, L.t[i - 1].name)) {
			rc = rq_errf(err, -EPROTO, "%s: tensor %s is in both %s and %s", dir, L.t[i].name,
			             m->files[L.t[i - 1].file].path, m->files[L.t[i].file].path);
			goto fail;
		}

	/* 5-6. bind */
	if ((rc = bind_all(&L)))
		goto fail;
	rc = 0;
	*out = m;
	m = NULL;
fail:
	lg_model_close(m);
	free(L.t);
	for (size_t i = 0; i < nshards; i++)
		free(shards[i]);
	free(shards);
	free(text);
	free(path);
	free(types);
	free(heads);
	free(moe);
	return rc;
}
