/* plan_w4a4.c — what --scheme nvfp4 (W4A4: NVFP4 weights and NVFP4
 * activations with static global scales, issue 21) adds to a data-free
 * scheme's plan: each module's input_global_scale from a calibration file,
 * and the ignore list oneshot writes.
 *
 * Calibration: `requantfs calib run SRC --text F -o calib.safetensors` writes
 * <module>.input_global_scale (F32 [1], 448*6/amax) for every Linear; the
 * plan copies each chosen module's value bit for bit (no fusion: llm-compressor
 * 0.14.0.1 links only weight observers, see plan_scheme.c). A module missing
 * from the file is refused naming both. The file's __metadata__ may say which
 * observer made the scales ("calib_observer", written by `calib run` since
 * --observer): kept in p->calib_observer for plan and status to name next to
 * the weights' observer (the two are independent: any pair is accepted).
 *
 * The ignore list: compressed-tensors QuantizationConfig.from_pretrained (what
 * oneshot's save writes) lists by name every module of a quantized class that
 * is not quantized — the Linear layers left alone: lm_head (also when tied to
 * the embedding and so absent from SRC), MoE routers, whatever --ignore
 * matched — never a regex. Its order is model.named_modules(); from SRC we
 * only have names, so we sort them with numeric components compared as
 * numbers (layers 2 before 10) and lm_head last, which is that order for the
 * decoder layouts we know. */
#include "plan/plan_int.h"
#include "plan/ckpt.h"
#include "base/err.h"
#include "base/grow.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* __metadata__ "calib_observer" of a calibration file (a directory says
 * nothing): a malloc'd string, or NULL. A file the scales were read from
 * parses; anything odd here only means "not said". */
static char *calib_observer(const char *calib)
{
	struct stat st;
	struct st_header *h = NULL;
	char *out = NULL;
	if (stat(calib, &st) || !S_ISREG(st.st_mode) || st_parse_path(calib, &h, NULL) ||
	    !h->metadata) {
		st_header_free(h);
		return NULL;
	}
	cJSON *m = cJSON_Parse(h->metadata);
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, "calib_observer");
	if (cJSON_IsString(v) && strlen(v->valuestring) < 64)
		out = strdup(v->valuestring);
	cJSON_Delete(m);
	st_header_free(h);
	return out;
}

int rq_plan_w4a4_calib(struct rq_plan *p, const char *calib, struct rq_err *err)
{
	if (!calib)
		return rq_errf(err, -EINVAL, "--scheme nvfp4 quantizes activations with static scales "
		               "and needs --calib FILE: run `requantfs calib run %s --text FILE -o "
		               "calib.safetensors` first", p->src_dir);
	struct rq_ckpt *c;
	int rc = rq_ckpt_open(calib, &c, err);
	if (rc)
		return rq_err_prefix(err, "--calib %s", calib);
	for (size_t i = 0; i < p->nmods && !rc; i++) {
		char name[1100];
		snprintf(name, sizeof name, "%s.input_global_scale", p->mods[i].name);
		rc = rq_calib_read_scale(c, calib, name, &p->mods[i].input_gs_bits, err);
		if (rc == -ENOENT)
			rq_errf(err, rc, "module %s has no input_global_scale in --calib %s; it is not "
			        "a calibration of this SRC: run `requantfs calib run %s --text FILE -o "
			        "calib.safetensors` (or add '%s' to --ignore to leave it unquantized)",
			        p->mods[i].name, calib, p->src_dir, p->mods[i].name);
	}
	rq_ckpt_close(c);
	if (!rc)
		p->calib_observer = calib_observer(calib);
	return rc;
}

static int ends_with(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcmp(s + a - b, suf);
}

/* A 2-D `.weight` whose last name component is not a norm or an embedding. */
static int linear_like(const struct st_tensor *t, char *mod, size_t cap)
{
	size_t l = strlen(t->name);
	if (t->ndim != 2 || !ends_with(t->name, ".weight") || l - 7 >= cap)
		return 0;
	memcpy(mod, t->name, l - 7);
	mod[l - 7] = 0;
	const char *last = strrchr(mod, '.');
	last = last ? last + 1 : mod;
	return !strstr(last, "norm") && !strstr(last, "embed") && strcmp(last, "wte") &&
	       strcmp(last, "wpe");
}

/* Dotted names, numeric components as numbers; "lm_head" after the rest. */
static int cmp_natural(const void *x, const void *y)
{
	const char *a = *(char *const *)x, *b = *(char *const *)y;
	int la = !strcmp(a, "lm_head"), lb = !strcmp(b, "lm_head");
	if (la != lb)
		return la - lb;
	while (*a && *b) {
		if (*a >= '0' && *a <= '9' && *b >= '0' && *b <= '9') {
			char *ea, *eb;
			unsigned long long na = strtoull(a, &ea, 10), nb = strtoull(b, &eb, 10);
			if (na != nb)
				return na < nb ? -1 : 1;
			a = ea;
			b = eb;
			continue;
		}
		if (*a != *b)
			return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
		a++;
		b++;
	}
	return (unsigned char)*a - (unsigned char)*b;
}

int rq_plan_w4a4_ignore(const struct rq_plan *p, struct st_header **hdr, char ***out,
                        size_t *nout)
{
	char **v = NULL, mod[1100];
	size_t n = 0, cap = 0;
	int lm_head = 0, rc = 0;
	for (size_t f = 0; f < p->nsrcs && !rc; f++)
		for (size_t i = 0; hdr[f] && i < hdr[f]->n && !rc; i++) {
			if (!linear_like(&hdr[f]->t[i], mod, sizeof mod) || rq_plan_find_mod(p, mod) >= 0)
				continue;
			lm_head |= !strcmp(mod, "lm_head");
			if (RQ_GROW(v, n, cap, 16) || !(v[n] = strdup(mod)))
				rc = -ENOMEM;
			else
				n++;
		}
	if (!rc && !lm_head && rq_plan_find_mod(p, "lm_head") < 0) {   /* tied: not in SRC, still a Linear */
		if (RQ_GROW(v, n, cap, 16) || !(v[n] = strdup("lm_head")))
			rc = -ENOMEM;
		else
			n++;
	}
	if (rc) {
		for (size_t i = 0; i < n; i++)
			free(v[i]);
		free(v);
		return rc;
	}
	if (n)
		qsort(v, n, sizeof *v, cmp_natural);
	*out = v;
	*nout = n;
	return 0;
}
