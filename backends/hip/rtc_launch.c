/* rtc_launch.c: the HIP module's kernels compiled at run time (-Dhip-kernels=rtc): fa_rtc_launch
 * and fa_rtc_occupancy of ../cuda/host/rtc_launch.h through the HIP runtime, which the module
 * links: each kernel compiled by hipRTC (../cuda/host/rtc_compiler.c built with FA_RTC_HIP) for
 * the current device's gcnArchName as HIP reports it ("gfx90a:sramecc+:xnack-": the target and
 * its feature settings, what hipcc's --offload-arch takes), loaded with hipModuleLoadData and
 * launched with hipModuleLaunchKernel. The launch sequences over them (SIMT, decode) are the CUDA
 * backend's run-time ones, shared (../cuda/host/rtc_simt.c, rtc_decode.c).
 *
 * Loaded modules are kept in a table keyed by (device, name expression), loaded by the first
 * launch that needs them and kept until fa_rtc_launch_release. The table lock is not held while
 * a kernel compiles, so launches of loaded kernels do not wait; two threads that miss together
 * both load, and the second unloads its copy. Plain C against hip_runtime_api.h. */
#include "host/rtc_launch.h"

#include "common/simt_geometry.h"
#include "host/why.h"

#include <hip/hip_runtime_api.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct loaded_kernel {
    int device;
    char name[FA_RTC_NAME_MAX]; /* the name expression (namespaced: unique across families) */
    hipModule_t module;
    hipFunction_t function;
} loaded_kernel;

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static loaded_kernel *table;
static size_t table_len, table_cap;

/* FA_RTC_OK, or FA_RTC_DRIVER_ERROR with why in host/rtc_entry.c's form "<call> failed: <name>
 * (<code>): <text>" */
static fa_rtc_status hip_failed(hipError_t e, const char *call, char *why, size_t why_len)
{
    if (e == hipSuccess)
        return FA_RTC_OK;
    fa_why_set(why, why_len, "%s failed: %s (%d): %s", call, hipGetErrorName(e), (int)e, hipGetErrorString(e));
    return FA_RTC_DRIVER_ERROR;
}

/* the table's entry for (device, name), or NULL; table_lock held */
static loaded_kernel *find_locked(int device, const char *name)
{
    for (size_t i = 0; i < table_len; ++i)
        if (table[i].device == device && strcmp(table[i].name, name) == 0)
            return &table[i];
    return NULL;
}

/* The architectures of the first devices, read once each (hipGetDeviceProperties is not a cheap
 * call to make per launch); "" until then. table_lock guards them. */
#define KNOWN_DEVICES 64
static char device_arch[KNOWN_DEVICES][sizeof ((hipDeviceProp_t *)0)->gcnArchName];

/* The current device and its architecture, as hipRTC's --offload-arch takes it. */
static fa_rtc_status current_device(int *device, char *arch, size_t arch_len, char *why, size_t why_len)
{
    fa_rtc_status st = hip_failed(hipGetDevice(device), "hipGetDevice", why, why_len);
    if (st != FA_RTC_OK)
        return st;
    const int known = *device >= 0 && *device < KNOWN_DEVICES;
    if (known) {
        pthread_mutex_lock(&table_lock);
        snprintf(arch, arch_len, "%s", device_arch[*device]);
        pthread_mutex_unlock(&table_lock);
        if (arch[0])
            return FA_RTC_OK;
    }
    hipDeviceProp_t prop;
    if ((st = hip_failed(hipGetDeviceProperties(&prop, *device), "hipGetDeviceProperties", why, why_len)) != FA_RTC_OK)
        return st;
    snprintf(arch, arch_len, "%s", prop.gcnArchName);
    if (known) {
        pthread_mutex_lock(&table_lock);
        snprintf(device_arch[*device], sizeof device_arch[*device], "%s", prop.gcnArchName);
        pthread_mutex_unlock(&table_lock);
    }
    return FA_RTC_OK;
}

/* The function of kernel name (of family) on the current device: from the table, else compiled,
 * loaded and added to the table. */
