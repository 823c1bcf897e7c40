/* ek.h — the Laguna engine's kernels: one C entry point per op on the GPU
 * and its CPU twin.
 *
 * Every op `ek_X(d, ...)` runs on the device's stream with device pointers;
 * `ek_X_cpu(...)` takes the same data arguments as host pointers and computes
 * the same function in plain C (the oracle of tests/kernels/test_ek_gpu.c,
 * itself checked against scalar references in test_ek_cpu.c). Each op family
 * lives in one .cu (ek_gemv.cu, ek_gemm.cu, ek_wq.cu, ek_attn.cu, ek_moe.cu,
 * ek_ops.cu, runtime in ek_rt.cu); twins in ek_*_cpu.c by the same families
 * (ek_cpu_int.h), compiled in every build. Without CUDA, ek_stub.c answers
 * -ENODEV to every GPU entry point. Twins that allocate return 0 or -ENOMEM;
 * BF16/E4M3/E2M1 conversions are quant/'s (quant/quant.h).
 *
 * Conventions: activations are binary32 [tokens][ld] row-major; weights are
 * BF16, NVFP4, FP8 (E4M3) or symmetric INT8/INT4 (below); GPU ops return 0,
 * -EINVAL (bad shape, message in ek_error), -ENOMEM or -EIO (CUDA failure,
 * message in ek_error). Ops only
 * enqueue work: results are ready after ek_sync(). Ops whose position comes
 * from `const int *pos` read it from memory when they run, so a decode step
 * can be captured once in a CUDA graph and replayed (ek_capture_*).
 *
 * Numerics (tests state the tolerances):
 *   - BF16 GEMV: weights widened exactly, fp32 activations and accumulation.
 *   - NVFP4 GEMV (W4A16): x[t] scaled by 2^e_t (a power of two putting max|x[t]|
 *     in [2^14, 2^15)) and rounded to fp16; weights e2m1·e4m3 exact in fp16;
 *     fp32 accumulation on tensor cores; y = acc · 2^(14-e_t) / gs.
 *   - GEMM (prefill): x rounded to BF16, weights exact in BF16 (NVFP4: e2m1·e4m3,
 *     1/gs applied to the fp32 sum), fp32 accumulation on tensor cores.
 *   - FP8 / INT8 / INT4 GEMV and GEMM (SIMT): each weight dequantized exactly
 *     (E4M3 by bits or the GPU's conversion, INT by byte/nibble extraction
 *     into a binary32 integer) and multiplied once by its binary32 scale:
 *     fl(v·s), the CPU engine's value of that weight bit for bit; fp32
 *     activations as given (no rounding), fp32 FMA accumulation. They differ
 *     from the CPU engine only by summation order and FMA.
 *   - everything else: fp32, the CPU engine's formulas (engine/model/ops.c). */
#ifndef RQ_KERNELS_EK_H
#define RQ_KERNELS_EK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ek_dev;
struct ek_graph;

/* ------------------------------------------------------------- device */

/* 1 if the CUDA kernels are compiled in. */
int ek_compiled(void);
/* CUDA devices present (0 without CUDA, a driver or a device). Creates no
 * context. The engine's own query: the quantizer has kq_device_count. */
int ek_device_count(void);
/* Opens device `index` (makes it current, creates a non-blocking stream and,
 * when libcublas can be loaded, a cuBLAS handle). -ENODEV with a reason. */
int ek_open(int index, struct ek_dev **out, char *msg, size_t msglen);
void ek_close(struct ek_dev *d);
/* The last failure's message ("" when none). */
const char *ek_error(const struct ek_dev *d);

struct ek_info {
	char name[256];
	int cc;                    /* compute capability, 10·major + minor */
	int sms;                   /* multiprocessors */
	size_t mem_total, mem_free;/* bytes (cudaMemGetInfo at the call) */
	size_t l2_bytes;
	double peak_gbs;           /* memory clock × bus width × 2, GB/s */
	int cublas;                /* 1 if cuBLAS was loaded (BF16 prefill GEMM) */
};
int ek_info(struct ek_dev *d, struct ek_info *out);

