/* Rotary embedding, KV-cache write and attention of one decoder layer for the new rows of one or
 * more sequences, each against its own cache, in one call (one parallel region over every row and
 * head), any instruction set (simd.h). Arguments: kernels.h.
 *
 * q and k are rotated in place (the halves layout of HF Llama: x cos + rotate_half(x) sin with the
 * cos/sin rows of each row's position) and k, v appended to the cache; then each row and head takes
 * softmax(q kᵀ · scale) v over the keys it sees (scale 1 / sqrt(d) but for Gemma), in fp32, where
 * a sliding window hides the keys `window` or more positions behind (Mistral, Gemma's local layers).
 *
 * The cache holds fp32 or fp16 numbers (kv_f16): an fp16 cache halves what a step reads of it,
 * which for several sequences' caches (each read once per step) outweighs their weights. k and v
 * are rounded to fp16 once, when written (to nearest, ties to even: what torch's conversion does,
 * so the torch path writes the same cache), and widened exactly when read.
 *
 * A row's result depends only on its query and the keys it sees, taken in position order: the
 * keys are gathered into a list first, so a tree node (which sees the cache and its ancestors,
 * with its masked siblings in between) computes exactly what the same token computes in a chain
 * or in a plain step, and nothing depends on how many rows share the call.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "simd.h"
#include "threads.h"

static void rotate(float *x, const float *cos, const float *sin, int64_t d) {
    const int64_t half = d / 2;
    for (int64_t i = 0; i < half; i++) {
        const float a = x[i], b = x[i + half];
        x[i] = a * cos[i] - b * sin[i];
        x[i + half] = b * cos[i + half] + a * sin[i + half];
    }
}

/* VL numbers of a cache (fp16 or fp32) from element i, widened exactly */
ALWAYS_INLINE vf kv_load(const int F16, const void *cache, int64_t i) {
    return F16 ? vload_f16((const uint16_t *)cache + i) : vload((const float *)cache + i);
}

/* A decoding step reads each sequence's cache once, from memory: a thread waiting for one key
 * at a time is bound by the memory's latency, not its bandwidth. So the key or value AHEAD
 * places further on is requested early (into the cache, without waiting for it). */
#define AHEAD 32

/* ask for the numbers [i, i + n) of a cache (fp16 or fp32) to be brought into the cache */
ALWAYS_INLINE void kv_prefetch(const int F16, const void *cache, int64_t i, int64_t n) {
    const char *from = (const char *)cache + i * (F16 ? 2 : 4);
    for (int64_t byte = 0; byte < n * (F16 ? 2 : 4); byte += 64) __builtin_prefetch(from + byte);
}

/* x rounded to IEEE half precision, to nearest with ties to even (overflow to infinity) */
static uint16_t f32_to_f16(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    const uint32_t sign = (b >> 16) & 0x8000, magnitude = b & 0x7fffffff;
    if (magnitude >= 0x7f800000) /* infinity, NaN (kept quiet) */
        return (uint16_t)(sign | 0x7c00 | (magnitude > 0x7f800000 ? 0x200 : 0));
    if (magnitude >= 0x477ff000) return (uint16_t)(sign | 0x7c00); /* rounds past 65504 */
    if (magnitude < 0x38800000) { /* below 2^-14: a subnormal half (or zero) */
        const uint32_t shift = 126 - (magnitude >> 23); /* >= 14 */
        if (shift > 24) return (uint16_t)sign;
        const uint32_t mantissa = (magnitude & 0x7fffff) | 0x800000, kept = mantissa >> shift;
        const uint32_t rest = mantissa & ((1u << shift) - 1), half = 1u << (shift - 1);
        return (uint16_t)(sign | (kept + (rest > half || (rest == half && (kept & 1)))));
    }
    const uint32_t kept = (magnitude >> 13) - (112u << 10), rest = magnitude & 0x1fff;
    return (uint16_t)(sign | (kept + (rest > 0x1000 || (rest == 0x1000 && (kept & 1)))));
}

/* scores[r stride + from + k] = q_r · keys[seen[from + k]] * scale for k < VL and NR heads r
 * (q_r = q + r d, NR <= SCORE_HEADS) that share the keys: each key vector is read once for all of
 * them, SCORE_KEYS keys at a time (their accumulators fit the registers); one accumulator per head
 * and key over d in order, then the VL sums of each head at once (vsums adds every key's lanes in
 * the same order, so a key's score depends on nothing it is scored with) */
