/* y = x @ w.T for weights in GGUF's block formats, in integer dot products, any instruction set
 * (simd.h).
 *
 * The arithmetic is llama.cpp's, at a finer grain for x: each row of x is rounded per block of 32
 * values to 8 bits, x ~ dx qx with dx = max|x| / 127 and qx in [-127, 127]; a weight is
 * w = D u + w0 with u an unsigned integer of the format's bits, D and w0 per (sub-)block; so a
 * block's share of a product is
 *     sum(w x) ~ dx (D sum(u qx) + w0 sum(qx)),
 * sum(u qx) exact in 32-bit integers (vdot4), the rest in fp32. x is rounded row by row and the
 * integer sums have no order to change, so a row's result is bitwise the same whatever other rows
 * share the call.
 *
 * Formats: u's bits, and D and w0 of each block of 32 (the K formats keep d, dmin per 256):
 *   Q8_0  8 (q + 128)  D = d       w0 = -128 d
 *   Q4_0  4            D = d       w0 = -8 d
 *   Q4_1  4            D = d       w0 = m
 *   Q5_0  5            D = d       w0 = -16 d
 *   Q5_1  5            D = d       w0 = m
 *   Q4_K  4            D = d sc    w0 = -dmin mn      (sc, mn: 6-bit integers per 32)
 *   Q5_K  5            as Q4_K
 *   Q6_K  6            D = d sc    w0 = -32 d sc      (sc: a signed byte per 16)
 *   Q3_K  3            D = d sc    w0 = -4 d sc       (sc: a signed 6-bit integer per 16)
 * A w0 that is an integer multiple of D (the "offset" below) is taken off the integer sum.
 *
 * Packed layout (kernels/native.py makes it): per panel of VL output rows and per super-block
 * (32 values, or 256 for the K formats), a header of the lanes' scales, then per block of 32:
 *   the low 4 bits of u, 4 vectors of VL lanes x 4 bytes: vector g, lane i, byte j holds
 *     u[4g + j] in its low and u[16 + 4g + j] in its high nibble (Q8_0: 8 vectors of whole
 *     bytes, u[4g + j] in vector 2g and u[16 + 4g + j] in vector 2g + 1);
 *   5 bits: one vector of fifth bits, byte j of lane i holding that of u[4g + j] at bit g and
 *     that of u[16 + 4g + j] at bit 4 + g;
 *   6 bits: two vectors of the top two bits, of u[4g + j] and of u[16 + 4g + j], at bits 2g, 2g+1;
 *   3 bits: instead of the 4 vectors of low nibbles, two of the low two bits, of u[4g + j] and
 *     of u[16 + 4g + j], at bits 2g, 2g + 1, then one vector of the third bits as the 5-bit
 *     formats keep their fifth (bit g, bit 4 + g).
 * A lane's 4 bytes are then 4 consecutive k of one output row, and vdot4 takes x's 4 bytes
 * broadcast. Headers, VL numbers each: d (fp16); Q4_1, Q5_1: m (fp16); K formats: d, dmin
 * (fp16), sc[8], mn[8] (bytes); Q6_K, Q3_K: d (fp16), sc[16] (signed bytes).
 */
#include <math.h>
#include <stdlib.h>

#include "kernels.h"
#include "simd.h"
#include "threads.h"

/* the K formats (256 values a super-block) from Q4_K on */
enum format { Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q3_K, FORMATS };
static const char *const FORMAT_NAMES[FORMATS] = {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                                                  "Q4_K", "Q5_K", "Q6_K", "Q3_K"};
#define BLOCK 32 /* values of x per scale dx, and of w per D */

