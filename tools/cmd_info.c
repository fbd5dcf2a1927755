/* cmd_info.c: `flashattn info`: the library version, the backends compiled in with their devices
 * and capabilities, the default backend, and the plan and kernels for an example shape; as text,
 * or with --json as one JSON object with the same facts. */
#include "cli.h"
#include "json.h"
#include "tensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    unsigned bit;
    const char *word;
} features[] = {
    {FA_FEATURE_CAUSAL, "causal"},     {FA_FEATURE_WINDOW, "window"},
    {FA_FEATURE_VARLEN, "varlen"},     {FA_FEATURE_GQA, "gqa"},
    {FA_FEATURE_DROPOUT, "dropout"},   {FA_FEATURE_BLOCK_SPARSE, "block-sparse"},
    {FA_FEATURE_LSE, "lse"},           {FA_FEATURE_DETERMINISTIC, "deterministic"},
    {FA_FEATURE_BACKWARD, "backward"}, {FA_FEATURE_STRIDES, "strides"},
    {FA_FEATURE_F32_OUTPUT, "f32-output"},
    {FA_FEATURE_SOFTCAP, "softcap"},   {FA_FEATURE_ALIBI, "alibi"},
    {FA_FEATURE_KVCACHE, "kvcache"},   {FA_FEATURE_KVCACHE_DEVICE_CHECK, "kvcache-device-check"},
    {FA_FEATURE_SINK, "sink"},         {FA_FEATURE_HEAD_DIM_V, "head-dim-v"},
};

/* caps->notes, terminated: never trust a fixed buffer to be */
static void capability_notes(const fa_capabilities *caps, char *notes)
{
    memcpy(notes, caps->notes, sizeof caps->notes);
    notes[sizeof caps->notes] = '\0';
}

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
    printf("\n    features:");
    for (size_t i = 0; i < sizeof features / sizeof features[0]; ++i)
        if (caps->features & features[i].bit)
            printf(" %s", features[i].word);
    char notes[sizeof caps->notes + 1];
    capability_notes(caps, notes);
    printf("\n    notes: %s\n", notes[0] ? notes : "-");
}

/* The plan and kernel choice for one example shape, as text or, with jw, as one JSON object of the
 * "plans" array; buffers come from the context so this works on any backend. */
static void print_example_plan(fa_context *ctx, fa_dtype dt, int64_t seqlen, int64_t d, json_writer *jw)
{
    int64_t shape[4] = {1, seqlen, 1, d};
    int64_t lse_shape[3] = {1, 1, seqlen};
    size_t bytes = (size_t)(seqlen * d) * fa_dtype_size(dt);
    device_buffer q = {0}, k = {0}, v = {0}, o = {0}, lse = {0};
    fa_status st;
    if (jw) {
        json_begin_object(jw, NULL);
        json_int(jw, "d", d);
    }
    if ((st = device_alloc(ctx, bytes, &q)) || (st = device_alloc(ctx, bytes, &k)) ||
        (st = device_alloc(ctx, bytes, &v)) || (st = device_alloc(ctx, bytes, &o)) ||
        (st = device_alloc(ctx, (size_t)seqlen * sizeof(float), &lse))) {
        if (jw)
            json_string(jw, "error", fa_status_string(st));
        else
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
        if (jw) {
            json_string(jw, "error", fa_status_string(st));
            json_string(jw, "error_detail", fa_context_last_error(ctx));
        } else {
            printf("    d %lld: %s (%s)\n", (long long)d, fa_status_string(st), fa_context_last_error(ctx));
        }
        goto done;
    }
    if (jw) {
        json_int(jw, "block_q", plan.block_q);
        json_int(jw, "block_k", plan.block_k);
        json_int(jw, "paper_block_q", plan.paper_block_q);
        json_int(jw, "paper_block_k", plan.paper_block_k);
        json_int(jw, "onchip_bytes", plan.onchip_bytes);
        json_int(jw, "num_q_blocks", plan.num_q_blocks);
        json_int(jw, "num_k_blocks", plan.num_k_blocks);
        json_int(jw, "workspace_forward_bytes", plan.workspace_fwd);
        json_int(jw, "workspace_backward_bytes", plan.workspace_bwd);
    } else {
        char ws_f[32], ws_b[32];
        format_bytes((double)plan.workspace_fwd, ws_f, sizeof ws_f);
        format_bytes((double)plan.workspace_bwd, ws_b, sizeof ws_b);
        printf("    d %lld: tiles B_r x B_c = %lld x %lld (paper %lld x %lld from M = %lld bytes), %lld x %lld "
               "blocks, workspace forward %s, backward %s\n",
               (long long)d, (long long)plan.block_q, (long long)plan.block_k, (long long)plan.paper_block_q,
               (long long)plan.paper_block_k, (long long)plan.onchip_bytes, (long long)plan.num_q_blocks,
               (long long)plan.num_k_blocks, ws_f, ws_b);
    }
    for (int backward = 0; backward <= 1; ++backward) {
        char variant[128] = "";
        st = fa_query_support(ctx, &args, backward, variant, sizeof variant);
        if (jw) {
            /* the kernel, or null and why not */
            json_string(jw, backward ? "backward_kernel" : "forward_kernel", st == FA_SUCCESS ? variant : NULL);
            if (st != FA_SUCCESS)
                json_string(jw, backward ? "backward_unsupported" : "forward_unsupported",
                            fa_context_last_error(ctx));
        } else {
            printf("      %s kernel: %s%s%s\n", backward ? "backward" : "forward ",
                   st == FA_SUCCESS ? variant : fa_status_string(st), st == FA_SUCCESS ? "" : ": ",
                   st == FA_SUCCESS ? "" : fa_context_last_error(ctx));
        }
    }
done:
    if (jw)
        json_end_object(jw);
    device_release(ctx, &q);
    device_release(ctx, &k);
    device_release(ctx, &v);
    device_release(ctx, &o);
    device_release(ctx, &lse);
}

