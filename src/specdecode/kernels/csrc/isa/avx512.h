/* AVX-512 F and BW (with VNNI's dot-product instruction where SPECDECODE_VNNI is defined, and AMX's
 * matrix tiles for the block formats' long calls where SPECDECODE_AMX is: amx.c): 16 fp32
 * lanes, 32 vector registers. */
#include <immintrin.h>

#ifdef SPECDECODE_AMX
#define ISA_NAME "avx512amx"
#elif defined(SPECDECODE_VNNI)
#define ISA_NAME "avx512vnni"
#else
#define ISA_NAME "avx512"
#endif
#define VL 16
/* accumulators for rows x panels, plus the panels' weights and one broadcast, fit 32 registers */
#define ROWS_PER_TILE 8
#define MAX_PANELS 4
#define PANELS_FOR(rows) ((rows) <= 6 ? 4 : 3)
/* the block formats' tile (qlinear.c): integer and fp32 accumulators, scales and unpacked weights.
 * Two panels at every row count: with four, Q6_K's two halves' sums spill at 2 rows and do not
 * pay at 1 (measured on Zen 4).
 * On the AMX Xeons, one panel up to 8 rows: from memory a tile over two panels reads two weight
 * streams, which there costs more than its shared unpacking saves (the streamed calls of more
 * rows keep two panels). Zen 4 measured the other way, and a path cannot tell the two makers
 * apart, so the AMX path takes it, and `avx512` without VNNI, which only Intel's Skylake-SP
 * generation runs (the Xeon forced to it: one panel faster; up to 4 rows, as tiles of 8 rows
 * lost at 8). Numbers: docs/benchmarks/kernel-paths. */
#ifdef SPECDECODE_AMX
#define QROWS_PER_TILE 8
#define QPANELS_FOR(rows) 1
#elif !defined(SPECDECODE_VNNI)
#define QROWS_PER_TILE 4
#define QPANELS_FOR(rows) 1
#else
#define QROWS_PER_TILE 4
#define QPANELS_FOR(rows) 2
#endif
#define QMAX_PANELS 2
/* query heads of one KV group whose values attention.c weighs together (their value accumulators
 * fit: 8 heads x 2 vectors; a 1.5B's group of 6 heads together rather than 4 + 2 is faster on
 * long prompts' chunks: docs/benchmarks/prefill) */
#define ATTENTION_HEADS 8
/* query heads of a KV group attention.c scores together, and keys at a time:
 * 3 heads x 8 keys of accumulators, their queries and a key: 28 of the 32 registers */
#define SCORE_HEADS 3
#define SCORE_KEYS 8

#define X86(op) _mm512_##op /* the intrinsics' prefix, for x86.h */
#define HALF_LOAD(p) _mm256_loadu_si256((const __m256i *)(p)) /* VL 16-bit values */
#define BYTE_LOAD(p) _mm_loadu_si128((const __m128i *)(p)) /* VL bytes */
#define SI(op) _mm512_##op##_si512
#define DPBUSD _mm512_dpbusd_epi32 /* AVX-512 VNNI */
typedef __m512i vi;
#define CAST_PS _mm512_castsi512_ps
typedef __m512 vf;
#include "x86.h"

static inline float vsum(vf a) { return _mm512_reduce_add_ps(a); }
/* lane k: the sum of a[k]'s lanes; four rounds of adding halves (j + 8, j + 4, j + 2, j + 1),
 * the same for every k, then the sums put in order */
static inline vf vsums(const vf a[VL]) {
    __m512 b[8], c[4];
    for (int i = 0; i < 8; i++)
        b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; i++)
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0xDD));
    const __m512 e = quarter_sums(c[0], c[1], c[2], c[3]);
    /* e holds the sum of a[4 m + l] at 4 l + m */
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7,
                                                   11, 15), e);
}
static inline vf vround(vf a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline vf vselect_lt(vf a, vf b, vf x, vf y) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), y, x);
}