/* a format's facts (constants once the format is) */
ALWAYS_INLINE int bits(int f) {
    return f == Q8_0  ? 8
           : f == Q6_K ? 6
           : f == Q3_K ? 3
           : f == Q5_0 || f == Q5_1 || f == Q5_K ? 5 : 4;
}
ALWAYS_INLINE int blocks_per_super(int f) { return f >= Q4_K ? 8 : 1; }
#ifdef VDOT4_CENTERED /* the instruction set dots Q8_0's (u - 128) x directly */
#define Q8_OFFSET 0
#else
#define Q8_OFFSET 128
#endif
ALWAYS_INLINE int offset(int f) {
    return f == Q8_0   ? Q8_OFFSET
           : f == Q4_0 ? 8
           : f == Q5_0 ? 16
           : f == Q6_K ? 32
           : f == Q3_K ? 4 : 0;
}
ALWAYS_INLINE int has_w0(int f) { return f == Q4_1 || f == Q5_1 || f == Q4_K || f == Q5_K; }
ALWAYS_INLINE int halves(int f) { return f == Q6_K || f == Q3_K ? 2 : 1; } /* D per block of 32 */
/* bytes per lane: a super-block's header, a block's quants */
ALWAYS_INLINE int header_bytes(int f) {
    return f == Q4_K || f == Q5_K ? 20 : f == Q6_K || f == Q3_K ? 18 : has_w0(f) ? 4 : 2;
}
ALWAYS_INLINE int payload_bytes(int f) { return bits(f) == 8 ? 32 : 16 + 4 * (bits(f) - 4); }
ALWAYS_INLINE int64_t super_bytes(int f) {
    return (int64_t)VL * (header_bytes(f) + blocks_per_super(f) * payload_bytes(f));
}

/* the fp16 factors of the super-block whose header is at s, in fp32: d, and m (the K formats'
 * dmin, Q4_1 and Q5_1's m; zero where the format has none). A K format's 8 blocks share them:
 * converted once a super-block, not once a block (a 1-row Q4_K call's blocks are otherwise
 * worth a tenth of their instructions in conversions) */
ALWAYS_INLINE void super_scales(const int f, const uint8_t *s, vf *d, vf *m) {
    *d = vload_f16((const uint16_t *)s);
    *m = has_w0(f) ? vload_f16((const uint16_t *)(s + 2 * VL)) : vzero();
}

/* D (per half block) and w0 of block j of the super-block whose header is at s and whose d and m
 * super_scales read */
ALWAYS_INLINE void scales_of(const int f, const uint8_t *s, int64_t j, vf d, vf m, vf D[2],
                             vf *w0) {
    if (f == Q4_K || f == Q5_K) {
        D[0] = D[1] = vmul(d, vload_u8(s + (4 + j) * VL));
        *w0 = vsub(vzero(), vmul(m, vload_u8(s + (12 + j) * VL)));
    } else if (f == Q6_K || f == Q3_K) {
        D[0] = vmul(d, vload_s8((const int8_t *)s + (2 + 2 * j) * VL));
        D[1] = vmul(d, vload_s8((const int8_t *)s + (3 + 2 * j) * VL));
        *w0 = m;
    } else {
        D[0] = D[1] = d;
        *w0 = m;
    }
}

ALWAYS_INLINE vi shift_bits(vi a, int n) {
    return n > 0 ? vshl_bits(a, n) : n < 0 ? vshr_bits(a, -n) : a;
}

/* u of k = 4g..4g+3 (lo) and of k = 16+4g..16+4g+3 (hi) in the block whose quants are at b */
ALWAYS_INLINE void group(const int f, const uint8_t *b, const int g, vi *lo, vi *hi) {
    const int64_t vector = 4 * VL;
    if (bits(f) == 8) {
        *lo = viload(b + 2 * g * vector);
        *hi = viload(b + (2 * g + 1) * vector);
        return;
    }
    if (bits(f) == 3) {
        const vi low2 = vbytes(3), third = viload(b + 2 * vector), bit2 = vbytes(4);
        *lo = vi_or(vi_and(shift_bits(viload(b), -2 * g), low2),
                    vi_and(shift_bits(third, 2 - g), bit2));
        *hi = vi_or(vi_and(shift_bits(viload(b + vector), -2 * g), low2),
                    vi_and(shift_bits(third, -2 - g), bit2));
        return;
    }
    const vi nibbles = viload(b + g * vector), low4 = vbytes(15);
    *lo = vi_and(nibbles, low4);
    *hi = vi_and(vshr_bits(nibbles, 4), low4);
    if (bits(f) == 5) {
        const vi fifth = viload(b + 4 * vector), bit4 = vbytes(16);
        *lo = vi_or(*lo, vi_and(shift_bits(fifth, 4 - g), bit4));
        *hi = vi_or(*hi, vi_and(shift_bits(fifth, -g), bit4));
    } else if (bits(f) == 6) {
        const vi bits45 = vbytes(0x30);
        *lo = vi_or(*lo, vi_and(shift_bits(viload(b + 4 * vector), 4 - 2 * g), bits45));
        *hi = vi_or(*hi, vi_and(shift_bits(viload(b + 5 * vector), 4 - 2 * g), bits45));
    }
}

