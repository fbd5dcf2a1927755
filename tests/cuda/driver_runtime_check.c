/* driver_runtime_check.c: the runtime API's calls over the driver API (host/driver_runtime.c, the
 * FA_RUNTIME_DRIVER spelling of runtime.h's FA_RT) against a fake driver (fake_libcuda.c, named by
 * argv[1] and given as FLASHATTN_CUDA_DRIVER_LIBRARY), so neither a GPU nor the CUDA toolkit is
 * needed. A driver library that is not there: every call an error, no crash, and the error's text
 * names the library; a driver without devices: CUDA_ERROR_NO_DEVICE. Two fake devices: their count,
 * properties and attributes; SetDevice retains each primary context once and makes it current; a
 * call without one makes device 0's current. Memory: an allocation, copies in every direction and a
 * memset round-trip the bytes; 0 bytes and NULL are what cudart makes of them; Free waits for the
 * device. Streams and events reach the driver with their flags. Errors: the driver's result, its
 * name and text, the thread's last error (reset by reading it, kept per thread). Exit 0 when every
 * check holds, 1 on the first that fails. */
#include "host/runtime.h"
#include "rtc_check_common.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_ERROR_ILLEGAL_ADDRESS 700
#define CUDA_ERROR_LAUNCH_FAILED 719

/* e is the call's result, expected; its name is name and the thread's last error is e, once */
static void expect_error(fa_rt_error e, fa_rt_error expected, const char *name, const char *call)
{
    CHECK(e == expected, "%s: %d (%s), expected %d", call, (int)e, FA_RT(GetErrorName)(e), (int)expected);
    CHECK(strcmp(FA_RT(GetErrorName)(e), name) == 0, "%s: named %s, expected %s", call, FA_RT(GetErrorName)(e), name);
    CHECK(FA_RT(PeekAtLastError)() == expected, "%s: peeked last error %d", call, (int)FA_RT(PeekAtLastError)());
    CHECK(FA_RT(GetLastError)() == expected, "%s: the last error", call);
    CHECK(FA_RT(GetLastError)() == FA_RT(Success), "%s: reading the last error resets it", call);
}

static void no_driver(void)
{
    int n = 7;
    void *ptr = (void *)&n;
    setenv("FLASHATTN_CUDA_DRIVER_LIBRARY", "/nonexistent/libcuda.so.1", 1);
    fa_rt_error e = FA_RT(GetDeviceCount)(&n);
    CHECK(n == 0, "no driver: %d devices", n);
    expect_error(e, FA_CU_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "GetDeviceCount without a driver");
    const char *why = FA_RT(GetErrorString)(e);
    CHECK(strstr(why, "FLASHATTN_CUDA_DRIVER_LIBRARY=/nonexistent/libcuda.so.1") != NULL,
          "the text names the variable and the library: %s", why);
    printf("ok: FLASHATTN_CUDA_DRIVER_LIBRARY=/nonexistent/libcuda.so.1: %s: %s\n", FA_RT(GetErrorName)(e), why);
    expect_error(FA_RT(Malloc)(&ptr, 64), FA_CU_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED",
                 "Malloc without a driver");
    CHECK(ptr == NULL, "a failed Malloc hands out NULL");
    expect_error(FA_RT(SetDevice)(0), FA_CU_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED",
                 "SetDevice without a driver");
    fa_rt_stream stream = NULL;
    expect_error(FA_RT(StreamCreateWithFlags)(&stream, FA_RT(StreamNonBlocking)), FA_CU_ERROR_NOT_INITIALIZED,
                 "CUDA_ERROR_NOT_INITIALIZED", "StreamCreateWithFlags without a driver");
    CHECK(FA_RT(Free)(NULL) == FA_RT(Success), "Free(NULL) needs no driver");
    printf("ok: without a driver every call is CUDA_ERROR_NOT_INITIALIZED\n");
}

