/*
 * gpu: enumerate GPUs through the CUDA driver API loaded with dlopen.
 * cuda.h is used for the types when the build found it; the handful of
 * constants below are the driver ABI and do not change between versions.
 */
#include "io/gpu.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detd/error.h"

#ifdef DETD_HAVE_CUDA_H
#include <cuda.h>
#define GPU_ATTR_CC_MAJOR CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
#define GPU_ATTR_CC_MINOR CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
#define GPU_ATTR_SM_COUNT CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
typedef CUresult gpu_result;
typedef CUdevice gpu_device;
#else
#define GPU_ATTR_CC_MAJOR 75
#define GPU_ATTR_CC_MINOR 76
#define GPU_ATTR_SM_COUNT 16
typedef int gpu_result;
typedef int gpu_device;
#endif

typedef gpu_result (*fn_init)(unsigned);
typedef gpu_result (*fn_count)(int *);
typedef gpu_result (*fn_get)(gpu_device *, int);
typedef gpu_result (*fn_name)(char *, int, gpu_device);
typedef gpu_result (*fn_attr)(int *, int, gpu_device);
typedef gpu_result (*fn_mem)(size_t *, gpu_device);
typedef gpu_result (*fn_uuid)(unsigned char *, gpu_device);

void gpu_probe_clear(struct gpu_probe *p) {
    if (p == NULL)
        return;
    free(p->gpus);
    p->gpus = NULL;
    p->n = 0;
}

static void *sym(void *lib, const char *a, const char *b) {
    void *f = dlsym(lib, a);
    if (f == NULL && b != NULL)
        f = dlsym(lib, b);
    return f;
}

int gpu_probe_run(const char *library, struct gpu_probe *ret) {
    memset(ret, 0, sizeof(*ret));
    const char *libname = library != NULL ? library : "libcuda.so.1";
    void *lib = dlopen(libname, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        snprintf(ret->state, sizeof(ret->state), "no driver (%s not found)",
                 libname);
        return 0;
    }
    fn_init init = (fn_init)sym(lib, "cuInit", NULL);
    fn_count count = (fn_count)sym(lib, "cuDeviceGetCount", NULL);
    fn_get get = (fn_get)sym(lib, "cuDeviceGet", NULL);
    fn_name name = (fn_name)sym(lib, "cuDeviceGetName", NULL);
    fn_attr attr = (fn_attr)sym(lib, "cuDeviceGetAttribute", NULL);
    fn_mem mem = (fn_mem)sym(lib, "cuDeviceTotalMem_v2", "cuDeviceTotalMem");
    fn_uuid uuid = (fn_uuid)sym(lib, "cuDeviceGetUuid_v2", "cuDeviceGetUuid");
    int n = 0;
    if (init == NULL || count == NULL || get == NULL || name == NULL ||
        attr == NULL) {
        snprintf(ret->state, sizeof(ret->state),
                 "driver %s lacks the device API", libname);
        goto out;
    }
    gpu_result r = init(0);
    if (r != 0) {
        snprintf(ret->state, sizeof(ret->state), "no GPU (cuInit: %d)", (int)r);
        goto out;
    }
    if (count(&n) != 0 || n <= 0) {
        snprintf(ret->state, sizeof(ret->state), "no GPU");
        goto out;
    }
    if (n > 64)
        n = 64;
    ret->gpus = calloc((size_t)n, sizeof(*ret->gpus));
    if (ret->gpus == NULL) {
        dlclose(lib);
        return DETD_ENOMEM;
    }
    for (int i = 0; i < n; i++) {
        struct gpu_info *g = &ret->gpus[ret->n];
        gpu_device d;
        if (get(&d, i) != 0)
            continue;
        g->index = i;
        if (name(g->name, (int)sizeof(g->name) - 1, d) != 0)
            snprintf(g->name, sizeof(g->name), "unknown");
        int major = 0, minor = 0;
        attr(&major, GPU_ATTR_CC_MAJOR, d);
        attr(&minor, GPU_ATTR_CC_MINOR, d);
        snprintf(g->arch, sizeof(g->arch), "sm%d%d", major, minor);
        attr(&g->sm_count, GPU_ATTR_SM_COUNT, d);
        size_t bytes = 0;
        if (mem != NULL && mem(&bytes, d) == 0)
            g->memory_bytes = bytes;
        unsigned char u[16];
        if (uuid != NULL && uuid(u, d) == 0)
            snprintf(g->uuid, sizeof(g->uuid),
                     "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
                     "%02x%02x%02x%02x%02x%02x",
                     u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9],
                     u[10], u[11], u[12], u[13], u[14], u[15]);
        ret->n++;
    }
    snprintf(ret->state, sizeof(ret->state), "ok");
out:
    /* The driver stays loaded: unloading libcuda is not supported. */
    (void)lib;
    return 0;
}
