/* nccl.c: the NCCL transport of ring attention (fa_ring_nccl_*, include/flashattn.h). One
 * communicator, one stream of its own: start records an event on the context's stream, makes the
 * transport's stream wait for it and queues ncclSend / ncclRecv (grouped) there, then records the
 * channel's "done" event; finish makes the context's stream wait for that event. The transfer thus
 * starts after the data is written and runs alongside the kernels queued after it. agree is an
 * ncclAllReduce (min) of one int, waited for on the host. libnccl.so.2 is loaded at the first call
 * (dlopen), so that the library itself needs NCCL only where a ring is made: libflashattn.so still
 * loads on machines without NCCL. The runtime's calls are spelled through
 * host/runtime.h (FA_RT), NCCL's through host/nccl_api.h (no nccl.h: the file builds with the CUDA
 * toolkit or without it, in either kind of build). */
#include "host/dl_symbols.h"
#include "host/nccl_api.h"
#include "host/runtime.h"
#include "internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(fa_nccl_unique_id) == FA_RING_NCCL_ID_BYTES, "NCCL's unique id is not FA_RING_NCCL_ID_BYTES bytes");

static fa_nccl_api api;
static int api_loaded;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static void api_load(void)
{
    void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        lib = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return;
    const fa_dl_symbol table[] = {
        {"ncclGetUniqueId", (void **)&api.get_unique_id}, {"ncclCommInitRank", (void **)&api.comm_init_rank},
        {"ncclCommDestroy", (void **)&api.comm_destroy},  {"ncclGroupStart", (void **)&api.group_start},
        {"ncclGroupEnd", (void **)&api.group_end},         {"ncclSend", (void **)&api.send},
        {"ncclRecv", (void **)&api.recv},                  {"ncclAllReduce", (void **)&api.all_reduce},
        {"ncclGetErrorString", (void **)&api.error_string},
    };
    const char *err = NULL;
    api_loaded = fa_dl_resolve(lib, table, sizeof table / sizeof table[0], &err) == NULL;
}

static int api_ready(void)
{
    pthread_once(&api_once, api_load);
    return api_loaded;
}

struct fa_ring_nccl {
    int device, rank, size;
    fa_nccl_comm_t comm;
    fa_rt_stream stream; /* the transport's */
    fa_rt_event ready, done[2];
    int *flag; /* device int for agree */
};

fa_status fa_ring_nccl_unique_id(unsigned char id[FA_RING_NCCL_ID_BYTES])
{
    if (!id)
        return FA_ERR_INVALID_ARG;
    if (!api_ready())
        return FA_ERR_NO_BACKEND;
    fa_nccl_unique_id u;
    if (api.get_unique_id(&u) != FA_NCCL_SUCCESS)
        return FA_ERR_BACKEND;
    memcpy(id, &u, sizeof u);
    return FA_SUCCESS;
}

static void release(fa_ring_nccl *r)
{
    if (r->stream)
        FA_RT(StreamSynchronize)(r->stream);
    if (r->comm)
        api.comm_destroy(r->comm);
    if (r->ready)
        FA_RT(EventDestroy)(r->ready);
    for (int c = 0; c < 2; ++c)
        if (r->done[c])
            FA_RT(EventDestroy)(r->done[c]);
    if (r->flag)
        FA_RT(Free)(r->flag);
    if (r->stream)
        FA_RT(StreamDestroy)(r->stream);
    free(r);
}

