/* Runs the kernel library of another machine (built for aarch64 and run under qemu-aarch64) on
 * behalf of the tests: reads a call from stdin, runs it, writes the outputs to stdout. The tests'
 * `EmulatedLibrary` (emulated.py) speaks the other side; every number is little-endian.
 *
 * A call: int32 operation, then its int64 sizes (and float eps or scale; for the linear
 * layers the weight's size in bytes and the block format), then its input
 * arrays in argument order. The answer: int32 status, then the output arrays (for attention also
 * qkv, keys and values, which the kernel changes in place). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

static void get(void *p, size_t bytes) {
    if (bytes && fread(p, 1, bytes, stdin) != bytes) exit(0); /* the tests closed the pipe */
}
static void put(const void *p, size_t bytes) {
    if (bytes) fwrite(p, 1, bytes, stdout);
}
static void *read_array(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) exit(3);
    get(p, bytes);
    return p;
}
static int64_t size(void) {
    int64_t v;
    get(&v, sizeof v);
    return v;
}

int main(void) {
    for (;;) {
        int32_t op, status = 0;
        get(&op, sizeof op);
        if (op == 0) { /* lanes, then the isa and threading names in 16 bytes each */
            char names[32] = {0};
            int32_t lanes = kernel_lanes();
            strncpy(names, kernel_isa(), 15);
            strncpy(names + 16, kernel_threading(), 15);
            put(&status, sizeof status);
            put(&lanes, sizeof lanes);
            put(names, sizeof names);
        } else if (op == 1 || op == 2 || op == 6 || op == 7) {
            /* linear_f32, _bf16, _f16, _quant: T I O threads bytes-of-w format; x w -> y */
            int64_t T = size(), I = size(), O = size(), threads = size(), w_bytes = size();
            int64_t format = size();
            float *x = read_array(sizeof(float) * T * I);
            void *w = read_array(w_bytes);
            float *y = calloc(T * O + 1, sizeof(float));
            status = op == 1 ? linear_f32(x, w, y, T, I, O, threads)
                   : op == 2 ? linear_bf16(x, w, y, T, I, O, threads)
                   : op == 6 ? linear_f16(x, w, y, T, I, O, threads)
                             : linear_quant(x, w, y, T, I, O, (int)format, threads);
            put(&status, sizeof status);
            put(y, sizeof(float) * T * O);
            free(x), free(w), free(y);
        } else if (op == 8) { /* kernel_format: format -> status, the name in 16 bytes */
            char name[16] = {0};
            const char *found = kernel_format((int)size());
            if (found) strncpy(name, found, 15);
            status = found ? 0 : 1;
            put(&status, sizeof status);
            put(name, sizeof name);
        } else if (op == 9) { /* kernel_peak: iterations threads -> status 0, the count */
            int64_t iterations = size(), threads = size();
            int64_t macs = kernel_peak(iterations, (int)threads);
            put(&status, sizeof status);
            put(&macs, sizeof macs);
        } else if (op == 12) { /* kernel_read: bytes threads; the bytes -> status 0, the sum */
            int64_t bytes = size(), threads = size();
            uint8_t *data = read_array(bytes > 0 ? (size_t)bytes : 0);
            int64_t sum = kernel_read(data, bytes, (int)threads);
            put(&status, sizeof status);
            put(&sum, sizeof sum);
            free(data);
        } else if (op == 3) { /* attention: S H G d kv_f16 threads shipped rope_rows T window
                                 scale(float), then per sequence start rows capacity has_mask;
                                 qkv, per sequence the layer's keys values [mask], the shipped
                                 rows of cos and sin, positions -> out qkv, per sequence keys
                                 values */
            int64_t S = size(), H = size(), G = size(), d = size(), kv_f16 = size();
            int64_t threads = size();
            const size_t number = kv_f16 ? 2 : sizeof(float);
            int64_t shipped = size(), rope_rows = size(), T = size(), window = size();
            float scale;
            get(&scale, sizeof scale);
            int64_t *starts = calloc(S + 1, sizeof(int64_t)), *rows = calloc(S + 1, sizeof(int64_t));
            int64_t *capacity = calloc(S + 1, sizeof(int64_t)), *has_mask = calloc(S + 1, sizeof(int64_t));
            void **keys = calloc(S + 1, sizeof(void *)), **values = calloc(S + 1, sizeof(void *));
            uint8_t **masks = calloc(S + 1, sizeof(uint8_t *));
            for (int64_t s = 0; s < S; s++)
                starts[s] = size(), rows[s] = size(), capacity[s] = size(), has_mask[s] = size();
            size_t qkv_bytes = sizeof(float) * T * (H + 2 * G) * d;
            float *qkv = read_array(qkv_bytes);
            for (int64_t s = 0; s < S; s++) {
                size_t cache_bytes = number * G * capacity[s] * d;
                keys[s] = read_array(cache_bytes), values[s] = read_array(cache_bytes);
                masks[s] = has_mask[s] ? read_array((size_t)(rows[s] * (starts[s] + rows[s])))
                                       : NULL;
            }
            float *cos = read_array(sizeof(float) * shipped * d);
            float *sin = read_array(sizeof(float) * shipped * d);
            int64_t *positions = read_array(sizeof(int64_t) * T);
            float *out = calloc(T * H * d + 1, sizeof(float));
            status = attention(qkv, keys, values, capacity, starts, rows,
                               (const uint8_t *const *)masks, S, 0, cos, sin, rope_rows,
                               positions, out, H, G, d, window, scale, (int)kv_f16, threads);
            put(&status, sizeof status);
            put(out, sizeof(float) * T * H * d);
            put(qkv, qkv_bytes);
            for (int64_t s = 0; s < S; s++) {
                put(keys[s], number * G * capacity[s] * d);
                put(values[s], number * G * capacity[s] * d);
                free(keys[s]), free(values[s]), free(masks[s]);
            }
            free(qkv), free(cos), free(sin), free(positions), free(out);
            free(starts), free(rows), free(capacity), free(has_mask), free(keys), free(values);
            free(masks);
        } else if (op == 4) { /* rms_norm: T H eps(float); x w -> out */
            int64_t T = size(), H = size();
            float eps;
            get(&eps, sizeof eps);
            float *x = read_array(sizeof(float) * T * H), *w = read_array(sizeof(float) * H);
            float *out = calloc(T * H + 1, sizeof(float));
            status = rms_norm(x, w, out, T, H, eps);
            put(&status, sizeof status);
            put(out, sizeof(float) * T * H);
            free(x), free(w), free(out);
        } else if (op == 5 || op == 10) { /* silu_mul (5), gelu_mul (10): T I; gate_up -> out */
            int64_t T = size(), I = size();
            float *gate_up = read_array(sizeof(float) * T * 2 * I);
            float *out = calloc(T * I + 1, sizeof(float));
            status = (op == 5 ? silu_mul : gelu_mul)(gate_up, out, T, I);
            put(&status, sizeof status);
            put(out, sizeof(float) * T * I);
            free(gate_up), free(out);
        } else if (op == 11) { /* head_norm: T H G d eps(float); qkv q_w k_w -> qkv */
            int64_t T = size(), H = size(), G = size(), d = size();
            float eps;
            get(&eps, sizeof eps);
            size_t qkv_bytes = sizeof(float) * T * (H + 2 * G) * d;
            float *qkv = read_array(qkv_bytes);
            float *q_w = read_array(sizeof(float) * d), *k_w = read_array(sizeof(float) * d);
            status = head_norm(qkv, q_w, k_w, T, H, G, d, eps);
            put(&status, sizeof status);
            put(qkv, qkv_bytes);
            free(qkv), free(q_w), free(k_w);
        } else {
            return 2;
        }
        fflush(stdout);
    }
}