/* Device memory; NULL on failure (ek_error says why). */
void *ek_alloc(struct ek_dev *d, size_t bytes);
void ek_free(struct ek_dev *d, void *p);
/* Page-locked host memory (fast, asynchronous copies). */
void *ek_host_alloc(struct ek_dev *d, size_t bytes);
void ek_host_free(struct ek_dev *d, void *p);
/* Copies queued on the stream (asynchronous when the host side is pinned). */
int ek_h2d(struct ek_dev *d, void *dst, const void *src, size_t n);
int ek_d2h(struct ek_dev *d, void *dst, const void *src, size_t n);
int ek_d2d(struct ek_dev *d, void *dst, const void *src, size_t n);
int ek_memset(struct ek_dev *d, void *p, int byte, size_t n);
/* Waits for everything queued. */
int ek_sync(struct ek_dev *d);
/* Event slot s (0..7): ek_mark records it on the stream, ek_wait_mark blocks
 * the host until the stream has passed it (staging-buffer reuse). */
int ek_mark(struct ek_dev *d, int s);
int ek_wait_mark(struct ek_dev *d, int s);
/* Seconds between ek_time_begin and ek_time_end, measured on the stream. */
int ek_time_begin(struct ek_dev *d);
int ek_time_end(struct ek_dev *d, double *seconds);
/* Stream capture: every op between begin and end becomes one graph. */
int ek_capture_begin(struct ek_dev *d);
int ek_capture_end(struct ek_dev *d, struct ek_graph **out);
int ek_graph_run(struct ek_dev *d, struct ek_graph *g);
void ek_graph_free(struct ek_graph *g);
/* Programmatic dependent launch (the rule: kernels/ek_rt.cu). ek_pdl: 0 off,
 * 1 on for direct launches only, 2 on for launches and captured graphs. On by
 * default on compute capability >= 9.0 when ek_open's probe launches (and a
 * probe capture) work; EK_PDL=0 in the environment at ek_open turns it off.
 * A capture that fails with PDL edges drops the mode to 1 (capture again).
 * ek_set_pdl sets the mode (-ENODEV when asked for more than the probe
 * found); ek_pdl_status says why it is off. Results are identical with and
 * without: PDL changes when a kernel is scheduled, never what it reads. */
int ek_pdl(const struct ek_dev *d);
int ek_set_pdl(struct ek_dev *d, int mode);
const char *ek_pdl_status(const struct ek_dev *d);
/* Kernels launched (or recorded into a capture) on d since ek_open; with
 * d NULL, on every device of the process. */
unsigned long long ek_launches(const struct ek_dev *d);
/* Copy bandwidths in bytes/s, best of reps: device→device cudaMemcpy of
 * `bytes` (counted as read + write) and pinned host→device. */
int ek_copy_bw(struct ek_dev *d, size_t bytes, int reps, double *d2d, double *h2d);

/* Deterministic fills (same values from the GPU op and its twin; for tests
 * and synthetic benchmark weights). Element i depends on (seed, i) only:
 * BF16 ~ uniform(-amp, amp) rounded; bytes uniform in [lo, hi]. */
int ek_fill_bf16(struct ek_dev *d, uint16_t *p, size_t n, float amp, uint64_t seed);
void ek_fill_bf16_cpu(uint16_t *p, size_t n, float amp, uint64_t seed);
int ek_fill_bytes(struct ek_dev *d, uint8_t *p, size_t n, int lo, int hi, uint64_t seed);
void ek_fill_bytes_cpu(uint8_t *p, size_t n, int lo, int hi, uint64_t seed);

/* ------------------------------------------------------------- weights */

enum ek_wkind { EK_BF16 = 0, EK_NVFP4 = 1, EK_FP8 = 2, EK_INT8 = 3, EK_INT4 = 4 };

/* dtype of the scales given to ek_wq_repack (the checkpoint's weight_scale) */
enum ek_sdtype { EK_S_BF16 = 0, EK_S_F16 = 1, EK_S_F32 = 2 };

#define EK_GSHIFT_ROW 30       /* ek_w.gshift of one scale per row (per channel, per tensor) */