ALWAYS_INLINE void score_keys(const int F16, const int NR, const float *q, const void *keys,
                              const int64_t *seen, int64_t from, int64_t d, vf scale,
                              float *scores, int64_t stride) {
    vf sums[SCORE_HEADS][VL];
    for (int part = 0; part < VL; part += SCORE_KEYS) {
        vf acc[SCORE_HEADS][SCORE_KEYS];
        for (int r = 0; r < NR; r++)
            for (int k = 0; k < SCORE_KEYS; k++) acc[r][k] = vzero();
        for (int64_t i = 0; i < d; i += VL) {
            vf qi[SCORE_HEADS];
            for (int r = 0; r < NR; r++) qi[r] = vload(q + r * d + i);
            for (int k = 0; k < SCORE_KEYS; k++) {
                const vf key = kv_load(F16, keys, seen[from + part + k] * d + i);
                for (int r = 0; r < NR; r++) acc[r][k] = vfma(qi[r], key, acc[r][k]);
            }
        }
        for (int r = 0; r < NR; r++)
            for (int k = 0; k < SCORE_KEYS; k++) sums[r][part + k] = acc[r][k];
    }
    for (int r = 0; r < NR; r++) vstore(scores + r * stride + from, vmul(vsums(sums[r]), scale));
}

/* acc_r[i..i+WIDTH) += p_r[j] values[seen[j]][i..i+WIDTH) for j in [j0, j1), in order of j, for NR
 * heads r (p_r = p + r * stride, acc_r = acc + r * d: their sums so far, zero where `first`) that
 * share the values: each value vector is read once for all of them, every head's sum in its own
 * registers between a load and a store of acc */
ALWAYS_INLINE void weigh_values(const int F16, const int NR, const int WIDTH, const float *p,
                                int64_t stride, const void *values, const int64_t *seen, int64_t j0,
                                int64_t j1, int64_t d, int64_t i, int first, float *acc) {
    vf sums[ATTENTION_HEADS][4];
    for (int r = 0; r < NR; r++)
        for (int b = 0; b < WIDTH / VL; b++)
            sums[r][b] = first ? vzero() : vload(acc + r * d + i + b * VL);
    for (int64_t j = j0; j < j1; j++) {
        const int64_t v = seen[j] * d + i;
        if (j + AHEAD < j1) kv_prefetch(F16, values, seen[j + AHEAD] * d + i, WIDTH);
        vf pj[ATTENTION_HEADS];
        for (int r = 0; r < NR; r++) pj[r] = vset1(p[r * stride + j]);
        for (int b = 0; b < WIDTH / VL; b++) {
            const vf value = kv_load(F16, values, v + b * VL);
            for (int r = 0; r < NR; r++) sums[r][b] = vfma(pj[r], value, sums[r][b]);
        }
    }
    for (int r = 0; r < NR; r++)
        for (int b = 0; b < WIDTH / VL; b++) vstore(acc + r * d + i + b * VL, sums[r][b]);
}

/* the scores s_j of NR heads (scores + r * stride, j < n; padded to a multiple of VL) replaced by
 * e^(s_j - max) (the padding by 0), and norm[r] = 1 / their sum */
ALWAYS_INLINE void softmax_heads(const int NR, float *scores, int64_t stride, int64_t n,
                                 vf norm[]) {
    for (int r = 0; r < NR; r++) {
        float *sr = scores + r * stride;
        for (int64_t j = n; j % VL; j++) sr[j] = -INFINITY; /* the padding: e^-inf = 0 */
        vf most = vset1(-INFINITY);
        for (int64_t j = 0; j < n; j += VL) most = vmax(most, vload(sr + j));
        float lanes[VL], max = -INFINITY;
        vstore(lanes, most);
        for (int k = 0; k < VL; k++) max = lanes[k] > max ? lanes[k] : max;
        vf total = vzero();
        for (int64_t j = 0; j < n; j += VL) { /* p_j = e^(s_j - max) */
            const vf e = vexp(vsub(vload(sr + j), vset1(max)));
            vstore(sr + j, e);
            total = vadd(total, e);
        }
        norm[r] = vset1(1.0f / vsum(total));
    }
}

/* keys a block of rows takes in turn, each row all of its part of them: 256 keys' values of 128
 * fp16 numbers are 64 KB, in L2 while every row weighs them */
#define KEY_BLOCK 256
/* rows of one sequence and KV group attention.c takes together */
#define ROW_BLOCK 8

