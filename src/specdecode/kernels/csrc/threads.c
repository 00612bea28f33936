/* `run_parallel` (threads.h): OpenMP, or a persistent pool of POSIX threads.
 *
 * The pool exists because a decoding step makes one kernel call per linear layer, norm and
 * attention, each a fraction of a millisecond: creating threads per call would cost more than the
 * work. Workers spin briefly between calls (the next
 * one usually comes within microseconds), then sleep on a condition variable. */
#include "kernels.h"
#include "threads.h"

#ifdef _OPENMP
#include <omp.h>

const char *kernel_threading(void) { return "OpenMP"; }

void run_parallel(int threads, task_fn task, void *context) {
    if (threads <= 1) {
        task(context, 0, 1);
        return;
    }
#pragma omp parallel num_threads(threads)
    task(context, omp_get_thread_num(), omp_get_num_threads());
}

#else
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define MAX_WORKERS 255
#define SPINS 20000 /* polls of the job counter before a worker sleeps */

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ volatile("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

static struct {
    pthread_mutex_t call;        /* one caller at a time owns the pool */
    pthread_mutex_t lock;        /* guards sleeping and waking */
    pthread_cond_t wake;
    int workers;                 /* started so far; worker w runs index w + 1 */
    atomic_uint job;             /* bumped once per call: workers wait for a new value */
    atomic_int running;          /* workers that have not finished the current job */
    unsigned first_job;          /* the job counter when the newest workers were started */
    task_fn task;
    void *context;
    int threads;
} pool = {.call = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER};

/* a forked child has none of the parent's workers: it starts its own */
static void forget_workers(void) {
    pthread_mutex_init(&pool.call, NULL);
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pool.workers = 0;
}

const char *kernel_threading(void) { return "pthreads"; }

static void *worker(void *arg) {
    const int index = (int)(intptr_t)arg;
    unsigned seen = pool.first_job; /* written before this thread was created */
    for (;;) {
        unsigned job;
        int spins = 0;
        while ((job = atomic_load_explicit(&pool.job, memory_order_acquire)) == seen) {
            if (++spins < SPINS) {
                CPU_RELAX();
                continue;
            }
            pthread_mutex_lock(&pool.lock);
            while (atomic_load(&pool.job) == seen) pthread_cond_wait(&pool.wake, &pool.lock);
            pthread_mutex_unlock(&pool.lock);
        }
        seen = job;
        if (index < pool.threads) pool.task(pool.context, index, pool.threads);
        atomic_fetch_sub_explicit(&pool.running, 1, memory_order_release);
    }
    return NULL;
}

void run_parallel(int threads, task_fn task, void *context) {
    if (threads > MAX_WORKERS + 1) threads = MAX_WORKERS + 1;
    if (threads <= 1) {
        task(context, 0, 1);
        return;
    }
    pthread_mutex_lock(&pool.call);
    static int fork_handled;
    if (!fork_handled) fork_handled = !pthread_atfork(NULL, NULL, forget_workers);
    pool.first_job = atomic_load(&pool.job);
    while (pool.workers < threads - 1) { /* a worker that cannot start: fewer threads */
        pthread_t thread;
        if (pthread_create(&thread, NULL, worker, (void *)(intptr_t)(pool.workers + 1))) break;
        pthread_detach(thread);
        pool.workers++;
    }
    if (threads > pool.workers + 1) threads = pool.workers + 1;
    pool.task = task;
    pool.context = context;
    pool.threads = threads;
    atomic_store(&pool.running, pool.workers); /* every worker wakes, counts itself done */
    pthread_mutex_lock(&pool.lock);
    atomic_fetch_add_explicit(&pool.job, 1, memory_order_release);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    task(context, 0, threads);
    while (atomic_load_explicit(&pool.running, memory_order_acquire) > 0) CPU_RELAX();
    pthread_mutex_unlock(&pool.call);
}
#endif
