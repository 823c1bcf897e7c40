/* forward_cuda_int.h — the CUDA engine's state, shared by forward_cuda.c
 * (the forward pass, the decode graph) and forward_cuda_load.c (memory plan,
 * weight upload). Internal to engine/. */
#ifndef RQ_ENGINE_FORWARD_CUDA_INT_H
#define RQ_ENGINE_FORWARD_CUDA_INT_H

#include "engine/model/forward_cuda.h"
#include "kernels/ek.h"

#define LGC_MAXG 4                 /* members of a linear group */
#define LGC_SLOTS 4                /* pinned staging slots of the upload */
#define LGC_SLOT_BYTES ((size_t)64 << 20)
#define LGC_LOGIT_ROWS 16          /* logits computed per lm_head call */

/* A Linear's input quantization (lg_linear act, in_gs): its input goes
 * through ek_actq_nvfp4 / ek_actq_fp8 into lgc.xq before the product. */
struct lgc_aq {
	int act;                   /* enum lg_act */
	float gs;                  /* LG_A_NVFP4: input global scale */
};

/* Linears reading the same input, outputs side by side in one buffer: one
 * fused BF16 matrix (n = 1) or one product per member. */
struct lgc_group {
	int n;
	struct ek_w w[LGC_MAXG];   /* device weights */
	int off[LGC_MAXG];         /* first output column of each */
	int width;                 /* output columns in all */
	struct lgc_aq aq[LGC_MAXG];/* each member's input quantization (a fused BF16 group: none) */
	int any_aq;                /* some member quantizes its input (the norm is not fused) */
};

struct lgc_layer {
	int type, nh, moe;         /* lg_layer's */
	float *attn_norm, *mlp_norm;   /* device [hidden] */
	float *q_norm, *k_norm;    /* device [head_dim] */
	struct lgc_group qkvg;     /* q | k | v | g */
	int qo, ko, vo, go;        /* their columns in qkvg's output */
	struct ek_w o;
	struct lgc_group gu;       /* dense: gate | up */
	struct ek_w down;
	struct lgc_group rsu;      /* MoE: router | shared gate | shared up [| shared_expert_gate] */
	struct ek_w sd;            /* shared down */
	float *bias;               /* device [n_experts] selection bias */
	float *qkvg_b;             /* device [qkvg.width] q|k|v biases (0 for g), NULL: none */
	float *o_b, *down_b;       /* device [hidden] o_proj / dense down_proj bias, or NULL */
	float *gu_b;               /* device [gu.width] dense gate|up biases, or NULL */
	int sgo;                   /* MoE: column of the shared-expert gate logit in rsu, -1: none */
	struct ek_w eg, eu, ed;    /* routed expert sets (n = n_experts) */
	struct lgc_aq aq_o, aq_down, aq_sd;   /* o_proj, dense down_proj, shared down_proj inputs */
	float *egs_gu, *egs_dn;    /* W4A4 experts: device [n_experts] input global scales of
	                              gate/up (fused) and down (ek_moe_q); NULL: A16 experts */
	int ea8;                   /* experts quantize their inputs FP8 per token (ek_moe_a8) */
	void *kc, *vc;             /* KV cache [nkv][cap][hd] of kv_type */
	int cap;                   /* positions in the cache (ring for sliding layers) */
};

/* The calibration observer on the device (forward_cuda_obs.c); buffers made
 * at the first lgc_observe_start, kept until lgc_free. */
struct lgc_obs {
	int on;                    /* lgc_forward observes */
	int all;                   /* every token through every expert, for the observer only */
	int per;                   /* slots per layer (lg_obs_per_layer) */
	size_t n;                  /* slots (lg_obs_count) */
	float *amax;               /* device [n] running max|x| (atomicMax on the bits) */
	unsigned *cnt;             /* device [n] tokens routed (experts' gate slots) */
	long *tok;                 /* host [n] tokens seen by the other slots */
	int *all_ids;              /* device [ceil(E/K)][B][kk]: chunk c picks experts c·K + j */
	float *all_w;              /* device [B·K] zero weights (all) */
	float *all_out;            /* device [B][hidden] the all-experts pass's discarded output */
};

/* Invariant: pos == positions fed; hstep/dstep are [1 + B] ints, position
 * then tokens (the decode graph copies hstep → dstep as its first node). */
struct lgc {
	const struct lg_model *m;
	struct lgc_opts o;
	int kv_type;
	int B;                     /* tokens per batch */
	int pos;
	struct ek_dev *d;
	struct lgc_plan plan;
	struct lgc_stats st;
	struct lgc_layer *L;       /* [n_layers] */
	uint16_t *embed;           /* device [vocab][hidden] BF16 */
	float *final_norm;         /* device [hidden] */
	struct ek_w lm_head;
	struct lgc_aq aq_head;     /* lm_head's input quantization */
	float *xq;                 /* [B][xq_w] a quantized product input (models with
	                              act-quantized Linears; NULL otherwise) */
	int xq_w;
	float *inv_freq[2];        /* device [rot/2] per layer type */
	/* activations, device */
	float *x, *xn;             /* [B][hidden] */
	float *qkvg;               /* [B][qkvg_w] */
	float *att;                /* [B][qd] */
	float *gu;                 /* [B][gu_w] dense gate | up */
	float *h;                  /* [B][max(inter, shared)] SwiGLU output */
	float *rsu;                /* [B][rsu_w] router logits | shared gate | shared up */
	int *ids;                  /* [B·top_k] */
	float *wts;                /* [B·top_k] */
	float *logits;             /* [LGC_LOGIT_ROWS][vocab] */
	void *moe_work, *attn_work;
	int qkvg_w, gu_w, rsu_w, qd, hw;
	int *dstep;                /* device [1 + B] */
	int *hstep;                /* pinned [1 + B] */
	float *hlogits;            /* pinned [LGC_LOGIT_ROWS][vocab] */
	struct ek_graph *graph;
	int warm;                  /* decode steps run directly before capturing */
	struct lgc_obs ob;         /* the calibration observer (off unless ob.on) */
	void **allocs;             /* device allocations, freed at lgc_free */
	int nallocs, capallocs;
};

/* forward_cuda_load.c */
int lgc_layout(struct lgc *g, int dry, struct rq_err *err);
void *lgc_dalloc(struct lgc *g, size_t bytes);
size_t lgc_act_bytes(const struct lg_model *m, int B, int max_ctx);
/* Columns of lgc.xq: the widest input of a non-expert Linear. */
int lgc_xq_width(const struct lg_model *m);

/* forward_cuda_obs.c: the observer's hooks in the pass (each returns 0 at
 * once when not observing). lgc_obs_x: x observed for slots[0..ns) of layer
 * li; lgc_obs_routed: the routed experts' gate/up inputs after routing;
 * lgc_obs_moe_dn: the down inputs' maxima for ek_moe_obs (NULL: plain MoE);
 * lgc_obs_all_experts: the all-experts pass after the layer's MoE. */
int lgc_obs_x(struct lgc *g, int li, const int *slots, int ns, const float *x, int ldx, int T,
              int cols);
int lgc_obs_routed(struct lgc *g, int li, int T);
float *lgc_obs_moe_dn(struct lgc *g, int li);
int lgc_obs_all_experts(struct lgc *g, int li, int T);
#define LGC_OBS(g, li, x, ldx, T, cols, ...)                                                    \
	lgc_obs_x(g, li, (const int[]){__VA_ARGS__}, sizeof((const int[]){__VA_ARGS__}) / sizeof(int), \
	          x, ldx, T, cols)

#endif
