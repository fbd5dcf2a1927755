/* pool.c: the persistent worker threads behind fa_parallel_for (pool.h). */
#include "pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

typedef struct pool_job {
    fa_task_fn fn;
    void *arg;
    int64_t ntasks;
    atomic_llong next;
    float *scratch_base;
    int64_t scratch_floats;
} pool_job;

static void run_job(pool_job *job, int index)
{
    float *scratch = job->scratch_base ? job->scratch_base + (int64_t)index * job->scratch_floats : 0;
    for (;;) {
        int64_t t = atomic_fetch_add(&job->next, 1);
        if (t >= job->ntasks)
            break;
        job->fn(job->arg, t, scratch);
    }
}

/* ------------------------------------------------------------------ threads for one call */

typedef struct call_worker {
    pool_job *job;
    int index;
} call_worker;

static void *call_worker_main(void *argp)
{
    call_worker *w = argp;
    run_job(w->job, w->index);
    return 0;
}

static void run_with_call_threads(int threads, pool_job *job)
{
    pthread_t tid[FA_POOL_MAX_THREADS];
    call_worker w[FA_POOL_MAX_THREADS];
    int started[FA_POOL_MAX_THREADS] = {0};
    for (int i = 1; i < threads; ++i) {
        w[i].job = job;
        w[i].index = i;
        started[i] = pthread_create(&tid[i], 0, call_worker_main, &w[i]) == 0;
    }
    run_job(job, 0);
    for (int i = 1; i < threads; ++i)
        if (started[i])
            pthread_join(tid[i], 0);
}

/* ------------------------------------------------------------------ the persistent pool */

/* Everything below `lock` is read and written under it, but `owner_pid`, which a forked child
 * reads first (its copy of the lock may be held by a thread that does not exist there). */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    int workers;                 /* started, indices 1 .. workers */
    pthread_t tid[FA_POOL_MAX_THREADS];
    uint64_t start_generation[FA_POOL_MAX_THREADS]; /* the generation when worker i was started */
    uint64_t generation;         /* one per job */
    pool_job *job;
    int want;                    /* workers 1 .. want take part in the current job */
    int finished;                /* of those, how many are done */
    int busy;                    /* a caller's job is running */
    int stopping;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};
static atomic_int owner_pid; /* the process whose threads these are; 0 before the first */

static void *pool_worker_main(void *argp)
{
    const int index = (int)(intptr_t)argp;
    pthread_mutex_lock(&pool.lock);
    /* a worker started for a job sees that job's generation as new */
    uint64_t seen = pool.start_generation[index];
    for (;;) {
        while (!pool.stopping && pool.generation == seen)
            pthread_cond_wait(&pool.wake, &pool.lock);
        if (pool.stopping)
            break;
        seen = pool.generation;
        if (index > pool.want)
            continue;
        pool_job *job = pool.job;
        pthread_mutex_unlock(&pool.lock);
        run_job(job, index);
        pthread_mutex_lock(&pool.lock);
        if (++pool.finished == pool.want)
            pthread_cond_signal(&pool.done);
    }
    pthread_mutex_unlock(&pool.lock);
    return 0;
}

/* Joins the workers when the library is unloaded (or the program exits), so no thread is left
 * running code that is about to be unmapped. */
__attribute__((destructor)) static void pool_shutdown(void)
{
    if (atomic_load(&owner_pid) != (int)getpid())
        return;
    pthread_mutex_lock(&pool.lock);
    pool.stopping = 1;
    int n = pool.workers;
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    for (int i = 1; i <= n; ++i)
        pthread_join(pool.tid[i], 0);
    pool.workers = 0;
}

void fa_parallel_for(int threads, int64_t ntasks, fa_task_fn fn, void *arg, float *scratch, int64_t scratch_floats)
{
    if (ntasks <= 0)
        return;
    if (threads > ntasks)
        threads = (int)ntasks;
    if (threads > FA_POOL_MAX_THREADS)
        threads = FA_POOL_MAX_THREADS;
    if (threads < 1)
        threads = 1;
    pool_job job = {.fn = fn, .arg = arg, .ntasks = ntasks, .scratch_base = scratch, .scratch_floats = scratch_floats};
    atomic_init(&job.next, 0);
    if (threads == 1) {
        run_job(&job, 0);
        return;
    }
    const int pid = (int)getpid(), owner = atomic_load(&owner_pid);
    if (owner != 0 && owner != pid) { /* a forked child: the pool's threads are not here */
        run_with_call_threads(threads, &job);
        return;
    }
    pthread_mutex_lock(&pool.lock);
    if (pool.busy || pool.stopping) { /* another thread's job holds the workers */
        pthread_mutex_unlock(&pool.lock);
        run_with_call_threads(threads, &job);
        return;
    }
    atomic_store(&owner_pid, pid);
    while (pool.workers < threads - 1) {
        int i = pool.workers + 1;
        pool.start_generation[i] = pool.generation;
        if (pthread_create(&pool.tid[i], 0, pool_worker_main, (void *)(intptr_t)i) != 0)
            break; /* fewer workers: the others take their share */
        pool.workers = i;
    }
    pool.busy = 1;
    pool.job = &job;
    pool.want = threads - 1 < pool.workers ? threads - 1 : pool.workers;
    pool.finished = 0;
    ++pool.generation;
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    run_job(&job, 0);
    pthread_mutex_lock(&pool.lock);
    while (pool.finished < pool.want)
        pthread_cond_wait(&pool.done, &pool.lock);
    pool.busy = 0;
    pool.job = 0;
    pthread_mutex_unlock(&pool.lock);
}
