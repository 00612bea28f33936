/* The two peaks of this path that `bench --floor` measures a step against.
 *
 * The read peak: every thread streams its share of a buffer far larger than the caches, with
 * the kernels' own loads and L2 prefetches, so the bandwidth floor is what memory delivers to
 * code like ours (torch's sum reads slower on some hosts, and a floor the kernels beat is no
 * floor: docs/benchmarks/kernel-paths).
 *
 * The instruction peak: `vdot4`, the block formats' integer dot product (simd.h), in
 * a loop that touches no memory, on every thread; where the kernels sum byte pairs in 16 bits
 * before widening (VDOT_PAIRS16), that cheaper form: `vdot2_16` and `vadd16`. `bench --floor`
 * divides a step's multiply-adds by it, so the gap between a kernel and the most its
 * instructions can do is a number.
 *
 * CHAINS independent accumulators hide the instruction's latency (a few cycles on every CPU we
 * know) behind its throughput; with their operands they fit the 16 registers of the narrower
 * paths. */
#include "kernels.h"
#include "simd.h"
#include "threads.h"

#define CHAINS 8
#ifdef VDOT_PAIRS16
#define PEAK_DOT(acc, u, x) vadd16(acc, vdot2_16(u, x))
#else
#define PEAK_DOT(acc, u, x) vdot4(acc, u, x)
#endif

/* tells the compiler `v` may have changed, at no cost where it stays in a register: without it
 * a loop adding the same products could be folded into one multiplication */
#if defined(SPECDECODE_AVX512) || defined(SPECDECODE_AVX2)
#define OPAQUE(v) __asm__ volatile("" : "+v"(v))
#elif defined(SPECDECODE_NEON)
#define OPAQUE(v) __asm__ volatile("" : "+w"(v))
#else
#define OPAQUE(v) __asm__ volatile("" : "+m"(v))
#endif

struct peak_job {
    int64_t iterations;
    int32_t seed;
    int32_t sums[256]; /* one per thread: a result the loops must produce */
};

static void peak_task(void *context, int thread, int threads) {
    struct peak_job *job = context;
    (void)threads;
    const int64_t iterations = job->iterations;
    /* each chain its own pair of operands: paths whose dot is several instructions would
     * otherwise share the first ones between chains. Named variables, not arrays: GCC keeps
     * arrays that inline asm touches in memory. */
    vi u0 = viset1(job->seed & 0x7f7f7f7f), u1 = viset1((job->seed + 1) & 0x7f7f7f7f);
    vi u2 = viset1((job->seed + 2) & 0x7f7f7f7f), u3 = viset1((job->seed + 3) & 0x7f7f7f7f);
    vi x0 = viset1(job->seed + thread), x1 = viset1(job->seed + thread + 1);
    vi a0 = viset1(0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int64_t i = 0; i < iterations; i++) {
        OPAQUE(u0);
        OPAQUE(u1);
        OPAQUE(u2);
        OPAQUE(u3);
        OPAQUE(x0);
        OPAQUE(x1);
        a0 = PEAK_DOT(a0, u0, x0);
        a1 = PEAK_DOT(a1, u1, x0);
        a2 = PEAK_DOT(a2, u2, x0);
        a3 = PEAK_DOT(a3, u3, x0);
        a4 = PEAK_DOT(a4, u0, x1);
        a5 = PEAK_DOT(a5, u1, x1);
        a6 = PEAK_DOT(a6, u2, x1);
        a7 = PEAK_DOT(a7, u3, x1);
    }
    const vi all[CHAINS] = {a0, a1, a2, a3, a4, a5, a6, a7};
    int32_t lanes[VL * CHAINS], sum = 0;
    memcpy(lanes, all, sizeof lanes);
    for (int l = 0; l < VL * CHAINS; l++) sum += lanes[l];
    job->sums[thread] = sum; /* thread < threads <= 256: kernel_peak checks */
}

int64_t kernel_peak(int64_t iterations, int threads) {
    if (iterations < 1 || threads < 1 || threads > 256) return 0;
    struct peak_job job = {.iterations = iterations, .seed = (int32_t)(iterations * 2654435761u)};
    run_parallel(threads, peak_task, &job);
    return iterations * CHAINS * 4 * VL * threads; /* multiply-adds: a vdot4 is VL lanes of 4 */
}

/* how far ahead of its loads a reading thread asks for lines into L2 (the kernels ask for the next
 * panel group; 4 KB read fastest of 0 / 4 / 16 KB on the hosts measured) */
#define READ_AHEAD 4096
#define READ_VECTORS 4 /* independent sums a round: loads are not held up by one add chain */

struct read_job {
    const uint8_t *data;
    int64_t rounds;         /* of READ_VECTORS vectors; the words after them are thread 0's */
    int64_t words;          /* int32 words in all */
    uint32_t sums[256];     /* one per thread */
};

static void read_task(void *context, int thread, int threads) {
    struct read_job *job = context;
    const int64_t round_bytes = (int64_t)READ_VECTORS * VL * 4;
    long long begin, end;
    share(job->rounds, thread, threads, &begin, &end);
    vi a0 = viset1(0), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t r = begin; r < end; r++) {
        const uint8_t *p = job->data + r * round_bytes;
        if (r * round_bytes + READ_AHEAD < 4 * job->words) __builtin_prefetch(p + READ_AHEAD, 0, 2);
        a0 = viadd(a0, viload(p));
        a1 = viadd(a1, viload(p + VL * 4));
        a2 = viadd(a2, viload(p + 2 * VL * 4));
        a3 = viadd(a3, viload(p + 3 * VL * 4));
    }
    const vi all[READ_VECTORS] = {a0, a1, a2, a3};
    uint32_t lanes[VL * READ_VECTORS], sum = 0;
    memcpy(lanes, all, sizeof lanes);
    for (int l = 0; l < VL * READ_VECTORS; l++) sum += lanes[l];
    if (thread == 0) /* the words that fill no round */
        for (int64_t w = job->rounds * READ_VECTORS * VL; w < job->words; w++) {
            uint32_t word;
            memcpy(&word, job->data + 4 * w, sizeof word);
            sum += word;
        }
    job->sums[thread] = sum;
}

int64_t kernel_read(const uint8_t *data, int64_t bytes, int threads) {
    if (bytes < 0 || bytes % 4 || threads < 1 || threads > 256) return -1;
    struct read_job job = {.data = data, .rounds = bytes / (READ_VECTORS * VL * 4),
                           .words = bytes / 4};
    run_parallel(threads, read_task, &job);
    uint32_t sum = 0;
    for (int t = 0; t < threads; t++) sum += job.sums[t];
    return sum;
}
