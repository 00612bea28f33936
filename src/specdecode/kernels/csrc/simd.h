/* The vector operations the kernels are written in, one implementation per instruction set.
 *
 * The build defines one of SPECDECODE_AVX512, SPECDECODE_AVX2, SPECDECODE_NEON; without any,
 * the portable C implementation is used. Each `isa/<name>.h` defines (what AVX2 and AVX-512
 * name alike is in `isa/x86.h`):
 *
 *   VL                   fp32 lanes of a vector (the panel width of packed weights)
 *   vf                   the vector type
 *   vzero vset1 vload vstore vload_bf16
 *   vload_f16 vload_s8 vload_u8   VL fp16 numbers / signed / unsigned bytes as floats
 *   vadd vsub vmul vdiv vmax vmin  (or VEC(op), the intrinsic's name, to take simd.h's)
 *   vfma(a, b, c)        a * b + c, lane by lane (fused where the instruction set has it)
 *   vsum(a)              the sum of the lanes, always in the same order
 *   vsums(a[VL])         lane k: the sum of a[k]'s lanes, in an order the same for every k
 *   vround(a)            round to the nearest integer (ties to even)
 *   vpow2i(n)            2^n for integral n in [-126, 127]
 *   vselect_lt(a, b, x, y)  x where a < b, else y, lane by lane
 *   ISA_NAME             "avx512", "avx2", "neon" or "generic" (and variants: "avx512vnni",
 *                        "avx512amx", "avx2vnni", "neondot")
 *   ROWS_PER_TILE, MAX_PANELS, PANELS_FOR(rows)
 *                        the linear kernel's tile: rows of x times panels held in registers
 *   QROWS_PER_TILE, QMAX_PANELS, QPANELS_FOR(rows)   the same for the block formats
 *   ATTENTION_HEADS      query heads of a KV group attention.c weighs values for together (<= 8)
 *   SCORE_HEADS, SCORE_KEYS   query heads it scores together, and keys at a time (a divisor of VL)
 *
 * and, for the block formats' integer arithmetic, vi: VL 32-bit lanes, each of 4 bytes:
 *   viload(p)            4 VL bytes
 *   vbytes(c)            every byte c
 *   vi_and vi_or         bit by bit
 *   vshl_bits(a, n) vshr_bits(a, n)   every byte's bits shifted by n (0 < n < 8); bits may cross
 *                        into the neighbouring byte (x86 shifts 16-bit lanes): mask the result
 *   viset1 visub viadd   32-bit lanes
 *   vcvt(a)              the 32-bit lanes as floats
 *   vbroadcast4(p)       the 4 bytes at p in every lane
 *   vdot4_u8(acc, u, x)  acc + the sum of the 4 products u x of a lane's bytes, u unsigned and
 *                        x signed in [-127, 127], exactly
 *   vdot4(acc, u, x)     the same for u < 128 (one instruction fewer on x86 without VNNI)
 * and optionally VDOT4_CENTERED with vdot4_centered(acc, u, x): acc + the sum of (u - 128) x,
 * where that is cheaper than vdot4_u8 (AVX2's sign trick); and VDOT_PAIRS16 where vdot4 sums
 * byte pairs in 16 bits first (x86 without VNNI), with its parts:
 *   vdot2_16(u, x)       16-bit lanes: u0 x0 + u1 x1 of each byte pair, exact for u < 128
 *   vadd16(a, b)         16-bit lanes added (wrapping)
 *   vwiden16(acc, s)     acc + the sum of each 32-bit lane's two 16-bit lanes
 *
 * Everything else (the exponential below, the kernels) is written once over these.
 */
#ifndef SPECDECODE_SIMD_H
#define SPECDECODE_SIMD_H
#include <stdint.h>
#include <string.h>

#if defined(SPECDECODE_AVX512)
#include "isa/avx512.h"
#elif defined(SPECDECODE_AVX2)
#include "isa/avx2.h"
#elif defined(SPECDECODE_NEON)
#include "isa/neon.h"
#else
#include "isa/generic.h"
#endif

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* A case of the tile switches of linear.c and qlinear.c (`switch (rows) { TILE_ROWS(1, MAX) ..
 * TILE_ROWS(8, MAX) }`): tiles of R rows, up to MAX, each switching on the panels `nb` to its
 * file's PANELS(R, 1..4); so each file asserts tiles of at most 8 rows and 4 panels. */
#define TILE_ROWS(R, MAX) case R: \
    if (R <= (MAX)) \
        switch (nb) { PANELS(R, 1) PANELS(R, 2) PANELS(R, 3) PANELS(R, 4) } \
    break;

#ifdef VEC /* instruction sets whose element-wise intrinsics are named alike: VEC(add) is
              _mm512_add_ps, _mm256_add_ps or vaddq_f32 (the portable set defines its own) */
static inline vf vadd(vf a, vf b) { return VEC(add)(a, b); }
static inline vf vsub(vf a, vf b) { return VEC(sub)(a, b); }
static inline vf vmul(vf a, vf b) { return VEC(mul)(a, b); }
static inline vf vdiv(vf a, vf b) { return VEC(div)(a, b); }
static inline vf vmax(vf a, vf b) { return VEC(max)(a, b); }
static inline vf vmin(vf a, vf b) { return VEC(min)(a, b); }
#endif

/* store the first n lanes of a (n <= VL) */
ALWAYS_INLINE void vstore_first(float *p, vf a, int n) {
    if (n == VL) {
        vstore(p, a);
    } else {
        float lanes[VL];
        vstore(lanes, a);
        memcpy(p, lanes, sizeof(float) * (size_t)n);
    }
}

/* e^x = 2^n e^r with n = round(x / ln 2), |r| <= ln 2 / 2, and a degree-7 Taylor polynomial for
 * e^r (relative error < 1e-8 before rounding). x is clamped to [-87.3, 88.3] so that 2^n is a
 * normal number; below -87.3 (masked keys: -inf) the result is 0. */
ALWAYS_INLINE vf vexp(vf x) {
    const vf lo = vset1(-87.3f);
    const vf c = vmin(vmax(x, lo), vset1(88.3f));
    const vf n = vround(vmul(c, vset1(1.44269504088896341f)));
    vf r = vfma(n, vset1(-0.693145751953125f), c); /* ln 2 in two parts: r stays exact */
    r = vfma(n, vset1(-1.428606765330187e-06f), r);
    vf p = vset1(1.0f / 5040);
    p = vfma(p, r, vset1(1.0f / 720));
    p = vfma(p, r, vset1(1.0f / 120));
    p = vfma(p, r, vset1(1.0f / 24));
    p = vfma(p, r, vset1(1.0f / 6));
    p = vfma(p, r, vset1(0.5f));
    p = vfma(p, r, vset1(1.0f));
    p = vfma(p, r, vset1(1.0f));
    return vselect_lt(x, lo, vzero(), vmul(p, vpow2i(n)));
}

#endif
