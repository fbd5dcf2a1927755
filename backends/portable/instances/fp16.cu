// The portable kernels for fp16 storage, every head-dim bucket (dispatch.cu picks one).
#include "../kernels.cuh"

namespace fa_portable {
template fa_gpu_error launch_forward<store_f16, 64>(const fa_cuda_params &, fa_gpu_stream);
template fa_gpu_error launch_forward<store_f16, 128>(const fa_cuda_params &, fa_gpu_stream);
template fa_gpu_error launch_forward<store_f16, 256>(const fa_cuda_params &, fa_gpu_stream);
template fa_gpu_error launch_backward<store_f16, 64>(const fa_cuda_params &, fa_gpu_stream);
template fa_gpu_error launch_backward<store_f16, 128>(const fa_cuda_params &, fa_gpu_stream);
template fa_gpu_error launch_backward<store_f16, 256>(const fa_cuda_params &, fa_gpu_stream);
} // namespace fa_portable
