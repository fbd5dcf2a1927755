/* rtc_launch.c: kernels compiled by NVRTC, loaded and launched through the driver API
 * (rtc_launch.h says what for).
 *
 * Loaded modules are kept in host/rtc_loaded.h's table keyed by (context, name expression): a
 * context's module is loaded by the first launch that needs it and kept until
 * fa_rtc_launch_release. */
#include "host/rtc_launch.h"

#include "host/driver_api.h"
#include "host/why.h"

#include <stdio.h>
#include <string.h>

static fa_rtc_status driver_failed(const fa_cu_api *cu, fa_cu_result r, const char *call, char *why, size_t why_len)
{
    return fa_cu_check(cu, r, call, why, why_len) == FA_CU_OK ? FA_RTC_OK : FA_RTC_DRIVER_ERROR;
}

/* The current context (device 0's primary context, made current, when there is none) and the
 * compute capability of its device as major * 10 + minor. */
static fa_rtc_status current_context(const fa_cu_api *cu, fa_cu_context *context, int *arch, char *why, size_t why_len)
{
    fa_rtc_status st;
    fa_cu_device device;
    if ((st = driver_failed(cu, cu->CtxGetCurrent(context), "cuCtxGetCurrent", why, why_len)) != FA_RTC_OK)
        return st;
    if (!*context) {
        if ((st = driver_failed(cu, cu->DeviceGet(&device, 0), "cuDeviceGet", why, why_len)) != FA_RTC_OK ||
            (st = driver_failed(cu, cu->DevicePrimaryCtxRetain(context, device), "cuDevicePrimaryCtxRetain", why,
                                why_len)) != FA_RTC_OK ||
            (st = driver_failed(cu, cu->CtxSetCurrent(*context), "cuCtxSetCurrent", why, why_len)) != FA_RTC_OK)
            return st;
    }
    int major = 0, minor = 0;
    if ((st = driver_failed(cu, cu->CtxGetDevice(&device), "cuCtxGetDevice", why, why_len)) != FA_RTC_OK ||
        (st = driver_failed(cu, cu->DeviceGetAttribute(&major, FA_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
                            "cuDeviceGetAttribute", why, why_len)) != FA_RTC_OK ||
        (st = driver_failed(cu, cu->DeviceGetAttribute(&minor, FA_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device),
                            "cuDeviceGetAttribute", why, why_len)) != FA_RTC_OK)
        return st;
    *arch = 10 * major + minor;
    return FA_RTC_OK;
}

/* The function of kernel name (of family, for sm_<arch><suffix>) in context: from the table,
 * else compiled, loaded into context (current) and added to the table. */
static fa_rtc_status kernel_function(const fa_cu_api *cu, fa_cu_context context, int arch, const char *family,
                                     char suffix, const char *name, fa_cu_function *function, char *why,
                                     size_t why_len)
{
    if ((*function = fa_rtc_loaded_find(context, name, NULL)) != NULL)
        return FA_RTC_OK;

    fa_rtc_kernel kernel;
    fa_rtc_status st = fa_rtc_compile_family(family, arch, suffix, name, NULL, 0, &kernel, why, why_len);
    if (st != FA_RTC_OK)
        return st;
    fa_cu_module module = NULL;
    st = driver_failed(cu, cu->ModuleLoadData(&module, kernel.cubin), "cuModuleLoadData", why, why_len);
    if (st == FA_RTC_OK)
        st = driver_failed(cu, cu->ModuleGetFunction(function, module, kernel.lowered_name), "cuModuleGetFunction",
                           why, why_len);
    fa_rtc_kernel_free(&kernel);
    if (st != FA_RTC_OK) {
        if (module)
            cu->ModuleUnload(module);
        return st;
    }

    void *kept_module = module, *kept_function = *function;
    st = fa_rtc_loaded_add(context, name, &kept_module, &kept_function);
    *function = (fa_cu_function)kept_function;
    if (kept_module) /* another thread's is kept, or none could be */
        cu->ModuleUnload((fa_cu_module)kept_module);
    return st;
}

/* Raises function's dynamic shared memory limit to bytes (once per kernel and size: the table
 * remembers the largest set). Needed for any dynamic size the default limit, 48 KB less the
 * kernel's static shared memory, does not hold, so it is set for every size, as the nvcc launchers
 * do. */
static fa_rtc_status allow_shared(const fa_cu_api *cu, fa_cu_context context, const char *name,
                                  fa_cu_function function, unsigned bytes, char *why, size_t why_len)
{
    if (bytes == 0)
        return FA_RTC_OK;
    unsigned allowed = 0;
    fa_rtc_loaded_find(context, name, &allowed);
    if (allowed >= bytes)
        return FA_RTC_OK;
    /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
    fa_rtc_status st = driver_failed(cu, cu->FuncSetAttribute(function, 8, (int)bytes), "cuFuncSetAttribute", why,
                                     why_len);
    if (st == FA_RTC_OK)
        fa_rtc_loaded_raise(context, name, bytes);
    return st;
}

/* The driver, the current context and the loaded function of kernel name (of family, compiled
 * for the context's device with suffix): what fa_rtc_function and fa_rtc_launch both need. */
static fa_rtc_status resolve(const char *family, char suffix, const char *name, const fa_cu_api **cu,
                             fa_cu_context *context, fa_cu_function *function, char *why, size_t why_len)
{
    *function = NULL;
    if (!family || !name || strlen(name) >= FA_RTC_NAME_MAX) {
        fa_why_set(why, why_len, "no family, no kernel name, or a name of %d or more characters", FA_RTC_NAME_MAX);
        return FA_RTC_INVALID_ARG;
    }
    if (!(*cu = fa_cu_driver(why, why_len)))
        return FA_RTC_NO_DRIVER;
    int arch;
    fa_rtc_status st = current_context(*cu, context, &arch, why, why_len);
    return st != FA_RTC_OK ? st : kernel_function(*cu, *context, arch, family, suffix, name, function, why, why_len);
}

fa_rtc_status fa_rtc_function(const char *family, char suffix, const char *name_expression, fa_cu_function *function,
                              char *why, size_t why_len)
{
    const fa_cu_api *cu;
    fa_cu_context context;
    return resolve(family, suffix, name_expression, &cu, &context, function, why, why_len);
}

fa_rtc_status fa_rtc_launch(const char *name_expression, const fa_rtc_launch_config *c, void *stream, void **args,
                            char *why, size_t why_len)
{
    fa_rtc_status st = fa_rtc_launch_config_check(name_expression, c, args, why, why_len);
    if (st != FA_RTC_OK)
        return st;
    const fa_cu_api *cu;
    fa_cu_context context;
    fa_cu_function function;
    st = resolve(c->family, c->suffix, name_expression, &cu, &context, &function, why, why_len);
    if (st != FA_RTC_OK ||
        (st = allow_shared(cu, context, name_expression, function, c->shared_bytes, why, why_len)) != FA_RTC_OK)
        return st;
    return driver_failed(cu,
                         cu->LaunchKernel(function, (unsigned)c->grid_x, (unsigned)c->grid_y, (unsigned)c->grid_z,
                                          c->threads, 1, 1, c->shared_bytes, (fa_cu_stream)stream, args, NULL),
                         "cuLaunchKernel", why, why_len);
}

/* Blocks of kernel name (of family) with shared_bytes of dynamic shared memory resident on one
 * multiprocessor: its limit raised to those bytes first, as the launch will. */
fa_rtc_status fa_rtc_occupancy(const char *family, const char *name, unsigned threads, unsigned shared_bytes,
                               int *blocks, char *why, size_t why_len)
{
    const fa_cu_api *cu;
    fa_cu_context context;
    fa_cu_function function;
    fa_rtc_status st = resolve(family, 0, name, &cu, &context, &function, why, why_len);
    if (st != FA_RTC_OK || (st = allow_shared(cu, context, name, function, shared_bytes, why, why_len)) != FA_RTC_OK)
        return st;
    return driver_failed(cu, cu->OccupancyMaxActiveBlocksPerMultiprocessor(blocks, function, (int)threads, shared_bytes),
                         "cuOccupancyMaxActiveBlocksPerMultiprocessor", why, why_len);
}

/* cuModuleUnload acts in the current context: the module's, made current */
static void unload_in_context(const void *context, void *module, void *cu)
{
    const fa_cu_api *api = cu;
    if (api && api->CtxSetCurrent((fa_cu_context)context) == 0)
        api->ModuleUnload((fa_cu_module)module);
}

void fa_rtc_launch_release(void)
{
    char why[8];
    const fa_cu_api *cu = fa_cu_driver(why, sizeof why);
    fa_cu_context previous = NULL;
    if (cu)
        cu->CtxGetCurrent(&previous);
    fa_rtc_loaded_release(unload_in_context, (void *)cu);
    if (cu)
        cu->CtxSetCurrent(previous);
}
