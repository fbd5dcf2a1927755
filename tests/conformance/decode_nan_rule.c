/* decode_nan_rule.c: the NaN rule on fa_forward_kvcache (decode.c runs it). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "decode_case.h"

/* The NaN rule (docs/options.md), as fa_forward keeps it: NaN in a query row, or in a key that rows
 * see, makes those rows' O and LSE NaN, never O = 0 and LSE = -inf (a row that sees no key); the
 * other rows stay finite. One split and several, a contiguous and a paged cache. */
int run_nan_rule(fa_context *ctx, fa_dtype dt)
{
    int failures = 0;
    for (int variant = 0; variant < 4; ++variant) {
        const int paged = variant & 1, splits = variant & 2 ? 4 : 1;
        const dcase c = {"nan", dt, 2, 1, 4, 2, 64, paged ? 16 : 0, 128, {40, 70}, 1, 0, 0, 0, -1, -1, 0, splits,
                         0, 0, 0, 0, 0, 0, 0};
        host_case h;
        make_host(&c, &h, 7 + (uint64_t)variant);
        /* q of sequence 0, head 0 (kv head 0); key 2 of sequence 1, kv head 1 (query heads 2, 3) */
        for (int64_t ch = 0; ch < c.d; ++ch)
            put(dt, h.q, ch, NAN);
        const int64_t row = paged ? h.table[h.pages_per_seq] : 1;
        put(dt, h.kc, ((row * h.rows + 2) * c.hkv + 1) * h.dp, NAN);
        dev_case x;
        fa_status st = make_dev(ctx, &c, &h, &x) ? fa_forward_kvcache(ctx, &x.a) : FA_ERR_OUT_OF_MEMORY;
        if (st == FA_SUCCESS)
            st = fa_synchronize(ctx);
        const size_t es = esz(dt);
        void *o = back(ctx, x.a.o.data, es * (size_t)h.qn);
        float *lse = back(ctx, x.a.lse.data, sizeof(float) * (size_t)(c.batch * c.hq));
        int bad_rows = 0;
        for (int64_t b = 0; st == FA_SUCCESS && o && lse && b < c.batch; ++b)
            for (int64_t hq = 0; hq < c.hq; ++hq) {
                const int want_nan = (b == 0 && hq == 0) || (b == 1 && hq >= 2);
                int nan_o = 1, finite_o = 1;
                for (int64_t ch = 0; ch < c.d; ++ch) {
                    const double v = get(dt, o, (b * c.hq + hq) * c.d + ch);
                    nan_o &= isnan(v) != 0;
                    finite_o &= isfinite(v) != 0;
                }
                const float l = lse[b * c.hq + hq];
                if (want_nan ? !(nan_o && isnan(l)) : !(finite_o && isfinite(l))) {
                    printf("  nan rule, %s cache, %d split(s): sequence %lld head %lld: o %s, lse %g, expected %s\n",
                           paged ? "paged" : "contiguous", splits, (long long)b, (long long)hq,
                           nan_o ? "NaN" : finite_o ? "finite" : "mixed", (double)l, want_nan ? "NaN" : "finite");
                    ++bad_rows;
                }
            }
        if (st != FA_SUCCESS || !o || !lse || bad_rows) {
            printf("  FAILED nan rule (%s cache, %d split(s), %s): %s\n", paged ? "paged" : "contiguous", splits,
                   dt == F32 ? "f32" : "bf16", fa_status_string(st));
            ++failures;
        }
        free(o), free(lse);
        free_dev(ctx, &x);
        free_host(&h);
    }
    return failures;
}
