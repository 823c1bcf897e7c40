/* rope.c — rotary embedding frequencies exactly as transformers' rope init
 * functions compute them ('default', 'linear', 'dynamic', 'llama3', 'yarn'),
 * in the same float32 steps. */
#include "engine/model/cfg_int.h"
#include "base/err.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- RoPE: transformers' rope init functions, in the same float32 steps ---- */

static double yarn_mscale(double scale, double mscale)
{
	return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

static double yarn_correction_dim(double rot, int dim, double base, double max_pos)
{
	return (dim * log(max_pos / (rot * 2 * M_PI))) / (2 * log(base));
}

/* original_max_position_embeddings: transformers' standardize_rope_params
 * gives a top-level value priority over the rope dict's, else the dict's,
 * else max_position_embeddings (one dict for all layers; nested dicts keep
 * their own). */
static int orig_max(const cJSON *p, const cJSON *top, const cJSON *root, long max_pos, double *out,
                    const char *path, struct rq_err *err)
{
	int rc = cfg_num(p, "original_max_position_embeddings", 0, (double)max_pos, out, path, err);
	if (rc || p != top)   /* nested per layer type: the dict's own */
		return rc;
	return cfg_num(root, "original_max_position_embeddings", 0, *out, out, path, err);
}

/* linear, dynamic, llama3 (_compute_linear_scaling_rope_parameters,
 * _compute_dynamic_ntk_parameters at init, _compute_llama3_parameters):
 * float32 tensor arithmetic with Python scalars rounded to float32, as torch
 * does it. pos_freq: the default base ** (2i / dim). */
static int scaled_init(struct lg_rope *r, const cJSON *p, const cJSON *top, const cJSON *root,
                       const float *pos_freq,
                       double theta, long max_pos, const char *what, const char *path,
                       struct rq_err *err)
{
	double factor = 0, lo = 0, hi = 0, omax = 0;
	int rc, half = r->rot_dim / 2, dim = r->rot_dim;
	if ((rc = cfg_num(p, "factor", 1, 0, &factor, path, err)))
		return rc;
	if (!(factor >= 1))
		return rq_errf(err, -EINVAL, "%s: %s (%s): factor %g must be >= 1", path, what, r->type,
		               factor);
	float ff = (float)factor;
	if (!strcmp(r->type, "linear")) {
		for (int i = 0; i < half; i++)
			r->inv_freq[i] = (1.0f / pos_freq[i]) / ff;
		return 0;
	}
	if (!strcmp(r->type, "dynamic")) {
		/* at init seq_len = max_position_embeddings; longer sequences make
		 * transformers recompute the frequencies, so the forward pass
		 * refuses positions past exact_ctx rather than differ */
		double base = theta * pow(factor * max_pos / max_pos - (factor - 1), (double)dim / (dim - 2));
		for (int i = 0; i < half; i++) {
			float e = (float)(2 * i) / (float)dim;
			r->inv_freq[i] = 1.0f / (float)pow((float)base, (double)e);
		}
		r->exact_ctx = max_pos;
		return 0;
	}
	/* llama3 */
	if ((rc = cfg_num(p, "low_freq_factor", 1, 0, &lo, path, err)) ||
	    (rc = cfg_num(p, "high_freq_factor", 1, 0, &hi, path, err)) ||
	    (rc = orig_max(p, top, root, max_pos, &omax, path, err)))
		return rc;
	if (!(omax > 0))
		return rq_errf(err, -EINVAL, "%s: %s (llama3): original_max_position_embeddings is %g; it "
		               "must be > 0 (the context length the model was trained with)", path, what, omax);
	if (!(hi > lo) || !(lo > 0))
		return rq_errf(err, -EINVAL, "%s: %s (llama3): needs high_freq_factor > low_freq_factor > 0 "
		               "(high_freq_factor %g, low_freq_factor %g)", path, what, hi, lo);
	float lo_wl = (float)(omax / lo), hi_wl = (float)(omax / hi), two_pi = (float)(2 * M_PI);
	float fo = (float)omax, flo = (float)lo, span = (float)(hi - lo);
	for (int i = 0; i < half; i++) {
		float inv = 1.0f / pos_freq[i];
		float wl = two_pi / inv;
		float l3 = wl > lo_wl ? inv / ff : inv;
		if (!(wl < hi_wl) && !(wl > lo_wl)) {
			float s = (fo / wl - flo) / span;
			l3 = (1.0f - s) * l3 / ff + s * l3;
		}
		r->inv_freq[i] = l3;
	}
	return 0;
}

/* p: this layer type's rope dict; top: the rope_parameters object transformers
 * reads `truncate` from (the whole nested dict for the nested form). */
int lg_rope_init(struct lg_rope *r, const cJSON *p, const cJSON *top, const cJSON *root,
                 int head_dim, long max_pos, double theta_def, const char *what,
                 const char *path, struct rq_err *err)
{
	double theta = 0, prf = 0, d = 0;
	int rc;
	memset(r, 0, sizeof *r);
	const char *type = cfg_str(p, "rope_type");
	if (!type)
		type = cfg_str(p, "type");
	if (!type)
		type = "default";
	static const char *const known[] = {"default", "linear", "dynamic", "llama3", "yarn"};
	int ok = 0;
	for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
		ok |= !strcmp(type, known[i]);
	if (!ok)
		return rq_errf(err, -ENOTSUP, "%s: %s: rope_type \"%s\" is not supported (default, linear, "
		               "dynamic, llama3, yarn)", path, what, type);
	snprintf(r->type, sizeof r->type, "%s", type);
	/* rope_theta / partial_rotary_factor: the per-type value, else the
	 * top-level one (transformers' standardize_rope_params setdefault). */
	if ((rc = cfg_num(root, "rope_theta", 0, theta_def, &d, path, err)) ||
	    (rc = cfg_num(p, "rope_theta", 0, d, &theta, path, err)))
		return rc;
	if ((rc = cfg_num(root, "partial_rotary_factor", 0, 1.0, &d, path, err)) ||
	    (rc = cfg_num(p, "partial_rotary_factor", 0, d, &prf, path, err)))
		return rc;
	if (!(theta > 1) || !(prf > 0 && prf <= 1))
		return rq_errf(err, -EINVAL, "%s: %s: rope_theta %g must be > 1 and partial_rotary_factor "
		               "%g in (0, 1]", path, what, theta, prf);
	int dim = (int)(head_dim * prf);
	if (dim < 2 || dim % 2 || dim / 2 > LG_ROPE_MAX)
		return rq_errf(err, -EINVAL, "%s: %s: rotary dim %d (head_dim %d x partial_rotary_factor "
		               "%g) must be even, >= 2 and <= %d", path, what, dim, head_dim, prf, 2 * LG_ROPE_MAX);
	r->rot_dim = dim;
	r->theta = theta;
	r->attn_scale = 1.0f;
	int half = dim / 2;
	/* pos_freqs = base ** (arange(0, dim, 2, float32) / dim), in float32 */
	float pos_freq[LG_ROPE_MAX];
	for (int i = 0; i < half; i++) {
		float e = (float)(2 * i) / (float)dim;
		pos_freq[i] = (float)pow(theta, (double)e);
	}
	if (!strcmp(type, "default")) {
		for (int i = 0; i < half; i++)
			r->inv_freq[i] = 1.0f / pos_freq[i];
		return 0;
	}
	if (!strcmp(type, "linear") || !strcmp(type, "dynamic") || !strcmp(type, "llama3"))
		return scaled_init(r, p, top, root, pos_freq, theta, max_pos, what, path, err);
	/* YaRN (_compute_yarn_parameters) */
	double factor = 0, attn_factor = 0, mscale = 0, mscale_all = 0, beta_fast = 0, beta_slow = 0;
	double omax = 0;
	if ((rc = cfg_num(p, "factor", 1, 0, &factor, path, err)) ||
	    (rc = cfg_num(p, "mscale", 0, 0, &mscale, path, err)) ||
	    (rc = cfg_num(p, "mscale_all_dim", 0, 0, &mscale_all, path, err)) ||
	    (rc = cfg_num(p, "beta_fast", 0, 0, &beta_fast, path, err)) ||
	    (rc = cfg_num(p, "beta_slow", 0, 0, &beta_slow, path, err)) ||
	    (rc = orig_max(p, top, root, max_pos, &omax, path, err)))
		return rc;
	if (!(factor > 0))
		return rq_errf(err, -EINVAL, "%s: %s (yarn): factor %g must be > 0", path, what, factor);
	if (!(omax > 0))
		return rq_errf(err, -EINVAL, "%s: %s (yarn): original_max_position_embeddings is %g; it "
		               "must be > 0 (the context length the model was trained with)", path, what, omax);
	if (cfg_key(p, "attention_factor")) {
		if ((rc = cfg_num(p, "attention_factor", 1, 0, &attn_factor, path, err)))
			return rc;
	} else if (mscale != 0 && mscale_all != 0) {
		attn_factor = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all);
	} else {
		attn_factor = yarn_mscale(factor, 1);
	}
	if (beta_fast == 0)
		beta_fast = 32;
	if (beta_slow == 0)
		beta_slow = 1;
	int truncate = 1;
	if ((rc = cfg_bool(top, "truncate", 1, &truncate, path, err)))
		return rc;
	double low = yarn_correction_dim(beta_fast, dim, theta, omax);
	double high = yarn_correction_dim(beta_slow, dim, theta, omax);
	if (truncate) {
		low = floor(low);
		high = ceil(high);
	}
	if (low < 0)
		low = 0;
	if (high > dim - 1)
		high = dim - 1;
	if (low == high)
		high += 0.001;
	float span = (float)(high - low), flo = (float)low, ffac = (float)factor;
	for (int i = 0; i < half; i++) {
		float ramp = ((float)i - flo) / span;
		ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
		float extrap_factor = 1.0f - ramp;
		float extrap = 1.0f / pos_freq[i];
		float interp = 1.0f / (ffac * pos_freq[i]);
		float a = interp * (1.0f - extrap_factor);
		float b = extrap * extrap_factor;
		r->inv_freq[i] = a + b;
	}
	r->attn_scale = (float)attn_factor;
	return 0;
}

