/* nccl_api.h: the part of NCCL's C interface that the ring transport (nccl.c) calls, written out
 * here so that the transport builds without nccl.h, which comes with the CUDA toolkit or NCCL's
 * own packages and includes the toolkit's cuda_runtime.h: a build that compiles its kernels at
 * run time (-Dcuda-kernels=rtc) has neither. libnccl.so.2 is opened with dlopen at the first call,
 * as libcuda and libnvrtc are.
 *
 * Only values NCCL keeps stable across its 2.x releases appear: the result code of success, the
 * data types and reduction used, the size of the unique id and the communicator as an opaque
 * pointer. A stream is passed where NCCL takes a cudaStream_t (a pointer to the same driver stream
 * as CUstream, whichever runtime made it). tests/cuda/nccl_api_check.c compares every value with
 * nccl.h where one is installed. Plain C. */
#ifndef FA_NCCL_API_H
#define FA_NCCL_API_H

#include <stddef.h>

#define FA_NCCL_UNIQUE_ID_BYTES 128

typedef struct fa_nccl_unique_id {
    char internal[FA_NCCL_UNIQUE_ID_BYTES];
} fa_nccl_unique_id;

typedef struct fa_nccl_comm *fa_nccl_comm_t; /* ncclComm_t */
typedef int fa_nccl_result;                  /* ncclResult_t: an enum, int-sized */
typedef int fa_nccl_data_type;               /* ncclDataType_t */
typedef int fa_nccl_red_op;                  /* ncclRedOp_t */

#define FA_NCCL_SUCCESS 0 /* ncclSuccess */
#define FA_NCCL_UINT8 1   /* ncclUint8 */
#define FA_NCCL_INT32 2   /* ncclInt32 */
#define FA_NCCL_MIN 3     /* ncclMin */

/* The functions the transport calls, by their exported names. */
typedef struct fa_nccl_api {
    fa_nccl_result (*get_unique_id)(fa_nccl_unique_id *id);                                       /* ncclGetUniqueId */
    fa_nccl_result (*comm_init_rank)(fa_nccl_comm_t *comm, int size, fa_nccl_unique_id id, int rank); /* ncclCommInitRank */
    fa_nccl_result (*comm_destroy)(fa_nccl_comm_t comm);                                          /* ncclCommDestroy */
    fa_nccl_result (*group_start)(void);                                                          /* ncclGroupStart */
    fa_nccl_result (*group_end)(void);                                                            /* ncclGroupEnd */
    fa_nccl_result (*send)(const void *buf, size_t count, fa_nccl_data_type type, int peer, fa_nccl_comm_t comm,
                           void *stream); /* ncclSend */
    fa_nccl_result (*recv)(void *buf, size_t count, fa_nccl_data_type type, int peer, fa_nccl_comm_t comm,
                           void *stream); /* ncclRecv */
    fa_nccl_result (*all_reduce)(const void *in, void *out, size_t count, fa_nccl_data_type type, fa_nccl_red_op op,
                                 fa_nccl_comm_t comm, void *stream); /* ncclAllReduce */
    const char *(*error_string)(fa_nccl_result r);                   /* ncclGetErrorString */
} fa_nccl_api;

#endif
