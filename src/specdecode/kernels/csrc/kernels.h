/* The functions the kernel library exports: the one list the Python side (`kernels/build.py`)
 * reads its ctypes signatures from. Keep one prototype per statement.
 *
 * The contract every instruction-set path keeps: a row's result is bitwise the same whatever
 * other rows share the call (a token scored alone, in a verification step or in a prefill), so
 * speculative and plain greedy decoding stay token-identical. Paths may differ from each other in
 * the last bits (vector width sets the order of the reductions); each is exact with itself.
 *
 * Return 0 on success, 1 for arguments the kernel does not take, 2 when its scratch memory
 * cannot be allocated; after a failure its outputs are not to be used.
 */
#ifndef SPECDECODE_KERNELS_H
#define SPECDECODE_KERNELS_H
#include <stdint.h>

/* The instruction set compiled in ("avx512amx", "avx512vnni", "avx512", "avx2vnni", "avx2",
 * "neondot", "neon", "generic"). */
const char *kernel_isa(void);
/* How rows are spread over threads: "OpenMP" or "pthreads". */
const char *kernel_threading(void);
/* fp32 lanes of one vector: the output rows of a packed weight panel. */
int kernel_lanes(void);

/* y = x @ w.T. x: [T, I] fp32; y: [T, O] fp32; w packed in panels of `kernel_lanes()` output
 * rows, [ceil(O / lanes)][I][lanes], the rows past O zero; fp32, bf16 or fp16 (widened to fp32). */
int linear_f32(const float *x, const float *w, float *y, int64_t T, int64_t I, int64_t O,
               int threads);
int linear_bf16(const float *x, const uint16_t *w, float *y, int64_t T, int64_t I, int64_t O,
                int threads);
int linear_f16(const float *x, const uint16_t *w, float *y, int64_t T, int64_t I, int64_t O,
               int threads);
/* The same for w in one of GGUF's block formats, packed as qlinear.c describes, in integer dot
 * products with x rounded to 8 bits per block of 32 (each row alone); I a multiple of the
 * format's block (32, or 256 for the K formats). */
int linear_quant(const float *x, const uint8_t *w, float *y, int64_t T, int64_t I, int64_t O,
                 int format, int threads);
/* The GGUF name of block format number `format` ("Q4_K", ..), NULL past the last. */
const char *kernel_format(int format);

/* Runs `iterations` rounds of 8 independent `vdot4` (the block formats' integer dot product) on
 * each of `threads` threads, touching no memory, and returns the multiply-adds done (0 for bad
 * arguments): the caller's clock over it is the path's instruction peak (peak.c). */
int64_t kernel_peak(int64_t iterations, int threads);
/* Reads the `bytes` at data (a multiple of 4) on `threads` threads, each its share in order, and
 * returns the sum of its 32-bit words modulo 2^32 (-1 for bad arguments): the caller's clock over
 * a buffer far larger than the caches is the path's read peak, the bandwidth floor (peak.c). */
int64_t kernel_read(const uint8_t *data, int64_t bytes, int threads);

/* Rotary embedding, KV-cache write and softmax attention of decoder layer `layer` for the new
 * rows of S sequences, each against its own cache. qkv: [T, (H + 2 G) d], T = the sum of
 * rows[s], sequence s's rows after those of the sequences before it, q and k rotated in place;
 * caches_k[s], caches_v[s]: [layers, G, capacity[s], d], fp16 if kv_f16 is 1, else fp32, its new
 * k and v written (rounded to fp16 if so) in the layer's part at starts[s]..starts[s]+rows[s]-1;
 * masks[s]: [rows[s], starts[s] + rows[s]] bytes, 1 where a row may attend, or NULL for causal;
 * cos, sin: [rope_rows, d]; positions: [T], each in [0, rope_rows) (else 1, before any write);
 * window: a row sees only keys less than `window` positions behind its own (0: all); scale: the
 * scores' factor (1 / sqrt(d) mostly); out: [T, H d]. d must be a multiple of 16. */
