/* dispatch.c: the registry of compiled-in backends, the default-backend choice (CUDA, HIP, then
 * the CPU; OpenCL only by name; FLASHATTN_BACKEND overrides), contexts, and discovery queries.
 * A backend is linked into the library (its table is here) or built as a shared module that
 * core/module.c loads at first use (the HIP backend: libflashattn-hip.so). */
#include "internal.h"
#include "kernels_switch.h"
#include "module.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FA_HAVE_CUDA
extern const fa_backend fa_backend_cuda;
#endif
#ifdef FA_HAVE_OPENCL
extern const fa_backend fa_backend_opencl;
#endif

/* One backend compiled in: its table, or NULL for a module (fa_module_backend loads it). */
typedef struct registry_entry {
    const char *name;
    const fa_backend *table;
} registry_entry;

/* In order of preference for "default". */
static const registry_entry registry[] = {
#ifdef FA_HAVE_CUDA
    {"cuda", &fa_backend_cuda},
#endif
#ifdef FA_HAVE_HIP
    {"hip", NULL}, /* libflashattn-hip.so */
#endif
#ifdef FA_HAVE_OPENCL
    {"opencl", &fa_backend_opencl},
#endif
    {"cpu", &fa_backend_cpu},
};
#define REGISTRY_SIZE ((int)(sizeof registry / sizeof registry[0]))

int fa_backend_count(void)
{
    return REGISTRY_SIZE;
}

const char *fa_backend_name(int index)
{
    return index >= 0 && index < REGISTRY_SIZE ? registry[index].name : NULL;
}

static int find_backend(const char *name)
{
    for (int i = 0; i < REGISTRY_SIZE; ++i)
        if (strcmp(registry[i].name, name) == 0)
            return i;
    return -1;
}

/* Entry i's table, loading its module at the first call; NULL (why says why) when it cannot load. */
static const fa_backend *backend_table(int i, char *why, size_t len)
{
    return registry[i].table ? registry[i].table : fa_module_backend(registry[i].name, why, len);
}

static int usable(const fa_backend *b)
{
    int n = 0;
    return b->device_count(&n) == FA_SUCCESS && n > 0;
}

/* The first GPU backend in preference order with a device, else the CPU. The OpenCL backend
 * reports is_gpu = 0 (the flag is per backend, and a CPU-only platform such as PoCL must not be
 * preferred over the native CPU backend), so it runs only when named. */
static const fa_backend *default_backend(void)
{
    for (int i = 0; i < REGISTRY_SIZE; ++i) {
        const fa_backend *b = backend_table(i, NULL, 0);
        if (b && b->is_gpu && usable(b))
            return b;
    }
    return &fa_backend_cpu;
}

/* A module that cannot load has no devices, as a runtime without a driver has none. */
fa_status fa_device_count(const char *backend, int *count)
{
    if (!backend || !count)
        return FA_ERR_INVALID_ARG;
    int i = find_backend(backend);
    if (i < 0)
        return FA_ERR_NO_BACKEND;
    const fa_backend *b = backend_table(i, NULL, 0);
    if (!b) {
        *count = 0;
        return FA_SUCCESS;
    }
    return b->device_count(count);
}

/* Whether b can run here (fa_backend.availability, else its device count), the reason in why. */
static fa_status backend_availability(const fa_backend *b, int *count, char *why, size_t len)
{
    *count = 0;
    why[0] = '\0';
    fa_status st;
    if (b->availability) {
        st = b->availability(count, why, len);
    } else {
        st = b->device_count(count);
        if (st != FA_SUCCESS)
            snprintf(why, len, "cannot count its devices: %s", fa_status_string(st));
        else if (*count <= 0)
            st = FA_ERR_NO_BACKEND;
    }
    if (st == FA_SUCCESS && *count > 0) {
        snprintf(why, len, "available: %d device%s", *count, *count == 1 ? "" : "s");
    } else {
        *count = 0;
        if (st == FA_SUCCESS)
            st = FA_ERR_NO_BACKEND;
        if (!why[0])
            snprintf(why, len, "no device");
    }
    return st;
}

fa_status fa_backend_availability(const char *backend, char *why, size_t len)
{
    if (!backend || !why || len == 0)
        return FA_ERR_INVALID_ARG;
    int i = find_backend(backend);
    if (i < 0) {
        snprintf(why, len, "not compiled in");
        return FA_ERR_NO_BACKEND;
    }
    char line[FA_ERROR_MESSAGE_BYTES];
    const fa_backend *b = backend_table(i, line, sizeof line);
    if (!b) {
        snprintf(why, len, "%s", line);
        return FA_ERR_NO_BACKEND;
    }
    int n = 0;
    fa_status st = backend_availability(b, &n, line, sizeof line);
    snprintf(why, len, "%s", line);
    return st;
}

