/* nccl.c: the NCCL transport of ring attention (fa_ring_nccl_*, include/flashattn.h). One
 * communicator, one stream of its own: start records an event on the context's stream, makes the
 * transport's stream wait for it and queues ncclSend / ncclRecv (grouped) there, then records the
 * channel's "done" event; finish makes the context's stream wait for that event. The transfer thus
 * starts after the data is written and runs alongside the kernels queued after it. agree is an
 * ncclAllReduce (min) of one int, waited for on the host. libnccl.so.2 is loaded at the first call
 * (dlopen), so that the library itself needs NCCL only where a ring is made: built with nccl.h,
 * libflashattn.so still loads on machines without NCCL. The runtime's calls are spelled through
 * host/runtime.h (FA_RT); nccl.h itself includes the toolkit's cuda_runtime.h, so this file needs
 * the toolkit's headers whichever runtime runs them, and NCCL's calls take its cudaStream_t. */
#include "host/runtime.h"
#include "internal.h"

#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(ncclUniqueId) == FA_RING_NCCL_ID_BYTES, "ncclUniqueId is not FA_RING_NCCL_ID_BYTES bytes");

typedef struct nccl_api {
    ncclResult_t (*get_unique_id)(ncclUniqueId *id);
    ncclResult_t (*comm_init_rank)(ncclComm_t *comm, int size, ncclUniqueId id, int rank);
    ncclResult_t (*comm_destroy)(ncclComm_t comm);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    ncclResult_t (*send)(const void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t s);
    ncclResult_t (*recv)(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t s);
    ncclResult_t (*all_reduce)(const void *in, void *out, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t s);
    const char *(*error_string)(ncclResult_t r);
} nccl_api;

static nccl_api api;
static int api_loaded;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static int symbol(void *lib, const char *name, void *fn)
{
    void *sym = dlsym(lib, name);
    memcpy(fn, &sym, sizeof sym); /* object pointer to function pointer without a cast */
    return sym != NULL;
}

static void api_load(void)
{
    void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        lib = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return;
    api_loaded = symbol(lib, "ncclGetUniqueId", &api.get_unique_id) &&
                 symbol(lib, "ncclCommInitRank", &api.comm_init_rank) &&
                 symbol(lib, "ncclCommDestroy", &api.comm_destroy) && symbol(lib, "ncclGroupStart", &api.group_start) &&
                 symbol(lib, "ncclGroupEnd", &api.group_end) && symbol(lib, "ncclSend", &api.send) &&
                 symbol(lib, "ncclRecv", &api.recv) && symbol(lib, "ncclAllReduce", &api.all_reduce) &&
                 symbol(lib, "ncclGetErrorString", &api.error_string);
}

static int api_ready(void)
{
    pthread_once(&api_once, api_load);
    return api_loaded;
}

struct fa_ring_nccl {
    int device, rank, size;
    ncclComm_t comm;
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
    ncclUniqueId u;
    if (api.get_unique_id(&u) != ncclSuccess)
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
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    const ncclResult_t n = api.comm_init_rank(&r->comm, size, u, rank);
    if (n != ncclSuccess) {
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
    if (api.group_start() != ncclSuccess)
        return -1;
    const ncclResult_t a =
        api.send(send, bytes, ncclUint8, (r->rank + 1) % r->size, r->comm, (cudaStream_t)r->stream);
    const ncclResult_t b =
        api.recv(recv, bytes, ncclUint8, (r->rank + r->size - 1) % r->size, r->comm, (cudaStream_t)r->stream);
    const ncclResult_t c = api.group_end();
    if (a != ncclSuccess || b != ncclSuccess || c != ncclSuccess)
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
        api.all_reduce(r->flag, r->flag, 1, ncclInt32, ncclMin, r->comm, (cudaStream_t)r->stream) != ncclSuccess ||
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
