/* cfg_json.c — small readers of config.json values for config.c, rope.c and
 * arch.c: each returns 0, or -EINVAL with a message naming the key. */
#include "engine/model/cfg_int.h"
#include "base/err.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>


const cJSON *cfg_key(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return v && !cJSON_IsNull(v) ? v : NULL;
}

int cfg_num(const cJSON *o, const char *k, int required, double def, double *out,
                   const char *path, struct rq_err *err)
{
	const cJSON *v = cfg_key(o, k);
	if (!v) {
		if (required)
			return rq_errf(err, -EINVAL, "%s: \"%s\" is missing", path, k);
		*out = def;
		return 0;
	}
	if (!cJSON_IsNumber(v))
		return rq_errf(err, -EINVAL, "%s: \"%s\" is not a number", path, k);
	*out = v->valuedouble;
	return 0;
}

int cfg_int(const cJSON *o, const char *k, int required, long def, long lo, long hi,
                   long *out, const char *path, struct rq_err *err)
{
	double d = 0;
	int rc = cfg_num(o, k, required, (double)def, &d, path, err);
	if (rc)
		return rc;
	if (d != floor(d) || d < lo || d > hi)
		return rq_errf(err, -EINVAL, "%s: \"%s\" = %g is not an integer in [%ld, %ld]",
		               path, k, d, lo, hi);
	*out = (long)d;
	return 0;
}

int cfg_bool(const cJSON *o, const char *k, int def, int *out, const char *path,
                    struct rq_err *err)
{
	const cJSON *v = cfg_key(o, k);
	if (!v) {
		*out = def;
		return 0;
	}
	if (!cJSON_IsBool(v))
		return rq_errf(err, -EINVAL, "%s: \"%s\" is not true/false", path, k);
	*out = cJSON_IsTrue(v);
	return 0;
}

const char *cfg_str(const cJSON *o, const char *k)
{
	const cJSON *v = cfg_key(o, k);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

int cfg_refuse_true(const cJSON *root, const char *k, const char *path, struct rq_err *err)
{
	int v = 0, rc = cfg_bool(root, k, 0, &v, path, err);
	if (rc)
		return rc;
	return v ? rq_errf(err, -ENOTSUP, "%s: \"%s\": true is not supported by this engine", path, k) : 0;
}


/* One eos id: an integer, never a float truncated onto another token's id
 * (a negative one, which transformers only warns about, never matches). */
static int eos_id(const cJSON *e, const char *where, int *out, const char *path, struct rq_err *err)
{
	if (!cJSON_IsNumber(e))
		return rq_errf(err, -EINVAL, "%s: %s is not a number: it must be an integer token id",
		               path, where);
	double d = e->valuedouble;
	if (d != floor(d) || d < INT_MIN || d > INT_MAX)
		return rq_errf(err, -EINVAL, "%s: %s = %.17g: it must be an integer token id", path,
		               where, d);
	*out = (int)d;
	return 0;
}

int cfg_eos(const cJSON *o, int *eos, int *n, const char *path, struct rq_err *err)
{
	const cJSON *v = cfg_key(o, "eos_token_id"), *e;
	if (!v)
		return 0;
	if (cJSON_IsNumber(v)) {
		int rc = eos_id(v, "\"eos_token_id\"", &eos[0], path, err);
		if (!rc)
			*n = 1;
		return rc;
	}
	if (!cJSON_IsArray(v))
		return rq_errf(err, -EINVAL, "%s: \"eos_token_id\" is neither a number nor a list", path);
	int k = 0, got = 0, ids[8];
	cJSON_ArrayForEach(e, v) {
		char where[48];
		snprintf(where, sizeof where, "\"eos_token_id\"[%d]", k++);
		int id = 0, rc = eos_id(e, where, &id, path, err);
		if (rc)
			return rc;
		if (got < 8)
			ids[got++] = id;
	}
	memcpy(eos, ids, sizeof(int) * got);
	*n = got;
	return 0;
}