fa_status fa_device_name(const char *backend, int device, char *buf, size_t len)
{
    if (!backend || !buf || len == 0)
        return FA_ERR_INVALID_ARG;
    int i = find_backend(backend);
    if (i < 0)
        return FA_ERR_NO_BACKEND;
    const fa_backend *b = backend_table(i, NULL, 0);
    int n = 0;
    fa_status st = b ? b->device_count(&n) : FA_SUCCESS;
    if (st != FA_SUCCESS)
        return st;
    if (device < 0 || device >= n)
        return FA_ERR_NO_DEVICE;
    return b->device_name(device, buf, len);
}

fa_status fa_backend_capabilities(const char *backend, fa_capabilities *caps)
{
    if (!backend || !caps)
        return FA_ERR_INVALID_ARG;
    int i = find_backend(backend);
    if (i < 0)
        return FA_ERR_NO_BACKEND;
    char why[FA_ERROR_MESSAGE_BYTES - 96];
    const fa_backend *b = backend_table(i, why, sizeof why);
    if (!b)
        return FA_ERROR(NULL, FA_ERR_NO_BACKEND, "fa_backend_capabilities: the %s backend is unavailable: %s", backend,
                        why);
    memset(caps, 0, sizeof *caps);
    b->capabilities(caps);
    return FA_SUCCESS;
}

fa_status fa_context_create(fa_context **out, const char *backend, int device)
{
    if (!out)
        return FA_ERROR(NULL, FA_ERR_INVALID_ARG, "fa_context_create: out is NULL");
    *out = NULL;
    char bad[48];
    if (!fa_kernels_switch_valid(bad, sizeof bad))
        return FA_ERROR(NULL, FA_ERR_INVALID_ARG,
                        "fa_context_create: " FA_KERNELS_ENV " has \"%s\", which is no token of it or lacks or "
                        "has a value where it should not (docs/options.md lists the tokens)",
                        bad);
    const char *env = getenv("FLASHATTN_BACKEND");
    if ((!backend || strcmp(backend, "default") == 0) && env && *env && strcmp(env, "default") != 0)
        backend = env;
    const fa_backend *b;
    char why[FA_ERROR_MESSAGE_BYTES - 96];
    if (!backend || strcmp(backend, "default") == 0) {
        b = default_backend();
    } else {
        int i = find_backend(backend);
        if (i < 0)
            return FA_ERROR(NULL, FA_ERR_NO_BACKEND, "fa_context_create: no backend \"%s\" in this build%s", backend,
                            backend == env ? " (named by FLASHATTN_BACKEND)" : "");
        b = backend_table(i, why, sizeof why);
        if (!b)
            return FA_ERROR(NULL, FA_ERR_NO_BACKEND, "fa_context_create: the %s backend is unavailable: %s",
                            backend, why);
    }
    int n = 0;
    fa_status st = backend_availability(b, &n, why, sizeof why);
    if (st != FA_SUCCESS)
        return FA_ERROR(NULL, st, "fa_context_create: the %s backend is unavailable: %s", b->name, why);
    if (device < 0 || device >= n)
        return FA_ERROR(NULL, FA_ERR_NO_DEVICE, "fa_context_create: device %d of the %s backend: it has %d (0..%d)",
                        device, b->name, n, n - 1);
    fa_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return FA_ERROR(NULL, FA_ERR_OUT_OF_MEMORY, "fa_context_create: cannot allocate the context");
    ctx->backend = b;
    ctx->device = device;
    ctx->serial = fa_context_next_serial();
    fa_clear_error(NULL);
    if (fa_lists_cache_create(ctx) != FA_SUCCESS) {
        free(ctx);
        return FA_ERROR(NULL, FA_ERR_OUT_OF_MEMORY, "fa_context_create: cannot allocate the context");
    }
    st = b->open(ctx, device);
    if (st != FA_SUCCESS) {
        fa_lists_cache_destroy(ctx);
        /* the backend recorded its reason against the context that is about to go */
        fa_error_move_to_thread(ctx);
        if (!*fa_last_error())
            FA_ERROR(NULL, st, "fa_context_create: the %s backend could not open device %d", b->name, device);
        free(ctx);
        return st;
    }
    fa_clear_error(NULL);
    *out = ctx;
    return FA_SUCCESS;
}

void fa_context_destroy(fa_context *ctx)
{
    if (!ctx)
        return;
    fa_lists_cache_destroy(ctx); /* the backend's device copies first: it is still open */
    ctx->backend->close(ctx);
    free(ctx);
}

const char *fa_context_backend_name(const fa_context *ctx)
{
    return ctx ? ctx->backend->name : NULL;
}

int fa_context_device(const fa_context *ctx)
{
    return ctx ? ctx->device : -1;
}
