/* nccl_api_check.c: host/nccl_api.h's copy of NCCL's interface against the nccl.h of this machine:
 * every value, size and the int-sized enums the transport passes must be NCCL's own, or a ring
 * over NCCL would send the wrong type or misread a result. Built where nccl.h is installed. */
#include "host/nccl_api.h"

#include <nccl.h>
#include <stdio.h>

static int failures;

static void expect(const char *what, long long ours, long long nccls)
{
    if (ours != nccls) {
        fprintf(stderr, "host/nccl_api.h: %s is %lld, nccl.h says %lld\n", what, ours, nccls);
        ++failures;
    }
}

int main(void)
{
    printf("nccl.h %d.%d.%d\n", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
    expect("FA_NCCL_UNIQUE_ID_BYTES", FA_NCCL_UNIQUE_ID_BYTES, NCCL_UNIQUE_ID_BYTES);
    expect("sizeof(fa_nccl_unique_id)", (long long)sizeof(fa_nccl_unique_id), (long long)sizeof(ncclUniqueId));
    expect("FA_NCCL_SUCCESS", FA_NCCL_SUCCESS, ncclSuccess);
    expect("FA_NCCL_UINT8", FA_NCCL_UINT8, ncclUint8);
    expect("FA_NCCL_INT32", FA_NCCL_INT32, ncclInt32);
    expect("FA_NCCL_MIN", FA_NCCL_MIN, ncclMin);
    expect("sizeof(fa_nccl_result)", (long long)sizeof(fa_nccl_result), (long long)sizeof(ncclResult_t));
    expect("sizeof(fa_nccl_data_type)", (long long)sizeof(fa_nccl_data_type), (long long)sizeof(ncclDataType_t));
    expect("sizeof(fa_nccl_red_op)", (long long)sizeof(fa_nccl_red_op), (long long)sizeof(ncclRedOp_t));
    expect("sizeof(fa_nccl_comm_t)", (long long)sizeof(fa_nccl_comm_t), (long long)sizeof(ncclComm_t));
    expect("sizeof(void *) (a stream)", (long long)sizeof(void *), (long long)sizeof(cudaStream_t));
    if (failures == 0)
        printf("host/nccl_api.h matches nccl.h\n");
    return failures == 0 ? 0 : 1;
}
