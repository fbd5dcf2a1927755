/* decode.cuh: the launchers of fa_forward_kvcache's kernels (decode_kernels.cuh describes them),
 * CUDA and HIP from one source: the device check (check.cuh), the append, the decode kernel of the
 * instance a call needs, the combine. Their grids, blocks and shared memory are
 * common/kv_geometry.h's, which host/rtc_decode.c reads too. */
#ifndef FA_GPU_DECODE_CUH
#define FA_GPU_DECODE_CUH

#include "decode/combine_groups.cuh"
#include "decode/decode_kernels.cuh"

namespace fa_gpu {
namespace decode {

/* check_kernel over the call's sequences, where the call checks on the device and its decode
 * blocks do not (fa_kv_checks_in_blocks). */
template <class S> fa_gpu_error launch_check(const fa_gpu_kv_params &p, fa_gpu_stream stream)
{
    if (!p.fault || p.batch == 0 || fa_kv_checks_in_blocks(&p))
        return FA_GPU_SUCCESS;
    check_kernel<S><<<fa_kv_check_blocks(p.batch), FA_KV_ELEMENTWISE_THREADS, 0, stream>>>(p);
    return fa_gpu_last_error();
}

/* Dynamic shared memory of a decode instance, set as its limit (above the default 48 KB) on the
 * current device at every launch, as the other CUDA kernels do: the attribute belongs to one
 * device, and a process may decode on several. */
template <class S, int D, int RT, bool ASYNC> fa_gpu_error prepare(int *bytes)
{
    *bytes = fa_kv_simt_smem(D, ASYNC);
    static_assert(FA_KV_SIMT_RING_BYTES(D) == decode_shape<D>::RING_BYTES, "one ring size");
#if !defined(__HIPCC__)
    if (ASYNC)
        return cudaFuncSetAttribute(decode_kernel<S, D, RT, ASYNC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    *bytes);
#endif
    return FA_GPU_SUCCESS;
}

/* Decode blocks of an instance resident on one multiprocessor at a time. */
template <class S, int D, int RT, bool ASYNC> fa_gpu_error blocks_per_processor(int *n)
{
    int bytes;
    fa_gpu_error e = prepare<S, D, RT, ASYNC>(&bytes);
    if (e == FA_GPU_SUCCESS)
        e = fa_gpu_occupancy(n, decode_kernel<S, D, RT, ASYNC>, FA_KV_THREADS, (size_t)bytes);
    return e;
}

/* A call's first kernels: the device check (check_on_device), then the append kernel when new
 * keys are given. */
template <class S> fa_gpu_error launch_check_append(const fa_gpu_kv_params &p, fa_gpu_stream stream)
{
    fa_gpu_error e = launch_check<S>(p, stream);
    if (e != FA_GPU_SUCCESS || !p.k_new.data || p.seqlen_knew == 0)
        return e;
    append_kernel<S><<<fa_kv_stride_blocks(fa_kv_append_elements(&p)), FA_KV_ELEMENTWISE_THREADS, 0, stream>>>(p);
    return fa_gpu_last_error();
}

/* The combine kernel, when the keys are split. */
template <class S> fa_gpu_error launch_combine(const fa_gpu_kv_params &p, fa_gpu_stream stream)
{
    if (p.splits == 1)
        return FA_GPU_SUCCESS;
    if (p.group_combine)
        combine_groups_kernel<S><<<fa_kv_combine_blocks(&p), FA_KV_ELEMENTWISE_THREADS, 0, stream>>>(p);
    else
        combine_kernel<S><<<fa_kv_combine_blocks(&p), FA_KV_ELEMENTWISE_THREADS, 0, stream>>>(p);
    return fa_gpu_last_error();
}

/* The kernels of one call around its decode kernel: check and append, then decode(grid) (which
 * launches the decode kernel on one block per sequence, kv head and row tile by split), then
 * combine. Every decode kernel (this file's, CUDA's decode_mma.cuh) is launched through it. */
template <class S, class Decode>
fa_gpu_error launch_call(const fa_gpu_kv_params &p, fa_gpu_stream stream, Decode decode)
{
    fa_gpu_error e = launch_check_append<S>(p, stream);
    if (e != FA_GPU_SUCCESS || p.seqlen_new == 0)
        return e;
    unsigned blocks, splits;
    if (!fa_kv_decode_grid(&p, &blocks, &splits))
        return FA_GPU_INVALID_VALUE;
    if ((e = decode(dim3(blocks, splits))) != FA_GPU_SUCCESS)
        return e;
    return launch_combine<S>(p, stream);
}

/* The kernels of one call with the SIMT decode kernel; D the head-dim bucket, RT the row tile the
 * host chose (p.row_tiles, p.splits and p.keys_per_split were computed with it). */
template <class S, int D, int RT, bool ASYNC> fa_gpu_error launch(const fa_gpu_kv_params &p, fa_gpu_stream stream)
{
    return launch_call<S>(p, stream, [&](dim3 grid) {
        int bytes;
        fa_gpu_error e = prepare<S, D, RT, ASYNC>(&bytes);
        if (e != FA_GPU_SUCCESS)
            return e;
        decode_kernel<S, D, RT, ASYNC><<<grid, FA_KV_THREADS, bytes, stream>>>(p);
        return fa_gpu_last_error();
    });
}

/* The SIMT decode kernels of a call, with the cp.async ring where the instance has one (fp16 /
 * bf16 on CUDA: FA_KV_HAVE_ASYNC) and the host asked for it: the instance the entry points pick. */
template <class S, int D, int RT>
fa_gpu_error launch_instance(const fa_gpu_kv_params &p, fa_gpu_stream stream, int async_copy)
{
    if constexpr (FA_KV_HAVE_ASYNC && sizeof(typename S::T) == 2)
        if (async_copy)
            return launch<S, D, RT, true>(p, stream);
    return launch<S, D, RT, false>(p, stream);
}

template <class S, int D, int RT> fa_gpu_error blocks_per_processor_instance(int *n, int async_copy)
{
    if constexpr (FA_KV_HAVE_ASYNC && sizeof(typename S::T) == 2)
        if (async_copy)
            return blocks_per_processor<S, D, RT, true>(n);
    return blocks_per_processor<S, D, RT, false>(n);
}

} // namespace decode
} // namespace fa_gpu

#endif
