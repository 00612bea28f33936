/* AMX, Intel's matrix tiles (Sapphire Rapids and later), for the block formats' products of
 * qlinear.c on calls of many rows (prompt chunks, batches of sequences), where the path is built
 * with SPECDECODE_AMX (on the other paths this unit is empty). The formats: qformats.h.
 *
 * One TDPBSSD forms a block's integer sums for AMX_ROWS rows of x and one panel of VL output
 * rows: tile A holds the rows' rounded x (AMX_ROWS x 32 signed bytes), tile B the panel's weights
 * as signed bytes in the layout the packing already has (4 consecutive k per lane: B's row g is
 * the unpacked vector of group g), tile C the AMX_ROWS x VL sums. Weights are centred on the way
 * into B (u - offset: Q8_0's u - 128 is its signed q, the 4/5/6-bit u - 8/16/32 stay within a
 * byte), which is exactly what the vector tile takes off afterwards. Q6_K's and Q3_K's two scales
 * per block take two products of 16 k each.
 *
 * The integer sums are the vector tile's exactly (integers have no order to change) and the fp32
 * steps after them are the same operations in the same order, so every row's result is bitwise
 * what the vector tile of the same path gives: which tile a call takes, by its number of rows,
 * changes nothing a token sees. A block's sums still have to be scaled in fp32 one row at a time,
 * and that, not the products, bounds these calls.
 *
 * Linux grants a process the tiles' register state only when asked (arch_prctl); where it is
 * not granted, every call takes the vector tile.
 */
#ifdef SPECDECODE_AMX
#include <stdatomic.h>
#include <sys/syscall.h>
#include <stdlib.h>
#include <unistd.h>

#include "qformats.h"
#include "threads.h"

#define AMX_ROWS 16 /* rows of x in one product: a tile's rows */
/* Calls of fewer rows take the vector tile, as fast or faster for them. The K formats' vector
 * tiles and stream keep up longer (measured on an Intel Xeon with the Qwen2.5-Coder pair's and
 * SmolLM2's formats: docs/benchmarks/kernel-paths) */
int amx_min_rows(int format) { return blocks_per_super(format) > 1 ? 64 : 32; }
/* products formed before the first one's sums are read (a product, the store of its sums and
 * their loads follow each other with long latencies): tiles 0..3 hold their sums, and x and the
 * weights alternate between tiles 4, 5 and 6, 7 */
#define IN_FLIGHT 4
/* panels whose unpacked weights a thread holds at once (32 KB per 64 inputs: within its L2 up to
 * 4096 inputs), so that a tile of rows, read once, meets all of them */
#define WEIGHT_PANELS 8

/* a tile of rounded x: AMX_ROWS rows' block of 32, with their scales (`struct xblock`'s d, dsum) */
struct xtile {
    int8_t q[AMX_ROWS][BLOCK];
    float d[AMX_ROWS], dsum[AMX_ROWS];
};

/* what LDTILECFG reads: per tile, its rows and bytes per row */
struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t bytes_per_row[16];
    uint8_t rows[16];
};

/* 1 once the OS has granted this process the tile state; asked once (the request is idempotent,
 * so threads racing here all get the same answer) */
int amx_usable(void) {
    static atomic_int granted = -1;
    int answer = atomic_load_explicit(&granted, memory_order_relaxed);
    if (answer < 0) {
        const long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
        answer = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
        atomic_store_explicit(&granted, answer, memory_order_relaxed);
    }
    return answer;
}

/* product I (< products) of the blocks from b: tile I = x tile X . weights tile W (literal
 * digits: the intrinsics take tile numbers as such), its sums stored */
#define PRODUCT(I, X, W) \
    if ((I) < products) { \
        _tile_zero(I); \
        _tile_loadd(X, x[b + (I) / H].q[0] + (I) % H * K, BLOCK); \
        _tile_loadd(W, weights[b + (I) / H][(I) % H * K / 4], 4 * VL); \
        _tile_dpbssd(I, X, W); \
        _tile_stored(I, sums[I], 4 * VL); \
    }

struct amx_job {
    const struct xtile *tiles; /* [row tiles][blocks]: the rows past T zero */
    const uint8_t *w;
    float *y;
    int64_t T, I, O;
    atomic_int failed; /* set by any thread whose unpacking buffer could not be allocated */
};

struct amx_rounding {
    const float *x;
    struct xtile *tiles;
    int64_t count, blocks; /* blocks of 32 in all, in a row */
};

/* each block of x rounded as the vector tile rounds it (quantize_block), into its tile */
static void amx_round_task(void *context, int thread, int threads) {
    const struct amx_rounding *job = context;
    long long begin, end;
    share(job->count, thread, threads, &begin, &end);
    for (long long r = begin; r < end; r++) {
        const int64_t t = r / job->blocks, b = r % job->blocks;
        struct xblock rounded;
        quantize_block(job->x + r * BLOCK, &rounded);
        struct xtile *tile = &job->tiles[t / AMX_ROWS * job->blocks + b];
        memcpy(tile->q[t % AMX_ROWS], rounded.q, BLOCK);
        tile->d[t % AMX_ROWS] = rounded.d, tile->dsum[t % AMX_ROWS] = rounded.dsum;
    }
}

