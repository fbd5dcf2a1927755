/* loader.h: the OpenCL API as a table of function pointers, filled at first use from the ICD
 * loader opened with dlopen (libOpenCL.so.1, then libOpenCL.so; FLASHATTN_OPENCL_LIBRARY names
 * another file), so that libflashattn loads on a machine without OpenCL and the backend then
 * reports why it is unavailable. CL/cl.h still gives the types: each pointer has the type of the
 * header's declaration. The backend calls ocl_api.clFinish(...) and so on, never clFinish itself
 * (the library does not link libOpenCL, so a direct call fails to link). */
#ifndef FA_OPENCL_LOADER_H
#define FA_OPENCL_LOADER_H

#include <CL/cl.h>

/* Every OpenCL function the backend calls. */
#define OCL_API_FUNCTIONS(X)                                                                                       \
    X(clGetPlatformIDs) X(clGetPlatformInfo) X(clGetDeviceIDs) X(clGetDeviceInfo) X(clCreateContext)             \
    X(clReleaseContext) X(clCreateCommandQueue) X(clReleaseCommandQueue) X(clCreateBuffer)                        \
    X(clReleaseMemObject) X(clCreateProgramWithSource) X(clCreateProgramWithBinary) X(clBuildProgram)            \
    X(clGetProgramInfo) X(clGetProgramBuildInfo) X(clReleaseProgram) X(clCreateKernel) X(clReleaseKernel)        \
    X(clSetKernelArg) X(clEnqueueNDRangeKernel) X(clEnqueueReadBuffer) X(clEnqueueWriteBuffer)                   \
    X(clEnqueueCopyBuffer) X(clFlush) X(clFinish)

typedef struct ocl_api_table {
#define OCL_API_POINTER(name) __typeof__(name) *name;
    OCL_API_FUNCTIONS(OCL_API_POINTER)
#undef OCL_API_POINTER
} ocl_api_table;

/* Filled by ocl_api_load; every pointer is set once it returned NULL. */
extern ocl_api_table ocl_api;

/* Loads the table at the first call (once per process, thread-safe). NULL when the API is
 * usable; otherwise why not, one line starting "library not found: " with dlopen's message, or
 * naming the function the library lacks. */
const char *ocl_api_load(void);

#endif