ALWAYS_INLINE vi dot(const int f, vi acc, vi u, vi x) {
#ifdef VDOT4_CENTERED
    if (bits(f) == 8) return vdot4_centered(acc, u, x);
#endif
    return bits(f) == 8 ? vdot4_u8(acc, u, x) : vdot4(acc, u, x);
}

/* acc + the dot products of u[g] and the 4 bytes of x at q + 4 g, g = 0..3, exactly. Where the
 * instruction set sums byte pairs in 16 bits (VDOT_PAIRS16), the pairs of as many groups as stay
 * below 2^15 are summed there before one widening: |u x0 + u x1| <= 2 * 127 u, so 4 groups for
 * u < 32, 2 for u < 64 (Q6_K); the integer sums are the same, so the results are bitwise those
 * of vdot4 one group at a time. */
ALWAYS_INLINE vi dots(const int f, vi acc, const vi u[4], const int8_t *q) {
#ifdef VDOT_PAIRS16
    if (bits(f) <= 6) {
        const int run = bits(f) == 6 ? 2 : 4;
        for (int g = 0; g < 4; g += run) {
            vi s = vdot2_16(u[g], vbroadcast4(q + 4 * g));
            for (int k = g + 1; k < g + run; k++)
                s = vadd16(s, vdot2_16(u[k], vbroadcast4(q + 4 * k)));
            acc = vwiden16(acc, s);
        }
        return acc;
    }
#endif
    for (int g = 0; g < 4; g++) acc = dot(f, acc, u[g], vbroadcast4(q + 4 * g));
    return acc;
}

/* a block of 32 values of a row of x, rounded: x ~ d q; sum: of all q, of the first and of the
 * last 16; dsum = d sum[0] (what the block's w0 is multiplied with) */
struct xblock {
    float d, dsum;
    int32_t sum[3];
    int8_t q[BLOCK];
};

/* one block: the same operations for every row (vector max, multiply, round half to even: what
 * lrintf does), so a row's bytes do not depend on what else is quantized with it. The sums are of
 * small integers, exact in fp32 in any order; they and the bytes stay in locals, which no store
 * to the block's bytes can alias (a char store may alias anything: through `b` it would make
 * every sum a load and a store). */
static void quantize_block(const float *v, struct xblock *b) {
    _Static_assert(16 % VL == 0, "a vector lies within one half of a block");
    vf most = vzero();
    for (int k = 0; k < BLOCK; k += VL) {
        const vf a = vload(v + k);
        most = vmax(most, vmax(a, vsub(vzero(), a)));
    }
    float lanes[VL], amax = 0, rounded[BLOCK];
    vstore(lanes, most);
    for (int i = 0; i < VL; i++) amax = lanes[i] > amax ? lanes[i] : amax; /* exact in any order */
    const vf inverse = vset1(amax > 0 ? 127 / amax : 0);
    vf halves[2] = {vzero(), vzero()};
    for (int k = 0; k < BLOCK; k += VL) {
        const vf r = vround(vmul(vload(v + k), inverse));
        vstore(rounded + k, r);
        halves[k / 16] = vadd(halves[k / 16], r);
    }
    const float lo = vsum(halves[0]), hi = vsum(halves[1]);
    if (isnan(lo + hi)) {
        /* a NaN or an infinity in the block (either rounds to NaN above: inf * 0, NaN * any):
         * converting it to int8 is undefined, so the block becomes zeros with a NaN scale, and
         * every output it reaches is NaN, as fp32 arithmetic would make it */
        memset(b->q, 0, sizeof b->q);
        b->d = b->dsum = NAN;
        b->sum[0] = b->sum[1] = b->sum[2] = 0;
        return;
    }
    int8_t q[BLOCK];
    for (int k = 0; k < BLOCK; k++) q[k] = (int8_t)rounded[k];
    memcpy(b->q, q, sizeof q);
    b->d = amax / 127;
    b->sum[1] = (int32_t)lo;
    b->sum[2] = (int32_t)hi;
    b->sum[0] = b->sum[1] + b->sum[2];
    b->dsum = b->d * (float)b->sum[0];
}