/* A set of n same-shaped Linears (n = 1, or the routed experts of a layer):
 * matrix e is y = W_e · x, W_e [rows][cols], stored at data + e·stride.
 *
 * EK_BF16: [rows][cols] uint16 BF16 bits, row-major.
 * EK_NVFP4 (the engine's repacked form, made once at load by ek_nvfp4_repack):
 *   rows padded to R16 = roundup(rows, 16), cols to C64 = roundup(cols, 64);
 *   tiles of 16 rows × 64 columns, row-tile major: tile (rt, kc) at byte
 *   (rt · C64/64 + kc) · 576. A tile is 512 bytes of codes then 64 of scales:
 *     codes: lane l = 4·g + i (g = l/4, i = l%4) owns bytes [16l, 16l+16) =
 *       four little-endian u32, word j for columns c = 64kc + 16j. Its nibbles
 *       0..7 are W[r+g][c+2i], W[r+g+8][c+2i], W[r+g][c+2i+8], W[r+g+8][c+2i+8],
 *       W[r+g][c+2i+1], W[r+g+8][c+2i+1], W[r+g][c+2i+9], W[r+g+8][c+2i+9]
 *       (r = 16rt): nibbles p and p+4 are one fp16x2 register of the A operand
 *       of mma.m16n8k16, decoded with two shifts and one AND/OR each;
 *     scales: byte 512 + 8g + j = E4M3 scale of row r+g, group 4kc+j;
 *       byte 512 + 8g + 4 + j = row r+g+8 (each lane loads its 8 in one u64).
 *   Padding holds code 0 and scale 0 (weight 0). Values e2m1(code)·e4m3(s)/gs,
 *   gs = weight_global_scale, one per matrix in gs[e].
 * EK_FP8, EK_INT8, EK_INT4 (made once at load by ek_wq_repack): codes row-major,
 *   each row padded to LDB bytes, a multiple of 16 (one lane's 16-byte load):
 *     EK_FP8   LDB = roundup(cols, 16); byte c of row r = E4M3 code of W[r][c];
 *     EK_INT8  LDB = roundup(cols, 16); byte c = q + 128, q in [-128, 127];
 *     EK_INT4  LDB = roundup(cols, 32) / 2; byte c/2, low nibble for even c,
 *              = q + 8, q in [-8, 7] (pack-quantized's own bit order: a row of
 *              its little-endian int32 stream is this row, unpadded);
 *   padding holds the code of 0 (0x00, 0x80, 0x8). Then, at byte
 *   roundup(rows · LDB, 16), the scales: binary32 [rows][G], G = ((cols - 1) >>
 *   gshift) + 1: column c of row r has scale S[r][c >> gshift]. gshift >= 4 (a
 *   group holds whole 16-column runs): log2 of a power-of-two group width
 *   (w8a16/w4a16: 7), or EK_GSHIFT_ROW for one scale per row. Per-tensor
 *   scales, per-channel scales and (row block, column group) block scales
 *   are all expanded into this table by the repack (exactly: BF16 and F16
 *   widen to binary32 without rounding). Value of W[r][c]: the binary32
 *   product fl(v · S[r][c >> gshift]), v = e4m3(code) or q — the CPU engine's
 *   (engine/model/ops.c), exact when the checkpoint's scale is BF16 or F16. */
struct ek_w {
	int kind;                  /* enum ek_wkind */
	int rows, cols;            /* each matrix: out_features, in_features */
	int n;                     /* matrices in the set (>= 1) */
	size_t stride;             /* bytes from matrix e to matrix e + 1 */
	const void *data;          /* matrix 0, layout above */
	const float *gs;           /* NVFP4: [n] global scales, same memory as data; else NULL */
	int gshift;                /* FP8, INT8, INT4: scale group of column c is c >> gshift */
};

/* Bytes of one matrix in the engine's layout (NVFP4: padded tiles; FP8 and
 * INT: one scale per row, ek_w_bytes_g for groups). */
size_t ek_w_bytes(int kind, int rows, int cols);
/* The same with FP8/INT scale groups of 2^gshift columns (EK_GSHIFT_ROW: one
 * per row); BF16 and NVFP4 ignore gshift. */
size_t ek_w_bytes_g(int kind, int rows, int cols, int gshift);
/* FP8 / INT8 / INT4 weights → the layout above (ek_w_bytes_g bytes at out).
 *   codes: row r at codes + r·ldc bytes, FP8 bytes / INT unsigned fields (q +
 *     128, q + 8) in pack-quantized's order (INT4: column c in bits 4c..4c+3
 *     of the row's little-endian stream: byte c/2, low nibble for even c);
 *   scales: [srows][G] of sdtype (enum ek_sdtype), G = ((cols - 1) >> gshift)
 *     + 1; row r reads scale row r / srb (srb = 1: per channel or per group;
 *     srb = rows: per tensor; 128: 128-row blocks).
 * Integer work and exact widening: GPU and twin agree byte for byte.
 * -EINVAL for a kind, shape, gshift (< 4) or srb (< 1) they cannot take. */
