/* How fast could an AMX Q4_K product be with x rounded per 256 values? A timing prototype, not
 * the library's kernel (measured and set aside: docs/benchmarks/kernel-paths).
 *
 * Today (qlinear.c, isa/amx.h) every block of 32 has its own x scale, so a TDPBSSD covers 32 k
 * and its 16 x 16 sums are scaled in fp32 row by row: ~4 vector operations a row a block, twice
 * the matrix unit's time. With one x scale per 256 (llama.cpp's Q8_K grain) the integer sums can
 * run over a whole super-block: the block scales sc (6 bits) go into the weights as two byte
 * tiles, u sc_lo and u sc_hi with sc = 16 sc_hi + sc_lo (u sc_lo <= 225, unsigned: TDPBSUD), and
 * the minima as a third tile of mn per block, so
 *     S = 16 C_hi + C_lo = sum_k q_k u_k sc_k,   M = C_mn = sum_k q_k mn_k,
 *     y += dx (d S - dmin M)        (fp32 once per 256 values, not once per 32).
 * The weights are unpacked for all row tiles of a call (as amx.h does), from bytes u (the nibble
 * split of the real layout left out: two operations a vector more).
 *
 * cc -O3 -march=native -fopenmp amx_super.c -o amx_super && ./amx_super
 * prints GMAC/s at 64, 128 and 512 rows (OMP_NUM_THREADS=2) and checks one output against the
 * scalar formula; AMX_PART=unpack or products times one part alone (the check then fails). */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define IN 1536
#define OUT 8960
#define VL 16
#define SUPERS (IN / 256)
#define PANELS (OUT / VL)
#define GROUP 8 /* panels unpacked at once per thread */

static uint8_t U[OUT][IN], SC[OUT][IN / 32], MN[OUT][IN / 32];
static float D[OUT][SUPERS], DMIN[OUT][SUPERS];

struct cfg {
    uint8_t palette, start;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* bytes a * b where each product < 256: even bytes in 16-bit lanes, odd bytes shifted down */
static inline __m512i mul_bytes(__m512i a, __m512i b) {
    const __m512i low = _mm512_set1_epi16(0x00ff);
    const __m512i even = _mm512_mullo_epi16(_mm512_and_si512(a, low), _mm512_and_si512(b, low));
    const __m512i odd = _mm512_mullo_epi16(_mm512_srli_epi16(a, 8), _mm512_srli_epi16(b, 8));
    return _mm512_ternarylogic_epi32(_mm512_slli_epi16(odd, 8), even, low, 0xF8); /* odd | even & low */
}

/* B tiles of one panel and super-block: [chunk 0..3][lo, hi, mn][16 rows][64 bytes] */
typedef int8_t btiles[4][3][16][64];

static void unpack(int p, int s, btiles *out) {
    for (int c = 0; c < 4; c++)
        for (int half = 0; half < 2; half++) {
            const int block = s * 8 + c * 2 + half;
            uint8_t lo[64], hi[64], mn[64];
            for (int n = 0; n < VL; n++)
                for (int i = 0; i < 4; i++) {
                    const uint8_t sc = SC[p * VL + n][block];
                    lo[4 * n + i] = sc & 15, hi[4 * n + i] = sc >> 4, mn[4 * n + i] = MN[p * VL + n][block];
                }
            const __m512i vlo = _mm512_loadu_si512(lo), vhi = _mm512_loadu_si512(hi);
            const __m512i vmn = _mm512_loadu_si512(mn);
            for (int r = 0; r < 8; r++) {
                uint8_t u[64];
                const int k = s * 256 + c * 64 + half * 32 + 4 * r;
                for (int n = 0; n < VL; n++) memcpy(u + 4 * n, &U[p * VL + n][k], 4);
                const __m512i vu = _mm512_loadu_si512(u);
                _mm512_storeu_si512((*out)[c][0][half * 8 + r], mul_bytes(vu, vlo));
                _mm512_storeu_si512((*out)[c][1][half * 8 + r], mul_bytes(vu, vhi));
                _mm512_storeu_si512((*out)[c][2][half * 8 + r], vmn);
            }
        }
}

/* y[T][OUT] for x q[T][IN] (int8) with scales dx[T][SUPERS] */
static int skip_products, skip_unpacking; /* AMX_PART=unpack / products: time one part alone */

static void product(int T, const int8_t *q, const float *dx, float *y) {
#pragma omp parallel
    {
        struct cfg config = {.palette = 1};
        for (int i = 0; i < 8; i++) config.rows[i] = 16, config.colsb[i] = 64;
        _tile_loadconfig(&config);
        btiles *b = aligned_alloc(64, sizeof(btiles) * GROUP * SUPERS);
        _Alignas(64) int32_t sums[3][16][16];
        const int threads = omp_get_num_threads(), me = omp_get_thread_num();
        const int begin = PANELS * me / threads, end = PANELS * (me + 1) / threads;
        for (int p0 = begin; p0 < end; p0 += GROUP) {
            const int panels = end - p0 < GROUP ? end - p0 : GROUP;
            /* setup: the unpacking itself is part of what is timed (the scalar gathering of u
             * is not what a packed layout pays; its vector work is) */
            for (int n = 0; n < panels && !(skip_unpacking && p0 > begin); n++)
                for (int s = 0; s < SUPERS; s++) unpack(p0 + n, s, &b[n * SUPERS + s]);
            for (int r = 0; r < T && !skip_products; r += 16)
                for (int n = 0; n < panels; n++) {
                    __m512 acc[16];
                    for (int t = 0; t < 16; t++) acc[t] = _mm512_setzero_ps();
                    for (int s = 0; s < SUPERS; s++) {
                        _tile_zero(0);
                        _tile_zero(1);
                        _tile_zero(2);
                        for (int c = 0; c < 4; c++) {
                            _tile_loadd(3, q + (size_t)r * IN + s * 256 + c * 64, IN);
                            _tile_loadd(4, b[n * SUPERS + s][c][0], 64);
                            _tile_loadd(5, b[n * SUPERS + s][c][1], 64);
                            _tile_loadd(6, b[n * SUPERS + s][c][2], 64);
                            _tile_dpbsud(0, 3, 4);
                            _tile_dpbsud(1, 3, 5);
                            _tile_dpbsud(2, 3, 6);
                        }
                        _tile_stored(0, sums[0], 64);
                        _tile_stored(1, sums[1], 64);
                        _tile_stored(2, sums[2], 64);
                        const int o = (p0 + n) * VL;
                        float dcol[VL], mcol[VL];
                        for (int i = 0; i < VL; i++) dcol[i] = D[o + i][s], mcol[i] = -DMIN[o + i][s];
                        const __m512 vd = _mm512_loadu_ps(dcol), vm = _mm512_loadu_ps(mcol);
                        for (int t = 0; t < 16; t++) {
                            const __m512i S = _mm512_add_epi32(
                                _mm512_slli_epi32(_mm512_load_si512(sums[1][t]), 4),
                                _mm512_load_si512(sums[0][t]));
                            const __m512 x = _mm512_set1_ps(dx[(size_t)(r + t) * SUPERS + s]);
                            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(vd, x), acc[t]);
                            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums[2][t])),
                                                     _mm512_mul_ps(vm, x), acc[t]);
                        }
                    }
                    for (int t = 0; t < 16 && r + t < T; t++)
                        _mm512_storeu_ps(y + (size_t)(r + t) * OUT + (p0 + n) * VL, acc[t]);
                }
        }
        free(b);
        _tile_release();
    }
}

