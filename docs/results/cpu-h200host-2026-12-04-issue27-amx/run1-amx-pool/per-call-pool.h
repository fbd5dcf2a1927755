/* pool.h: the CPU kernels' parallel loop: workers started per call (the caller is worker 0), tasks
 * handed out by an atomic counter, a pre-allocated scratch block per worker. A thread that cannot
 * be started leaves its share to the others. Shared by flash.c and the benchmark's baseline. */
#ifndef FA_CPU_POOL_H
#define FA_CPU_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define FA_POOL_MAX_THREADS 256

typedef void (*fa_task_fn)(void *arg, int64_t task, float *scratch);

typedef struct fa_pool_job {
    fa_task_fn fn;
    void *arg;
    int64_t ntasks;
    atomic_llong next;
    float *scratch_base;
    int64_t scratch_floats;
} fa_pool_job;

typedef struct fa_pool_worker {
    fa_pool_job *job;
    int index;
} fa_pool_worker;

static void *fa_pool_run(void *argp)
{
    fa_pool_worker *w = (fa_pool_worker *)argp;
    fa_pool_job *job = w->job;
    float *scratch = job->scratch_base ? job->scratch_base + (int64_t)w->index * job->scratch_floats : 0;
    for (;;) {
        int64_t t = atomic_fetch_add(&job->next, 1);
        if (t >= job->ntasks)
            break;
        job->fn(job->arg, t, scratch);
    }
    return 0;
}

static void fa_parallel_for(int threads, int64_t ntasks, fa_task_fn fn, void *arg, float *scratch,
                            int64_t scratch_floats)
{
    if (ntasks <= 0)
        return;
    if (threads > ntasks)
        threads = (int)ntasks;
    if (threads > FA_POOL_MAX_THREADS)
        threads = FA_POOL_MAX_THREADS;
    if (threads < 1)
        threads = 1;
    fa_pool_job job = {.fn = fn, .arg = arg, .ntasks = ntasks, .scratch_base = scratch,
                       .scratch_floats = scratch_floats};
    atomic_init(&job.next, 0);
    pthread_t tid[FA_POOL_MAX_THREADS];
    fa_pool_worker w[FA_POOL_MAX_THREADS];
    int started[FA_POOL_MAX_THREADS] = {0};
    for (int i = 1; i < threads; ++i) {
        w[i].job = &job;
        w[i].index = i;
        started[i] = pthread_create(&tid[i], 0, fa_pool_run, &w[i]) == 0;
    }
    w[0].job = &job;
    w[0].index = 0;
    fa_pool_run(&w[0]);
    for (int i = 1; i < threads; ++i)
        if (started[i])
            pthread_join(tid[i], 0);
}

#endif