int ek_wq_repack(struct ek_dev *d, int kind, const uint8_t *codes, size_t ldc,
                 const void *scales, int sdtype, int srb, int rows, int cols, int gshift,
                 uint8_t *out);
int ek_wq_repack_cpu(int kind, const uint8_t *codes, size_t ldc, const void *scales, int sdtype,
                     int srb, int rows, int cols, int gshift, uint8_t *out);
/* compressed-tensors NVFP4 (packed [rows][cols/2], low nibble = even column;
 * scales [rows][cols/16] E4M3) → the tiles above. cols % 16 == 0. Integer
 * work: GPU and twin agree byte for byte. */
int ek_nvfp4_repack(struct ek_dev *d, const uint8_t *packed, const uint8_t *scales, int rows,
                    int cols, uint8_t *out);
void ek_nvfp4_repack_cpu(const uint8_t *packed, const uint8_t *scales, int rows, int cols,
                         uint8_t *out);
/* Row r of matrix e as binary32 (exact values; host memory; tests). */
void ek_w_row_cpu(const struct ek_w *W, int e, int r, float *out);

/* --------------------------------------------------------- linear algebra */

#define EK_GEMV_MAX_T 16       /* tokens one ek_gemv call reads each weight once for */

/* y[t][r] = (acc ? y[t][r] : 0) + Σ_c W_0[r][c] · x[t][c], t < T, r < rows.
 * ek_gemv: 1 <= T <= EK_GEMV_MAX_T (decode and small batches; numerics in the
 * header comment). ek_gemm: any T (prefill; BF16 through cuBLAS when loaded). */
int ek_gemv(struct ek_dev *d, const struct ek_w *W, const float *x, int ldx, float *y, int ldy,
            int T, int acc);
int ek_gemv_cpu(const struct ek_w *W, const float *x, int ldx, float *y, int ldy, int T, int acc);
int ek_gemm(struct ek_dev *d, const struct ek_w *W, const float *x, int ldx, float *y, int ldy,
            int T, int acc);
/* RMSNorm fused into the GEMV that reads it (decode, T <= EK_GEMV_NORM_MAX_T):
 *   xn[t] = RMSNorm(x[t]) with weights nw [cols] and eps (ek_rmsnorm's formula),
 *   y[t][r] = (acc ? y[t][r] : 0) + Σ_c W_0[r][c] · xn[t][c].
 * Every block computes 1/rms of x[t] itself and normalizes x as it stages it;
 * when xn is not NULL, block 0 also stores xn[t] [T][ldxn] (for later readers
 * of the normalized x; must not overlap x). On the GPU y and xn are bit-identical
 * to ek_rmsnorm followed by ek_gemv (same reduction, same roundings); the
 * twin is bit-identical to ek_rmsnorm_cpu followed by ek_gemv_cpu. */
#define EK_GEMV_NORM_MAX_T 4
int ek_gemv_norm(struct ek_dev *d, const struct ek_w *W, const float *x, int ldx,
                 const float *nw, float eps, float *xn, int ldxn, float *y, int ldy, int T,
                 int acc);
int ek_gemv_norm_cpu(const struct ek_w *W, const float *x, int ldx, const float *nw, float eps,
                     float *xn, int ldxn, float *y, int ldy, int T, int acc);
int ek_gemm_cpu(const struct ek_w *W, const float *x, int ldx, float *y, int ldy, int T, int acc);

/* ------------------------------------------------------------------- MoE */

/* Router, per token t < T: s_e = sigmoid(c > 0 ? tanh(l_e/c)·c : l_e) from
 * logits[t·ldl + e]; picks the k largest s_e + bias[e] (bias only picks; ties
 * to the lower index), best first, into ids[t·k + j]; wts = s at the picks,
 * divided by their sum when norm. E <= 1024, k <= 32. */
int ek_route(struct ek_dev *d, const float *logits, int ldl, const float *bias, int E, int k,
             int norm, float softcap, int *ids, float *wts, int T);
