/* What AVX2 and AVX-512 name alike, given X86(op) (_mm256_op or _mm512_op), SI(op) (the
 * whole-register integer operations: _mm256_op_si256 or _mm512_op_si512), CAST_PS (from integer
 * lanes to floats), HALF_LOAD(p) and BYTE_LOAD(p) (VL 16-bit values, VL bytes), vf and vi (VL
 * floats, VL 32-bit integers), and where SPECDECODE_VNNI is defined DPBUSD (the VNNI dot-product
 * intrinsic of the width). */
#define VEC(op) X86(op##_ps) /* vadd, vsub, .. in simd.h */

static inline vf vzero(void) { return VEC(setzero)(); }
static inline vf vset1(float a) { return VEC(set1)(a); }
static inline vf vload(const float *p) { return VEC(loadu)(p); }
static inline void vstore(float *p, vf a) { VEC(storeu)(p, a); }
static inline vf vfma(vf a, vf b, vf c) { return VEC(fmadd)(a, b, c); }
static inline vf vpow2i(vf n) {
    return CAST_PS(X86(slli_epi32)(X86(add_epi32)(X86(cvtps_epi32)(n), X86(set1_epi32)(127)), 23));
}
/* a bf16 number is the upper half of an fp32 one: widening is exact */
static inline vf vload_bf16(const uint16_t *p) {
    return CAST_PS(X86(slli_epi32)(X86(cvtepu16_epi32)(HALF_LOAD(p)), 16));
}
static inline vf vload_f16(const uint16_t *p) { return X86(cvtph_ps)(HALF_LOAD(p)); }
static inline vf vload_s8(const int8_t *p) {
    return X86(cvtepi32_ps)(X86(cvtepi8_epi32)(BYTE_LOAD(p)));
}
static inline vf vload_u8(const uint8_t *p) {
    return X86(cvtepi32_ps)(X86(cvtepu8_epi32)(BYTE_LOAD(p)));
}

/* the two rounds of adding halves that `vsums` ends with on both widths, within each 128-bit
 * quarter: lane 4 q + m of the result holds the sum of b_m's four lanes in quarter q */
static inline vf quarter_sums(vf b0, vf b1, vf b2, vf b3) {
    const vf c0 = VEC(add)(VEC(shuffle)(b0, b1, 0x44), VEC(shuffle)(b0, b1, 0xEE));
    const vf c1 = VEC(add)(VEC(shuffle)(b2, b3, 0x44), VEC(shuffle)(b2, b3, 0xEE));
    return VEC(add)(VEC(shuffle)(c0, c1, 0x88), VEC(shuffle)(c0, c1, 0xDD));
}

/* integers (qlinear.c) */
static inline vi viload(const uint8_t *p) { return SI(loadu)((const void *)p); }
static inline vi vbytes(uint8_t c) { return X86(set1_epi8)((char)c); }
static inline vi vi_and(vi a, vi b) { return SI(and)(a, b); }
static inline vi vi_or(vi a, vi b) { return SI(or)(a, b); }
static inline vi vshl_bits(vi a, int n) { return X86(slli_epi16)(a, n); }
static inline vi vshr_bits(vi a, int n) { return X86(srli_epi16)(a, n); }
static inline vi viset1(int32_t a) { return X86(set1_epi32)(a); }
static inline vi visub(vi a, vi b) { return X86(sub_epi32)(a, b); }
static inline vi viadd(vi a, vi b) { return X86(add_epi32)(a, b); }
static inline vf vcvt(vi a) { return X86(cvtepi32_ps)(a); }
static inline vi vbroadcast4(const int8_t *p) {
    int32_t four;
    memcpy(&four, p, sizeof four);
    return X86(set1_epi32)(four);
}
#ifdef SPECDECODE_VNNI /* one instruction, no intermediate rounding or saturation */
static inline vi vdot4(vi acc, vi u, vi x) { return DPBUSD(acc, u, x); }
static inline vi vdot4_u8(vi acc, vi u, vi x) { return vdot4(acc, u, x); }
#else /* byte pairs summed in 16 bits (saturating past 32767: u < 128 keeps them exact), then
         pairs of those in 32 */
/* several dot products' byte pairs may be summed in 16 bits before one widening (qlinear.c's
 * `dots`): two instructions a dot product instead of three */
#define VDOT_PAIRS16
static inline vi vdot2_16(vi u, vi x) { return X86(maddubs_epi16)(u, x); }
static inline vi vadd16(vi a, vi b) { return X86(add_epi16)(a, b); }
static inline vi vwiden16(vi acc, vi s) {
    return X86(add_epi32)(acc, X86(madd_epi16)(s, X86(set1_epi16)(1)));
}
static inline vi vdot4(vi acc, vi u, vi x) { return vwiden16(acc, vdot2_16(u, x)); }
static inline vi vdot4_u8(vi acc, vi u, vi x) { /* u = 16 high + low, each part exact */
    const vi low = vi_and(u, vbytes(15)), high = vi_and(vshr_bits(u, 4), vbytes(15));
    return X86(add_epi32)(vdot4(acc, low, x), X86(slli_epi32)(vdot4(viset1(0), high, x), 4));
}
#endif
