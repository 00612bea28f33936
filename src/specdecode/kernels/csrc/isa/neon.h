/* AArch64 Advanced SIMD (NEON), with the dot-product extension's SDOT where SPECDECODE_DOTPROD is
 * defined (Armv8.2-A and later: Apple M1 and later, AWS Graviton 2 and later, Cortex-A76 and
 * later such as the Raspberry Pi 5): 4 fp32 lanes, 32 vector registers. */
#include <arm_neon.h>
#include <string.h>

#ifdef SPECDECODE_DOTPROD
#define ISA_NAME "neondot"
#else
#define ISA_NAME "neon"
#endif
#define VL 4
/* accumulators for rows x panels, plus the panels' weights and one broadcast, fit 32 registers */
#define ROWS_PER_TILE 8
#define MAX_PANELS 4
#define PANELS_FOR(rows) ((rows) <= 6 ? 4 : 3)
/* the block formats' tile (qlinear.c): integer and fp32 accumulators, scales and unpacked weights */
#define QROWS_PER_TILE 4
#define QMAX_PANELS 4
#define QPANELS_FOR(rows) ((rows) <= 2 ? 4 : 2)
/* query heads of one KV group whose values attention.c weighs together (their value accumulators fit) */
#define ATTENTION_HEADS 4
/* query heads of a KV group attention.c scores together, and keys at a time:
 * 4 heads x 4 keys of accumulators, their queries and a key: 21 of the 32 registers */
#define SCORE_HEADS 4
#define SCORE_KEYS VL

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
/* lane k: the sum of a[k]'s lanes, (0 + 1) + (2 + 3) for every k */
static inline vf vsums(const vf a[VL]) {
    return vpaddq_f32(vpaddq_f32(a[0], a[1]), vpaddq_f32(a[2], a[3]));
}
static inline vf vround(vf a) { return vrndnq_f32(a); }
static inline vf vpow2i(vf n) {
    int32x4_t e = vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127));
    return vreinterpretq_f32_s32(vshlq_n_s32(e, 23));
}
static inline vf vselect_lt(vf a, vf b, vf x, vf y) { return vbslq_f32(vcltq_f32(a, b), x, y); }
static inline vf vload_f16(const uint16_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
static inline uint8x8_t load4_u8(const void *p) { /* VL = 4 bytes, in the low half */
    uint32_t word;
    memcpy(&word, p, sizeof word);
    return vreinterpret_u8_u32(vdup_n_u32(word));
}
static inline vf vload_s8(const int8_t *p) {
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(vmovl_s8(vreinterpret_s8_u8(load4_u8(p))))));
}
static inline vf vload_u8(const uint8_t *p) {
    return vcvtq_f32_u32(vmovl_u16(vget_low_u16(vmovl_u8(load4_u8(p)))));
}

/* integers (qlinear.c): 16 bytes, VL lanes of 4 */
typedef int32x4_t vi;
static inline uint8x16_t bytes_of(vi a) { return vreinterpretq_u8_s32(a); }
static inline vi viload(const uint8_t *p) { return vreinterpretq_s32_u8(vld1q_u8(p)); }
static inline vi vbytes(uint8_t c) { return vreinterpretq_s32_u8(vdupq_n_u8(c)); }
static inline vi vi_and(vi a, vi b) { return vandq_s32(a, b); }
static inline vi vi_or(vi a, vi b) { return vorrq_s32(a, b); }
/* shifted byte by byte (a variable shift: no immediate needed) */
static inline vi vshl_bits(vi a, int n) {
    return vreinterpretq_s32_u8(vshlq_u8(bytes_of(a), vdupq_n_s8((int8_t)n)));
}
static inline vi vshr_bits(vi a, int n) { return vshl_bits(a, -n); }
static inline vi viset1(int32_t a) { return vdupq_n_s32(a); }
static inline vi visub(vi a, vi b) { return vsubq_s32(a, b); }
static inline vi viadd(vi a, vi b) { return vaddq_s32(a, b); }
static inline vf vcvt(vi a) { return vcvtq_f32_s32(a); }
static inline vi vbroadcast4(const int8_t *p) {
    int32_t four;
    memcpy(&four, p, sizeof four);
    return vdupq_n_s32(four);
}
/* u x in 16 bits (|u x| <= 255 * 127 fits), summed pairwise into 32-bit lanes */
static inline vi vdot4_u8(vi acc, vi u, vi x) {
    const uint8x16_t ub = bytes_of(u);
    const int8x16_t xb = vreinterpretq_s8_s32(x);
    const int16x8_t low = vmulq_s16(vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(ub))),
                                    vmovl_s8(vget_low_s8(xb)));
    const int16x8_t high = vmulq_s16(vreinterpretq_s16_u16(vmovl_u8(vget_high_u8(ub))),
                                     vmovl_s8(vget_high_s8(xb)));
    return vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(low), vpaddlq_s16(high)));
}
#ifdef SPECDECODE_DOTPROD /* signed bytes times signed bytes, summed by 4 exactly: u < 128 is one */
static inline vi vdot4(vi acc, vi u, vi x) {
    return vdotq_s32(acc, vreinterpretq_s8_s32(u), vreinterpretq_s8_s32(x));
}
/* Q8_0's (u - 128) x: u - 128 is its stored signed byte */
#define VDOT4_CENTERED
static inline vi vdot4_centered(vi acc, vi u, vi x) {
    return vdot4(acc, vreinterpretq_s32_u8(veorq_u8(bytes_of(u), vdupq_n_u8(0x80))), x);
}
#else
static inline vi vdot4(vi acc, vi u, vi x) { return vdot4_u8(acc, u, x); }
#endif