/* Softmax router (Mixtral, Qwen MoE: transformers' top-k router), per token
 * t < T: p = softmax(logits[t·ldl .. + E)) in binary32; the k largest p (ties
 * to the lower index), best first, into ids[t·k + j]; wts = p at the picks,
 * divided by their sum when norm. E <= 1024, k <= 32. The CPU twin is also
 * the CPU engine's router for these families. */
int ek_route_softmax(struct ek_dev *d, const float *logits, int ldl, int E, int k, int norm,
                     int *ids, float *wts, int T);
void ek_route_softmax_cpu(const float *logits, int ldl, int E, int k, int norm, int *ids,
                          float *wts, int T);
void ek_route_cpu(const float *logits, int ldl, const float *bias, int E, int k, int norm,
                  float softcap, int *ids, float *wts, int T);

/* Routed experts: out[t] = (acc ? out[t] : 0)
 *   + scale · Σ_j wts[t·k+j] · D_e(silu(G_e · x[t]) ⊙ (U_e · x[t])), e = ids[t·k+j],
 * summed in pick order. G, U: [inter][hidden] sets; D: [hidden][inter].
 * work: ek_moe_work_bytes() bytes of device memory, zeroed once before the
 * first call (kernels leave their counters at zero). T <= EK_GEMV_MAX_T runs
 * expert GEMVs entirely on the device (capturable); larger T (prefill) groups
 * the slots by expert on the host after one synchronising copy of ids. */
int ek_moe(struct ek_dev *d, const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
           const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
           float *out, int ldo, int T, int acc, void *work);
int ek_moe_cpu(const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
               const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
               float *out, int ldo, int T, int acc, void *work);
/* ek_moe for W4A4 experts (NVFP4 weights, NVFP4 inputs as vLLM quantizes
 * them, ek_actq_nvfp4's rule): expert e's gate/up input (the token's x) is
 * quantized with gs_gu[e], its down input (the SwiGLU) with gs_dn[e]; gs_gu,
 * gs_dn: [E] floats in device memory (host memory for the twin). Same work
 * buffer. hidden and inter % 16 == 0. */
int ek_moe_q(struct ek_dev *d, const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
             const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
             float *out, int ldo, int T, int acc, void *work, const float *gs_gu,
             const float *gs_dn);
int ek_moe_q_cpu(const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
                 const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
                 float *out, int ldo, int T, int acc, void *work, const float *gs_gu,
                 const float *gs_dn);
/* ek_moe for experts whose Linears quantize their inputs FP8 per token
 * (FP8_DYNAMIC: ek_actq_fp8's rule, as vLLM): x[t] once for every expert's
 * gate/up, each slot's SwiGLU before its down projection. obs_dn, obs_stride:
 * as ek_moe_obs (the down inputs before their quantization), or NULL. Same
 * work buffer. */
int ek_moe_a8(struct ek_dev *d, const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
              const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
              float *out, int ldo, int T, int acc, void *work, float *obs_dn, int obs_stride);
int ek_moe_a8_cpu(const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
                  const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
                  float *out, int ldo, int T, int acc, void *work, float *obs_dn, int obs_stride);
size_t ek_moe_work_bytes(int T, int k, int inter, int hidden);
/* ek_moe (gs_gu NULL) or ek_moe_q that also feeds the calibration observer
 * (engine/model/observe.h): for every slot s = t·k + j, the down projection's input
 * (the SwiGLU of the token through expert e = ids[s], before ek_moe_q
 * quantizes it) is folded into obs_dn[e·obs_stride] as ek_obs_rows does
 * (obs_dn: device memory; host memory for the twin). Same results otherwise. */
int ek_moe_obs(struct ek_dev *d, const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
               const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
               float *out, int ldo, int T, int acc, void *work, const float *gs_gu,
               const float *gs_dn, float *obs_dn, int obs_stride);
int ek_moe_obs_cpu(const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
                   const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
                   float *out, int ldo, int T, int acc, void *work, const float *gs_gu,
                   const float *gs_dn, float *obs_dn, int obs_stride);

/* ek_moe keeps arrival counters in the first EK_WORK_CNT_BYTES of its work
 * buffer, at offsets that do not depend on T: one buffer sized for the
 * largest T serves every call, and the counters stay zero between. */
