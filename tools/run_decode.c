/* run_decode.c: `flashattn run --decode`: times fa_forward_kvcache over a full KV cache of random
 * normal values (contiguous, or paged with the pages in shuffled order) and reports the time, the
 * cache bytes read per second, and beside it the copy rate of the same memory in the same run: on
 * GPU backends a device-to-device fa_memcpy of the cache's size (bytes read + written per second),
 * on the CPU one memcpy per worker thread over the same bytes (the rate with all the threads the
 * call uses). */
#include "../bench/provenance.h"
#include "cli.h"
#include "tensors.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char decode_help[] =
    "Usage: flashattn run --decode [options]\n"
    "\n"
    "Times fa_forward_kvcache: --new query tokens per sequence over a cache of --kv tokens, and\n"
    "reports microseconds per call, the K and V bytes read per second, and the copy rate of the\n"
    "same memory measured in the same run (device-to-device copy on GPUs; on the CPU one memcpy per\n"
    "worker thread), each the median of --repeat runs after one warm-up.\n"
    "\n"
    "  --backend NAME --device N --threads T\n"
    "  --batch B (8)  --kv N (32768)  --new N (1)  --heads H (32)  --heads-kv H (8)  --dim D (128)\n"
    "  --dtype fp32|fp16|bf16 (bf16)  --page P (0: contiguous; else the page size, pages shuffled)\n"
    "  --splits N (0: the backend's choice)  --causal  --repeat R (10)\n"
    "  --check-on-device (the int32 arrays checked by the device: no host copy per call; the\n"
    "    backends without it check on the host)\n";

typedef struct copy_job {
    char *dst;
    const char *src;
    size_t bytes;
} copy_job;