/* softmax(q_r,h · keys[seen[j]] · score_scale over j < n[r]) · values -> out_r,h for NR
 * consecutive heads h of `rows` (<= ROW_BLOCK) consecutive rows r of one sequence that share a KV
 * group (q_r,h = q + r q_stride + h d, out likewise with out_stride), row r seeing the first n[r]
 * of seen (each row's keys a prefix of the next row's, as a prompt's rows see theirs; one row
 * alone: any keys).
 * The keys and values are taken KEY_BLOCK at a time, every row its part of them in turn, so that
 * they come from memory once for all the rows rather than once a row, and each row and head
 * computes exactly what it computes alone: its scores, then its sum over j in order, the same
 * operations. seen: n[rows - 1] indices padded to a multiple of VL (with valid ones); scores:
 * rows x NR x stride, stride >= n rounded up to VL; partial: rows x NR x d. */
ALWAYS_INLINE void attend(const int F16, const int NR, int64_t rows, const float *q,
                          int64_t q_stride, const void *keys, const void *values,
                          const int64_t *seen, const int64_t *n, int64_t d, float score_scale,
                          float *scores, int64_t stride, float *partial, float *out,
                          int64_t out_stride) {
    const vf scale = vset1(score_scale);
    const int64_t last = n[rows - 1];
    for (int64_t j0 = 0; j0 < last; j0 += KEY_BLOCK)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = j0; j < j0 + KEY_BLOCK && j < n[r]; j += VL) {
                if (r == 0 || j >= n[r - 1]) /* the first row to reach these keys */
                    for (int64_t k = j + AHEAD; k < j + AHEAD + VL && k < last; k++)
                        kv_prefetch(F16, keys, seen[k] * d, d);
                for (int h = 0; h < NR; h += SCORE_HEADS)
                    score_keys(F16, NR - h < SCORE_HEADS ? NR - h : SCORE_HEADS,
                               q + r * q_stride + h * d, keys, seen, j, d, scale,
                               scores + (r * NR + h) * stride, stride);
            }
    vf norm[ROW_BLOCK][ATTENTION_HEADS];
    for (int64_t r = 0; r < rows; r++) softmax_heads(NR, scores + r * NR * stride, stride, n[r],
                                                     norm[r]);
    /* values VL x WIDTH at a time: 4 vectors per head for up to 4 heads, 2 for more (their
       accumulators fit the registers) */
    const int WIDTH = d % ((NR <= 4 ? 4 : 2) * VL) ? VL : (NR <= 4 ? 4 : 2) * VL;
    for (int64_t j0 = 0; j0 < last; j0 += KEY_BLOCK)
        for (int64_t r = 0; r < rows; r++) {
            const int64_t j1 = j0 + KEY_BLOCK < n[r] ? j0 + KEY_BLOCK : n[r];
            const float *p = scores + r * NR * stride;
            float *acc = partial + r * NR * d;
            for (int64_t i = 0; j0 < j1 && i < d; i += WIDTH) {
                if (WIDTH == VL)
                    weigh_values(F16, NR, VL, p, stride, values, seen, j0, j1, d, i, !j0, acc);
                else if (NR <= 4)
                    weigh_values(F16, NR, 4 * VL, p, stride, values, seen, j0, j1, d, i, !j0, acc);
                else weigh_values(F16, NR, 2 * VL, p, stride, values, seen, j0, j1, d, i, !j0, acc);
            }
        }
    for (int64_t r = 0; r < rows; r++)
        for (int h = 0; h < NR; h++)
            for (int64_t i = 0; i < d; i += VL)
                vstore(out + r * out_stride + h * d + i,
                       vmul(vload(partial + (r * NR + h) * d + i), norm[r][h]));
}

/* The work is a list of units, each the heads of one KV group for one row, ordered by sequence,
 * then KV group, then row: a thread's consecutive units read one sequence's keys and values of
 * one group for each of its rows in turn, so only the first finds them in memory and the others
 * in its own core's cache. In row order, the other thread would take a draft's second row and
 * read the whole cache from memory again. */
struct attention_job {
    const float *qkv;
    void *const *keys, *const *values; /* by row: its sequence's layer cache */
    const int64_t *capacity;            /* by row */
    const int64_t *seen, *first, *count; /* row t sees keys seen[first[t] .. + count[t]] */
    const int64_t *unit_row, *unit_group; /* by unit */
    const int64_t *before;              /* by unit: the work of the units before it (+ one: all) */
    float *out;
    int64_t U, longest, H, G, d;
    int64_t row_block; /* rows a block takes at most: ROW_BLOCK, or the longest sequence's */
    float scale;
    int f16;
    atomic_int failed; /* set by any thread whose scratch could not be allocated */
};

/* heads [h, h + nr) of rows t .. t + rows - 1, nr <= ATTENTION_HEADS, as a constant */
#define HEADS(NR) case NR: \
    if (NR <= ATTENTION_HEADS) \
        attend(F16, NR, rows, q, width, keys, values, seen, job->count + t, d, job->scale, \
               scores, stride, partial, out, H * d); \
    break;