static void devices(fake_cuda_state *fake)
{
    int n = 7;
    fake->device_count = 0;
    fa_rt_error e = FA_RT(GetDeviceCount)(&n);
    CHECK(n == 0, "no device: %d devices", n);
    expect_error(e, FA_RT_ERR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "GetDeviceCount without a device");
    CHECK(strstr(FA_RT(GetErrorString)(e), "no CUDA-capable device is detected") != NULL, "no device: %s",
          FA_RT(GetErrorString)(e));
    printf("ok: a driver without devices: %s\n", FA_RT(GetErrorString)(e));

    fake->device_count = 2;
    fake->cc_major = 9;
    fake->cc_minor = 0;
    fake->multiprocessors = 132;
    fake->shared_optin = 232448;
    fake->total_mem = (size_t)80 << 30;
    CHECK(FA_RT(GetDeviceCount)(&n) == FA_RT(Success) && n == 2, "%d devices", n);
    fa_rt_prop prop;
    CHECK(FA_RT(GetDeviceProperties)(&prop, 1) == FA_RT(Success), "GetDeviceProperties(1)");
    CHECK(strcmp(prop.name, "Fake CUDA device 1") == 0 && prop.major == 9 && prop.minor == 0 &&
              prop.multiProcessorCount == 132 && prop.sharedMemPerBlockOptin == 232448 &&
              prop.totalGlobalMem == (size_t)80 << 30,
          "device 1: %s, sm_%d%d, %d SMs, %zu shared bytes, %zu bytes", prop.name, prop.major, prop.minor,
          prop.multiProcessorCount, prop.sharedMemPerBlockOptin, prop.totalGlobalMem);
    static const struct {
        enum fa_drv_device_attr attr;
        int value;
    } attrs[] = {{FA_RT(DevAttrMultiProcessorCount), 132},
                 {FA_RT(DevAttrComputeCapabilityMajor), 9},
                 {FA_RT(DevAttrComputeCapabilityMinor), 0},
                 {FA_RT(DevAttrMaxSharedMemoryPerBlockOptin), 232448}};
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; ++i) {
        int v = -1;
        CHECK(FA_RT(DeviceGetAttribute)(&v, attrs[i].attr, 0) == FA_RT(Success) && v == attrs[i].value,
              "attribute %d: %d, expected %d", (int)attrs[i].attr, v, attrs[i].value);
    }
    fa_rt_prop none;
    expect_error(FA_RT(GetDeviceProperties)(&none, 2), FA_CU_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE",
                 "GetDeviceProperties(2)");
    int v;
    expect_error(FA_RT(DeviceGetAttribute)(&v, FA_RT(DevAttrMultiProcessorCount), 2), FA_CU_ERROR_INVALID_DEVICE,
                 "CUDA_ERROR_INVALID_DEVICE", "DeviceGetAttribute(2)");
    printf("ok: 2 devices: %s (sm_%d%d, %d SMs, %zu opt-in shared bytes, %zu GiB)\n", prop.name, prop.major,
           prop.minor, prop.multiProcessorCount, prop.sharedMemPerBlockOptin, prop.totalGlobalMem >> 30);
}

static void contexts(fake_cuda_state *fake)
{
    /* no SetDevice yet: a call makes device 0's primary context current */
    void *ptr;
    CHECK(fake->current_device == -1 && fake->retain_calls == 0, "no context yet: device %d, %d retains",
          fake->current_device, fake->retain_calls);
    CHECK(FA_RT(Malloc)(&ptr, 16) == FA_RT(Success), "Malloc without SetDevice");
    CHECK(fake->current_device == 0 && fake->retain_calls == 1, "device 0's context: device %d, %d retains",
          fake->current_device, fake->retain_calls);
    CHECK(FA_RT(Free)(ptr) == FA_RT(Success), "Free");

    CHECK(FA_RT(SetDevice)(1) == FA_RT(Success) && fake->current_device == 1, "SetDevice(1): device %d",
          fake->current_device);
    CHECK(FA_RT(SetDevice)(0) == FA_RT(Success) && fake->current_device == 0, "SetDevice(0): device %d",
          fake->current_device);
    CHECK(FA_RT(SetDevice)(1) == FA_RT(Success) && fake->current_device == 1, "SetDevice(1): device %d",
          fake->current_device);
    CHECK(fake->retain_calls == 2, "each primary context retained once: %d retains", fake->retain_calls);
    expect_error(FA_RT(SetDevice)(2), FA_CU_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "SetDevice(2)");
    expect_error(FA_RT(SetDevice)(-1), FA_CU_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "SetDevice(-1)");
    CHECK(fake->current_device == 1, "a failed SetDevice keeps the current device: %d", fake->current_device);
    printf("ok: SetDevice retains each primary context once; a call without one makes device 0's current\n");
}