static void *copy_part(void *arg)
{
    copy_job *j = arg;
    memcpy(j->dst, j->src, j->bytes);
    return NULL;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One copy of bytes from src to dst: threads memcpy's on the host, fa_memcpy on a device. */
static fa_status copy_once(fa_context *ctx, int host, int threads, void *dst, const void *src, size_t bytes)
{
    if (!host) {
        fa_status st = fa_memcpy(ctx, dst, src, bytes, FA_COPY_DEVICE_TO_DEVICE);
        return st == FA_SUCCESS ? fa_synchronize(ctx) : st;
    }
    pthread_t tid[256];
    copy_job jobs[256];
    int started[256] = {0};
    if (threads < 1)
        threads = 1;
    if (threads > 256)
        threads = 256;
    size_t part = (bytes / (size_t)threads + 63) / 64 * 64;
    for (int i = 0; i < threads; ++i) {
        size_t lo = part * (size_t)i < bytes ? part * (size_t)i : bytes, hi = lo + part < bytes ? lo + part : bytes;
        jobs[i] = (copy_job){(char *)dst + lo, (const char *)src + lo, hi - lo};
        started[i] = i > 0 && pthread_create(&tid[i], NULL, copy_part, &jobs[i]) == 0;
        if (i > 0 && !started[i])
            copy_part(&jobs[i]);
    }
    copy_part(&jobs[0]);
    for (int i = 1; i < threads; ++i)
        if (started[i])
            pthread_join(tid[i], NULL);
    return FA_SUCCESS;
}

static const struct option decode_options[] = {
    HELP_OPTION,
    {"decode", no_argument, NULL, 0},
    {"backend", required_argument, NULL, 0},
    {"device", required_argument, NULL, 0},
    {"threads", required_argument, NULL, 0},
    {"repeat", required_argument, NULL, 0},
    {"splits", required_argument, NULL, 0},
    {"causal", no_argument, NULL, 0},
    {"check-on-device", no_argument, NULL, 0},
    {"batch", required_argument, NULL, 0},
    {"kv", required_argument, NULL, 0},
    {"new", required_argument, NULL, 0},
    {"heads", required_argument, NULL, 0},
    {"heads-kv", required_argument, NULL, 0},
    {"dim", required_argument, NULL, 0},
    {"page", required_argument, NULL, 0},
    {"dtype", required_argument, NULL, 0},
    OPTIONS_END,
};

int run_decode(int argc, char **argv)
{
    const char *cmd = "run";
    arg_cursor a;
    const char *backend = NULL, *dtype_name = "bf16";
    int device = 0, threads = -1, repeat = 10, splits = 0, causal = 0, check_on_device = 0;
    int64_t batch = 8, kv = 32768, sn = 1, hq = 32, hk = 8, d = 128, page = 0;
    int parse_rc = 0;
    arg_begin(&a, cmd, argc, argv, decode_options);
    while (next_option(&a, &parse_rc)) {
        const char *o = a.opt;
        int rc = 0;
        if (is_help(o)) {
            fputs(decode_help, stdout);
            return 0;
        } else if (!strcmp(o, "--decode")) {
        } else if (!strcmp(o, "--backend")) {
            rc = take_value(&a, o, &backend);
        } else if (!strcmp(o, "--device")) {
            rc = take_int(&a, o, 0, 1 << 20, &device);
        } else if (!strcmp(o, "--threads")) {
            rc = take_int(&a, o, 0, 4096, &threads);
        } else if (!strcmp(o, "--repeat")) {
            rc = take_int(&a, o, 1, 100000, &repeat);
        } else if (!strcmp(o, "--splits")) {
            rc = take_int(&a, o, 0, 1 << 16, &splits);
        } else if (!strcmp(o, "--causal")) {
            causal = 1;
        } else if (!strcmp(o, "--check-on-device")) {
            check_on_device = 1;
        } else if (!strcmp(o, "--batch")) {
            rc = take_i64(&a, o, 1, INT32_MAX, &batch);
        } else if (!strcmp(o, "--kv")) {
            rc = take_i64(&a, o, 0, INT32_MAX, &kv);
        } else if (!strcmp(o, "--new")) {
            rc = take_i64(&a, o, 1, INT32_MAX, &sn);
        } else if (!strcmp(o, "--heads")) {
            rc = take_i64(&a, o, 1, INT32_MAX, &hq);
        } else if (!strcmp(o, "--heads-kv")) {
            rc = take_i64(&a, o, 1, INT32_MAX, &hk);
        } else if (!strcmp(o, "--dim")) {
            rc = take_i64(&a, o, 1, FA_MAX_HEAD_DIM, &d);
        } else if (!strcmp(o, "--page")) {
            rc = take_i64(&a, o, 0, 1 << 20, &page);
        } else if (!strcmp(o, "--dtype")) {
            rc = take_value(&a, o, &dtype_name);
        } else {
            rc = usage_error(cmd, "unknown option '%s' with --decode", o); /* in decode_options, not here */
        }
        if (rc)
            return rc;
    }
    if (parse_rc)
        return parse_rc;
    fa_dtype dt;
    if (!parse_dtype_name(dtype_name, &dt))
        return usage_error(cmd, "--dtype: '%s' is not fp32, fp16 or bf16", dtype_name);
    const size_t es = fa_dtype_size(dt);
    const int64_t pages_per = page ? (kv + page - 1) / page : 0, rows = page ? page : kv;
    const int64_t nb = page ? batch * pages_per : batch;
    int64_t shape_c[4] = {nb, rows, hk, d}, shape_q[4] = {batch, sn, hq, d}, n_c, n_q;
    size_t bytes_c, bytes_q;
    if (!shape_bytes(4, shape_c, es, &n_c, &bytes_c) || !shape_bytes(4, shape_q, es, &n_q, &bytes_q))
        return usage_error(cmd, "the cache or query size overflows");

    fa_context *ctx = NULL;
    fa_status st = fa_context_create(&ctx, backend, device);
    if (st != FA_SUCCESS)
        return context_error(cmd, backend, device, st);
    if (threads >= 0 && (st = fa_context_set_num_threads(ctx, threads)) != FA_SUCCESS) {
        int rc = library_error(cmd, ctx, "fa_context_set_num_threads", st);
        fa_context_destroy(ctx);
        return rc;
    }
    const char *bname = fa_context_backend_name(ctx);
    const int host = strcmp(bname, "cpu") == 0;
    device_buffer kc = {0}, vc = {0}, q = {0}, o = {0}, lens = {0}, table = {0}, scratch = {0};
    void *hc = malloc(bytes_c ? bytes_c : 1), *hq_ = malloc(bytes_q ? bytes_q : 1);
    int32_t *hl = malloc(sizeof(int32_t) * (size_t)batch), *ht = page ? malloc(sizeof(int32_t) * (size_t)nb) : NULL;
    double *times = malloc(sizeof(double) * (size_t)repeat), *ctimes = malloc(sizeof(double) * (size_t)repeat);
    int rc = EXIT_LIBRARY;
    if (!hc || !hq_ || !hl || (page && !ht) || !times || !ctimes) {
        fprintf(stderr, "flashattn run: out of host memory\n");
        goto done;
    }
    uint64_t seed = 88172645463325252ull;
    for (int64_t i = 0; i < n_c; ++i) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        dtype_store(dt, hc, i, (float)((double)(seed >> 11) / 9007199254740992.0 * 2.0 - 1.0));
    }
    for (int64_t i = 0; i < n_q; ++i)
        dtype_store(dt, hq_, i, (float)((i * 2654435761u % 1000) / 500.0 - 1.0));
    for (int64_t b = 0; b < batch; ++b)
        hl[b] = (int32_t)kv;
    if (page) { /* a random permutation of the pages */
        for (int64_t i = 0; i < nb; ++i)
            ht[i] = (int32_t)i;
        for (int64_t i = nb - 1; i > 0; --i) {
            seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
            int64_t j = (int64_t)(seed % (uint64_t)(i + 1));
            int32_t t = ht[i];
            ht[i] = ht[j];
            ht[j] = t;
        }
    }
    if ((st = device_upload(ctx, hc, bytes_c, &kc)) || (st = device_upload(ctx, hc, bytes_c, &vc)) ||
        (st = device_upload(ctx, hq_, bytes_q, &q)) || (st = device_alloc(ctx, bytes_q, &o)) ||
        (st = device_upload(ctx, hl, sizeof(int32_t) * (size_t)batch, &lens)) ||
        (page && (st = device_upload(ctx, ht, sizeof(int32_t) * (size_t)nb, &table))) ||
        (st = device_alloc(ctx, bytes_c, &scratch))) {
        rc = library_error(cmd, ctx, "allocating the cache", st);
        goto done;
    }
    fa_kvcache_args args;
    memset(&args, 0, sizeof args);
    args.q = fa_tensor_contiguous(q.ptr, dt, 4, shape_q);
    args.k_cache = fa_tensor_contiguous(kc.ptr, dt, 4, shape_c);
    args.v_cache = fa_tensor_contiguous(vc.ptr, dt, 4, shape_c);
    args.o = fa_tensor_contiguous(o.ptr, dt, 4, shape_q);
    args.cache_seqlens = lens.ptr;
    if (page) {
        args.block_table = table.ptr;
        args.block_table_stride = pages_per;
    }
    args.opts = fa_options_default();
    args.opts.causal = causal;
    args.num_splits = splits;
    args.check_on_device = check_on_device;
    const int workers = fa_context_num_threads(ctx);
    for (int r = -1; r < repeat; ++r) { /* r = -1: warm-up */
        double t0 = now();
        st = fa_forward_kvcache(ctx, &args);
        if (st == FA_SUCCESS)
            st = fa_synchronize(ctx);
        double t1 = now();
        if (st == FA_SUCCESS)
            st = copy_once(ctx, host, workers, scratch.ptr, kc.ptr, bytes_c);
        double t2 = now();
        if (st != FA_SUCCESS) {
            rc = library_error(cmd, ctx, "fa_forward_kvcache", st);
            goto done;
        }
        if (r >= 0) {
            times[r] = t1 - t0;
            ctimes[r] = t2 - t1;
        }
    }
    qsort(times, (size_t)repeat, sizeof *times, cmp_double);
    qsort(ctimes, (size_t)repeat, sizeof *ctimes, cmp_double);
    const double t = times[repeat / 2], tc = ctimes[repeat / 2];
    const double kv_bytes = 2.0 * (double)batch * (double)kv * (double)hk * (double)d * (double)es;
    const double rate = kv_bytes / t, copy = 2.0 * (double)bytes_c / tc;
    char devname[256] = "";
    fa_device_name(bname, device, devname, sizeof devname);
    fa_bench_provenance(stdout, devname, argc, argv);
    printf("decode on %s (%d thread%s): batch %lld, kv %lld, new %lld, heads %lld/%lld, d %lld, %s, %s cache%s%s\n",
           bname, workers, workers == 1 ? "" : "s", (long long)batch, (long long)kv, (long long)sn, (long long)hq,
           (long long)hk, (long long)d, fa_dtype_name(dt), page ? "paged" : "contiguous", causal ? ", causal" : "",
           check_on_device ? ", check_on_device" : "");
    printf("  fa_forward_kvcache: %.1f us (min %.1f), K and V read at %.1f GB/s\n", t * 1e6, times[0] * 1e6,
           rate / 1e9);
    printf("  copy of the cache's %.1f MB: %.1f GB/s (read + write)\n", (double)bytes_c / 1e6, copy / 1e9);
    printf("  decode rate / copy rate: %.2f\n", rate / copy);
    rc = 0;
done:
    device_release(ctx, &kc), device_release(ctx, &vc), device_release(ctx, &q), device_release(ctx, &o);
    device_release(ctx, &lens), device_release(ctx, &table), device_release(ctx, &scratch);
    free(hc), free(hq_), free(hl), free(ht), free(times), free(ctimes);
    fa_context_destroy(ctx);
    return rc;
}