/* this thread's share of the output panels for every row of x */
ALWAYS_INLINE void amx_share(struct amx_job *job, int thread, int threads, const int f) {
    const int64_t T = job->T, I = job->I, O = job->O, P = (O + VL - 1) / VL, blocks = I / BLOCK;
    const int64_t per_super = blocks_per_super(f), supers = blocks / per_super;
    const int H = halves(f), K = BLOCK / H, span = IN_FLIGHT / H; /* k per product; blocks */
    struct tile_config config = {.palette = 1};
    for (int i = 0; i < IN_FLIGHT; i++)
        config.rows[i] = AMX_ROWS, config.bytes_per_row[i] = 4 * VL;
    for (int i = 0; i < 2; i++) {
        config.rows[4 + i] = AMX_ROWS, config.bytes_per_row[4 + i] = (uint16_t)K;
        config.rows[6 + i] = (uint8_t)(K / 4), config.bytes_per_row[6 + i] = 4 * VL;
    }
    /* WEIGHT_PANELS panels' weights, every block unpacked and centred once for all the tiles of
       rows: panel n's block b is weights[n * blocks + b], its row g group g's 4 k per lane
       (Q6_K: rows 0..3 the first half); each tile of rows then meets all of them in turn */
    int8_t (*unpacked)[BLOCK / 4][4 * VL] =
        aligned_alloc(64, (size_t)(WEIGHT_PANELS * blocks) * BLOCK * VL);
    if (!unpacked) {
        atomic_store_explicit(&job->failed, 1, memory_order_relaxed);
        return;
    }
    _Alignas(64) int32_t sums[IN_FLIGHT][AMX_ROWS][VL];
    const vi centre = vbytes((uint8_t)offset(f));
    _tile_loadconfig(&config);
    long long begin, end;
    share(P, thread, threads, &begin, &end);
    for (int64_t p0 = begin; p0 < end; p0 += WEIGHT_PANELS) {
        const int64_t panels = end - p0 < WEIGHT_PANELS ? end - p0 : WEIGHT_PANELS;
        for (int64_t n = 0; n < panels; n++)
            for (int64_t b = 0; b < blocks; b++) {
                const int64_t j = b % per_super;
                const uint8_t *s = job->w + ((p0 + n) * supers + b / per_super) * super_bytes(f);
                const uint8_t *quants = s + VL * header_bytes(f) + j * VL * payload_bytes(f);
                for (int g = 0; g < 4; g++) {
                    vi lo, hi;
                    group(f, quants, g, &lo, &hi);
                    SI(storeu)((void *)unpacked[n * blocks + b][g], X86(sub_epi8)(lo, centre));
                    SI(storeu)((void *)unpacked[n * blocks + b][4 + g], X86(sub_epi8)(hi, centre));
                }
            }
        for (int64_t r = 0; r < T; r += AMX_ROWS)
            for (int64_t n = 0; n < panels; n++) {
                const int64_t p = p0 + n;
                const struct xtile *x = job->tiles + r / AMX_ROWS * blocks;
                int8_t (*weights)[BLOCK / 4][4 * VL] = unpacked + n * blocks;
                vf acc[AMX_ROWS];
                for (int t = 0; t < AMX_ROWS; t++) acc[t] = vzero();
                /* the block's scales, read once a block (Q6_K's two products share them), from
                   its super-block's fp16 factors, converted once a super-block */
                vf d = vzero(), m = vzero(), D[2], w0 = vzero();
                for (int64_t b = 0; b < blocks; b += span) {
                    const int c = blocks - b < span ? (int)(blocks - b) : span, products = c * H;
                    PRODUCT(0, 4, 6) PRODUCT(1, 5, 7) PRODUCT(2, 4, 6) PRODUCT(3, 5, 7)
                    for (int first = 0; first < products; first += H) { /* a block's products */
                        const int64_t block = b + first / H, j = block % per_super;
                        const uint8_t *s =
                            job->w + (p * supers + block / per_super) * super_bytes(f);
                        if (j == 0) super_scales(f, s, &d, &m);
                        scales_of(f, s, j, d, m, D, &w0);
                        for (int h = 0; h < H; h++) {
                            const int i = first + h;
                            for (int t = 0; t < AMX_ROWS; t++) {
                                const vi sum = viload((const uint8_t *)sums[i][t]);
                                acc[t] = vfma(vcvt(sum), vmul(D[h], vset1(x[block].d[t])), acc[t]);
                                if (has_w0(f)) acc[t] = vfma(w0, vset1(x[block].dsum[t]), acc[t]);
                            }
                        }
                    }
                }
                const int64_t o = p * VL;
                const int lanes = O - o < VL ? (int)(O - o) : VL;
                for (int t = 0; t < AMX_ROWS && r + t < T; t++)
                    vstore_first(job->y + (r + t) * O + o, acc[t], lanes);
            }
    }
    _tile_release();
    free(unpacked);
}

#define AMX_TASK(F, ...) \
    static void amx_task_##F(void *job, int thread, int threads) { \
        amx_share(job, thread, threads, F); \
    }
#define AMX_TASK_ENTRY(F, ...) amx_task_##F,
BLOCK_FORMATS(AMX_TASK)
static const task_fn AMX_TASKS[FORMATS] = {BLOCK_FORMATS(AMX_TASK_ENTRY)};

/* linear_quant in matrix tiles */
int amx_linear(const float *x, const uint8_t *w, float *y, int64_t T, int64_t I, int64_t O,
               int format, int threads) {
    const int64_t blocks = I / BLOCK, tiles = (T + AMX_ROWS - 1) / AMX_ROWS * blocks;
    struct xtile *rounded = aligned_alloc(64, sizeof *rounded * (size_t)tiles);
    if (!rounded) return 2;
    memset(rounded, 0, sizeof *rounded * (size_t)tiles);
    struct amx_rounding rounding = {x, rounded, T * blocks, blocks};
    run_parallel(threads, amx_round_task, &rounding);
    struct amx_job job = {rounded, w, y, T, I, O, 0};
    run_parallel(threads, AMX_TASKS[format], &job);
    free(rounded);
    return atomic_load_explicit(&job.failed, memory_order_relaxed) ? 2 : 0; /* threads joined */
}

#endif