static fa_rtc_status kernel_function(const char *family, const char *name, hipFunction_t *function, char *why,
                                     size_t why_len)
{
    *function = NULL;
    if (!family || !name || strlen(name) >= FA_RTC_NAME_MAX) {
        fa_why_set(why, why_len, "no family, no kernel name, or a name of %d or more characters", FA_RTC_NAME_MAX);
        return FA_RTC_INVALID_ARG;
    }
    int device;
    char arch[sizeof ((hipDeviceProp_t *)0)->gcnArchName];
    fa_rtc_status st = current_device(&device, arch, sizeof arch, why, why_len);
    if (st != FA_RTC_OK)
        return st;
    pthread_mutex_lock(&table_lock);
    const loaded_kernel *found = find_locked(device, name);
    *function = found ? found->function : NULL;
    pthread_mutex_unlock(&table_lock);
    if (*function)
        return FA_RTC_OK;

    fa_rtc_kernel kernel;
    if ((st = fa_rtc_compile_target(family, arch, name, NULL, 0, &kernel, why, why_len)) != FA_RTC_OK)
        return st;
    hipModule_t module = NULL;
    st = hip_failed(hipModuleLoadData(&module, kernel.cubin), "hipModuleLoadData", why, why_len);
    if (st == FA_RTC_OK)
        st = hip_failed(hipModuleGetFunction(function, module, kernel.lowered_name), "hipModuleGetFunction", why,
                        why_len);
    fa_rtc_kernel_free(&kernel);
    if (st != FA_RTC_OK) {
        if (module)
            (void)hipModuleUnload(module);
        return st;
    }

    pthread_mutex_lock(&table_lock);
    const loaded_kernel *loaded = find_locked(device, name);
    if (loaded) { /* another thread loaded it meanwhile: keep its module */
        *function = loaded->function;
    } else {
        if (table_len == table_cap) {
            size_t cap = table_cap ? 2 * table_cap : 32;
            loaded_kernel *grown = realloc(table, cap * sizeof *grown);
            if (!grown) {
                st = FA_RTC_OUT_OF_MEMORY;
            } else {
                table = grown;
                table_cap = cap;
            }
        }
        if (st == FA_RTC_OK) {
            loaded_kernel *e = &table[table_len++];
            e->device = device;
            snprintf(e->name, sizeof e->name, "%s", name);
            e->module = module;
            e->function = *function;
            module = NULL;
        }
    }
    pthread_mutex_unlock(&table_lock);
    if (module)
        (void)hipModuleUnload(module);
    return st;
}

fa_rtc_status fa_rtc_launch(const char *name_expression, const fa_rtc_launch_config *c, void *stream, void **args,
                            char *why, size_t why_len)
{
    if (!c || c->threads == 0 || !args) {
        fa_why_set(why, why_len, "%s: no launch configuration, no threads or no arguments",
                   name_expression ? name_expression : "(no kernel name)");
        return FA_RTC_INVALID_ARG;
    }
    if (!fa_simt_grid_ok(c->grid_x, c->grid_y, c->grid_z)) {
        fa_why_set(why, why_len, "%s: the grid (%lld, %lld, %lld) exceeds the launch limits", name_expression,
                   (long long)c->grid_x, (long long)c->grid_y, (long long)c->grid_z);
        return FA_RTC_INVALID_ARG;
    }
    hipFunction_t function;
    fa_rtc_status st = kernel_function(c->family, name_expression, &function, why, why_len);
    if (st != FA_RTC_OK)
        return st;
    /* no shared-memory limit to raise: a HIP kernel may use the device's whole LDS */
    return hip_failed(hipModuleLaunchKernel(function, (unsigned)c->grid_x, (unsigned)c->grid_y, (unsigned)c->grid_z,
                                            c->threads, 1, 1, c->shared_bytes, (hipStream_t)stream, args, NULL),
                      "hipModuleLaunchKernel", why, why_len);
}

fa_rtc_status fa_rtc_occupancy(const char *family, const char *name_expression, unsigned threads,
                               unsigned shared_bytes, int *blocks, char *why, size_t why_len)
{
    hipFunction_t function;
    fa_rtc_status st = kernel_function(family, name_expression, &function, why, why_len);
    if (st != FA_RTC_OK)
        return st;
    return hip_failed(hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(blocks, function, (int)threads, shared_bytes),
                      "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor", why, why_len);
}

void fa_rtc_launch_release(void)
{
    pthread_mutex_lock(&table_lock);
    for (size_t i = 0; i < table_len; ++i)
        (void)hipModuleUnload(table[i].module);
    free(table);
    table = NULL;
    table_len = table_cap = 0;
    pthread_mutex_unlock(&table_lock);
}