int main(void) {
    if (syscall(SYS_arch_prctl, 0x1023, 18)) return puts("AMX not granted"), 1;
    const char *part = getenv("AMX_PART");
    skip_products = part && !strcmp(part, "unpack"), skip_unpacking = part && !strcmp(part, "products");
    srand(1);
    for (int o = 0; o < OUT; o++) {
        for (int k = 0; k < IN; k++) U[o][k] = rand() & 15;
        for (int j = 0; j < IN / 32; j++) SC[o][j] = rand() & 63, MN[o][j] = rand() & 63;
        for (int s = 0; s < SUPERS; s++) D[o][s] = 1e-3f * (rand() % 100), DMIN[o][s] = 1e-3f * (rand() % 100);
    }
    const int rows[] = {64, 128, 512};
    for (int ri = 0; ri < 3; ri++) {
        const int T = rows[ri];
        int8_t *q = malloc((size_t)T * IN);
        float *dx = malloc(sizeof(float) * T * SUPERS), *y = malloc(sizeof(float) * T * OUT);
        for (size_t i = 0; i < (size_t)T * IN; i++) q[i] = (int8_t)(rand() % 255 - 127);
        for (int i = 0; i < T * SUPERS; i++) dx[i] = 1e-2f;
        product(T, q, dx, y);
        /* check one output against the scalar formula */
        double want = 0;
        const int t0 = T - 1, o0 = OUT - 5;
        for (int s = 0; s < SUPERS; s++) {
            long long S = 0, M = 0;
            for (int k = s * 256; k < s * 256 + 256; k++)
                S += q[(size_t)t0 * IN + k] * U[o0][k] * SC[o0][k / 32], M += q[(size_t)t0 * IN + k] * MN[o0][k / 32];
            want += 1e-2 * ((double)D[o0][s] * S - (double)DMIN[o0][s] * M);
        }
        double best = 1e9;
        for (int rep = 0; rep < 9; rep++) {
            const double start = now();
            product(T, q, dx, y);
            const double took = now() - start;
            best = took < best ? took : best;
        }
        printf("rows %3d: %.3f ms  %.1f GMAC/s  (check %.4f vs %.4f)\n", T, best * 1e3,
               (double)T * IN * OUT / best / 1e9, y[(size_t)t0 * OUT + o0], want);
        free(q), free(dx), free(y);
    }
    return 0;
}
