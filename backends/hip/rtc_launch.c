/* rtc_launch.c: the HIP module's kernels compiled at run time (-Dhip-kernels=rtc): fa_rtc_launch
 * and fa_rtc_occupancy of ../cuda/host/rtc_launch.h through the HIP runtime, which the module
 * links: each kernel compiled by hipRTC (../cuda/host/rtc_compiler.c built with FA_RTC_HIP) for
 * the current device's gcnArchName as HIP reports it ("gfx90a:sramecc+:xnack-": the target and
 * its feature settings, what hipcc's --offload-arch takes), loaded with hipModuleLoadData and
 * launched with hipModuleLaunchKernel. The launch sequences over them (SIMT, decode) are the CUDA
 * backend's run-time ones, shared (../cuda/host/rtc_simt.c, rtc_decode.c).
 *
 * Loaded modules are kept in ../cuda/host/rtc_loaded.h's table keyed by (device, name expression),
 * loaded by the first launch that needs them and kept until fa_rtc_launch_release. Plain C against
 * hip_runtime_api.h. */
#include "host/rtc_launch.h"

#include "host/why.h"

#include <hip/hip_runtime_api.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* FA_RTC_OK, or FA_RTC_DRIVER_ERROR with why in host/rtc_entry.c's form "<call> failed: <name>
 * (<code>): <text>" */
static fa_rtc_status hip_failed(hipError_t e, const char *call, char *why, size_t why_len)
{
    if (e == hipSuccess)
        return FA_RTC_OK;
    fa_why_set(why, why_len, "%s failed: %s (%d): %s", call, hipGetErrorName(e), (int)e, hipGetErrorString(e));
    return FA_RTC_DRIVER_ERROR;
}

/* A device as the loaded-kernel table's key (never NULL). */
static const void *where_of(int device)
{
    return (const void *)((intptr_t)device + 1);
}

/* The architectures of the first devices, read once each (hipGetDeviceProperties is not a cheap
 * call to make per launch); "" until then. */
#define KNOWN_DEVICES 64
static char device_arch[KNOWN_DEVICES][sizeof ((hipDeviceProp_t *)0)->gcnArchName];
static pthread_mutex_t arch_lock = PTHREAD_MUTEX_INITIALIZER;

/* The current device and its architecture, as hipRTC's --offload-arch takes it. */
static fa_rtc_status current_device(int *device, char *arch, size_t arch_len, char *why, size_t why_len)
{
    fa_rtc_status st = hip_failed(hipGetDevice(device), "hipGetDevice", why, why_len);
    if (st != FA_RTC_OK)
        return st;
    const int known = *device >= 0 && *device < KNOWN_DEVICES;
    if (known) {
        pthread_mutex_lock(&arch_lock);
        snprintf(arch, arch_len, "%s", device_arch[*device]);
        pthread_mutex_unlock(&arch_lock);
        if (arch[0])
            return FA_RTC_OK;
    }
    hipDeviceProp_t prop;
    if ((st = hip_failed(hipGetDeviceProperties(&prop, *device), "hipGetDeviceProperties", why, why_len)) != FA_RTC_OK)
        return st;
    snprintf(arch, arch_len, "%s", prop.gcnArchName);
    if (known) {
        pthread_mutex_lock(&arch_lock);
        snprintf(device_arch[*device], sizeof device_arch[*device], "%s", prop.gcnArchName);
        pthread_mutex_unlock(&arch_lock);
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
    if ((*function = (hipFunction_t)fa_rtc_loaded_find(where_of(device), name, NULL)) != NULL)
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

    void *kept_module = module, *kept_function = *function;
    st = fa_rtc_loaded_add(where_of(device), name, &kept_module, &kept_function);
    *function = (hipFunction_t)kept_function;
    if (kept_module) /* another thread's is kept, or none could be */
        (void)hipModuleUnload((hipModule_t)kept_module);
    return st;
}

fa_rtc_status fa_rtc_launch(const char *name_expression, const fa_rtc_launch_config *c, void *stream, void **args,
                            char *why, size_t why_len)
{
    fa_rtc_status st = fa_rtc_launch_config_check(name_expression, c, args, why, why_len);
    if (st != FA_RTC_OK)
        return st;
    hipFunction_t function;
    st = kernel_function(c->family, name_expression, &function, why, why_len);
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

static void unload(const void *device, void *module, void *user)
{
    (void)device;
    (void)user;
    (void)hipModuleUnload((hipModule_t)module);
}

void fa_rtc_launch_release(void)
{
    fa_rtc_loaded_release(unload, NULL);
}