fa_status fa_ring_nccl_create(fa_ring_nccl **ring, fa_context *ctx, const unsigned char id[FA_RING_NCCL_ID_BYTES],
                              int rank, int size)
{
    if (!ring || !ctx)
        return FA_ERR_INVALID_ARG;
    *ring = NULL;
    fa_clear_error(ctx);
    if (!id || size < 1 || rank < 0 || rank >= size)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "ring nccl: id is NULL or rank %d / size %d is invalid", rank, size);
    if (strcmp(ctx->backend->name, "cuda") != 0)
        return FA_ERROR(ctx, FA_ERR_UNSUPPORTED, "ring nccl: needs a cuda context, not %s", ctx->backend->name);
    if (!api_ready())
        return FA_ERROR(ctx, FA_ERR_NO_BACKEND, "ring nccl: libnccl.so.2 could not be loaded (dlopen)");
    fa_ring_nccl *r = calloc(1, sizeof *r);
    if (!r)
        return FA_ERROR(ctx, FA_ERR_OUT_OF_MEMORY, "ring nccl: out of host memory");
    r->device = ctx->device;
    r->rank = rank;
    r->size = size;
    fa_rt_error e = FA_RT(SetDevice)(r->device);
    if (e == FA_RT(Success))
        e = FA_RT(StreamCreateWithFlags)(&r->stream, FA_RT(StreamNonBlocking));
    if (e == FA_RT(Success))
        e = FA_RT(EventCreateWithFlags)(&r->ready, FA_RT(EventDisableTiming));
    for (int c = 0; c < 2 && e == FA_RT(Success); ++c)
        e = FA_RT(EventCreateWithFlags)(&r->done[c], FA_RT(EventDisableTiming));
    if (e == FA_RT(Success))
        e = FA_RT(Malloc)((void **)&r->flag, sizeof(int));
    if (e != FA_RT(Success)) {
        release(r);
        return FA_ERROR(ctx, e == FA_RT_ERR_NO_MEMORY ? FA_ERR_OUT_OF_MEMORY : FA_ERR_BACKEND,
                        "ring nccl: %s (%s)", FA_RT(GetErrorName)(e), FA_RT(GetErrorString)(e));
    }
    fa_nccl_unique_id u;
    memcpy(&u, id, sizeof u);
    const fa_nccl_result n = api.comm_init_rank(&r->comm, size, u, rank);
    if (n != FA_NCCL_SUCCESS) {
        r->comm = NULL;
        release(r);
        return FA_ERROR(ctx, FA_ERR_BACKEND, "ring nccl: ncclCommInitRank: %s", api.error_string(n));
    }
    *ring = r;
    return FA_SUCCESS;
}

static int nccl_start(void *user, int channel, const void *send, void *recv, size_t bytes, void *stream)
{
    fa_ring_nccl *r = user;
    if (channel < 0 || channel > 1 || FA_RT(SetDevice)(r->device) != FA_RT(Success) ||
        FA_RT(EventRecord)(r->ready, (fa_rt_stream)stream) != FA_RT(Success) ||
        FA_RT(StreamWaitEvent)(r->stream, r->ready, 0) != FA_RT(Success))
        return -1;
    if (api.group_start() != FA_NCCL_SUCCESS)
        return -1;
    const fa_nccl_result a =
        api.send(send, bytes, FA_NCCL_UINT8, (r->rank + 1) % r->size, r->comm, (void *)r->stream);
    const fa_nccl_result b =
        api.recv(recv, bytes, FA_NCCL_UINT8, (r->rank + r->size - 1) % r->size, r->comm, (void *)r->stream);
    const fa_nccl_result c = api.group_end();
    if (a != FA_NCCL_SUCCESS || b != FA_NCCL_SUCCESS || c != FA_NCCL_SUCCESS)
        return -1;
    return FA_RT(EventRecord)(r->done[channel], r->stream) == FA_RT(Success) ? 0 : -1;
}

static int nccl_finish(void *user, int channel, void *stream)
{
    fa_ring_nccl *r = user;
    if (channel < 0 || channel > 1 || FA_RT(SetDevice)(r->device) != FA_RT(Success))
        return -1;
    return FA_RT(StreamWaitEvent)((fa_rt_stream)stream, r->done[channel], 0) == FA_RT(Success) ? 0 : -1;
}

static int nccl_agree(void *user, int ok, int *all_ok)
{
    fa_ring_nccl *r = user;
    int v = ok != 0, out = 0;
    if (FA_RT(SetDevice)(r->device) != FA_RT(Success) ||
        FA_RT(MemcpyAsync)(r->flag, &v, sizeof v, FA_RT(MemcpyHostToDevice), r->stream) != FA_RT(Success) ||
        api.all_reduce(r->flag, r->flag, 1, FA_NCCL_INT32, FA_NCCL_MIN, r->comm, (void *)r->stream) != FA_NCCL_SUCCESS ||
        FA_RT(MemcpyAsync)(&out, r->flag, sizeof out, FA_RT(MemcpyDeviceToHost), r->stream) != FA_RT(Success) ||
        FA_RT(StreamSynchronize)(r->stream) != FA_RT(Success))
        return -1;
    *all_ok = out;
    return 0;
}

fa_ring_comm fa_ring_nccl_comm(fa_ring_nccl *ring)
{
    fa_ring_comm c;
    memset(&c, 0, sizeof c);
    if (ring) {
        c.rank = ring->rank;
        c.size = ring->size;
        c.start = nccl_start;
        c.finish = nccl_finish;
        c.agree = nccl_agree;
        c.user = ring;
    }
    return c;
}

void fa_ring_nccl_destroy(fa_ring_nccl *ring)
{
    if (!ring)
        return;
    FA_RT(SetDevice)(ring->device);
    release(ring);
}
