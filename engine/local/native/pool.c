/* The native kernels' own threads (engine/local/native.py, docs/engine.md "The native kernels'
 * threads").
 *
 * Why not OpenMP: an OpenMP region ends at a barrier that waits for every thread of the team,
 * so with passive threads (the engine's default wait policy) each region waits for a sleeping
 * thread to wake, about as long as a small product takes. Here the caller never waits for a
 * thread to wake: it claims shares of the job itself, and a pool thread that wakes late finds
 * fewer shares left, or none. The caller only waits for shares a pool thread has already begun.
 *
 * Between jobs a pool thread spins for ``tw_pool_spin`` ns (the Python between two kernels of one
 * forward is shorter than that), then sleeps on a futex until the next job, so an idle engine
 * takes no CPU and a forward's second thread is already awake for its next kernel.
 *
 * One job at a time: a caller that finds the pool busy (a second engine in the same process) runs
 * its job alone. After a fork the child has no pool threads and runs every job alone until new
 * ones start.
 *
 * The job word packs the job's number (high 32 bits) and its next unclaimed unit (low 32 bits);
 * a share is claimed by a compare-and-swap on it, so a thread holding a stale job number claims
 * nothing. A new job's number is published first with no unit left to claim (CLOSED), then its
 * description is written, then its first unit is opened: so a claim that succeeds saw the
 * description of its own job whole. (Were the description written under the last job's number, a
 * thread of that job reading the new unit count could claim units of the new job under the old
 * number, with the old job's task or context, and count them into the new job's total.)
 *
 * Built with TW_ONE_THREAD, or off Linux (no futex), every job runs on its caller.
 */
#define _GNU_SOURCE
#include "tokenwire.h"

#if defined(TW_ONE_THREAD) || !defined(__linux__)
void tw_pool_run(int64_t threads, int64_t n, int64_t chunk, tw_task fn, void *ctx) {
    (void)threads, (void)chunk;
    if (n > 0) fn(ctx, 0, n, 0);
}
void tw_pool_spin(int64_t ns) { (void)ns; }
int64_t tw_pool_threads(void) { return 0; }
int tw_pool_parallel(void) { return 0; }
#else

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_POOL 63 /* pool threads at most */
#define CLOSED UINT32_MAX /* a job word's next unit while its job is being described: none to claim */

static struct {
    _Atomic uint64_t job;     /* number << 32 | next unit */
    _Atomic int64_t done;     /* units finished in this job */
    _Atomic uint32_t wake;    /* bumped for every job: the futex the idle threads sleep on */
    _Atomic int sleepers;     /* pool threads in (or about to enter) futex_wait */
    _Atomic int64_t spin_ns;  /* how long a pool thread spins for the next job before it sleeps */
    /* the job's description: written only while no job runs, before its number is published */
    _Atomic(tw_task) fn;
    _Atomic(void *) ctx;
    _Atomic int64_t n, chunk, threads;
    _Atomic int started;      /* pool threads running (written under ``lock``) */
    pthread_mutex_t lock;     /* one job at a time; starting threads */
} pool = {.spin_ns = 100000, .lock = PTHREAD_MUTEX_INITIALIZER};

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Claim and run shares of job ``number`` until none is left (or another job began). */
static void work(uint64_t number, int64_t slot) {
    for (;;) {
        uint64_t seen = atomic_load_explicit(&pool.job, memory_order_acquire);
        if (seen >> 32 != number) return;
        const int64_t next = (int64_t)(uint32_t)seen;
        const int64_t n = atomic_load_explicit(&pool.n, memory_order_relaxed);
        const int64_t chunk = atomic_load_explicit(&pool.chunk, memory_order_relaxed);
        const tw_task fn = atomic_load_explicit(&pool.fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&pool.ctx, memory_order_relaxed);
        /* a description of a later job read here comes after that job's closing of the word: the claim fails */
        atomic_thread_fence(memory_order_acquire);
        if (next >= n) return;
        const int64_t end = next + chunk < n ? next + chunk : n;
        if (!atomic_compare_exchange_weak_explicit(&pool.job, &seen, number << 32 | (uint64_t)end,
                                                   memory_order_acq_rel, memory_order_acquire))
            continue;
        fn(ctx, next, end, slot);
        atomic_fetch_add_explicit(&pool.done, end - next, memory_order_release);
    }
}

