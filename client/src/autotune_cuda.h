/*
 * autotune_cuda: the CUDA adapter of detd_autotune() (internal).
 *
 * The only module of libdetd that calls into CUDA, and it does so without
 * a link-time dependency: the driver (libcuda.so.1) or a runtime
 * (libcudart.so.*) is opened with dlopen() and the few functions used are
 * looked up with dlsym(). Which one, in this order:
 *
 *  1. $DETD_CUDA_LIBRARY, when set: exactly that library (a driver when it
 *     has cuInit, else a runtime when it has cudaGetDeviceCount).
 *  2. A CUDA runtime the process has already loaded (libcudart.so.13, .12,
 *     .11.0, libcudart.so; dlopen with RTLD_NOLOAD): the caller's own
 *     launches go through it, so its per-thread error state
 *     (cudaGetLastError) also catches a launch that failed to start.
 *  3. The driver, libcuda.so.1: one per process whatever runtime the
 *     caller linked (nvcc links cudart statically by default); its events
 *     work in the context the caller's runtime made current.
 *
 * Errors are -ENODEV (no usable CUDA: no library, no device, a stub
 * library, a driver too old) with wire_set_error() naming the library and
 * the CUDA error; nothing here aborts, logs or prints.
 */
#ifndef DETD_AUTOTUNE_CUDA_H
#define DETD_AUTOTUNE_CUDA_H

#include <stddef.h>

#include "detd/autotune.h"

struct autotune_cuda;

/*
 * Open CUDA (the order above) and check that a device is there. On success
 * *ret owns the handle, to free with autotune_cuda_close(); on failure
 * *ret is untouched. Returns 0, -ENODEV or DETD_ENOMEM.
 */
int autotune_cuda_open(struct autotune_cuda **ret);

/* Close the library handle (dlclose); NULL is a no-op. */
void autotune_cuda_close(struct autotune_cuda *cuda);

/* "driver" or "runtime" and the library's name (borrowed, lives as long
 * as cuda). */
const char *autotune_cuda_kind(const struct autotune_cuda *cuda);
const char *autotune_cuda_name(const struct autotune_cuda *cuda);

/*
 * Time one candidate with CUDA events on stream (a CUstream, which is a
 * cudaStream_t; NULL: the legacy default stream): warmup launches, a
 * synchronize, then reps launches with an event recorded before the first
 * and after each, so ret_ms[r] is the GPU time of launch r (reps >= 1
 * entries). A launch returning nonzero, a runtime error left by a launch,
 * or a failing event or synchronize makes the candidate fail: returns 1
 * and writes a one-line reason into why (size why_size). Returns 0 when
 * timed. The reason never leaves a CUDA error pending on the thread.
 */
int autotune_cuda_time(struct autotune_cuda *cuda, void *stream,
                       detd_launch_cb launch, void *launch_user, size_t index,
                       const char *config, unsigned warmup, unsigned reps,
                       double *ret_ms, char *why, size_t why_size);

/*
 * The compute capability of the current device as "sm<major><minor>"
 * (e.g. "sm90") into buf (size bytes). Returns 0, -ENODEV or DETD_ELIMIT
 * (buf too small).
 */
int autotune_cuda_arch(struct autotune_cuda *cuda, char *buf, size_t size);

/*
 * The CUDA version the driver supports as "cuda <major>.<minor>" (e.g.
 * "cuda 13.0": cuDriverGetVersion, or cudaDriverGetVersion through a
 * runtime) into buf (size bytes). Returns 0, -ENODEV (the library has no
 * such call, or it failed) or DETD_ELIMIT (buf too small).
 */
int autotune_cuda_driver(struct autotune_cuda *cuda, char *buf, size_t size);

#endif /* DETD_AUTOTUNE_CUDA_H */