#define EK_WORK_CNT_BYTES 65536

/* ---------------------------------------------------- elementwise, norms */

/* out[t] = w ⊙ x[t] · rsqrt(mean(x[t]²) + eps), n features (out may be x). */
int ek_rmsnorm(struct ek_dev *d, float *out, int ldo, const float *x, int ldx, const float *w,
               int T, int n, float eps);
void ek_rmsnorm_cpu(float *out, int ldo, const float *x, int ldx, const float *w, int T, int n,
                    float eps);
/* out[t][i] = silu(g[t][i]) · u[t][i], i < n. */
int ek_swiglu(struct ek_dev *d, float *out, int ldo, const float *g, int ldg, const float *u,
              int ldu, int T, int n);
void ek_swiglu_cpu(float *out, int ldo, const float *g, int ldg, const float *u, int ldu, int T,
                   int n);
/* Input-activation quantization of a quantized Linear, as vLLM applies it
 * (the rule and its rounding: ek_actq_rule.h): y[t] = x[t] quantized and
 * dequantized, cols inputs per token (y may be x).
 * nvfp4: per group of 16 (cols % 16 == 0) with the static input global scale
 * gs (> 0); fp8: per token, dynamic. Integer-exact rule: the GPU op gives the
 * twin's bits. */
int ek_actq_nvfp4(struct ek_dev *d, const float *x, int ldx, float *y, int ldy, int T, int cols,
                  float gs);
void ek_actq_nvfp4_cpu(const float *x, int ldx, float *y, int ldy, int T, int cols, float gs);
int ek_actq_fp8(struct ek_dev *d, const float *x, int ldx, float *y, int ldy, int T, int cols);
void ek_actq_fp8_cpu(const float *x, int ldx, float *y, int ldy, int T, int cols);
/* x[i] += y[i], i < n. */
int ek_add(struct ek_dev *d, float *x, const float *y, size_t n);
void ek_add_cpu(float *x, const float *y, size_t n);
/* y[t·ldy + i] += b[i], i < n, t < T: a Linear's bias after its product. */
int ek_bias(struct ek_dev *d, float *y, int ldy, const float *b, int T, int n);
void ek_bias_cpu(float *y, int ldy, const float *b, int T, int n);
/* h[t·ldh + i] *= sigmoid(g[t·ldg]), i < n, t < T: Qwen2-MoE's shared-expert
 * gate, applied to the shared SwiGLU before its down projection. */
int ek_sigmoid_scale(struct ek_dev *d, float *h, int ldh, const float *g, int ldg, int T, int n);
void ek_sigmoid_scale_cpu(float *h, int ldh, const float *g, int ldg, int T, int n);
/* x[t][i] = bf16 table[tokens[t]][i] widened, i < hidden. */
int ek_embed(struct ek_dev *d, float *x, const uint16_t *table, const int *tokens, int T,
             int hidden);
void ek_embed_cpu(float *x, const uint16_t *table, const int *tokens, int T, int hidden);

/* ------------------------------------------------- calibration observer */

/* The observer's running maxima (engine/model/observe.h; ek_obs.cu): folded on the
 * device with atomicMax on the float's bits (values >= 0, where the bits'
 * unsigned order is the numeric order), so any order gives the same bits as
 * the twin. NaN inputs are skipped. amax must hold a value >= 0 (start at 0).
 *   ek_obs_amax: amax[0] = max(amax[0], max |x[t][c]|), t < T, c < cols.
 *   ek_obs_rows: per slot s < S, row r = (rowmap ? rowmap[s] : s) / xdiv of x
 *     and expert e = ids[s] (skipped unless 0 <= e < E):
 *     amax[e·stride] = max(.., max_c |x[r][c]|), and cnt[e·stride] += 1 when
 *     cnt is not NULL (the tokens routed to e). rowmap, ids: device memory. */
int ek_obs_amax(struct ek_dev *d, const float *x, int ldx, int T, int cols, float *amax);
void ek_obs_amax_cpu(const float *x, int ldx, int T, int cols, float *amax);
int ek_obs_rows(struct ek_dev *d, const float *x, int ldx, const int *rowmap, int xdiv, int S,
                int cols, const int *ids, int E, float *amax, unsigned *cnt, int stride);
