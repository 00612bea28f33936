/* Where a streamed Q4_K row-block's time goes on this CPU (AVX2): one panel's 8 unpacked weight
 * vectors in registers, 64 rows of rounded x in L1, the operations qlinear.c's `stream` issues per
 * row and block of 32, and variants that leave parts out or do them as another scheme would.
 * ns per row-block (256 multiply-adds), best of 5. */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define ROWS 64
#define XBYTES 48 /* struct xblock: d, dsum, sum[3], q[32] after 20 bytes */
#define OPAQUE(v) __asm__ volatile("" : "+x"(v))
static int8_t xq[ROWS * XBYTES * 8] __attribute__((aligned(64)));
static float accm[ROWS * 8] __attribute__((aligned(64)));

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static inline __m256i bcast(const int8_t *p) {
    int32_t four;
    memcpy(&four, p, 4);
    return _mm256_set1_epi32(four);
}
static inline float scalar(const int8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}
/* 8 maddubs (lo: k 0..15, hi: 16..31) summed in 16 bits, two chains */
static inline __m256i sums16(const __m256i w[8], const int8_t *q) {
    __m256i a = _mm256_maddubs_epi16(w[0], bcast(q)), c = _mm256_maddubs_epi16(w[4], bcast(q + 16));
    for (int g = 1; g < 4; g++) {
        a = _mm256_add_epi16(a, _mm256_maddubs_epi16(w[g], bcast(q + 4 * g)));
        c = _mm256_add_epi16(c, _mm256_maddubs_epi16(w[4 + g], bcast(q + 16 + 4 * g)));
    }
    return _mm256_add_epi16(a, c);
}

enum variant { INT_ONLY, WIDEN, WIDEN_CVT_ADD, STREAM, STREAM_NO_W0, SUPER256, VARIANTS };
static const char *NAMES[VARIANTS] = {
    "8 maddubs + 7 paddw only (the peak's instructions, x broadcast from L1)",
    "+ widening (pmaddwd) and an int32 add into the row's sum in L1",
    "+ widening, cvt and an fp32 add into the row's sum in L1",
    "stream today: widen, cvt, D dx, 2 fma, row's sum in L1",
    "stream today less the w0 fma",
    "x per 256 (Q8_K-like): pmaddwd by the block's scale into an int32 sum in a register, fp32 once per 8 blocks",
};

static double run(enum variant v, long reps) {
    __m256i w[8];
    for (int i = 0; i < 8; i++) w[i] = _mm256_set1_epi8((char)(i + 1));
    const __m256i ones = _mm256_set1_epi16(1), scale = _mm256_set1_epi16(37);
    const __m256 D = _mm256_set1_ps(0.5f), w0 = _mm256_set1_ps(0.25f);
    __m256i keep = _mm256_setzero_si256();
    const double start = now();
    for (long r = 0; r < reps; r++) {
        for (int i = 0; i < 8; i++) OPAQUE(w[i]);
        if (v == SUPER256) { /* 8 blocks per row before its fp32 step: ROWS / 8 rows x 8 blocks */
            for (int t = 0; t < ROWS / 8; t++) {
                __m256i isum = _mm256_setzero_si256();
                for (int j = 0; j < 8; j++) {
                    const int8_t *q = xq + (t * 8 + j) * XBYTES + 16;
                    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(sums16(w, q), scale));
                }
                const int8_t *x = xq + t * 8 * XBYTES;
                __m256 acc = _mm256_load_ps(accm + t * 8);
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
                                      _mm256_mul_ps(D, _mm256_set1_ps(scalar(x))), acc);
                acc = _mm256_fmadd_ps(w0, _mm256_set1_ps(scalar(x + 4)), acc);
                _mm256_store_ps(accm + t * 8, acc);
            }
            continue;
        }
        for (int t = 0; t < ROWS; t++) {
            const int8_t *x = xq + t * XBYTES;
            const __m256i s16 = sums16(w, x + 16);
            if (v == INT_ONLY) {
                keep = _mm256_add_epi16(keep, s16);
                continue;
            }
            const __m256i s = _mm256_madd_epi16(s16, ones);
            if (v == WIDEN) {
                __m256i *a = (__m256i *)(accm + t * 8);
                _mm256_store_si256(a, _mm256_add_epi32(_mm256_load_si256(a), s));
                continue;
            }
            __m256 acc = _mm256_load_ps(accm + t * 8);
            if (v == WIDEN_CVT_ADD) {
                acc = _mm256_add_ps(acc, _mm256_cvtepi32_ps(s));
            } else {
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s),
                                      _mm256_mul_ps(D, _mm256_set1_ps(scalar(x))), acc);
                if (v == STREAM) acc = _mm256_fmadd_ps(w0, _mm256_set1_ps(scalar(x + 4)), acc);
            }
            _mm256_store_ps(accm + t * 8, acc);
        }
    }
    const double seconds = now() - start;
    volatile int sink = _mm256_extract_epi32(keep, 1);
    (void)sink;
    return seconds / ((double)reps * ROWS) * 1e9;
}

int main(void) {
    for (int i = 0; i < (int)sizeof xq; i++) xq[i] = (int8_t)(i * 7 % 127);
    for (int v = 0; v < VARIANTS; v++) {
        double best = 1e30;
        for (int k = 0; k < 5; k++) {
            const double ns = run(v, 200000);
            best = ns < best ? ns : best;
        }
        printf("%6.2f ns  %s\n", best, NAMES[v]);
    }
    return 0;
}
