/* ek_stub.c — kernels/ek.h when requantfs is built without CUDA: no device is
 * ever present, every GPU entry point answers -ENODEV (or NULL), and the CPU
 * twins (ek_cpu.c) are still compiled in. */
#include "kernels/ek.h"

#include <errno.h>
#include <stdio.h>

#define EK_NO_CUDA "built without CUDA (reconfigure with -Dcuda=enabled)"

int ek_compiled(void)
{
	return 0;
}

int ek_device_count(void)
{
	return 0;
}

int ek_open(int index, struct ek_dev **out, char *msg, size_t msglen)
{
	if (msg && msglen)
		snprintf(msg, msglen, "%s", EK_NO_CUDA);
	return -ENODEV;
}

void ek_close(struct ek_dev *d)
{
}

const char *ek_error(const struct ek_dev *d)
{
	return EK_NO_CUDA;
}

int ek_info(struct ek_dev *d, struct ek_info *out)
{
	return -ENODEV;
}

void *ek_alloc(struct ek_dev *d, size_t bytes)
{
	return NULL;
}

void ek_free(struct ek_dev *d, void *p)
{
}

void *ek_host_alloc(struct ek_dev *d, size_t bytes)
{
	return NULL;
}

void ek_host_free(struct ek_dev *d, void *p)
{
}

#define NODEV { return -ENODEV; }

int ek_h2d(struct ek_dev *d, void *dst, const void *src, size_t n) NODEV
int ek_d2h(struct ek_dev *d, void *dst, const void *src, size_t n) NODEV
int ek_d2d(struct ek_dev *d, void *dst, const void *src, size_t n) NODEV
int ek_memset(struct ek_dev *d, void *p, int byte, size_t n) NODEV
int ek_sync(struct ek_dev *d) NODEV
int ek_mark(struct ek_dev *d, int s) NODEV
int ek_wait_mark(struct ek_dev *d, int s) NODEV
int ek_time_begin(struct ek_dev *d) NODEV
int ek_time_end(struct ek_dev *d, double *seconds) NODEV
int ek_capture_begin(struct ek_dev *d) NODEV
int ek_capture_end(struct ek_dev *d, struct ek_graph **out) NODEV
int ek_graph_run(struct ek_dev *d, struct ek_graph *g) NODEV

void ek_graph_free(struct ek_graph *g)
{
}

int ek_copy_bw(struct ek_dev *d, size_t bytes, int reps, double *d2d, double *h2d) NODEV
int ek_fill_bf16(struct ek_dev *d, uint16_t *p, size_t n, float amp, uint64_t seed) NODEV
int ek_fill_bytes(struct ek_dev *d, uint8_t *p, size_t n, int lo, int hi, uint64_t seed) NODEV
int ek_nvfp4_repack(struct ek_dev *d, const uint8_t *packed, const uint8_t *scales, int rows,
                    int cols, uint8_t *out) NODEV
int ek_wq_repack(struct ek_dev *d, int kind, const uint8_t *codes, size_t ldc,
                 const void *scales, int sdtype, int srb, int rows, int cols, int gshift,
                 uint8_t *out) NODEV
int ek_gemv(struct ek_dev *d, const struct ek_w *W, const float *x, int ldx, float *y, int ldy,
            int T, int acc) NODEV
int ek_gemm(struct ek_dev *d, const struct ek_w *W, const float *x, int ldx, float *y, int ldy,
            int T, int acc) NODEV
int ek_route(struct ek_dev *d, const float *logits, int ldl, const float *bias, int E, int k,
             int norm, float softcap, int *ids, float *wts, int T) NODEV
int ek_moe(struct ek_dev *d, const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
           const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
           float *out, int ldo, int T, int acc, void *work) NODEV
int ek_moe_q(struct ek_dev *d, const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
             const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
             float *out, int ldo, int T, int acc, void *work, const float *gs_gu,
             const float *gs_dn) NODEV
int ek_moe_obs(struct ek_dev *d, const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
               const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
               float *out, int ldo, int T, int acc, void *work, const float *gs_gu,
               const float *gs_dn, float *obs_dn, int obs_stride) NODEV
int ek_moe_a8(struct ek_dev *d, const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
              const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
              float *out, int ldo, int T, int acc, void *work, float *obs_dn, int obs_stride) NODEV
int ek_obs_amax(struct ek_dev *d, const float *x, int ldx, int T, int cols, float *amax) NODEV
int ek_obs_rows(struct ek_dev *d, const float *x, int ldx, const int *rowmap, int xdiv, int S,
                int cols, const int *ids, int E, float *amax, unsigned *cnt, int stride) NODEV
int ek_rmsnorm(struct ek_dev *d, float *out, int ldo, const float *x, int ldx, const float *w,
               int T, int n, float eps) NODEV
int ek_swiglu(struct ek_dev *d, float *out, int ldo, const float *g, int ldg, const float *u,
              int ldu, int T, int n) NODEV
int ek_add(struct ek_dev *d, float *x, const float *y, size_t n) NODEV
int ek_actq_nvfp4(struct ek_dev *d, const float *x, int ldx, float *y, int ldy, int T, int cols,
                  float gs) NODEV
int ek_actq_fp8(struct ek_dev *d, const float *x, int ldx, float *y, int ldy, int T, int cols) NODEV
int ek_bias(struct ek_dev *d, float *y, int ldy, const float *b, int T, int n) NODEV
int ek_sigmoid_scale(struct ek_dev *d, float *h, int ldh, const float *g, int ldg, int T, int n) NODEV
int ek_route_softmax(struct ek_dev *d, const float *logits, int ldl, int E, int k, int norm,
                     int *ids, float *wts, int T) NODEV
int ek_embed(struct ek_dev *d, float *x, const uint16_t *table, const int *tokens, int T,
             int hidden) NODEV
int ek_qk_rope_kv(struct ek_dev *d, float *q, int ldq, float *k, int ldk, const float *v, int ldv,
                  int T, int nh, int nkv, int hd, const float *qn, const float *kn, float eps,
                  const float *inv_freq, int rot, float attn_scale, const int *pos, void *kc,
                  void *vc, int kvtype, int cap) NODEV
int ek_attn(struct ek_dev *d, float *out, int ldo, const float *q, int ldq, const float *g,
            int ldg, int gate, int T, int nh, int nkv, int hd, const void *kc, const void *vc,
            int kvtype, int cap, const int *pos, int window, int max_keys, void *work) NODEV