/* One backend's entry of --json's "backends": devices, whether usable and why not, capabilities. */
static void json_backend(json_writer *jw, const char *name)
{
    json_begin_object(jw, NULL);
    json_string(jw, "name", name);
    char why[256];
    fa_status avail = fa_backend_availability(name, why, sizeof why);
    int count = 0;
    fa_status st = fa_device_count(name, &count);
    json_bool(jw, "available", avail == FA_SUCCESS && st == FA_SUCCESS && count > 0);
    if (avail != FA_SUCCESS)
        json_string(jw, "unavailable_reason", why); /* library not found, no driver, no device */
    else if (st != FA_SUCCESS)
        json_string(jw, "unavailable_reason", fa_status_string(st));
    else if (count == 0)
        json_string(jw, "unavailable_reason", "no devices");
    else
        json_null(jw, "unavailable_reason");
    if (st != FA_SUCCESS)
        json_string(jw, "status", fa_status_string(st));
    json_begin_array(jw, "devices");
    for (int dev = 0; st == FA_SUCCESS && dev < count; ++dev) {
        char dev_name[256] = "";
        fa_status dst = fa_device_name(name, dev, dev_name, sizeof dev_name);
        dev_name[sizeof dev_name - 1] = '\0';
        json_begin_object(jw, NULL);
        json_int(jw, "index", dev);
        json_string(jw, "name", dst == FA_SUCCESS ? dev_name : NULL);
        if (dst != FA_SUCCESS)
            json_string(jw, "error", fa_status_string(dst));
        json_end_object(jw);
    }
    json_end_array(jw);
    fa_capabilities caps;
    st = fa_backend_capabilities(name, &caps);
    if (st != FA_SUCCESS) {
        json_null(jw, "capabilities");
        json_string(jw, "capabilities_error", fa_status_string(st));
    } else {
        json_begin_object(jw, "capabilities");
        json_begin_array(jw, "dtypes");
        for (int dt = FA_DTYPE_F32; dt <= FA_DTYPE_BF16; ++dt)
            if (caps.dtypes & (1u << dt))
                json_string(jw, NULL, fa_dtype_name((fa_dtype)dt));
        json_end_array(jw);
        json_begin_array(jw, "head_dims"); /* empty: every d in 1..max_head_dim */
        for (int i = 0; i < 16 && caps.head_dims[i] > 0; ++i)
            json_int(jw, NULL, caps.head_dims[i]);
        json_end_array(jw);
        json_int(jw, "max_head_dim", caps.max_head_dim);
        json_begin_array(jw, "features");
        for (size_t i = 0; i < sizeof features / sizeof features[0]; ++i)
            if (caps.features & features[i].bit)
                json_string(jw, NULL, features[i].word);
        json_end_array(jw);
        char notes[sizeof caps.notes + 1];
        capability_notes(&caps, notes);
        json_string(jw, "notes", notes);
        json_end_object(jw);
    }
    json_end_object(jw);
}

static const char info_help[] =
    "Usage: flashattn info [--backend NAME] [--device N] [--json]\n"
    "\n"
    "Prints the library version, the backends compiled in with their devices and capabilities, the\n"
    "backend a context gets by default (FLASHATTN_BACKEND overrides it), and the tiles the library\n"
    "plans, with the kernels it would choose, for an example shape (batch 1, seqlen 2048, 1 head,\n"
    "d = 64 and 128) on that backend or on the one given with --backend.\n"
    "\n"
    "  --backend NAME        plan the example on this backend (cpu, cuda, hip, opencl)\n"
    "  --device N            and this device (0)\n"
    "  --json                the same as one JSON object on stdout (docs/tool.md lists its members)\n";

static const struct option info_options[] = {
    HELP_OPTION,
    {"backend", required_argument, NULL, 0},
    {"device", required_argument, NULL, 0},
    {"json", no_argument, NULL, 0},
    OPTIONS_END,
};

