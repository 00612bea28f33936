/* What AVX2 and AVX-512 name alike, given VEC(op) (_mm256_op_ps, _mm512_op_ps) and vf. */
static inline vf vzero(void) { return VEC(setzero)(); }
static inline vf vset1(float a) { return VEC(set1)(a); }
static inline vf vload(const float *p) { return VEC(loadu)(p); }
static inline void vstore(float *p, vf a) { VEC(storeu)(p, a); }
static inline vf vfma(vf a, vf b, vf c) { return VEC(fmadd)(a, b, c); }
