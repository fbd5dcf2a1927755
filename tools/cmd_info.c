/* cmd_info.c: `flashattn info`: the library version, the backends compiled in with their devices
 * and capabilities, the default backend, and the plan and kernels for an example shape. */
#include "cli.h"
#include "tensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_capabilities(const fa_capabilities *caps)
{
    printf("    dtypes:");
    for (int dt = FA_DTYPE_F32; dt <= FA_DTYPE_BF16; ++dt)
        if (caps->dtypes & (1u << dt))
            printf(" %s", fa_dtype_name((fa_dtype)dt));
    printf("\n    head dims:");
    if (caps->head_dims[0] > 0) {
        for (int i = 0; i < 16 && caps->head_dims[i] > 0; ++i)
            printf(" %d", caps->head_dims[i]);
        printf(" (other d up to %d padded)", caps->max_head_dim);
    } else {
        printf(" 1..%d", caps->max_head_dim);
    }
    static const struct {
        unsigned bit;
        const char *word;
    } features[] = {
        {FA_FEATURE_CAUSAL, "causal"},   {FA_FEATURE_WINDOW, "window"},
        {FA_FEATURE_VARLEN, "varlen"},   {FA_FEATURE_GQA, "gqa"},
        {FA_FEATURE_DROPOUT, "dropout"}, {FA_FEATURE_BLOCK_SPARSE, "block-sparse"},
        {FA_FEATURE_LSE, "lse"},         {FA_FEATURE_DETERMINISTIC, "deterministic"},
        {FA_FEATURE_BACKWARD, "backward"}, {FA_FEATURE_STRIDES, "strides"},
        {FA_FEATURE_F32_OUTPUT, "f32-output"},
        {FA_FEATURE_SOFTCAP, "softcap"}, {FA_FEATURE_ALIBI, "alibi"},
    };
    printf("\n    features:");
    for (size_t i = 0; i < sizeof features / sizeof features[0]; ++i)
        if (caps->features & features[i].bit)
            printf(" %s", features[i].word);
    char notes[sizeof caps->notes + 1];
    memcpy(notes, caps->notes, sizeof caps->notes);
    notes[sizeof caps->notes] = '\0'; /* never trust a fixed buffer to be terminated */
    printf("\n    notes: %s\n", notes[0] ? notes : "-");
}

/* The plan and kernel choice for one example shape; buffers come from the context so this works
 * on any backend. */
static void print_example_plan(fa_context *ctx, fa_dtype dt, int64_t seqlen, int64_t d)
{
    int64_t shape[4] = {1, seqlen, 1, d};
    int64_t lse_shape[3] = {1, 1, seqlen};
    size_t bytes = (size_t)(seqlen * d) * fa_dtype_size(dt);
    device_buffer q = {0}, k = {0}, v = {0}, o = {0}, lse = {0};
    fa_status st;
    if ((st = device_alloc(ctx, bytes, &q)) || (st = device_alloc(ctx, bytes, &k)) ||
        (st = device_alloc(ctx, bytes, &v)) || (st = device_alloc(ctx, bytes, &o)) ||
        (st = device_alloc(ctx, (size_t)seqlen * sizeof(float), &lse))) {
        printf("    d %lld: cannot allocate the example: %s\n", (long long)d, fa_status_string(st));
        goto done;
    }
    fa_fwd_args args;
    memset(&args, 0, sizeof args);
    args.q = fa_tensor_contiguous(q.ptr, dt, 4, shape);
    args.k = fa_tensor_contiguous(k.ptr, dt, 4, shape);
    args.v = fa_tensor_contiguous(v.ptr, dt, 4, shape);
    args.o = fa_tensor_contiguous(o.ptr, dt, 4, shape);
    args.lse = fa_tensor_contiguous(lse.ptr, FA_DTYPE_F32, 3, lse_shape);
    args.opts = fa_options_default();
    fa_plan_info plan;
    st = fa_plan(ctx, &args, &plan);
    if (st != FA_SUCCESS) {
        printf("    d %lld: %s (%s)\n", (long long)d, fa_status_string(st), fa_context_last_error(ctx));
        goto done;
    }
    char ws_f[32], ws_b[32];
    format_bytes((double)plan.workspace_fwd, ws_f, sizeof ws_f);
    format_bytes((double)plan.workspace_bwd, ws_b, sizeof ws_b);
    printf("    d %lld: tiles B_r x B_c = %lld x %lld (paper %lld x %lld from M = %lld bytes), %lld x %lld "
           "blocks, workspace forward %s, backward %s\n",
           (long long)d, (long long)plan.block_q, (long long)plan.block_k, (long long)plan.paper_block_q,
           (long long)plan.paper_block_k, (long long)plan.onchip_bytes, (long long)plan.num_q_blocks,
           (long long)plan.num_k_blocks, ws_f, ws_b);
    for (int backward = 0; backward <= 1; ++backward) {
        char variant[128] = "";
        st = fa_query_support(ctx, &args, backward, variant, sizeof variant);
        printf("      %s kernel: %s%s%s\n", backward ? "backward" : "forward ",
               st == FA_SUCCESS ? variant : fa_status_string(st), st == FA_SUCCESS ? "" : ": ",
               st == FA_SUCCESS ? "" : fa_context_last_error(ctx));
    }
done:
    device_release(ctx, &q);
    device_release(ctx, &k);
    device_release(ctx, &v);
    device_release(ctx, &o);
    device_release(ctx, &lse);
}

