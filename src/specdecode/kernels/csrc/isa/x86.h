/* What AVX2 and AVX-512 name alike, given X86(op) (_mm256_op or _mm512_op), CAST_PS (from
 * integer lanes to floats), HALF_LOAD(p) and BYTE_LOAD(p) (VL 16-bit values, VL bytes), AND_I,
 * vf and vi (VL floats, VL 32-bit integers). */
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
static inline vf vload_nibbles(const uint8_t *p, int high) {
    const vi bytes = X86(cvtepu8_epi32)(BYTE_LOAD(p));
    return X86(cvtepi32_ps)(AND_I(high ? X86(srli_epi32)(bytes, 4) : bytes, X86(set1_epi32)(15)));
}