void ek_obs_rows_cpu(const float *x, int ldx, const int *rowmap, int xdiv, int S, int cols,
                     const int *ids, int E, float *amax, unsigned *cnt, int stride);

/* ------------------------------------------------------------- attention */

enum ek_kv { EK_KV_F32 = 0, EK_KV_BF16 = 1, EK_KV_FP8 = 2 };  /* FP8: E4M3FN, unscaled, RNE, saturating */

/* Bytes of one K (or V) cache: [nkv][cap][hd] elements of kvtype. */
size_t ek_kv_bytes(int kvtype, int cap, int nkv, int hd);

/* For tokens t < T at positions p = *pos + t, in place:
 *   q[t·ldq + h·hd ..] (h < nh), k[t·ldk + h·hd ..] (h < nkv): RMSNorm over hd
 *   with weights qn / kn (both NULL: no norm), then rotate-half RoPE on the first rot dims:
 *   (a, b) = (x_i, x_{i+rot/2}) → (a·c - b·s, b·c + a·s), c, s = cos, sin(p·inv_freq[i])
 *   · attn_scale (fp32 product p·inv_freq like the CPU engine);
 *   then kc/vc[h][p % cap][:] = k and v[t·ldv + h·hd ..], stored as kvtype. */
int ek_qk_rope_kv(struct ek_dev *d, float *q, int ldq, float *k, int ldk, const float *v, int ldv,
                  int T, int nh, int nkv, int hd, const float *qn, const float *kn, float eps,
                  const float *inv_freq, int rot, float attn_scale, const int *pos, void *kc,
                  void *vc, int kvtype, int cap);
void ek_qk_rope_kv_cpu(float *q, int ldq, float *k, int ldk, const float *v, int ldv, int T,
                       int nh, int nkv, int hd, const float *qn, const float *kn, float eps,
                       const float *inv_freq, int rot, float attn_scale, const int *pos, void *kc,
                       void *vc, int kvtype, int cap);

/* Causal attention of tokens t < T at positions p = *pos + t over the cache:
 * keys at positions lo..p, lo = window > 0 ? max(0, p - window + 1) : 0, at
 * slots pos % cap (the caller sizes cap: >= max position + 1 for full layers,
 * >= window + T - 1 for a ring). Query head h reads kv head h / (nh / nkv).
 *   out[t·ldo + h·hd + i] = Σ softmax_j(q·k_j / sqrt(hd)) · v_j[i], then times
 *   softplus(g[t·ldg + h]) (gate 1, per head), softplus(g[t·ldg + h·hd + i])
 *   (gate 2, per element) or 1 (gate 0, g unused).
 * max_keys: the most keys a token sees in calls on this work buffer; it fixes
 * the grid (splits of up to 64-key chunks, graph-safe) and the work size, not
 * the result (more keys than max_keys are still all attended). work:
 * ek_attn_work_bytes() bytes of device memory (partials; no state is kept
 * between calls). T <= EK_GEMV_MAX_T: split blocks + a merge kernel (kernels/
 * ek_attn.cu); larger T: the prefill kernel. The twin computes the split and
 * merge arithmetic of the decode kernels for every T (work unused, may be
 * NULL; 0 or -ENOMEM). */
int ek_attn(struct ek_dev *d, float *out, int ldo, const float *q, int ldq, const float *g,
            int ldg, int gate, int T, int nh, int nkv, int hd, const void *kc, const void *vc,
            int kvtype, int cap, const int *pos, int window, int max_keys, void *work);
int ek_attn_cpu(float *out, int ldo, const float *q, int ldq, const float *g, int ldg, int gate,
                int T, int nh, int nkv, int hd, const void *kc, const void *vc, int kvtype,
                int cap, const int *pos, int window, int max_keys, void *work);
size_t ek_attn_work_bytes(int T, int nh, int hd, int max_keys);

/* fp16 conversions of the NVFP4 GEMV's activations (twins and tests); the
 * other formats are quant/'s: rq_bf16_to_f32, rq_f32_to_bf16, rq_e4m3_to_f32,
 * rq_f32_to_e4m3 (RNE, saturating to ±448, NaN → 0x7F), rq_e2m1_to_f32. */
float ek_f16_f32(uint16_t h);
uint16_t ek_f32_f16(float f);              /* round to nearest even, subnormals kept */

#ifdef __cplusplus
}
#endif

#endif
