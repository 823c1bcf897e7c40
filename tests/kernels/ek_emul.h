/* ek_emul.h — the host emulation of kernels/ek.h's GPU entry points
 * (ek_emul.c), linked before the kernels library into test_ek_emul and
 * requantfs-emul (the CLI with an emulated device: tests/engine's
 * `calib run --device cuda` test). "Device" memory is host memory, copies are
 * memcpy, each op runs its CPU twin at once or is recorded while the stream
 * is captured and run again at each launch of the graph. Products (GEMV,
 * GEMM, experts) use the CPU engine's numerics (exact weights, fp32
 * activations), not the kernels' fp16/BF16 activations (test_ek_gpu checks
 * those): here they would only move near-tied router scores of the tiny
 * models and hide what the emulation is for — forward_cuda's host code.
 *
 * Test hooks (set by a test, read by the emulation):
 *   emul_fail_op: when > 0, the emul_fail_op-th op enqueued during a capture
 *     fails with -EIO and the capture stays valid (like a launch refused
 *     before it reaches the stream); the graph ended from that capture is
 *     marked tainted. Cleared once it fired.
 *   emul_fail_end: when 1, the next ek_capture_end fails with -EIO (an end
 *     capture or instantiate error). Cleared once it fired.
 * Counters: graphs instantiated, graph launches, launches of a tainted graph
 * (a graph from a failed capture: must stay 0), ops and kernels of the last
 * capture ended without a failure, input quantizations and W4A4 expert calls
 * enqueued, observer reductions enqueued. */
#ifndef RQ_TESTS_KERNELS_EK_EMUL_H
#define RQ_TESTS_KERNELS_EK_EMUL_H

struct ek_dev;

extern int emul_fail_op, emul_fail_end;
extern int emul_graphs, emul_runs, emul_tainted_runs;
extern int emul_last_ops;        /* ops of the last capture ended without a failure */
extern int emul_last_kernels;    /* ... of which kernels (not copies or memsets) */
extern struct ek_dev *emul_last_dev;   /* the device ek_open handed out last */
extern long emul_actq_calls, emul_moe_q_calls;   /* input quantizations enqueued */
extern long emul_obs_calls;      /* ek_obs_amax, ek_obs_rows, ek_moe_obs enqueued */
extern long emul_moe_a8_calls;   /* ek_moe_a8 (FP8-input experts) enqueued */

#endif
