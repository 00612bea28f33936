/* AVX2 + FMA (with AVX-VNNI's dot-product instruction where SPECDECODE_VNNI is defined: Intel's
 * AVX2 cores since Alder Lake, which have no AVX-512): 8 fp32 lanes, 16 vector registers. */
#include <immintrin.h>

#ifdef SPECDECODE_VNNI
#define ISA_NAME "avx2vnni"
#else
#define ISA_NAME "avx2"
#endif
#define VL 8
/* 4 x 3 accumulators, 3 weight vectors and one broadcast fill the 16 registers; of the tiles that
 * fit, this one measured fastest for steps of 4-16 rows (docs/benchmarks/kernel-paths) */
#define ROWS_PER_TILE 4
#define MAX_PANELS 3
#define PANELS_FOR(rows) 3
/* the block formats' tiles and streams (qlinear.c): one panel of 8 output rows at a time, whose
 * unpacked weights, with a few rows' integer and fp32 sums, fit the 16 registers; two panels
 * spill. One panel measured faster than two, bitwise the same, on Zen 1 and on an Intel Xeon's
 * Golden Cove cores (Alder Lake's P-cores), streamed calls and tiles, `avx2vnni` and `avx2` alike.
 * With VNNI a row's sums take two registers and tiles run up to 6 rows before calls stream (3-6
 * row tiles faster than streamed); without it, 3-4 row tiles measured even or slower than the
 * stream (docs/benchmarks/kernel-paths). */
#ifdef SPECDECODE_VNNI
#define QROWS_PER_TILE 6
#else
#define QROWS_PER_TILE 2
#endif
#define QMAX_PANELS 1
#define QPANELS_FOR(rows) 1
/* query heads of one KV group whose values attention.c weighs together (their value accumulators fit) */
#define ATTENTION_HEADS 2
/* query heads of a KV group attention.c scores together, and keys at a time:
 * one head's 8 accumulators, its query and a key already take 10 of the 16 registers */
#define SCORE_HEADS 1
#define SCORE_KEYS VL

#define X86(op) _mm256_##op /* the intrinsics' prefix, for x86.h */
#define HALF_LOAD(p) _mm_loadu_si128((const __m128i *)(p)) /* VL 16-bit values */
#define BYTE_LOAD(p) _mm_loadl_epi64((const __m128i *)(p)) /* VL bytes */
#define SI(op) _mm256_##op##_si256
#define DPBUSD _mm256_dpbusd_avx_epi32 /* AVX-VNNI (VEX encoded) */
typedef __m256i vi;
#define CAST_PS _mm256_castsi256_ps
typedef __m256 vf;
#include "x86.h"

static inline float vsum(vf a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
/* lane k: the sum of a[k]'s lanes; three rounds of adding halves (j + 4, j + 2, j + 1), the
 * same for every k, then the sums put in order */
static inline vf vsums(const vf a[VL]) {
    __m256 b[4];
    for (int i = 0; i < 4; i++)
        b[i] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x31));
    const __m256 e = quarter_sums(b[0], b[1], b[2], b[3]);
    /* e holds the sum of a[2 m + h] at 4 h + m */
    return _mm256_permutevar8x32_ps(e, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
static inline vf vround(vf a) {
    return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline vf vselect_lt(vf a, vf b, vf x, vf y) {
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_LT_OQ));
}
#ifndef SPECDECODE_VNNI /* (with VNNI, Q8_0's u dots in one instruction as it is) */
/* Q8_0's (u - 128) x in one vpmaddubsw: q = u - 128 as a signed byte, |q| times x with q's sign
 * (|q| <= 128, so a pair's sum stays below 32768) */
#define VDOT4_CENTERED
static inline vi vdot4_centered(vi acc, vi u, vi x) {
    const vi q = _mm256_xor_si256(u, vbytes(0x80));
    return vdot4(acc, _mm256_abs_epi8(q), _mm256_sign_epi8(x, q));
}
#endif
