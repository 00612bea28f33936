/* AVX-512 F and BW (with VNNI's dot-product instruction where SPECDECODE_VNNI is defined): 16 fp32
 * lanes, 32 vector registers. */
#include <immintrin.h>

#ifdef SPECDECODE_VNNI
#define ISA_NAME "avx512vnni"
#else
#define ISA_NAME "avx512"
#endif
#define VL 16
/* accumulators for rows x panels, plus the panels' weights and one broadcast, fit 32 registers */
#define ROWS_PER_TILE 8
#define MAX_PANELS 4
#define PANELS_FOR(rows) ((rows) <= 6 ? 4 : 3)
/* the block formats' tile (qlinear.c): integer and fp32 accumulators, scales and unpacked weights */
#define QROWS_PER_TILE 4
#define QMAX_PANELS 4
#define QPANELS_FOR(rows) ((rows) <= 2 ? 4 : 2)

#define X86(op) _mm512_##op /* the intrinsics' prefix, for x86.h */
#define HALF_LOAD(p) _mm256_loadu_si256((const __m256i *)(p)) /* VL 16-bit values */
#define BYTE_LOAD(p) _mm_loadu_si128((const __m128i *)(p)) /* VL bytes */
#define SI(op) _mm512_##op##_si512
typedef __m512i vi;
#define CAST_PS _mm512_castsi512_ps
typedef __m512 vf;
#include "x86.h"

static inline float vsum(vf a) { return _mm512_reduce_add_ps(a); }
static inline vf vround(vf a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline vf vselect_lt(vf a, vf b, vf x, vf y) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), y, x);
}
