/* Rotary embedding, KV-cache write and attention of one decoder layer for the new rows of one or
 * more sequences, each against its own cache, in one call (one parallel region over every row and
 * head), any instruction set (simd.h). Arguments: kernels.h.
 *
 * q and k are rotated in place (the halves layout of HF Llama: x cos + rotate_half(x) sin with the
 * cos/sin rows of each row's position) and k, v appended to the cache; then each row and head takes
 * softmax(q kᵀ / sqrt(d)) v over the keys it sees, in fp32.
 *
 * A row's result depends only on its query and the keys it sees, taken in position order: the
 * keys are gathered into a list first, so a tree node (which sees the cache and its ancestors,
 * with its masked siblings in between) computes exactly what the same token computes in a chain
 * or in a plain step, and nothing depends on how many rows share the call.
 */
#include <math.h>
#include <stdlib.h>

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

/* scores[j] = q · keys[seen[j]] * scale for j in [from, from + KEYS): KEYS independent chains
 * (one FMA chain is latency-bound), each over d in order as for a key taken alone */
ALWAYS_INLINE void dot_keys(const int KEYS, const float *q, const float *keys, const int64_t *seen,
                            int64_t from, int64_t d, float scale, float *scores) {
    vf acc[4];
    for (int k = 0; k < KEYS; k++) acc[k] = vzero();
    for (int64_t i = 0; i < d; i += VL) {
        const vf qi = vload(q + i);
        for (int k = 0; k < KEYS; k++)
            acc[k] = vfma(qi, vload(keys + seen[from + k] * d + i), acc[k]);
    }
    for (int k = 0; k < KEYS; k++) scores[from + k] = vsum(acc[k]) * scale;
}

/* out[i..i+WIDTH) = sum over j of p_j values[seen[j]][i..i+WIDTH), in order of j, for WIDTH / VL
 * independent accumulators */
ALWAYS_INLINE void weigh_values(const int WIDTH, const float *p, const float *values,
                                const int64_t *seen, int64_t n, int64_t d, int64_t i, vf norm,
                                float *out) {
    vf acc[64 / 4];
    for (int b = 0; b < WIDTH / VL; b++) acc[b] = vzero();
    for (int64_t j = 0; j < n; j++) {
        const vf pj = vset1(p[j]);
        const float *v = values + seen[j] * d + i;
        for (int b = 0; b < WIDTH / VL; b++) acc[b] = vfma(pj, vload(v + b * VL), acc[b]);
    }
    for (int b = 0; b < WIDTH / VL; b++) vstore(out + i + b * VL, vmul(acc[b], norm));
}

/* softmax(q · keys[seen[j]] / sqrt(d) over j < n) · values -> out, for one row and head;
 * scores: room for n rounded up to VL */
static void attend(const float *q, const float *keys, const float *values, const int64_t *seen,
                   int64_t n, int64_t d, float *scores, float *out) {
    const float scale = 1.0f / sqrtf((float)d);
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) dot_keys(4, q, keys, seen, j, d, scale, scores);
    for (; j < n; j++) dot_keys(1, q, keys, seen, j, d, scale, scores);
    float max = -INFINITY;
    for (j = 0; j < n; j++) max = scores[j] > max ? scores[j] : max;
    for (j = n; j % VL; j++) scores[j] = -INFINITY; /* e^-inf = 0 fills the last vector */
    vf total = vzero();
    for (j = 0; j < n; j += VL) { /* p_j = e^(s_j - max) */
        const vf p = vexp(vsub(vload(scores + j), vset1(max)));
        vstore(scores + j, p);
        total = vadd(total, p);
    }
    const vf norm = vset1(1.0f / vsum(total));
    for (int64_t i = 0; i < d; i += d % 64 ? 16 : 64) {
        if (d % 64) weigh_values(16, scores, values, seen, n, d, i, norm, out);
        else weigh_values(64, scores, values, seen, n, d, i, norm, out);
    }
}