struct quantize_job {
    const float *x;
    struct xblock *out;
    int64_t count; /* blocks */
};

static void quantize_task(void *context, int thread, int threads) {
    const struct quantize_job *job = context;
    long long begin, end;
    share(job->count, thread, threads, &begin, &end);
    for (long long r = begin; r < end; r++) quantize_block(job->x + r * BLOCK, job->out + r);
}

/* the headers of the current super-block of a run of panels, and their fp32 factors */
struct supers {
    const uint8_t *headers[QMAX_PANELS];
    vf d[QMAX_PANELS], m[QMAX_PANELS];
};

/* The scales and quants of block b of panels p..p+nb-1: D (per half block), w0, and where its
 * packed quants start. `at` holds the block's super-block, read at its first block (b in order) */
ALWAYS_INLINE void panel_blocks(const int f, const int nb, const uint8_t *w, int64_t supers,
                                int64_t p, int64_t b, struct supers *at, vf D[][2], vf w0[],
                                const uint8_t *quants[]) {
    const int64_t j = b % blocks_per_super(f);
    for (int n = 0; n < nb; n++) {
        if (j == 0) {
            at->headers[n] = w + ((p + n) * supers + b / blocks_per_super(f)) * super_bytes(f);
            super_scales(f, at->headers[n], &at->d[n], &at->m[n]);
        }
        scales_of(f, at->headers[n], j, at->d[n], at->m[n], D[n], &w0[n]);
        quants[n] = at->headers[n] + VL * header_bytes(f) + j * VL * payload_bytes(f);
    }
}

/* where the integer sum of half h (lo, hi) of a row's block starts: minus the format's offset
 * times the sum of that half's q (of the whole block's, in lo, where the format has one scale a
 * block), so that the dot products finish it. The same integer as subtracting the offset after
 * them, one instruction a sum fewer (BENCHMARKS.md, twelfth session: Q6_K and Q4_0 calls). */
ALWAYS_INLINE vi sum_start(const int f, const struct xblock *xb, int h) {
    if (!offset(f) || (halves(f) == 1 && h)) return viset1(0);
    return viset1(-offset(f) * xb->sum[halves(f) == 1 ? 0 : 1 + h]);
}

/* acc plus a block's share (or a half's, where the format has two scales) for one row: D dx (its
 * integer sum, started at sum_start), plus w0 dsum. Every tile adds a row's blocks in this one
 * way, so the row's result does not depend on which tile computed it. */
ALWAYS_INLINE vf scaled(const int f, vf acc, vi isum, vf D, vf w0, const struct xblock *xb) {
    acc = vfma(vcvt(isum), vmul(D, vset1(xb->d)), acc);
    return has_w0(f) ? vfma(w0, vset1(xb->dsum), acc) : acc;
}

/* block b's share of the `ahead` bytes at `next` asked into L2 (see tile): as many bytes as
 * the nb panels' block b occupies, a constant number of lines (a count known when compiling:
 * the loop unrolls, where a computed share cost an eighth of a 1-row call in loop overhead) */
ALWAYS_INLINE void prefetch_share(const int f, const int nb, const uint8_t *next, int64_t ahead,
                                  int64_t b) {
    if (!next) return;
    const int64_t share = nb * super_bytes(f) / blocks_per_super(f), start = b * share;
    for (int64_t byte = 0; byte < share; byte += 64)
        if (start + byte < ahead) __builtin_prefetch(next + start + byte, 0, 2);
}

/* a tile's fp32 sums: zeroed, and stored to rows 0..rows-1 of y (the panels' lanes that exist) */
ALWAYS_INLINE void zero_sums(vf acc[][QMAX_PANELS], int rows, int nb) {
    for (int t = 0; t < rows; t++)
        for (int n = 0; n < nb; n++) acc[t][n] = vzero();
}
ALWAYS_INLINE void store_sums(vf acc[][QMAX_PANELS], int rows, int nb, float *y, int64_t O,
                              int64_t p) {
    for (int n = 0; n < nb; n++) {
        const int64_t o = (p + n) * VL;
        const int lanes = O - o < VL ? (int)(O - o) : VL;
        for (int t = 0; t < rows; t++) vstore_first(y + t * O + o, acc[t][n], lanes);
    }
}