int attention(float *qkv, void *const *caches_k, void *const *caches_v,
              const int64_t *capacity, const int64_t *starts, const int64_t *rows,
              const uint8_t *const *masks, int64_t S, int64_t layer, const float *cos,
              const float *sin, int64_t rope_rows, const int64_t *positions, float *out,
              int64_t H, int64_t G, int64_t d, int64_t window, float scale, int kv_f16,
              int threads);

/* The contract between these kernels and Python, stated here once: Python reads these constants
 * from this header (build.constants), as it reads the prototypes.
 *
 * Calls of up to ROW_INVARIANT_ROWS rows per sequence are row-invariant on every path: a row's
 * numbers are the same whatever else the call holds (decoding and verification steps); longer
 * calls are prompt prefills, which every method computes alike. */
#define ROW_INVARIANT_ROWS 64
/* the kind of a matrix part in a stack record: fp32, bf16 or fp16 panels, or PART_BLOCKS + f for
 * block format f (packed for `linear_quant`) */
enum part_kind { PART_F32 = 0, PART_BF16 = 1, PART_F16 = 2, PART_BLOCKS = 16 };

/* The decoder layers `layers[0..n_layers-1]` (indices into `stack`) of a model on its residual
 * stream x: [T, hidden], updated in place (layers.c); the caches and rows as for `attention`,
 * which each layer calls with its own index. Every sequence has at most ROW_INVARIANT_ROWS rows
 * (a call with more is refused). cos[i], sin[i]
 * for i < tables: the rotary tables a layer may name, each [rope_rows, d].
 * stack: STACK_HEADER numbers (hidden, heads H, KV heads G, head size d, the MLP's inner size,
 * the number of layer records: a `layers` entry outside them is refused; the activation, 0 SwiGLU
 * or 1 GeGLU (tanh form); attention's score scale as the bits of an fp32 number),
 * then LAYER_RECORD numbers per layer: the addresses of the fp32 weights of its norms, 0 where it
 * has none: before attention, on attention's output, before the MLP (required), on the MLP's
 * output, on each q head and on each k head (both or neither); its attention window (0: none); the
 * index of its rotary tables; then MATRIX_RECORD numbers for each of qkv, out, gate_up and down:
 * in features, parts (1..MAX_PARTS, stacked by rows), the address of an fp32 bias (0: none), out
 * features, then per part its kind (`part_kind`), its rows and its data's address. */
#define STACK_HEADER 8
#define MAX_PARTS 3
#define MATRIX_RECORD (4 + 3 * MAX_PARTS)
#define LAYER_RECORD (8 + 4 * MATRIX_RECORD)
int decoder_layers(float *x, int64_t T, const int64_t *stack, const int64_t *layers,
                   int64_t n_layers, void *const *caches_k, void *const *caches_v,
                   const int64_t *capacity, const int64_t *starts, const int64_t *rows,
                   const uint8_t *const *masks, int64_t S, const float *const *cos,
                   const float *const *sin, int64_t tables, int64_t rope_rows,
                   const int64_t *positions, float eps, int kv_f16, int threads);

/* out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w; x, out: [T, H]; H a multiple of 16. */
int rms_norm(const float *x, const float *w, float *out, int64_t T, int64_t H, float eps);

/* Each of the H q heads and G k heads of qkv: [T, (H + 2 G) d] normed in place as rms_norm norms
 * a row, by q_w: [d] and k_w: [d] (Qwen3's and Gemma's q/k norms, before the rotary embedding);
 * d a multiple of 16. */
int head_norm(float *qkv, const float *q_w, const float *k_w, int64_t T, int64_t H, int64_t G,
              int64_t d, float eps);

/* out[t] = silu(gate) * up where gate_up[t] = [gate; up]: [T, 2 I] -> [T, I]; I a multiple of 16. */
int silu_mul(const float *gate_up, float *out, int64_t T, int64_t I);

/* out[t] = gelu(gate) * up, gelu's tanh form (GeGLU); as silu_mul otherwise. */
int gelu_mul(const float *gate_up, float *out, int64_t T, int64_t I);

#endif
