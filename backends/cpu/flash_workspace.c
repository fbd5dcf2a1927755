/* flash_workspace.c: the CPU backend's extra memory for a call (fa_cpu_workspace_bytes, which the
 * core reports and checks before the call) and the backward's split of key tiles into chunks. */
#include "flash_tiles.h"

int64_t fa_cpu_workspace_bytes(const fa_problem *p, const fa_cpu_isa *isa, int threads)
{
    tile_dims t = dims_of(p, isa);
    int64_t part[4] = {float_bytes(threads, p->backward ? bwd_scratch_floats(&t) : fwd_scratch_floats(&t), 1), 0, 0, 0};
    if (!p->backward) {
        /* packed K^T and V tiles */
        int64_t rows = padded_rows(p, t.bk, 0);
        if (rows < 0)
            return -1;
        part[1] = float_bytes(rows, p->heads_kv, t.bf16 ? t.dp : 2 * t.dp);
    } else {
        int64_t q_rows; /* rows of every head */
        if (!fa_mul_ok(p->total_q, p->heads_q, &q_rows))
            return -1;
        part[1] = float_bytes(q_rows, 1, 1);                                  /* D */
        part[2] = float_bytes(fa_cpu_bwd_chunks(p, threads), q_rows, t.dp);   /* dQ partials */
        int64_t rows = padded_rows(p, t.bq, 1); /* Q and dO packed: 2 dp floats per padded row and head */
        if (rows < 0)
            return -1;
        part[3] = float_bytes(rows, p->heads_q, 2 * t.dp);
    }
    return sum_bytes(part, 4);
}

int64_t fa_cpu_bwd_chunks(const fa_problem *p, int threads)
{
    int64_t nk = (p->seqlen_k + p->block_k - 1) / p->block_k;
    int64_t units = p->batch * p->heads_kv;
    if (units < 1 || nk < 1)
        return 1;
    int64_t chunks = (threads + units - 1) / units;
    if (chunks > nk)
        chunks = nk;
    return chunks < 1 ? 1 : chunks;
}