#ifdef VDOT_PAIRS16
/* a tile's integer sums of block b (isum[half][row][panel], zero on entry) where byte pairs are
 * summed in 16 bits: over runs of groups as in `dots`, widened once a run; a 4-bit format with one
 * scale per block sums lo and hi together, into isum[0] (|u x0 + u x1| <= 2 * 15 * 127, times 8 <
 * 2^15). The same integers as `dot` group by group, two instructions a group fewer. */
ALWAYS_INLINE void tile_sums16(const int f, const int rows, const int nb, const struct xblock *x,
                               int64_t blocks, int64_t b, const uint8_t *const quants[],
                               vi isum[2][QROWS_PER_TILE][QMAX_PANELS]) {
    const int run = bits(f) == 6 ? 2 : 4, both = bits(f) == 4 && halves(f) == 1;
    for (int g0 = 0; g0 < 4; g0 += run) {
        vi s[2][QROWS_PER_TILE][QMAX_PANELS];
        for (int h = 0; h < 2; h++)
            for (int t = 0; t < rows; t++)
                for (int n = 0; n < nb; n++) s[h][t][n] = viset1(0);
        for (int g = g0; g < g0 + run; g++)
            for (int n = 0; n < nb; n++) {
                vi lo, hi;
                group(f, quants[n], g, &lo, &hi);
                for (int t = 0; t < rows; t++) {
                    const int8_t *q = x[t * blocks + b].q;
                    const vi a = vdot2_16(lo, vbroadcast4(q + 4 * g));
                    const vi c = vdot2_16(hi, vbroadcast4(q + 16 + 4 * g));
                    s[0][t][n] = vadd16(s[0][t][n], a);
                    s[both ? 0 : 1][t][n] = vadd16(s[both ? 0 : 1][t][n], c);
                }
            }
        for (int t = 0; t < rows; t++)
            for (int n = 0; n < nb; n++)
                for (int h = 0; h < 2 - both; h++)
                    isum[h][t][n] = vwiden16(isum[h][t][n], s[h][t][n]);
    }
}
#endif

/* rows 0..rows-1 of x against panels p..p+nb-1 (rows, nb, f constants after inlining), for calls
 * of up to QROWS_PER_TILE rows: the rows' sums stay in registers. `next`:
 * the next `ahead` bytes of weights this thread will read (or NULL), requested a share per block
 * so that they arrive while this tile computes: from memory, the first tile of rows over a panel
 * group would otherwise wait for its weights, then compute, never both at once. They are asked
 * into L2, not L1 (locality 2): requests into L1 hold its few miss buffers and evict the tile's
 * own weights and x, and the tile then waits on both (BENCHMARKS.md, issue 28: streamed Q4_K at
 * 4 / 8 / 16 rows 25-35% faster). */
ALWAYS_INLINE void tile(const int f, const int rows, const int nb, const struct xblock *x,
                        const uint8_t *w, float *y, int64_t I, int64_t O, int64_t p,
                        const uint8_t *next, int64_t ahead) {
    const int64_t blocks = I / BLOCK, supers = blocks / blocks_per_super(f);
    vf acc[QROWS_PER_TILE][QMAX_PANELS];
    zero_sums(acc, rows, nb);
    struct supers at = {0}; /* filled at block 0 */
    for (int64_t b = 0; b < blocks; b++) {
        prefetch_share(f, nb, next, ahead, b);
        vf D[QMAX_PANELS][2], w0[QMAX_PANELS];
        const uint8_t *quants[QMAX_PANELS];
        panel_blocks(f, nb, w, supers, p, b, &at, D, w0, quants);
        /* both halves' sums in one pass over the quants: each group is unpacked once; lo and
         * hi in separate sums (two dependency chains of 4 dot products, not one of 8), added
         * exactly where the format has one scale per block */
        vi isum[2][QROWS_PER_TILE][QMAX_PANELS];
        for (int h = 0; h < 2; h++)
            for (int t = 0; t < rows; t++)
                for (int n = 0; n < nb; n++) isum[h][t][n] = sum_start(f, &x[t * blocks + b], h);
#ifdef VDOT_PAIRS16
        if (bits(f) <= 6)
            tile_sums16(f, rows, nb, x, blocks, b, quants, isum);
        else
#endif
            for (int g = 0; g < 4; g++)
                for (int n = 0; n < nb; n++) {
                    vi lo, hi;
                    group(f, quants[n], g, &lo, &hi);
                    for (int t = 0; t < rows; t++) {
                        const int8_t *q = x[t * blocks + b].q;
                        isum[0][t][n] = dot(f, isum[0][t][n], lo, vbroadcast4(q + 4 * g));
                        isum[1][t][n] = dot(f, isum[1][t][n], hi, vbroadcast4(q + 16 + 4 * g));
                    }
                }
        for (int t = 0; t < rows; t++)
            for (int n = 0; n < nb; n++) {
                const struct xblock *xb = &x[t * blocks + b];
                if (halves(f) == 1)
                    acc[t][n] = scaled(f, acc[t][n], viadd(isum[0][t][n], isum[1][t][n]),
                                       D[n][0], w0[n], xb);
                else
                    for (int h = 0; h < 2; h++)
                        acc[t][n] = scaled(f, acc[t][n], isum[h][t][n], D[n][h], w0[n], xb);
            }
    }
    store_sums(acc, rows, nb, y, O, p);
}

