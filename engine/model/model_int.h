/* model_int.h — internal to engine/: the loader shared by model.c (the
 * directory, the shards, the layers of each family) and model_linear.c (one
 * tensor or one Linear bound in the form its header says). */
#ifndef RQ_ENGINE_MODEL_INT_H
#define RQ_ENGINE_MODEL_INT_H

#include "engine/model/model.h"
#include "st/st.h"

struct rq_err;

struct lg_file {
	char *path;
	const uint8_t *map;        /* whole file, PROT_READ */
	size_t size;
	struct st_header *h;
};

struct tref {
	const char *name;          /* points into the header */
	int file, idx;
	int used;
};

struct loader {
	struct lg_model *m;
	struct tref *t;            /* sorted by name */
	size_t n;
	struct rq_err *err;
};

/* by name, for qsort/bsearch over loader.t */
int ld_cmp_tref(const void *a, const void *b);
/* The tensor called name (NULL when no shard holds it). */
struct tref *ld_find(struct loader *L, const char *name);
const struct st_tensor *ld_tensor(struct loader *L, const struct tref *r);
const uint8_t *ld_data(struct loader *L, const struct tref *r);
/* Looks up name and checks dtype and shape (ndim dims; ndim 1 with d0 == 1
 * also accepts a scalar); marks it used. NULL with *rc and an error naming
 * the file and tensor when absent or different. */
const struct tref *ld_need(struct loader *L, const char *name, enum st_dtype dt, int ndim,
                           uint64_t d0, uint64_t d1, int *rc);
/* A Linear [rows, cols] named mod in whichever form its tensors say (BF16,
 * F16, F32, NVFP4, FP8, INT); ld_lin also binds <mod>.bias when bias. */
int ld_linear(struct loader *L, const char *mod, int rows, int cols, struct lg_linear *out);
int ld_lin(struct loader *L, const char *mod, int rows, int cols, int bias, struct lg_linear *out);
/* After every Linear is bound: the input global scale of the Linears vLLM
 * fuses (q/k/v, gate/up) made one, the largest (model_linear.c). */
void ld_fuse_acts(struct lg_model *m);
/* A vector of n values (BF16, F16 or F32) widened into a new float array. */
int ld_vec(struct loader *L, const char *name, int n, float **out);

#endif
