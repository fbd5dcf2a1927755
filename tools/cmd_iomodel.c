/* cmd_iomodel.c: `flashattn iomodel`: the device-memory traffic of the forward pass under the IO
 * model of Dao et al. 2022 (fa_io_model_compute), as a report, one CSV line or a block sweep. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char iomodel_help[] =
    "Usage: flashattn iomodel [options]\n"
    "\n"
    "Device-memory (HBM) traffic of the forward pass under the IO model of Dao et al. 2022\n"
    "(section 3.2), counted exactly (fa_io_model_compute; the constants are in core/iomodel.c) for\n"
    "standard attention (S and P written and read back), the paper's Algorithm 1 (K/V blocks in\n"
    "the outer loop) and FlashAttention-2's order (query blocks outside, K/V streamed: this\n"
    "library's kernels). Caches are not modelled. Bytes are for all batch x heads.\n"
    "\n"
    "  --seqlen-q N          query sequence length (1024)\n"
    "  --seqlen-k N          key/value sequence length (= seqlen-q)\n"
    "  --dim D               head dimension (64)\n"
    "  --batch B --heads H   (1, 1)\n"
    "  --dtype T             fp32, fp16 or bf16: bytes per element of Q, K, V, S, P, O (fp16)\n"
    "  --onchip M            on-chip memory in bytes for the paper's block sizes (232448: the\n"
    "                        shared memory a block may use on H100 / H200)\n"
    "  --block-q BR --block-k BC   block sizes (0: the paper's, B_c = ceil(M / 4d) and\n"
    "                        B_r = min(B_c, d) with M in fp32 elements)\n"
    "  --sweep B1,B2,...     one CSV line per block size b (B_r = B_c = b, at most 64 sizes): block,\n"
    "                        then read + written bytes of standard, Algorithm 1, query blocks outside\n"
    "  --csv                 the report as one CSV line (with a header): B_r, B_c and the same\n"
    "                        three totals\n";

/* The three totals (read + written) of m for bh heads; 0 or FA_ERR_OVERFLOW. */
static fa_status iomodel_totals(const fa_io_model *m, int64_t bh, int64_t v[3])
{
    const int64_t rd[3] = {m->standard_read, m->flash_read, m->flash_qouter_read};
    const int64_t wr[3] = {m->standard_write, m->flash_write, m->flash_qouter_write};
    for (int i = 0; i < 3; ++i)
        if (__builtin_add_overflow(rd[i], wr[i], &v[i]) || __builtin_mul_overflow(v[i], bh, &v[i]))
            return FA_ERR_OVERFLOW;
    return FA_SUCCESS;
}

static const struct option iomodel_options[] = {
    HELP_OPTION,
    {"seqlen-q", required_argument, NULL, 0},
    {"seqlen-k", required_argument, NULL, 0},
    {"dim", required_argument, NULL, 0},
    {"batch", required_argument, NULL, 0},
    {"heads", required_argument, NULL, 0},
    {"onchip", required_argument, NULL, 0},
    {"block-q", required_argument, NULL, 0},
    {"block-k", required_argument, NULL, 0},
    {"sweep", required_argument, NULL, 0},
    {"csv", no_argument, NULL, 0},
    {"dtype", required_argument, NULL, 0},
    OPTIONS_END,
};