static const char info_help[] =
    "Usage: flashattn info [--backend NAME] [--device N]\n"
    "\n"
    "Prints the library version, the backends compiled in with their devices and capabilities, the\n"
    "backend a context gets by default (FLASHATTN_BACKEND overrides it), and the tiles the library\n"
    "plans, with the kernels it would choose, for an example shape (batch 1, seqlen 2048, 1 head,\n"
    "d = 64 and 128) on that backend or on the one given with --backend.\n";

int cmd_info(int argc, char **argv)
{
    const char *backend = NULL;
    int device = 0;
    arg_cursor a = {"info", argc, argv, 0};
    for (a.pos = 1; a.pos < argc; ++a.pos) {
        const char *opt = argv[a.pos];
        int rc = 0;
        if (is_help(opt)) {
            fputs(info_help, stdout);
            return 0;
        } else if (strcmp(opt, "--backend") == 0) {
            rc = take_value(&a, opt, &backend);
        } else if (strcmp(opt, "--device") == 0) {
            rc = take_int(&a, opt, 0, 1 << 20, &device);
        } else {
            rc = usage_error(a.cmd, "unknown option '%s'", opt);
        }
        if (rc)
            return rc;
    }

    printf("flashattn %s\n", fa_version());
    int nb = fa_backend_count();
    printf("backends compiled in (%d):", nb);
    for (int i = 0; i < nb; ++i)
        printf(" %s", fa_backend_name(i));
    printf("\n");
    for (int i = 0; i < nb; ++i) {
        const char *name = fa_backend_name(i);
        if (!name)
            continue;
        printf("\nbackend %s\n", name);
        char why[256];
        fa_backend_availability(name, why, sizeof why);
        printf("    availability: %s\n", why);
        int count = 0;
        fa_status st = fa_device_count(name, &count);
        if (st != FA_SUCCESS) {
            printf("    devices: none usable (%s)\n", fa_status_string(st));
        } else {
            printf("    devices: %d\n", count);
            for (int dev = 0; dev < count; ++dev) {
                char dev_name[256] = "";
                st = fa_device_name(name, dev, dev_name, sizeof dev_name);
                dev_name[sizeof dev_name - 1] = '\0';
                printf("      %d: %s\n", dev, st == FA_SUCCESS ? dev_name : fa_status_string(st));
            }
        }
        fa_capabilities caps;
        st = fa_backend_capabilities(name, &caps);
        if (st == FA_SUCCESS)
            print_capabilities(&caps);
        else
            printf("    capabilities: %s\n", fa_status_string(st));
    }

    const char *env = getenv("FLASHATTN_BACKEND");
    fa_context *ctx = NULL;
    fa_status st = fa_context_create(&ctx, NULL, 0);
    printf("\ndefault backend: ");
    if (st == FA_SUCCESS)
        printf("%s (device 0)%s%s\n", fa_context_backend_name(ctx), env && *env ? ", from FLASHATTN_BACKEND=" : "",
               env && *env ? env : "");
    else
        printf("none: %s\n", fa_status_string(st));
    if (backend) {
        fa_context_destroy(ctx);
        ctx = NULL;
        st = fa_context_create(&ctx, backend, device);
        if (st != FA_SUCCESS)
            return context_error(a.cmd, backend, device, st);
    }
    if (ctx) {
        const char *name = fa_context_backend_name(ctx);
        fa_capabilities caps;
        fa_dtype dt = FA_DTYPE_F32;
        if (fa_backend_capabilities(name, &caps) == FA_SUCCESS && (caps.dtypes & (1u << FA_DTYPE_F16)))
            dt = FA_DTYPE_F16;
        printf("\nplan on %s device %d for batch 1, seqlen_q = seqlen_k = 2048, 1 head, %s:\n", name,
               fa_context_device(ctx), fa_dtype_name(dt));
        print_example_plan(ctx, dt, 2048, 64);
        print_example_plan(ctx, dt, 2048, 128);
        fa_context_destroy(ctx);
    }
    return 0;
}
