/* pool.h: the CPU kernels' parallel loop. Tasks are handed out by an atomic counter; the caller is
 * worker 0, each worker has a pre-allocated scratch block. The workers are kept between calls
 * (pool.c: started on first use, asleep on a condition variable between jobs, joined when the
 * library is unloaded); a call that finds the pool busy with another thread's job, or that runs
 * in a forked child, starts its own threads for the call instead. A thread that cannot be
 * started leaves its share to the others. */
#ifndef FA_CPU_POOL_H
#define FA_CPU_POOL_H

#include <stdint.h>

#define FA_POOL_MAX_THREADS 256

typedef void (*fa_task_fn)(void *arg, int64_t task, float *scratch);

/* Runs fn(arg, t, scratch of the worker) for t in [0, ntasks) on up to `threads` threads; the
 * worker with index i gets scratch + i * scratch_floats (scratch may be NULL). Returns when every
 * task has run. */
void fa_parallel_for(int threads, int64_t ntasks, fa_task_fn fn, void *arg, float *scratch, int64_t scratch_floats);

#endif
