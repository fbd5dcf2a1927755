"""The faults tests/mutation/run_mutations.py injects into the CPU kernels, one at a time.

Each mutation is a list of exact text edits (file, old, new): `old` must occur exactly once in the
file, so a mutation whose target code has changed is reported as STALE instead of being silently
skipped. Every fault models a plausible kernel bug that the test suite must catch."""

MUTATIONS = [
    {
        "id": "sink-factor-dropped",
        "what": "the CPU forward writes the sink's LSE but leaves O unscaled by exp(LSE0 - LSE) (flash_forward.c)",
        "edits": [
            ("backends/cpu/flash_forward.c", "            inv[r] *= fa_sink_factor(lse0, lse);\n", ""),
        ],
    },
    {
        "id": "sink-lse-max-only",
        "what": "the sink's log-sum-exp keeps only the larger term (core/sink.h: every kernel)",
        "edits": [
            ("core/sink.h", "return hi + FA_SINK_LOG1P(FA_SINK_EXP(lo - hi));", "return hi + 0.0f * lo;"),
        ],
    },
    {
        "id": "dsink-last-row-skipped",
        "what": "the CPU dsink leaves out each sequence's last query row (flash_backward.c bwd_dsink_task)",
        "edits": [
            ("backends/cpu/flash_backward.c", "        for (int64_t i = 0; i < sq; ++i) {\n            const float lse =",
             "        for (int64_t i = 0; i + 1 < sq; ++i) {\n            const float lse ="),
        ],
    },
    {
        "id": "kv-dv-as-d",
        "what": "the CPU KV-cache path widens the value rows with d channels instead of d_v (kvcache.c)",
        "edits": [
            ("backends/cpu/kvcache.c", "                              dv, dp, vt + (h * KV_BLOCK + j) * dp);",
             "                              d < dv ? d : dv, dp, vt + (h * KV_BLOCK + j) * dp);"),
        ],
    },
    {
        "id": "softcap-grad-dropped",
        "what": "the CPU backward forgets the softcap's derivative 1 - tanh^2 (flash_backward.c, fp32 products)",
        "edits": [
            ("backends/cpu/flash_backward.c", "                        ds[x] *= grad[x];", "                        ds[x] *= 1.0f;"),
        ],
    },
    {
        "id": "softcap-grad-dropped-bf16",
        "what": "the CPU backward forgets the softcap's derivative 1 - tanh^2 (flash_backward.c, bf16 products: "
                "the amx tables)",
        "edits": [
            ("backends/cpu/flash_backward.c", "            ds[x] *= grad[x];\n    for (int64_t r = 0; r < nr; ++r)\n"
             "        isa->to_bf16_row(", "            ds[x] *= 1.0f;\n    for (int64_t r = 0; r < nr; ++r)\n"
             "        isa->to_bf16_row("),
        ],
    },
    {
        "id": "bf16-pairs-swapped",
        "what": "the bf16 backward's P pairs built from the rows in the wrong order (flash_backward.c bf16_row_pairs)",
        "edits": [
            ("backends/cpu/flash_backward.c",
             "isa->to_bf16_pairs(x + r * ld, r + 1 < nr ? x + (r + 1) * ld : NULL, out + kp * n, n);",
             "isa->to_bf16_pairs(r + 1 < nr ? x + (r + 1) * ld : x + r * ld, r + 1 < nr ? x + r * ld : NULL, "
             "out + kp * n, n);"),
        ],
    },
    {
        "id": "amx-k-step-skipped",
        "what": "the AMX tile program skips the last 32-wide K step of every product (bf16_tiles.c: the amx "
                "and amx-emulated tables)",
        "edits": [
            ("backends/cpu/bf16_tiles.c", "    for (int64_t k = 0; k < K; k += 32) {",
             "    for (int64_t k = 0; k + 32 < K; k += 32) {"),
        ],
    },
    {
        "id": "alibi-diagonal-sign",
        "what": "ALiBi's distance measured from the mirrored diagonal, i - (seqlen_k - seqlen_q) - j "
                "(core/score_mod.h: every kernel)",
        "edits": [
            ("core/score_mod.h", "return (float)(row + diag - col0);", "return (float)(row - diag - col0);"),
        ],
    },
    {
        "id": "softcap-tanh-of-2x",
        "what": "the softcap's tanh argument off by a factor of 2 (core/score_mod.h)",
        "edits": [
            ("core/score_mod.h", "f.in = 2.8853900817779268f * (u / c);", "f.in = 5.7707801635558536f * (u / c);"),
        ],
    },
    {
        "id": "bwd-second-call-noop",
        "what": "a backward called again after one forward returns success without writing dQ/dK/dV "
                "(a kernel that believes its outputs are already up to date)",
        "edits": [
            ("backends/cpu/flash_tiles.h", "#include <string.h>\n",
             "#include <string.h>\nextern _Thread_local int mutation_backward_ran;\n"),
            ("backends/cpu/flash_forward.c",
             "fa_status fa_cpu_flash_forward(fa_context *ctx, const fa_problem *p)\n{\n",
             "_Thread_local int mutation_backward_ran;\n"
             "fa_status fa_cpu_flash_forward(fa_context *ctx, const fa_problem *p)\n{\n"
             "    mutation_backward_ran = 0;\n"),
            ("backends/cpu/flash_backward.c",
             "fa_status fa_cpu_flash_backward(fa_context *ctx, const fa_problem *p)\n{\n",
             "fa_status fa_cpu_flash_backward(fa_context *ctx, const fa_problem *p)\n{\n"
             "    if (mutation_backward_ran)\n        return FA_SUCCESS;\n    mutation_backward_ran = 1;\n"),
        ],
    },
    {
        "id": "ds-1pct",
        "what": "dS 1 % too large in the CPU backward (isa_kernels.c, every kernel table)",
        "edits": [
            ("backends/cpu/isa_kernels.c",
             "vf g = pv * (vload(drow + t) - dsum[r]) * scale;",
             "vf g = pv * (vload(drow + t) - dsum[r]) * scale * 1.01f;"),
        ],
    },
    {
        "id": "bf16-truncate-half.h",
        "what": "fa_float_to_bfloat truncates instead of rounding to nearest even (core/half.h: "
                "every user of the header, the tests' own conversions included)",
        "edits": [
            ("core/half.h", "    x += 0x7fffu + lsb;\n", "    (void)lsb;\n"),
        ],
    },
    {
        "id": "bf16-truncate-kernel-store",
        "what": "the CPU kernels' bf16 stores (O, dQ, dK, dV) truncate instead of rounding to nearest "
                "even; core/half.h itself untouched",
        "edits": [
            ("backends/cpu/flash_tiles.h", "#include <string.h>\n",
             "#include <string.h>\n"
             "static inline void mutation_store_elem(fa_dtype dt, void *base, int64_t off, float x)\n{\n"
             "    if (dt == FA_DTYPE_BF16)\n"
             "        ((uint16_t *)base)[off] = (uint16_t)(fa_f32_bits(x) >> 16);\n"
             "    else\n        fa_store_elem(dt, base, off, x);\n}\n"
             "#define fa_store_elem mutation_store_elem\n"),
        ],
    },
    {
        "id": "dropout-unscaled",
        "what": "dropout's kept elements of P not scaled by 1/(1-p) (flash_tiles.h apply_dropout, forward and backward)",
        "edits": [
            ("backends/cpu/flash_tiles.h",
             "p->dropout_threshold, p->dropout_scale, pm + r * ld + j0);",
             "p->dropout_threshold, 1.0f, pm + r * ld + j0);"),
        ],
    },
    {
        "id": "softmax-shift-no-inf-guard",
        "what": "the -inf guard removed from the online softmax's shift (core/softmax.h fa_softmax_shift)",
        "edits": [
            ("core/softmax.h", "    return m == -INFINITY ? 0.0f : m;\n", "    return m;\n"),
        ],
    },
    # Not listed: the -inf guard of fa_softmax_update's rescale factor. Without it the factor is
    # expf(-inf - m_new) = 0 for a finite new max, and 1 when both are -inf: an equivalent mutant
    # (measured: the whole suite passes with it, as it must).
    {
        "id": "softmax-inv-sum-no-guard",
        "what": "the final normalisation's guard for a fully masked row (l = 0) removed: O = 0 * inf "
                "(core/softmax.h fa_softmax_inv_sum)",
        "edits": [
            ("core/softmax.h", "    return row.l == 0.0f ? 0.0f : 1.0f / row.l;\n", "    return 1.0f / row.l;\n"),
        ],
    },
    {
        "id": "softmax-merge-no-inf-guard",
        "what": "the merge of two partial results loses its guard for two fully masked parts "
                "(core/softmax.h fa_softmax_merge, used by ring attention)",
        "edits": [
            ("core/softmax.h", "    if (m == -INFINITY) {\n        for (int64_t c = 0; c < d; ++c)",
             "    if (0) {\n        for (int64_t c = 0; c < d; ++c)"),
        ],
    },
    {
        "id": "bwd-lse-no-inf-guard",
        "what": "the backward's guard for fully masked rows (LSE = -inf) removed (flash_backward.c)",
        "edits": [
            ("backends/cpu/flash_backward.c",
             "                    if (fa_row_absent(lse[r]))\n"
             "                        memset(pm + r * bk, 0, sizeof(float) * (size_t)bk);\n"
             "                    else\n"
             "                        bc->isa->exp_row(pm + r * bk, bk, lse[r]);",
             "                    bc->isa->exp_row(pm + r * bk, bk, lse[r]);"),
        ],
    },
    {
        "id": "mask-right-off-by-one",
        "what": "causal / window right edge off by one in the CPU kernels' partial-tile mask (flash_tiles.h apply_mask)",
        "edits": [
            ("backends/cpu/flash_tiles.h",
             "            if (b < hi)\n                hi = b;\n",
             "            if (b + 1 < hi)\n                hi = b + 1;\n"),
        ],
    },
    {
        "id": "mask-left-off-by-one",
        "what": "sliding window left edge off by one in the CPU kernels' partial-tile mask (flash_tiles.h apply_mask)",
        "edits": [
            ("backends/cpu/flash_tiles.h",
             "            if (a > lo)\n                lo = a;\n",
             "            if (a - 1 > lo)\n                lo = a - 1;\n"),
        ],
    },
    {
        "id": "lse-off-1e-3",
        "what": "the forward's LSE 0.001 too large (flash_forward.c)",
        "edits": [
            ("backends/cpu/flash_forward.c",
             "((float *)p->lse.data)[off] = lse;",
             "((float *)p->lse.data)[off] = lse + 1e-3f;"),
        ],
    },
    {
        "id": "gqa-head-modulo",
        "what": "GQA: query head h reads kv head h % heads_kv instead of h / group in the forward (flash_forward.c)",
        "edits": [
            ("backends/cpu/flash_forward.c", "    int64_t hk = h / p->group;\n", "    int64_t hk = h % p->heads_kv;\n"),
        ],
    },
    {
        "id": "dq-chunk-sum-drops-last",
        "what": "the backward's sum of the per-chunk dQ buffers skips the last chunk (flash_backward.c bwd_dq_task)",
        "edits": [
            ("backends/cpu/flash_backward.c",
             "for (int64_t c = 1; c < bc->chunks; ++c) {",
             "for (int64_t c = 1; c < bc->chunks - 1; ++c) {"),
        ],
    },
    {
        "id": "kv-pv1-reads-masked-values",
        "what": "the CPU decode kernel's one-row P V adds the keys a row cannot see (weight 0 times "
                "whatever the value holds, NaN included; kv_rows.h kv_pv1, 32-channel steps)",
        "edits": [
            ("backends/cpu/kv_rows.h",
             "        for (int64_t j = 0; j < nk; ++j) {\n            if (s[j] == -INFINITY)\n                continue;\n"
             "            v8f x0, x1, x2, x3;",
             "        for (int64_t j = 0; j < nk; ++j) {\n            v8f x0, x1, x2, x3;"),
        ],
    },
    {
        "id": "kv-output-in-load-order",
        "what": "the CPU decode's bf16 / fp16 outputs left in the kernels' even / odd channel order "
                "(kvcache.c: the accumulators not put back into channel order)",
        "edits": [
            ("backends/cpu/kvcache.c", "            kv_from_load_order(p->dtype, ar, dv);\n", ""),
        ],
    },
    {
        "id": "kv-direct-drops-tail-keys",
        "what": "the CPU decode's P V skips the last, partial chunk of a key block (kvcache.c)",
        "edits": [
            ("backends/cpu/kvcache.c",
             "            for (int64_t j0 = 0; j0 < nk; j0 += DIRECT_CHUNK)\n                for (int64_t rs = 0; rs < nr;) {\n"
             "                    const int64_t h = (base + rs) / gr - hk0, seg_end = (h + hk0 + 1) * gr - base;\n"
             "                    const int64_t re = seg_end < nr ? seg_end : nr;\n                    direct_pv(",
             "            for (int64_t j0 = 0; j0 + DIRECT_CHUNK <= nk; j0 += DIRECT_CHUNK)\n                for (int64_t rs = 0; rs < nr;) {\n"
             "                    const int64_t h = (base + rs) / gr - hk0, seg_end = (h + hk0 + 1) * gr - base;\n"
             "                    const int64_t re = seg_end < nr ? seg_end : nr;\n                    direct_pv("),
        ],
    },
    {
        "id": "kv-page-offset-power-of-two",
        "what": "the CPU KV cache's row inside a page taken as t & (page_size - 1), right only for page sizes "
                "that are powers of two (kvcache.c cache_offset)",
        "edits": [
            ("backends/cpu/kvcache.c", "(t % kp->page_size) * v->ss", "(t & (kp->page_size - 1)) * v->ss"),
        ],
    },
    {
        "id": "kv-alibi-slope-of-kv-head",
        "what": "the CPU KV cache's ALiBi slope indexed by the kv head instead of the query head (kvcache.c: "
                "differs only under GQA / MQA)",
        "edits": [
            ("backends/cpu/kvcache.c", "p->alibi_slopes[fa_alibi_slope_index(f, b, hq)]",
             "p->alibi_slopes[fa_alibi_slope_index(f, b, hq / p->group)]"),
        ],
    },
    {
        "id": "kv-rotary-bound-one-short",
        "what": "a rotary table one row shorter than the positions need is accepted and read past its end "
                "(core/kvcache.c check_arrays)",
        "edits": [
            ("core/kvcache.c", "if (kp->rotary && rot_need > kp->seqlen_ro)", "if (kp->rotary && rot_need > kp->seqlen_ro + 1)"),
        ],
    },
    {
        "id": "kv-shared-row-accepted",
        "what": "the appends' exclusivity checked on sequence numbers instead of cache_batch_idx's rows, so two "
                "sequences appending into one cache row are accepted and a key is lost (core/kvcache.c)",
        "edits": [
            ("core/kvcache.c", "use[k++] = (kv_slot_use){kp->host_batch_idx[b], total, cached, b, 0};",
             "use[k++] = (kv_slot_use){b, total, cached, b, 0};"),
        ],
    },
    {
        "id": "kv-nan-row-hidden",
        "what": "the CPU KV cache's block maximum skips NaN scores, so a row whose visible scores are all NaN "
                "reads as one that sees no key (O = 0, LSE = -inf) instead of NaN (kvcache.c)",
        "edits": [
            ("backends/cpu/kvcache.c", "tmax = sr[j] > tmax || isnan(sr[j]) ? sr[j] : tmax;",
             "tmax = sr[j] > tmax ? sr[j] : tmax;"),
        ],
    },
]
