/* AArch64 Advanced SIMD (NEON): 4 fp32 lanes, 32 vector registers. */
#include <arm_neon.h>

#define ISA_NAME "neon"
#define VL 4
/* accumulators for rows x panels, plus the panels' weights and one broadcast, fit 32 registers */
#define ROWS_PER_TILE 8
#define MAX_PANELS 4
#define PANELS_FOR(rows) ((rows) <= 6 ? 4 : 3)

#define VEC(op) v##op##q_f32 /* vadd, vsub, .. in simd.h */
typedef float32x4_t vf;

static inline vf vzero(void) { return vdupq_n_f32(0.0f); }
static inline vf vset1(float a) { return vdupq_n_f32(a); }
static inline vf vload(const float *p) { return vld1q_f32(p); }
static inline void vstore(float *p, vf a) { vst1q_f32(p, a); }
/* a bf16 number is the upper half of an fp32 one: widening is exact */
static inline vf vload_bf16(const uint16_t *p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}
static inline vf vfma(vf a, vf b, vf c) { return vfmaq_f32(c, a, b); }
static inline float vsum(vf a) { return vaddvq_f32(a); }
static inline vf vround(vf a) { return vrndnq_f32(a); }
static inline vf vpow2i(vf n) {
    int32x4_t e = vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127));
    return vreinterpretq_f32_s32(vshlq_n_s32(e, 23));
}
static inline vf vselect_lt(vf a, vf b, vf x, vf y) { return vbslq_f32(vcltq_f32(a, b), x, y); }