static void *pool_thread(void *arg) {
    const int64_t slot = (int64_t)(intptr_t)arg;
    uint32_t seen = atomic_load(&pool.wake);
    int joined = 0; /* whether this thread took part in the last job (else it sleeps at once) */
    for (;;) {
        int64_t deadline = now_ns() + (joined ? atomic_load_explicit(&pool.spin_ns, memory_order_relaxed) : 0);
        for (int turn = 1; atomic_load_explicit(&pool.wake, memory_order_acquire) == seen; turn++) {
            relax();
            if (turn % 64 == 0 && now_ns() > deadline) {
                atomic_fetch_add(&pool.sleepers, 1);
                if (atomic_load(&pool.wake) == seen)
                    syscall(SYS_futex, &pool.wake, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
                atomic_fetch_sub(&pool.sleepers, 1);
            }
        }
        seen = atomic_load(&pool.wake);
        const uint64_t number = atomic_load_explicit(&pool.job, memory_order_acquire) >> 32;
        joined = slot < atomic_load_explicit(&pool.threads, memory_order_relaxed);
        if (joined) work(number, slot);
    }
    return NULL;
}

static void after_fork_in_child(void) {
    pool.started = 0;
    atomic_store(&pool.sleepers, 0);
    pthread_mutex_init(&pool.lock, NULL);
}

/* Start pool threads until ``want`` run (under ``pool.lock``); returns how many run. */
static int start_threads(int want) {
    if (want > MAX_POOL) want = MAX_POOL;
    if (pool.started == 0) {
        static int registered;
        if (!registered && pthread_atfork(NULL, NULL, after_fork_in_child) == 0) registered = 1;
    }
    while (pool.started < want) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        const int failed = pthread_create(&t, &attr, pool_thread, (void *)(intptr_t)(pool.started + 1));
        pthread_attr_destroy(&attr);
        if (failed) break;
        pool.started++;
    }
    return pool.started;
}

void tw_pool_run(int64_t threads, int64_t n, int64_t chunk, tw_task fn, void *ctx) {
    if (n <= 0) return;
    if (chunk < 1) chunk = 1;
    if (threads <= 1 || n <= chunk || n >= CLOSED || pthread_mutex_trylock(&pool.lock) != 0) {
        fn(ctx, 0, n, 0);
        return;
    }
    const int helpers = start_threads((int)(threads - 1 < MAX_POOL ? threads - 1 : MAX_POOL));
    if (helpers == 0) {
        pthread_mutex_unlock(&pool.lock);
        fn(ctx, 0, n, 0);
        return;
    }
    const uint64_t number = (atomic_load_explicit(&pool.job, memory_order_relaxed) >> 32) + 1;
    atomic_store_explicit(&pool.job, number << 32 | CLOSED, memory_order_relaxed);
    atomic_thread_fence(memory_order_release); /* the closing before the description (work's fence) */
    atomic_store_explicit(&pool.fn, fn, memory_order_relaxed);
    atomic_store_explicit(&pool.ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&pool.n, n, memory_order_relaxed);
    atomic_store_explicit(&pool.chunk, chunk, memory_order_relaxed);
    atomic_store_explicit(&pool.threads, helpers + 1 < threads ? helpers + 1 : threads, memory_order_relaxed);
    atomic_store_explicit(&pool.done, 0, memory_order_relaxed);
    atomic_store_explicit(&pool.job, number << 32, memory_order_release);
    atomic_fetch_add(&pool.wake, 1);
    if (atomic_load(&pool.sleepers) > 0) syscall(SYS_futex, &pool.wake, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
    work(number, 0);
    /* only shares a pool thread has begun are left: wait for them (yield if one was descheduled) */
    for (int turn = 1; atomic_load_explicit(&pool.done, memory_order_acquire) != n; turn++) {
        relax();
        if (turn > 4096) sched_yield();
    }
    pthread_mutex_unlock(&pool.lock);
}

/* How long a pool thread spins for the next job before it sleeps (ns; 0 sleeps at once). */
void tw_pool_spin(int64_t ns) { atomic_store(&pool.spin_ns, ns < 0 ? 0 : ns); }

/* Pool threads started so far. */
int64_t tw_pool_threads(void) { return atomic_load(&pool.started); }

/* 1: jobs are shared among threads (this build has the pool). */
int tw_pool_parallel(void) { return 1; }
#endif
