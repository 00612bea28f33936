/* Portable C, no intrinsics: a vector is an array of 8 floats and every operation a loop over
 * its lanes, which compilers vectorise for whatever the target has. Built with
 * -ffp-contract=off, so a * b + c is never fused in one instance of a loop and not in another:
 * every row's arithmetic is the same, as on the intrinsic paths. */
#include <string.h>

#define ISA_NAME "generic"
#define VL 8
#define ROWS_PER_TILE 8
#define MAX_PANELS 2
#define PANELS_FOR(rows) ((rows) <= 4 ? 2 : 1)
#define QROWS_PER_TILE 4
#define QMAX_PANELS 2
#define QPANELS_FOR(rows) ((rows) <= 2 ? 2 : 1)
/* query heads of one KV group whose values attention.c weighs together (their value accumulators fit) */
#define ATTENTION_HEADS 2
/* query heads of a KV group attention.c scores together, and keys at a time:
 * plain C: what the compiler keeps in registers is its own choice */
#define SCORE_HEADS 1
#define SCORE_KEYS VL

typedef struct { float lane[VL]; } vf;

#define LANEWISE(expr) vf r; for (int i = 0; i < VL; i++) r.lane[i] = (expr); return r
static inline vf vzero(void) { LANEWISE(0.0f); }
static inline vf vset1(float a) { LANEWISE(a); }
static inline vf vload(const float *p) { LANEWISE(p[i]); }
static inline void vstore(float *p, vf a) { for (int i = 0; i < VL; i++) p[i] = a.lane[i]; }
static inline float bf16_to_f32(uint16_t h) { /* exact: bf16 is the upper half of fp32 */
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
static inline vf vload_bf16(const uint16_t *p) { LANEWISE(bf16_to_f32(p[i])); }
/* IEEE half precision to single, exactly (normal, subnormal, zero, infinity and NaN) */
static inline float f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h >> 15) << 31, exponent = (h >> 10) & 31, mantissa = h & 1023;
    uint32_t bits;
    if (exponent == 31) bits = sign | 0x7f800000u | mantissa << 13;
    else if (exponent) bits = sign | (exponent + 112) << 23 | mantissa << 13;
    else if (!mantissa) bits = sign;
    else { /* subnormal: normalise */
        int shift = 0;
        uint32_t m = mantissa;
        while (!(m & 1024)) m <<= 1, shift++;
        bits = sign | (uint32_t)(113 - shift) << 23 | (m & 1023) << 13;
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
static inline vf vload_f16(const uint16_t *p) { LANEWISE(f16_to_f32(p[i])); }
static inline vf vload_s8(const int8_t *p) { LANEWISE((float)p[i]); }
static inline vf vload_u8(const uint8_t *p) { LANEWISE((float)p[i]); }
static inline vf vadd(vf a, vf b) { LANEWISE(a.lane[i] + b.lane[i]); }
static inline vf vsub(vf a, vf b) { LANEWISE(a.lane[i] - b.lane[i]); }
static inline vf vmul(vf a, vf b) { LANEWISE(a.lane[i] * b.lane[i]); }
static inline vf vdiv(vf a, vf b) { LANEWISE(a.lane[i] / b.lane[i]); }
static inline vf vmax(vf a, vf b) { LANEWISE(a.lane[i] > b.lane[i] ? a.lane[i] : b.lane[i]); }
static inline vf vmin(vf a, vf b) { LANEWISE(a.lane[i] < b.lane[i] ? a.lane[i] : b.lane[i]); }
static inline vf vfma(vf a, vf b, vf c) { LANEWISE(a.lane[i] * b.lane[i] + c.lane[i]); }
static inline float vsum(vf a) {
    float s = a.lane[0];
    for (int i = 1; i < VL; i++) s += a.lane[i];
    return s;
}
/* lane k: the sum of a[k]'s lanes, as vsum adds them */
static inline vf vsums(const vf a[VL]) { LANEWISE(vsum(a[i])); }
/* adding and removing 1.5 * 2^23 rounds to an integer (ties to even) for |a| < 2^22 */
static inline vf vround(vf a) { LANEWISE((a.lane[i] + 12582912.0f) - 12582912.0f); }
static inline vf vpow2i(vf n) {
    vf r;
    for (int i = 0; i < VL; i++) {
        uint32_t bits = (uint32_t)((int32_t)n.lane[i] + 127) << 23;
        memcpy(&r.lane[i], &bits, sizeof(float));
    }
    return r;
}
static inline vf vselect_lt(vf a, vf b, vf x, vf y) { LANEWISE(a.lane[i] < b.lane[i] ? x.lane[i] : y.lane[i]); }

/* integers (qlinear.c): VL lanes of 4 bytes */
typedef union { uint8_t byte[4 * VL]; int32_t lane[VL]; } vi;
#define BYTEWISE(expr) vi r; for (int i = 0; i < 4 * VL; i++) r.byte[i] = (uint8_t)(expr); return r
static inline vi viload(const uint8_t *p) { vi r; memcpy(r.byte, p, sizeof r.byte); return r; }
static inline vi vbytes(uint8_t c) { BYTEWISE(c); }
static inline vi vi_and(vi a, vi b) { BYTEWISE(a.byte[i] & b.byte[i]); }
static inline vi vi_or(vi a, vi b) { BYTEWISE(a.byte[i] | b.byte[i]); }
static inline vi vshl_bits(vi a, int n) { BYTEWISE(a.byte[i] << n); }
static inline vi vshr_bits(vi a, int n) { BYTEWISE(a.byte[i] >> n); }
#undef BYTEWISE
static inline vi viset1(int32_t a) { vi r; for (int i = 0; i < VL; i++) r.lane[i] = a; return r; }
static inline vi visub(vi a, vi b) {
    vi r;
    for (int i = 0; i < VL; i++) r.lane[i] = a.lane[i] - b.lane[i];
    return r;
}
static inline vi viadd(vi a, vi b) { /* wrapping, as the vector instructions add */
    vi r;
    for (int i = 0; i < VL; i++) r.lane[i] = (int32_t)((uint32_t)a.lane[i] + (uint32_t)b.lane[i]);
    return r;
}
static inline vf vcvt(vi a) { LANEWISE((float)a.lane[i]); }
static inline vi vbroadcast4(const int8_t *p) {
    vi r;
    for (int i = 0; i < VL; i++) memcpy(r.byte + 4 * i, p, 4);
    return r;
}
static inline vi vdot4_u8(vi acc, vi u, vi x) {
    for (int i = 0; i < VL; i++)
        for (int j = 4 * i; j < 4 * i + 4; j++) acc.lane[i] += u.byte[j] * (int8_t)x.byte[j];
    return acc;
}
static inline vi vdot4(vi acc, vi u, vi x) { return vdot4_u8(acc, u, x); }
#undef LANEWISE