static void memory(fake_cuda_state *fake)
{
    enum { N = 4096 };
    unsigned char host[N], back[N];
    for (int i = 0; i < N; ++i)
        host[i] = (unsigned char)(i * 7 + 3);
    void *a = NULL, *b = NULL;
    CHECK(FA_RT(Malloc)(&a, N) == FA_RT(Success) && a, "Malloc");
    CHECK(FA_RT(Malloc)(&b, N) == FA_RT(Success) && b, "Malloc");
    CHECK(FA_RT(Memcpy)(a, host, N, FA_RT(MemcpyHostToDevice)) == FA_RT(Success), "host to device");
    CHECK(FA_RT(Memcpy)(b, a, N, FA_RT(MemcpyDeviceToDevice)) == FA_RT(Success), "device to device");
    memset(back, 0, N);
    CHECK(FA_RT(Memcpy)(back, b, N, FA_RT(MemcpyDeviceToHost)) == FA_RT(Success), "device to host");
    CHECK(memcmp(back, host, N) == 0, "the bytes round-trip");
    CHECK(FA_RT(Memset)((char *)b + 100, 0x1AB, 200) == FA_RT(Success), "Memset");
    CHECK(FA_RT(Memcpy)(back, b, N, FA_RT(MemcpyDefault)) == FA_RT(Success), "device to host (default)");
    for (int i = 0; i < N; ++i)
        CHECK(back[i] == (i >= 100 && i < 300 ? 0xAB : host[i]), "byte %d after Memset: %#x", i, back[i]);
    printf("ok: %d bytes host -> device -> device -> host; Memset writes the low byte of its value\n", N);

    const int copies = fake->copy_calls;
    expect_error(FA_RT(Memcpy)(back, b, N, (enum fa_drv_memcpy_kind)7), FA_CU_ERROR_INVALID_VALUE,
                 "CUDA_ERROR_INVALID_VALUE", "Memcpy of kind 7");
    CHECK(FA_RT(Memcpy)(back, b, 0, FA_RT(MemcpyDeviceToHost)) == FA_RT(Success), "a copy of 0 bytes");
    CHECK(fake->copy_calls == copies, "no copy for a wrong kind or 0 bytes: %d", fake->copy_calls - copies);
    void *none = (void *)host;
    CHECK(FA_RT(Malloc)(&none, 0) == FA_RT(Success) && none == NULL, "Malloc of 0 bytes hands out NULL");

    const int syncs = fake->ctx_sync_calls;
    CHECK(FA_RT(Free)(a) == FA_RT(Success) && FA_RT(Free)(b) == FA_RT(Success), "Free");
    CHECK(fake->ctx_sync_calls == syncs + 2, "Free waits for the device: %d synchronisations",
          fake->ctx_sync_calls - syncs);
    CHECK(fake->live_allocations == 0, "%d allocations left", fake->live_allocations);

    /* stream-ordered */
    fa_rt_stream stream;
    CHECK(FA_RT(StreamCreateWithFlags)(&stream, FA_RT(StreamNonBlocking)) == FA_RT(Success), "a stream");
    CHECK(FA_RT(MallocAsync)(&a, N, stream) == FA_RT(Success) && a && fake->last_async_stream == (void *)stream,
          "MallocAsync on the stream");
    CHECK(FA_RT(MemcpyAsync)(a, host, N, FA_RT(MemcpyHostToDevice), stream) == FA_RT(Success), "MemcpyAsync");
    CHECK(FA_RT(MemsetAsync)(a, 0, 16, stream) == FA_RT(Success) && fake->last_async_stream == (void *)stream,
          "MemsetAsync on the stream");
    CHECK(FA_RT(MemcpyAsync)(back, a, N, FA_RT(MemcpyDeviceToHost), stream) == FA_RT(Success), "MemcpyAsync");
    CHECK(FA_RT(StreamSynchronize)(stream) == FA_RT(Success), "StreamSynchronize");
    for (int i = 0; i < N; ++i)
        CHECK(back[i] == (i < 16 ? 0 : host[i]), "byte %d after MemsetAsync: %#x", i, back[i]);
    fake->last_async_stream = NULL;
    CHECK(FA_RT(FreeAsync)(a, stream) == FA_RT(Success) && fake->last_async_stream == (void *)stream, "FreeAsync");
    CHECK(fake->live_allocations == 0, "%d allocations left", fake->live_allocations);
    CHECK(FA_RT(StreamDestroy)(stream) == FA_RT(Success), "StreamDestroy");
    printf("ok: MallocAsync, MemcpyAsync, MemsetAsync and FreeAsync on the stream given\n");
}

