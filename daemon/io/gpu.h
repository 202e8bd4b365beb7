/*
 * gpu: the GPU probe. The only module that calls the CUDA driver API
 * (cu*), loaded at run time with dlopen: the daemon runs without a GPU
 * and without the CUDA toolkit installed.
 */
#ifndef DETD_GPU_H
#define DETD_GPU_H

#include <stddef.h>
#include <stdint.h>

struct gpu_info {
    int index;
    char name[256];
    char arch[16]; /* "sm90" */
    char uuid[48]; /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    int sm_count;
    uint64_t memory_bytes;
};

struct gpu_probe {
    struct gpu_info *gpus; /* heap, n entries */
    size_t n;
    char state[128]; /* "ok", "no driver (libcuda.so.1 not found)" */
};

/*
 * Probe the GPUs of this node. "No GPU" or "no driver" is a normal
 * outcome: ret->n == 0 and ret->state says why; the function then still
 * returns 0. Returns DETD_ENOMEM only. Free with gpu_probe_clear().
 * library: the driver library to load (NULL: "libcuda.so.1").
 */
int gpu_probe_run(const char *library, struct gpu_probe *ret);

void gpu_probe_clear(struct gpu_probe *p);

#endif /* DETD_GPU_H */