/* rows t + 1, t + 2, .. (up to ROW_BLOCK in all) that may join row t's block of units th .. end:
 * whole KV groups of one sequence's consecutive rows, each row's keys a prefix of the next's */
static int64_t block_rows(const struct attention_job *job, long long th, long long end) {
    const int64_t group = job->H / job->G, u = th / group, t = job->unit_row[u];
    int64_t rows = 1;
    if (th % group || group > ATTENTION_HEADS) return 1;
    while (rows < job->row_block && th + (rows + 1) * group <= end) {
        const int64_t next = job->unit_row[u + rows], prev = next - 1;
        if (job->unit_group[u + rows] != job->unit_group[u] || next != t + rows ||
            job->keys[next] != job->keys[t] || job->count[next] < job->count[prev] ||
            memcmp(job->seen + job->first[next], job->seen + job->first[prev],
                   sizeof(int64_t) * (size_t)job->count[prev]))
            break;
        rows++;
    }
    return rows;
}

/* The first of thread i's unit-heads: threads take consecutive unit-heads of about equal work.
 * A unit's work is its row's keys, COLD times over for a sequence's first row: that row reads
 * the group's keys and values from memory, its other rows (a draft, a prompt chunk) find them in
 * the cache. Split by rows alone, the thread holding one sequence's draft rows would wait for the
 * other holding several sequences' first rows. */
#define COLD 2
static long long work_start(const struct attention_job *job, int i, int threads) {
    const int64_t U = job->U, group = job->H / job->G, goal = job->before[U] * i / threads;
    if (i >= threads) return (long long)(U * group);
    int64_t u = 0;
    while (job->before[u + 1] <= goal) u++;
    const int64_t head_work = (job->before[u + 1] - job->before[u]) / group;
    return (long long)(u * group + (goal - job->before[u] + head_work - 1) / head_work);
}

ALWAYS_INLINE void attention_share(const int F16, struct attention_job *job, int thread,
                                   int threads) {
    const int64_t H = job->H, d = job->d, width = (H + 2 * job->G) * d, group = H / job->G;
    const int64_t stride = job->longest + VL, heads = job->row_block * ATTENTION_HEADS;
    float *scores = malloc(sizeof(float) * (size_t)(heads * (stride + d)));
    if (!scores) {
        atomic_store_explicit(&job->failed, 1, memory_order_relaxed);
        return;
    }
    float *partial = scores + heads * stride;
    const long long begin = work_start(job, thread, threads);
    const long long end = work_start(job, thread + 1, threads);
    for (long long th = begin; th < end;) {
        /* this thread's next heads of one KV group, at most ATTENTION_HEADS, for one row or a
           block of rows */
        const int64_t u = th / group, t = job->unit_row[u], g = job->unit_group[u];
        const int64_t rows = block_rows(job, th, end);
        const int64_t h = g * group + th % group, cache = g * job->capacity[t] * d;
        int64_t nr = (g + 1) * group - h;
        nr = nr < end - th ? nr : end - th;
        nr = nr < ATTENTION_HEADS ? nr : ATTENTION_HEADS;
        const size_t bytes = (size_t)cache * (F16 ? sizeof(uint16_t) : sizeof(float));
        const float *q = job->qkv + t * width + h * d;
        const void *keys = (const char *)job->keys[t] + bytes;
        const void *values = (const char *)job->values[t] + bytes;
        const int64_t *seen = job->seen + job->first[t + rows - 1];
        float *out = job->out + (t * H + h) * d;
        _Static_assert(ATTENTION_HEADS <= 8, "add cases below");
        switch (nr) { HEADS(1) HEADS(2) HEADS(3) HEADS(4) HEADS(5) HEADS(6) HEADS(7) HEADS(8) }
        th += rows * nr;
    }
    free(scores);
}

static void attention_task(void *context, int thread, int threads) {
    struct attention_job *job = context;
    if (job->f16) attention_share(1, job, thread, threads);
    else attention_share(0, job, thread, threads);
}