static void streams_and_events(fake_cuda_state *fake)
{
    fa_rt_stream stream;
    fa_cu_event event;
    const int streams = fake->streams_created, events = fake->events_created;
    CHECK(FA_RT(StreamCreateWithFlags)(&stream, FA_RT(StreamNonBlocking)) == FA_RT(Success) &&
              fake->streams_created == streams + 1 && fake->last_stream_flags == 1,
          "StreamCreateWithFlags: flags %u", fake->last_stream_flags);
    CHECK(FA_RT(EventCreateWithFlags)(&event, FA_RT(EventDisableTiming)) == FA_RT(Success) &&
              fake->events_created == events + 1 && fake->last_event_flags == 2,
          "EventCreateWithFlags: flags %u", fake->last_event_flags);
    const int records = fake->event_records, waits = fake->stream_waits, syncs = fake->stream_syncs,
              ctx_syncs = fake->ctx_sync_calls;
    CHECK(FA_RT(EventRecord)(event, stream) == FA_RT(Success) && fake->event_records == records + 1, "EventRecord");
    CHECK(FA_RT(StreamWaitEvent)(NULL, event, 0) == FA_RT(Success) && fake->stream_waits == waits + 1,
          "StreamWaitEvent");
    CHECK(FA_RT(StreamSynchronize)(stream) == FA_RT(Success) && fake->stream_syncs == syncs + 1, "StreamSynchronize");
    CHECK(FA_RT(DeviceSynchronize)() == FA_RT(Success) && fake->ctx_sync_calls == ctx_syncs + 1, "DeviceSynchronize");
    fa_rt_capture_status cs = -1;
    fake->capture_status = 1;
    CHECK(FA_RT(StreamIsCapturing)(stream, &cs) == FA_RT(Success) && cs == 1, "capturing: %d", (int)cs);
    fake->capture_status = 0;
    CHECK(FA_RT(StreamIsCapturing)(stream, &cs) == FA_RT(Success) && cs == FA_RT_CAPTURE_NONE, "not capturing: %d",
          (int)cs);
    CHECK(FA_RT(EventDestroy)(event) == FA_RT(Success) && FA_RT(StreamDestroy)(stream) == FA_RT(Success) &&
              fake->events_destroyed == fake->events_created && fake->streams_destroyed == fake->streams_created,
          "destroyed %d of %d events, %d of %d streams", fake->events_destroyed, fake->events_created,
          fake->streams_destroyed, fake->streams_created);
    printf("ok: streams and events reach the driver with their flags\n");
}

static void *last_error_of_thread(void *unused)
{
    (void)unused;
    static fa_rt_error seen;
    seen = FA_RT(GetLastError)();
    return &seen;
}

static void errors(fake_cuda_state *fake)
{
    void *ptr = (void *)&ptr;
    fake->fail_call = "cuMemAlloc_v2";
    fake->fail_result = FA_CU_ERROR_OUT_OF_MEMORY;
    fa_rt_error e = FA_RT(Malloc)(&ptr, 1 << 20);
    CHECK(ptr == NULL, "a failed Malloc hands out NULL");
    expect_error(e, FA_RT_ERR_NO_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "Malloc out of memory");
    CHECK(strcmp(FA_RT(GetErrorString)(e), "out of memory") == 0, "the driver's text: %s", FA_RT(GetErrorString)(e));

    unsigned char byte = 0;
    fake->fail_call = "cuMemcpy";
    fake->fail_result = CUDA_ERROR_ILLEGAL_ADDRESS;
    expect_error(FA_RT(Memcpy)(&byte, &byte, 1, FA_RT(MemcpyDeviceToHost)), CUDA_ERROR_ILLEGAL_ADDRESS,
                 "CUDA_ERROR_ILLEGAL_ADDRESS", "Memcpy with a fault");
    fake->fail_call = NULL;
    CHECK(strcmp(FA_RT(GetErrorName)(12345), "CUDA_ERROR_UNRECOGNIZED") == 0, "a number no one knows: %s",
          FA_RT(GetErrorName)(12345));
    CHECK(strcmp(FA_RT(GetErrorName)(FA_RT(Success)), "CUDA_SUCCESS") == 0, "success: %s",
          FA_RT(GetErrorName)(FA_RT(Success)));

    /* a launch's error, recorded by its launcher; the last error is the thread's own */
    CHECK(fa_drv_record_error(CUDA_ERROR_LAUNCH_FAILED) == CUDA_ERROR_LAUNCH_FAILED, "record_error returns it");
    CHECK(fa_drv_record_error(FA_RT(Success)) == FA_RT(Success), "record_error of success");
    pthread_t t;
    void *seen;
    CHECK(pthread_create(&t, NULL, last_error_of_thread, NULL) == 0 && pthread_join(t, &seen) == 0, "a thread");
    CHECK(*(fa_rt_error *)seen == FA_RT(Success), "another thread's last error: %d", *(fa_rt_error *)seen);
    CHECK(FA_RT(GetLastError)() == CUDA_ERROR_LAUNCH_FAILED, "this thread's last error: the launch's");
    CHECK(FA_RT(GetLastError)() == FA_RT(Success), "reading the last error resets it");
    printf("ok: the driver's errors with their names and texts; the thread's last error, reset by reading it\n");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    CHECK(argc == 2, "usage: driver_runtime_check FAKE_LIBCUDA");

    /* first: a driver library that opened is kept for the process */
    no_driver();

    setenv("FLASHATTN_CUDA_DRIVER_LIBRARY", argv[1], 1);
    fake_cuda_state *fake = fake_cuda_open(argv[1], NULL);

    devices(fake);
    contexts(fake);
    memory(fake);
    streams_and_events(fake);
    errors(fake);
    printf("PASS\n");
    return 0;
}
