/* cpu.h: what the CPU backend's files share. */
#ifndef FA_CPU_H
#define FA_CPU_H

#include "internal.h"
#include "isa.h"

#define FA_CPU_MAX_THREADS 256
#define FA_CPU_MAX_BLOCK 256 /* largest B_r the tile table may give */

/* Worker threads for a call: the context's setting, else FLASHATTN_NUM_THREADS, else the number
 * of online processors; at most FA_CPU_MAX_THREADS. */
int fa_cpu_threads(const fa_context *ctx);

/* The context's kernel table (chosen when it opened); the best this CPU runs without one. */
const fa_cpu_isa *fa_cpu_isa_of(const fa_context *ctx);

fa_status fa_cpu_flash_forward(fa_context *ctx, const fa_problem *p);
fa_status fa_cpu_flash_backward(fa_context *ctx, const fa_problem *p);
int64_t fa_cpu_workspace_bytes(const fa_problem *p, const fa_cpu_isa *isa, int threads); /* -1 when it overflows 64 bits */
int64_t fa_cpu_bwd_chunks(const fa_problem *p, int threads);
fa_status fa_cpu_forward_kvcache(fa_context *ctx, const fa_kv_problem *kp); /* kvcache.c */

#endif