int attention(float *qkv, void *const *caches_k, void *const *caches_v,
              const int64_t *capacity, const int64_t *starts, const int64_t *rows,
              const uint8_t *const *masks, int64_t S, int64_t layer, const float *cos,
              const float *sin, int64_t rope_rows, const int64_t *positions, float *out,
              int64_t H, int64_t G, int64_t d, int64_t window, float scale, int kv_f16,
              int threads) {
    if (d % 16 || H % G || window < 0 || (kv_f16 != 0 && kv_f16 != 1)) return 1;
    const size_t number = kv_f16 ? sizeof(uint16_t) : sizeof(float);
    int64_t T = 0, seen_total = 0, longest = 0, row_block = 1;
    for (int64_t s = 0; s < S; s++) {
        const int64_t end = starts[s] + rows[s];
        if (rows[s] < 0 || starts[s] < 0 || end > capacity[s]) return 1;
        T += rows[s];
        row_block = rows[s] > row_block ? (rows[s] < ROW_BLOCK ? rows[s] : ROW_BLOCK) : row_block;
        seen_total += rows[s] * (end + VL); /* a row's keys, padded to a multiple of VL */
        longest = end > longest ? end : longest;
    }
    for (int64_t t = 0; t < T; t++) /* a row of the rotary tables for each, before any write */
        if (positions[t] < 0 || positions[t] >= rope_rows) return 1;
    const int64_t width = (H + 2 * G) * d;
    int64_t *index = malloc(sizeof(int64_t) * (size_t)(seen_total + 3 * T + 3 * T * G + 1));
    void **by_row = malloc(sizeof(void *) * (size_t)(2 * T + 1));
    if (!index || !by_row) {
        free(index), free(by_row);
        return 2;
    }
    int64_t *first = index + seen_total, *count = first + T, *row_capacity = count + T;
    int64_t *unit_row = row_capacity + T, *unit_group = unit_row + T * G;
    int64_t *before = unit_group + T * G; /* T G + 1 */
    void **row_keys = by_row, **row_values = by_row + T;
    int64_t t = 0, n_seen = 0;
    for (int64_t s = 0; s < S; s++) {
        const int64_t start = starts[s], end = start + rows[s];
        const size_t layer_bytes = (size_t)(layer * G * capacity[s] * d) * number;
        char *keys = (char *)caches_k[s] + layer_bytes, *values = (char *)caches_v[s] + layer_bytes;
        for (int64_t r = 0; r < rows[s]; r++, t++) {
            /* rotate q and k, then append k and v to the sequence's cache */
            float *row = qkv + t * width;
            for (int64_t h = 0; h < H + G; h++)
                rotate(row + h * d, cos + positions[t] * d, sin + positions[t] * d, d);
            for (int64_t g = 0; g < G; g++)
                for (int64_t i = 0; i < d; i++) {
                    const int64_t at = (g * capacity[s] + start + r) * d + i;
                    const float k = row[(H + g) * d + i], v = row[(H + G + g) * d + i];
                    if (kv_f16) {
                        ((uint16_t *)keys)[at] = f32_to_f16(k);
                        ((uint16_t *)values)[at] = f32_to_f16(v);
                    } else {
                        ((float *)keys)[at] = k;
                        ((float *)values)[at] = v;
                    }
                }
            /* the keys it sees: causal (positions 0..start + r), or its mask row; within a
             * window, only those less than `window` positions behind its own (a cached key's
             * position is its index, a new row's its entry in positions) */
            const uint8_t *mask = masks[s] ? masks[s] + r * end : NULL;
            const int64_t *row_positions = positions + t - r;
            first[t] = n_seen;
            for (int64_t j = 0; j < (mask ? end : start + r + 1); j++) {
                const int64_t at = j < start ? j : row_positions[j - start];
                if ((!mask || mask[j]) && (!window || at > positions[t] - window))
                    index[n_seen++] = j;
            }
            count[t] = n_seen - first[t];
            while (count[t] && (n_seen - first[t]) % VL) index[n_seen++] = index[first[t]];
            row_keys[t] = keys;
            row_values[t] = values;
            row_capacity[t] = capacity[s];
        }
    }
    /* the units: by sequence, then KV group, then row */
    int64_t u = 0;
    before[0] = 0;
    for (int64_t s = 0, row0 = 0; s < S; row0 += rows[s], s++)
        for (int64_t g = 0; g < G; g++)
            for (int64_t r = 0; r < rows[s]; r++, u++) {
                unit_row[u] = row0 + r;
                unit_group[u] = g;
                before[u + 1] = before[u] + count[row0 + r] * (H / G) * (r == 0 ? COLD : 1);
            }
    struct attention_job job = {qkv, row_keys, row_values, row_capacity, index, first, count,
                                unit_row, unit_group, before, out, u, longest, H, G, d,
                                row_block, scale, kv_f16, 0};
    run_parallel(threads, attention_task, &job);
    free(index), free(by_row);
    /* the threads have joined: their stores are seen */
    return atomic_load_explicit(&job.failed, memory_order_relaxed) ? 2 : 0;
}
