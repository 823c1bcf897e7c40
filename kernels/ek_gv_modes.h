/* ek_gv_modes.h — the GEMV kernels' modes (ek_gemv.cu, ek_gemv_bf16.cuh),
 * shared with the MoE ops (ek_moe.cu) through ek_dev.cuh. Internal to kernels/.
 *   GV_PLAIN  y[t] (+)= W·x[t], t < T (<= 16 tokens, each weight read once)
 *   GV_GU     per slot s < T: e = ids[s], y[s] = silu(W_e·x[s/k]) ⊙ (W2_e·x[s/k])
 *   GV_DOWN   per slot s: y[s] = W_e·x[s]; then the last block of each row
 *             block writes out[t] = (acc ? out[t] : 0) + scale·Σ_j wts[t·k+j]·y[t·k+j]
 *             (cnt: one zeroed int per row block, left at zero). */
#ifndef RQ_KERNELS_EK_GV_MODES_H
#define RQ_KERNELS_EK_GV_MODES_H

enum { GV_PLAIN = 0, GV_GU = 1, GV_DOWN = 2 };

#endif
