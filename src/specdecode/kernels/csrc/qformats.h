/* The block formats' facts and x's rounding, shared by qlinear.c (vector tiles) and amx.c (matrix
 * tiles): internal to the kernels, not part of their interface (kernels.h).
 *
 * A weight is w = D u + w0, D and w0 per block of 32 (per 16 where a format has two scales a
 * block), from the scale fields of its block or super-block (BLOCK_FORMATS below):
 *   SCALES_D   D = d       w0 = -offset d          Q8_0 (u = q + 128), Q4_0, Q5_0
 *   SCALES_DM  D = d       w0 = m                  Q4_1, Q5_1
 *   SCALES_K   D = d sc    w0 = -dmin mn           Q4_K, Q5_K (sc, mn: 6-bit integers per 32)
 *   SCALES_K16 D = d sc    w0 = -offset d sc       Q6_K (sc: signed bytes per 16), Q3_K (6-bit)
 * A w0 that is an integer multiple of D (the offset) is taken off the integer sum.
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
 * broadcast. Headers: the format's scale fields (`enum scales`), VL numbers each.
 */
#ifndef SPECDECODE_QFORMATS_H
#define SPECDECODE_QFORMATS_H

#include <math.h>
#include <string.h>

#include "simd.h"

/* Every block format the kernels compute in, one line each: the one list the enum, the names,
 * the task tables of qlinear.c and amx.c and the facts below are made from, and that Python reads
 * (quant.FORMATS) for the GGUF bytes it decodes and the panels it packs.
 *   X(name, GGUF bytes per (super-)block, values per (super-)block, u's bits,
 *     offset (u = the stored signed value + offset; 0: the format has a w0 field instead),
 *     values per D (32, or 16: two scales a block), the header's scale fields (`scales`))
 * Keep it one line per format and numbers only: Python parses it. */
#define BLOCK_FORMATS(X)                       \
    X(Q8_0, 34, 32, 8, 128, 32, SCALES_D)     \
    X(Q4_0, 18, 32, 4, 8, 32, SCALES_D)       \
    X(Q4_1, 20, 32, 4, 0, 32, SCALES_DM)      \
    X(Q5_0, 22, 32, 5, 16, 32, SCALES_D)      \
    X(Q5_1, 24, 32, 5, 0, 32, SCALES_DM)      \
    X(Q4_K, 144, 256, 4, 0, 32, SCALES_K)     \
    X(Q5_K, 176, 256, 5, 0, 32, SCALES_K)     \
    X(Q6_K, 210, 256, 6, 32, 16, SCALES_K16)  \
    X(Q3_K, 110, 256, 3, 4, 16, SCALES_K16)

/* a header's scale fields, per lane, in this order (quant.SCALE_FIELDS states the same for the
 * packing): SCALES_D: d (fp16); SCALES_DM: d, m (fp16); SCALES_K: d, dmin (fp16), sc[8], mn[8]
 * (6-bit bytes); SCALES_K16: d (fp16), sc[16] (signed bytes) */
enum scales { SCALES_D, SCALES_DM, SCALES_K, SCALES_K16 };

#define FORMAT_ENUM(name, ...) name,
enum format { BLOCK_FORMATS(FORMAT_ENUM) FORMATS };
#undef FORMAT_ENUM
#define BLOCK 32 /* values of x per scale dx, and of w per D */

/* a format's facts, from its line (constants once the format is: each is a switch that folds) */
#define FORMAT_FACT(fact, column)                                                       \
    ALWAYS_INLINE int fact(int f) {                                                     \
        switch (f) { BLOCK_FORMATS(column) }                                            \
        return 0;                                                                       \
    }
#define BITS_OF(n, bytes, values, bits, offset, per_d, scales) case n: return bits;
#define VALUES_OF(n, bytes, values, bits, offset, per_d, scales) case n: return values;
#define OFFSET_OF(n, bytes, values, bits, offset, per_d, scales) case n: return offset;
#define PER_D_OF(n, bytes, values, bits, offset, per_d, scales) case n: return per_d;
#define SCALES_OF(n, bytes, values, bits, offset, per_d, scales) case n: return scales;
FORMAT_FACT(bits, BITS_OF)
FORMAT_FACT(super_values, VALUES_OF)
FORMAT_FACT(stored_offset, OFFSET_OF)
FORMAT_FACT(values_per_d, PER_D_OF)
FORMAT_FACT(scale_fields, SCALES_OF)
#undef BITS_OF
#undef VALUES_OF
#undef OFFSET_OF
#undef PER_D_OF
#undef SCALES_OF
#undef FORMAT_FACT

ALWAYS_INLINE int blocks_per_super(int f) { return super_values(f) / BLOCK; }
#ifdef VDOT4_CENTERED /* the instruction set dots Q8_0's (u - 128) x directly */
#define Q8_OFFSET 0
#else
#define Q8_OFFSET 128
#endif
/* what the integer sums take off: u's offset, but where the instruction set dots Q8_0's signed
 * bytes directly */
ALWAYS_INLINE int offset(int f) { return f == Q8_0 ? Q8_OFFSET : stored_offset(f); }
ALWAYS_INLINE int has_w0(int f) {
    return scale_fields(f) == SCALES_DM || scale_fields(f) == SCALES_K;
}
ALWAYS_INLINE int halves(int f) { return BLOCK / values_per_d(f); } /* D per block of 32 */
/* bytes per lane: a super-block's header, a block's quants */
ALWAYS_INLINE int header_bytes(int f) {
    switch (scale_fields(f)) {
    case SCALES_K: return 2 + 2 + 8 + 8;
    case SCALES_K16: return 2 + 16;
    case SCALES_DM: return 2 + 2;
    default: return 2;
    }
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
    if (scale_fields(f) == SCALES_K) {
        D[0] = D[1] = vmul(d, vload_u8(s + (4 + j) * VL));
        *w0 = vsub(vzero(), vmul(m, vload_u8(s + (12 + j) * VL)));
    } else if (scale_fields(f) == SCALES_K16) {
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

#ifdef SPECDECODE_AMX
/* amx.c: linear_quant in matrix tiles, for calls of at least amx_min_rows(format) rows where the
 * OS grants this process the tiles (amx_usable) */
int amx_min_rows(int format);
int amx_usable(void);
int amx_linear(const float *x, const uint8_t *w, float *y, int64_t T, int64_t I, int64_t O,
               int format, int threads);
#endif

#endif