struct attention_job {
    const float *qkv;
    float *const *keys, *const *values; /* by row: its sequence's cache */
    const int64_t *capacity;            /* by row */
    const int64_t *seen, *first, *count; /* row t sees keys seen[first[t] .. + count[t]] */
    float *out;
    int64_t T, longest, H, G, d;
    int failed;
};

static void attention_task(void *context, int thread, int threads) {
    struct attention_job *job = context;
    const int64_t H = job->H, d = job->d, width = (H + 2 * job->G) * d, group = H / job->G;
    float *scores = malloc(sizeof(float) * (size_t)(job->longest + VL));
    if (!scores) {
        job->failed = 1; /* several threads may set it: they all write the same value */
        return;
    }
    long long begin, end;
    share(job->T * H, thread, threads, &begin, &end);
    for (long long th = begin; th < end; th++) {
        const int64_t t = th / H, h = th % H, g = h / group, cache = g * job->capacity[t] * d;
        attend(job->qkv + t * width + h * d, job->keys[t] + cache, job->values[t] + cache,
               job->seen + job->first[t], job->count[t], d, scores, job->out + (t * H + h) * d);
    }
    free(scores);
}

int attention(float *qkv, float *const *caches_k, float *const *caches_v,
              const int64_t *capacity, const int64_t *starts, const int64_t *rows,
              const uint8_t *const *masks, int64_t S, int64_t layer, const float *cos,
              const float *sin, const int64_t *positions, float *out, int64_t H, int64_t G,
              int64_t d, int threads) {
    if (d % 16 || H % G) return 1;
    int64_t T = 0, seen_total = 0, longest = 0;
    for (int64_t s = 0; s < S; s++) {
        const int64_t end = starts[s] + rows[s];
        if (rows[s] < 0 || end > capacity[s]) return 1;
        T += rows[s];
        seen_total += rows[s] * end;
        longest = end > longest ? end : longest;
    }
    const int64_t width = (H + 2 * G) * d;
    int64_t *index = malloc(sizeof(int64_t) * (size_t)(seen_total + 3 * T + 1));
    void **by_row = malloc(sizeof(void *) * (size_t)(2 * T + 1));
    if (!index || !by_row) {
        free(index), free(by_row);
        return 2;
    }
    int64_t *first = index + seen_total, *count = first + T, *row_capacity = count + T;
    float **row_keys = (float **)by_row, **row_values = (float **)by_row + T;
    int64_t t = 0, n_seen = 0;
    for (int64_t s = 0; s < S; s++) {
        const int64_t start = starts[s], end = start + rows[s];
        float *keys = caches_k[s] + layer * G * capacity[s] * d;
        float *values = caches_v[s] + layer * G * capacity[s] * d;
        for (int64_t r = 0; r < rows[s]; r++, t++) {
            /* rotate q and k, then append k and v to the sequence's cache */
            float *row = qkv + t * width;
            for (int64_t h = 0; h < H + G; h++)
                rotate(row + h * d, cos + positions[t] * d, sin + positions[t] * d, d);
            for (int64_t g = 0; g < G; g++)
                for (int64_t i = 0; i < d; i++) {
                    keys[(g * capacity[s] + start + r) * d + i] = row[(H + g) * d + i];
                    values[(g * capacity[s] + start + r) * d + i] = row[(H + G + g) * d + i];
                }
            /* the keys it sees: causal (positions 0..start + r), or its mask row */
            const uint8_t *mask = masks[s] ? masks[s] + r * end : NULL;
            first[t] = n_seen;
            for (int64_t j = 0; j < (mask ? end : start + r + 1); j++)
                if (!mask || mask[j]) index[n_seen++] = j;
            count[t] = n_seen - first[t];
            row_keys[t] = keys;
            row_values[t] = values;
            row_capacity[t] = capacity[s];
        }
    }
    struct attention_job job = {qkv, row_keys, row_values, row_capacity, index, first, count,
                                out, T, longest, H, G, d, 0};
    run_parallel(threads, attention_task, &job);
    free(index), free(by_row);
    return job.failed ? 2 : 0;
}
