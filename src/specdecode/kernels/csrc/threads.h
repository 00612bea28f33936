/* Spreading a kernel's work over threads: OpenMP where the compiler has it, else a small pool of
 * POSIX threads (Apple's clang ships without OpenMP). Which one was built is `kernel_threading()`.
 *
 * A task is called once per thread with its index; it splits the work by that index alone, so a
 * result never depends on which thread or how many threads computed it. */
#ifndef SPECDECODE_THREADS_H
#define SPECDECODE_THREADS_H

typedef void (*task_fn)(void *context, int thread, int threads);

/* run task(context, i, n) for i = 0..n-1 on n <= `threads` threads; returns when all are done */
void run_parallel(int threads, task_fn task, void *context);

/* the [begin, end) share of `count` items for thread `thread` of `threads` */
static inline void share(long long count, int thread, int threads, long long *begin,
                         long long *end) {
    long long chunk = (count + threads - 1) / threads;
    *begin = thread * chunk < count ? thread * chunk : count;
    *end = *begin + chunk < count ? *begin + chunk : count;
}

#endif