/* rows 0..rows-1 (up to STREAM_ROWS, any number) of x against panels p..p+nb-1, for calls of
 * more rows than a tile holds: each block of weights is unpacked once for all the rows (a tile
 * unpacks it again for every QROWS_PER_TILE rows, and its unpacking and scales cost about as
 * much as its dot products), and the rows' fp32 sums wait in L1 between blocks. A row gets the
 * same operations in the same order as in a tile: bitwise the same result. */
#define STREAM_ROWS 64
#ifndef QSTREAM_PANELS /* panels a stream unpacks at a time (an instruction set may set fewer) */
#define QSTREAM_PANELS QMAX_PANELS
#endif
ALWAYS_INLINE void stream(const int f, const int nb, const int rows, const struct xblock *x,
                          const uint8_t *w, float *y, int64_t I, int64_t O, int64_t p,
                          const uint8_t *next, int64_t ahead) {
    const int64_t blocks = I / BLOCK, supers = blocks / blocks_per_super(f);
    vf acc[STREAM_ROWS][QMAX_PANELS];
    zero_sums(acc, rows, nb);
    struct supers at = {0}; /* filled at block 0 */
    for (int64_t b = 0; b < blocks; b++) {
        prefetch_share(f, nb, next, ahead, b);
        vf D[QMAX_PANELS][2], w0[QMAX_PANELS];
        const uint8_t *quants[QMAX_PANELS];
        panel_blocks(f, nb, w, supers, p, b, &at, D, w0, quants);
        vi lo[QMAX_PANELS][4], hi[QMAX_PANELS][4];
        for (int n = 0; n < nb; n++)
            for (int g = 0; g < 4; g++) group(f, quants[n], g, &lo[n][g], &hi[n][g]);
        for (int t = 0; t < rows; t++) {
            const struct xblock *xb = &x[t * blocks + b];
            const vi start[2] = {sum_start(f, xb, 0), sum_start(f, xb, 1)}; /* every panel's */
            for (int n = 0; n < nb; n++) {
                /* lo and hi in separate sums (one per half where the format has two scales):
                 * two dependency chains of 4 dot products instead of one of 8 (measured: a
                 * single chain loses a quarter) */
                const vi isum[2] = {dots(f, start[0], lo[n], xb->q),
                                    dots(f, start[1], hi[n], xb->q + 16)};
                if (halves(f) == 1)
                    acc[t][n] = scaled(f, acc[t][n], viadd(isum[0], isum[1]), D[n][0], w0[n], xb);
                else
                    for (int h = 0; h < 2; h++)
                        acc[t][n] = scaled(f, acc[t][n], isum[h], D[n][h], w0[n], xb);
            }
        }
    }
    store_sums(acc, rows, nb, y, O, p);
}

struct qlinear_job {
    const struct xblock *x;
    const uint8_t *w;
    float *y;
    int64_t T, I, O;
};

/* `rows` rows against `nb` panels, both constants; nb <= QPANELS_FOR(rows) as in linear.c */
#define PANELS(ROWS, NB) case NB: \
    if (NB <= QMAX_PANELS && NB <= QPANELS_FOR(ROWS)) \
        tile(f, ROWS, NB, xr, job->w, yr, I, O, p, next, ahead); \
    break;