/* The default context's backend (or the one of --backend) with its example plans, after the
 * backends: text, or the members "default_backend", "plan_backend", "plan_device", "plan_dtype",
 * "plans" of jw's object. Returns 0, or what context_error says for --backend. */
static int info_default_and_plans(const char *backend, int device, fa_context *given, json_writer *jw)
{
    const char *env = getenv("FLASHATTN_BACKEND");
    fa_context *ctx = NULL;
    fa_status st = fa_context_create(&ctx, NULL, 0);
    if (jw) {
        json_begin_object(jw, "default_backend");
        json_string(jw, "name", st == FA_SUCCESS ? fa_context_backend_name(ctx) : NULL);
        json_int(jw, "device", 0);
        json_string(jw, "from_environment", env && *env ? env : NULL);
        json_string(jw, "error", st == FA_SUCCESS ? NULL : fa_status_string(st));
        json_end_object(jw);
    } else {
        printf("\ndefault backend: ");
        if (st == FA_SUCCESS)
            printf("%s (device 0)%s%s\n", fa_context_backend_name(ctx),
                   env && *env ? ", from FLASHATTN_BACKEND=" : "", env && *env ? env : "");
        else
            printf("none: %s\n", fa_status_string(st));
    }
    if (given) {
        fa_context_destroy(ctx);
        ctx = given;
    } else if (backend) {
        fa_context_destroy(ctx);
        ctx = NULL;
        st = fa_context_create(&ctx, backend, device);
        if (st != FA_SUCCESS)
            return context_error("info", backend, device, st);
    }
    if (!ctx)
        return 0;
    const char *name = fa_context_backend_name(ctx);
    fa_capabilities caps;
    fa_dtype dt = FA_DTYPE_F32;
    if (fa_backend_capabilities(name, &caps) == FA_SUCCESS && (caps.dtypes & (1u << FA_DTYPE_F16)))
        dt = FA_DTYPE_F16;
    if (jw) {
        json_begin_object(jw, "example_plans");
        json_string(jw, "backend", name);
        json_int(jw, "device", fa_context_device(ctx));
        json_string(jw, "dtype", fa_dtype_name(dt));
        json_int(jw, "batch", 1);
        json_int(jw, "seqlen_q", 2048);
        json_int(jw, "seqlen_k", 2048);
        json_int(jw, "heads", 1);
        json_begin_array(jw, "plans");
    } else {
        printf("\nplan on %s device %d for batch 1, seqlen_q = seqlen_k = 2048, 1 head, %s:\n", name,
               fa_context_device(ctx), fa_dtype_name(dt));
    }
    print_example_plan(ctx, dt, 2048, 64, jw);
    print_example_plan(ctx, dt, 2048, 128, jw);
    if (jw) {
        json_end_array(jw);
        json_end_object(jw);
    }
    fa_context_destroy(ctx);
    return 0;
}

int cmd_info(int argc, char **argv)
{
    const char *backend = NULL;
    int device = 0, as_json = 0;
    arg_cursor a;
    int parse_rc = 0;
    arg_begin(&a, "info", argc, argv, info_options);
    while (next_option(&a, &parse_rc)) {
        const char *opt = a.opt;
        int rc = 0;
        if (is_help(opt)) {
            fputs(info_help, stdout);
            return 0;
        } else if (strcmp(opt, "--backend") == 0) {
            rc = take_value(&a, opt, &backend);
        } else if (strcmp(opt, "--device") == 0) {
            rc = take_int(&a, opt, 0, 1 << 20, &device);
        } else if (strcmp(opt, "--json") == 0) {
            as_json = 1;
        } else {
            rc = usage_error(a.cmd, "unknown option '%s'", opt); /* in info_options, not here */
        }
        if (rc)
            return rc;
    }
    if (parse_rc)
        return parse_rc;

    int nb = fa_backend_count();
    if (as_json) {
        json_writer jw;
        json_init(&jw, stdout);
        json_begin_object(&jw, NULL);
        json_string(&jw, "command", "info");
        json_string(&jw, "version", fa_version());
        json_begin_array(&jw, "backends_compiled");
        for (int i = 0; i < nb; ++i)
            json_string(&jw, NULL, fa_backend_name(i));
        json_end_array(&jw);
        json_begin_array(&jw, "backends");
        for (int i = 0; i < nb; ++i)
            if (fa_backend_name(i))
                json_backend(&jw, fa_backend_name(i));
        json_end_array(&jw);
        int rc = info_default_and_plans(backend, device, NULL, &jw);
        json_int(&jw, "exit_status", rc);
        json_string(&jw, "error", rc ? last_error_message() : NULL);
        json_end_object(&jw);
        json_finish(&jw);
        return rc;
    }

    /* --backend first: a backend that cannot be opened gets its error alone, not after a report */
    fa_context *given = NULL;
    if (backend) {
        fa_status st = fa_context_create(&given, backend, device);
        if (st != FA_SUCCESS)
            return context_error("info", backend, device, st);
    }
    printf("flashattn %s\n", fa_version());
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
    return info_default_and_plans(backend, device, given, NULL);
}