int cmd_iomodel(int argc, char **argv)
{
    int64_t sq = 1024, sk = -1, d = 64, batch = 1, heads = 1, onchip = 232448, bq = 0, bk = 0;
    size_t elem = 2;
    const char *dtype_name = "fp16", *sweep = NULL;
    int as_csv = 0;
    arg_cursor a;
    int parse_rc = 0;
    arg_begin(&a, "iomodel", argc, argv, iomodel_options);
    while (next_option(&a, &parse_rc)) {
        const char *opt = a.opt;
        int rc = 0;
        if (is_help(opt)) {
            fputs(iomodel_help, stdout);
            return 0;
        } else if (strcmp(opt, "--seqlen-q") == 0) {
            rc = take_i64(&a, opt, 0, INT64_MAX, &sq);
        } else if (strcmp(opt, "--seqlen-k") == 0) {
            rc = take_i64(&a, opt, 0, INT64_MAX, &sk);
        } else if (strcmp(opt, "--dim") == 0) {
            rc = take_i64(&a, opt, 1, INT64_MAX, &d);
        } else if (strcmp(opt, "--batch") == 0) {
            rc = take_i64(&a, opt, 1, INT64_MAX, &batch);
        } else if (strcmp(opt, "--heads") == 0) {
            rc = take_i64(&a, opt, 1, INT64_MAX, &heads);
        } else if (strcmp(opt, "--onchip") == 0) {
            rc = take_i64(&a, opt, 1, INT64_MAX, &onchip);
        } else if (strcmp(opt, "--block-q") == 0) {
            rc = take_i64(&a, opt, 0, INT64_MAX, &bq);
        } else if (strcmp(opt, "--block-k") == 0) {
            rc = take_i64(&a, opt, 0, INT64_MAX, &bk);
        } else if (strcmp(opt, "--sweep") == 0) {
            rc = take_value(&a, opt, &sweep);
        } else if (strcmp(opt, "--csv") == 0) {
            as_csv = 1;
        } else if (strcmp(opt, "--dtype") == 0) {
            rc = take_value(&a, opt, &dtype_name);
            if (!rc) {
                if (strcmp(dtype_name, "fp32") == 0)
                    elem = 4;
                else if (strcmp(dtype_name, "fp16") == 0 || strcmp(dtype_name, "bf16") == 0)
                    elem = 2;
                else
                    rc = usage_error(a.cmd, "--dtype: '%s' is not fp32, fp16 or bf16", dtype_name);
            }
        } else {
            rc = usage_error(a.cmd, "unknown option '%s'", opt); /* in iomodel_options, not here */
        }
        if (rc)
            return rc;
    }
    if (parse_rc)
        return parse_rc;
    if (sk < 0)
        sk = sq;
    int64_t bh;
    if (__builtin_mul_overflow(batch, heads, &bh))
        return usage_error(a.cmd, "--batch x --heads overflows 64 bits");

    if (sweep) {
        int64_t blocks[64]; /* the whole list is parsed before anything is printed */
        int nb = 0;
        for (const char *p = sweep; *p;) {
            char *end = NULL;
            errno = 0;
            long long b = strtoll(p, &end, 10);
            if (end == p || errno == ERANGE || b < 1 || (*end != ',' && *end != '\0') || (*end == ',' && !end[1]) ||
                nb == 64)
                return usage_error(a.cmd, "--sweep: '%s' is not a list of at most 64 positive integers", sweep);
            blocks[nb++] = b;
            p = *end ? end + 1 : end;
        }
        printf("block,standard_bytes,flash_alg1_bytes,flash_qouter_bytes\n");
        for (int i = 0; i < nb; ++i) {
            fa_io_model m;
            int64_t v[3];
            fa_status st = fa_io_model_compute(sq, sk, d, onchip, blocks[i], blocks[i], elem, &m);
            if (st == FA_SUCCESS)
                st = iomodel_totals(&m, bh, v);
            if (st != FA_SUCCESS) {
                fprintf(stderr, "flashattn iomodel: block %lld: %s\n", (long long)blocks[i], fa_status_string(st));
                return EXIT_LIBRARY;
            }
            printf("%lld,%lld,%lld,%lld\n", (long long)blocks[i], (long long)v[0], (long long)v[1], (long long)v[2]);
        }
        return 0;
    }

    fa_io_model m;
    fa_status st = fa_io_model_compute(sq, sk, d, onchip, bq, bk, elem, &m);
    if (st != FA_SUCCESS) {
        fprintf(stderr, "flashattn iomodel: %s\n", fa_status_string(st));
        return EXIT_LIBRARY;
    }
    if (as_csv) {
        int64_t v[3];
        if (iomodel_totals(&m, bh, v) != FA_SUCCESS) {
            fprintf(stderr, "flashattn iomodel: %s\n", fa_status_string(FA_ERR_OVERFLOW));
            return EXIT_LIBRARY;
        }
        printf("block_q,block_k,standard_bytes,flash_alg1_bytes,flash_qouter_bytes\n%lld,%lld,%lld,%lld,%lld\n",
               (long long)m.block_q, (long long)m.block_k, (long long)v[0], (long long)v[1], (long long)v[2]);
        return 0;
    }
    /* the paper's blocks for this M and d: the same model with block sizes 0 and no sequence */
    fa_io_model paper;
    if (fa_io_model_compute(0, 0, d, onchip, 0, 0, elem, &paper) != FA_SUCCESS) {
        fprintf(stderr, "flashattn iomodel: %s\n", fa_status_string(FA_ERR_INVALID_ARG));
        return EXIT_LIBRARY;
    }
    int64_t pq = paper.block_q, pk = paper.block_k;
    printf("IO model (Dao et al. 2022, section 3.2), forward: batch %lld x heads %lld, seqlen_q %lld, seqlen_k %lld, "
           "d %lld, %s (%zu-byte elements, fp32 statistics)\n",
           (long long)batch, (long long)heads, (long long)sq, (long long)sk, (long long)d, dtype_name, elem);
    printf("on-chip memory M = %lld bytes: the paper's blocks B_r = %lld, B_c = %lld; counted with B_r = %lld, "
           "B_c = %lld\n",
           (long long)onchip, (long long)pq, (long long)pk, (long long)m.block_q, (long long)m.block_k);
    const char *names[3] = {"standard (S, P through memory)", "flash, Algorithm 1 (K/V outside)",
                            "flash, query blocks outside"};
    const int64_t rd[3] = {m.standard_read, m.flash_read, m.flash_qouter_read};
    const int64_t wr[3] = {m.standard_write, m.flash_write, m.flash_qouter_write};
    const double std_total = ((double)rd[0] + (double)wr[0]) * (double)bh;
    printf("%-34s %12s %12s %12s %12s\n", "algorithm", "read", "written", "total", "vs standard");
    for (int i = 0; i < 3; ++i) {
        char r[32], w[32], t[32];
        const double total = ((double)rd[i] + (double)wr[i]) * (double)bh;
        format_bytes((double)rd[i] * (double)bh, r, sizeof r);
        format_bytes((double)wr[i] * (double)bh, w, sizeof w);
        format_bytes(total, t, sizeof t);
        printf("%-34s %12s %12s %12s %11.2fx\n", names[i], r, w, t, total > 0.0 ? std_total / total : 0.0);
    }
    return 0;
}