/* the switch below has cases for tiles of up to 8 rows and 4 panels */
_Static_assert(QROWS_PER_TILE <= 8 && QMAX_PANELS <= 4, "add cases to qlinear_share");
#define ROWS(R) case R: \
    if (R <= QROWS_PER_TILE) \
        switch (nb) { PANELS(R, 1) PANELS(R, 2) PANELS(R, 3) PANELS(R, 4) } \
    break;
#define STREAMED(NB) case NB: \
    if (NB <= QSTREAM_PANELS) stream(f, NB, n, xr, job->w, yr, I, O, p, next, ahead); \
    break;

/* this thread's share of the output panels, for every row of x */
ALWAYS_INLINE void qlinear_share(const struct qlinear_job *job, int thread, int threads,
                                 const int f) {
    const int64_t T = job->T, I = job->I, O = job->O, P = (O + VL - 1) / VL, blocks = I / BLOCK;
    const int streamed = T > QROWS_PER_TILE;
    const int64_t rows = streamed ? STREAM_ROWS : T < QROWS_PER_TILE ? T : QROWS_PER_TILE;
    const int64_t group = streamed ? QSTREAM_PANELS : QPANELS_FOR(rows);
    long long begin, end;
    share(P, thread, threads, &begin, &end);
    const int64_t panel_bytes = blocks / blocks_per_super(f) * super_bytes(f);
    for (int64_t p = begin; p < end; p += group) {
        const int nb = p + group <= end ? (int)group : (int)(end - p);
        const int64_t ahead = (end - p - nb < group ? end - p - nb : group) * panel_bytes;
        for (int64_t r = 0; r < T; r += rows) {
            const struct xblock *xr = job->x + r * blocks;
            float *yr = job->y + r * O;
            /* the first tile of rows brings the next panel group's weights in */
            const uint8_t *next = r == 0 && ahead > 0 ? job->w + (p + nb) * panel_bytes : NULL;
            const int n = T - r < rows ? (int)(T - r) : (int)rows;
            if (streamed) {
                switch (nb) { STREAMED(1) STREAMED(2) STREAMED(3) STREAMED(4) }
            } else {
                switch (n) { ROWS(1) ROWS(2) ROWS(3) ROWS(4) ROWS(5) ROWS(6) ROWS(7) ROWS(8) }
            }
        }
    }
}

#define TASK(F) \
    static void task_##F(void *job, int thread, int threads) { qlinear_share(job, thread, threads, F); }
TASK(Q8_0) TASK(Q4_0) TASK(Q4_1) TASK(Q5_0) TASK(Q5_1) TASK(Q4_K) TASK(Q5_K) TASK(Q6_K)
TASK(Q3_K)
static const task_fn TASKS[FORMATS] = {task_Q8_0, task_Q4_0, task_Q4_1, task_Q5_0, task_Q5_1,
                                       task_Q4_K, task_Q5_K, task_Q6_K, task_Q3_K};

#ifdef SPECDECODE_AMX
#include "isa/amx.h" /* amx_linear: the same products in matrix tiles, for calls of many rows */
#endif

const char *kernel_format(int format) {
    return format >= 0 && format < FORMATS ? FORMAT_NAMES[format] : NULL;
}

int linear_quant(const float *x, const uint8_t *w, float *y, int64_t T, int64_t I, int64_t O,
                 int format, int threads) {
    if (T < 1 || format < 0 || format >= FORMATS) return 1;
    if (I % (BLOCK * blocks_per_super(format))) return 1;
#ifdef SPECDECODE_AMX
    if (T >= amx_min_rows(format) && amx_usable())
        return amx_linear(x, w, y, T, I, O, format, threads);
#endif
    struct xblock *xq = malloc(sizeof *xq * (size_t)(T * (I / BLOCK)));
    if (!xq) return 2;
    struct quantize_job rounding = {x, xq, T * (I / BLOCK)};
    /* a few rows take less than waking the threads */
    run_parallel(T > QROWS_PER_TILE ? threads : 1, quantize_task, &rounding);
    struct qlinear_job job = {xq, w, y, T, I, O};
    run_parallel(threads, TASKS[format], &job);
    free(xq);
    return 0;
}
