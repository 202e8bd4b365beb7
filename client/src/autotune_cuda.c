/* autotune_cuda: CUDA events through a dlopen()ed CUDA library. See
 * autotune_cuda.h. */
#define _GNU_SOURCE
#include "autotune_cuda.h"
#include "wire.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The CUDA types this module needs, declared here: no CUDA header is
 * needed to build libdetd. A CUstream is a cudaStream_t, a CUevent a
 * cudaEvent_t; both APIs return int error codes (0: success). */
typedef void *cuda_event_;
typedef int (*cuda_fn_init_)(unsigned);
typedef int (*cuda_fn_count_)(int *);
typedef int (*cuda_fn_ctx_)(void **);
typedef int (*cuda_fn_ev_new_drv_)(cuda_event_ *, unsigned);
typedef int (*cuda_fn_ev_new_rt_)(cuda_event_ *);
typedef int (*cuda_fn_ev_rec_)(cuda_event_, void *);
typedef int (*cuda_fn_ev_)(cuda_event_);
typedef int (*cuda_fn_elapsed_)(float *, cuda_event_, cuda_event_);
typedef int (*cuda_fn_stream_)(void *);
typedef int (*cuda_fn_last_)(void);
typedef int (*cuda_fn_name_drv_)(int, const char **);
typedef const char *(*cuda_fn_name_rt_)(int);
typedef int (*cuda_fn_cur_dev_drv_)(int *);
typedef int (*cuda_fn_cur_dev_rt_)(int *);
typedef int (*cuda_fn_attr_drv_)(int *, int, int);
typedef int (*cuda_fn_attr_rt_)(int *, int, int);

enum { CUDA_KIND_DRIVER_ = 1, CUDA_KIND_RUNTIME_ = 2 };

/* Device attributes (equal in both APIs). */
#define CUDA_ATTR_CC_MAJOR_ 75
#define CUDA_ATTR_CC_MINOR_ 76

struct autotune_cuda {
    void *dl;
    int kind;
    char name[256];
    /* Driver. */
    cuda_fn_init_ cu_init;
    cuda_fn_count_ cu_count;
    cuda_fn_ctx_ cu_ctx_current;
    cuda_fn_cur_dev_drv_ cu_ctx_device;
    cuda_fn_attr_drv_ cu_attr;
    cuda_fn_ev_new_drv_ cu_ev_new;
    cuda_fn_name_drv_ cu_err_name;
    /* Runtime. */
    cuda_fn_ev_new_rt_ rt_ev_new;
    cuda_fn_last_ rt_last_error;
    cuda_fn_name_rt_ rt_err_name;
    cuda_fn_cur_dev_rt_ rt_device;
    cuda_fn_attr_rt_ rt_attr;
    /* Both (one symbol name per API). */
    cuda_fn_ev_rec_ ev_record;
    cuda_fn_ev_ ev_sync;
    cuda_fn_ev_ ev_destroy;
    cuda_fn_elapsed_ ev_elapsed;
    cuda_fn_stream_ stream_sync;
};

/* Runtimes the process may have loaded already, newest first. */
static const char *const cuda_runtimes_[] = {
    "libcudart.so.13",
    "libcudart.so.12",
    "libcudart.so.11.0",
    "libcudart.so",
};
#define CUDA_DRIVER_ "libcuda.so.1"

static const char *cuda_err_(const struct autotune_cuda *c, int err, char *buf,
                             size_t size) {
    const char *n = NULL;
    if (c->kind == CUDA_KIND_DRIVER_ && c->cu_err_name != NULL)
        c->cu_err_name(err, &n);
    else if (c->kind == CUDA_KIND_RUNTIME_ && c->rt_err_name != NULL)
        n = c->rt_err_name(err);
    if (n != NULL)
        snprintf(buf, size, "%s (%d)", n, err);
    else
        snprintf(buf, size, "CUDA error %d", err);
    return buf;
}

static void *cuda_sym_(void *dl, const char *a, const char *b) {
    void *p = dlsym(dl, a);
    if (p == NULL && b != NULL)
        p = dlsym(dl, b);
    return p;
}

/* Resolve the functions of the kind dl's symbols say; 0 or -ENODEV. */
static int cuda_bind_(struct autotune_cuda *c) {
    void *dl = c->dl;
    const char *missing = NULL;
    if (dlsym(dl, "cuInit") != NULL) {
        c->kind = CUDA_KIND_DRIVER_;
        c->cu_init = (cuda_fn_init_)dlsym(dl, "cuInit");
        c->cu_count = (cuda_fn_count_)dlsym(dl, "cuDeviceGetCount");
        c->cu_ctx_current = (cuda_fn_ctx_)dlsym(dl, "cuCtxGetCurrent");
        c->cu_ctx_device = (cuda_fn_cur_dev_drv_)dlsym(dl, "cuCtxGetDevice");
        c->cu_attr = (cuda_fn_attr_drv_)dlsym(dl, "cuDeviceGetAttribute");
        c->cu_ev_new = (cuda_fn_ev_new_drv_)dlsym(dl, "cuEventCreate");
        c->cu_err_name = (cuda_fn_name_drv_)dlsym(dl, "cuGetErrorName");
        c->ev_record = (cuda_fn_ev_rec_)dlsym(dl, "cuEventRecord");
        c->ev_sync = (cuda_fn_ev_)dlsym(dl, "cuEventSynchronize");
        c->ev_destroy =
            (cuda_fn_ev_)cuda_sym_(dl, "cuEventDestroy_v2", "cuEventDestroy");
        c->ev_elapsed = (cuda_fn_elapsed_)cuda_sym_(dl, "cuEventElapsedTime_v2",
                                                    "cuEventElapsedTime");
        c->stream_sync = (cuda_fn_stream_)dlsym(dl, "cuStreamSynchronize");
        missing = c->cu_count == NULL         ? "cuDeviceGetCount"
                  : c->cu_ctx_current == NULL ? "cuCtxGetCurrent"
                  : c->cu_ctx_device == NULL  ? "cuCtxGetDevice"
                  : c->cu_attr == NULL        ? "cuDeviceGetAttribute"
                  : c->cu_ev_new == NULL      ? "cuEventCreate"
                                              : NULL;
    } else if (dlsym(dl, "cudaGetDeviceCount") != NULL) {
        c->kind = CUDA_KIND_RUNTIME_;
        c->cu_count = (cuda_fn_count_)dlsym(dl, "cudaGetDeviceCount");
        c->rt_ev_new = (cuda_fn_ev_new_rt_)dlsym(dl, "cudaEventCreate");
        c->rt_last_error = (cuda_fn_last_)dlsym(dl, "cudaGetLastError");
        c->rt_err_name = (cuda_fn_name_rt_)dlsym(dl, "cudaGetErrorName");
        c->rt_device = (cuda_fn_cur_dev_rt_)dlsym(dl, "cudaGetDevice");
        c->rt_attr = (cuda_fn_attr_rt_)dlsym(dl, "cudaDeviceGetAttribute");
        c->ev_record = (cuda_fn_ev_rec_)dlsym(dl, "cudaEventRecord");
        c->ev_sync = (cuda_fn_ev_)dlsym(dl, "cudaEventSynchronize");
        c->ev_destroy = (cuda_fn_ev_)dlsym(dl, "cudaEventDestroy");
        c->ev_elapsed = (cuda_fn_elapsed_)dlsym(dl, "cudaEventElapsedTime");
        c->stream_sync = (cuda_fn_stream_)dlsym(dl, "cudaStreamSynchronize");
        missing = c->rt_ev_new == NULL       ? "cudaEventCreate"
                  : c->rt_last_error == NULL ? "cudaGetLastError"
                  : c->rt_device == NULL     ? "cudaGetDevice"
                  : c->rt_attr == NULL       ? "cudaDeviceGetAttribute"
                                             : NULL;
    } else {
        wire_set_error("CUDA library '%s' has neither cuInit nor "
                       "cudaGetDeviceCount",
                       c->name);
        return -ENODEV;
    }
    if (missing == NULL)
        missing = c->ev_record == NULL     ? "EventRecord"
                  : c->ev_sync == NULL     ? "EventSynchronize"
                  : c->ev_destroy == NULL  ? "EventDestroy"
                  : c->ev_elapsed == NULL  ? "EventElapsedTime"
                  : c->stream_sync == NULL ? "StreamSynchronize"
                                           : NULL;
    if (missing != NULL) {
        wire_set_error("CUDA library '%s' lacks %s", c->name, missing);
        return -ENODEV;
    }
    return 0;
}

/* Find and dlopen the library (see autotune_cuda.h for the order). */
static int cuda_load_(struct autotune_cuda *c) {
    const char *env = getenv("DETD_CUDA_LIBRARY");
    if (env != NULL && env[0] != '\0') {
        snprintf(c->name, sizeof c->name, "%s", env);
        c->dl = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (c->dl == NULL) {
            const char *e = dlerror();
            wire_set_error("no CUDA: cannot load $DETD_CUDA_LIBRARY '%s': %s; "
                           "time with options.timer instead",
                           env, e != NULL ? e : "dlopen failed");
            return -ENODEV;
        }
        return 0;
    }
    for (size_t i = 0; i < sizeof cuda_runtimes_ / sizeof *cuda_runtimes_;
         i++) {
        c->dl = dlopen(cuda_runtimes_[i], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
        if (c->dl != NULL) {
            snprintf(c->name, sizeof c->name, "%s", cuda_runtimes_[i]);
            return 0;
        }
    }
    snprintf(c->name, sizeof c->name, "%s", CUDA_DRIVER_);
    c->dl = dlopen(CUDA_DRIVER_, RTLD_NOW | RTLD_LOCAL);
    if (c->dl == NULL) {
        const char *e = dlerror();
        wire_set_error("no CUDA: cannot load the CUDA driver %s (%s) and no "
                       "CUDA runtime is loaded in this process; time with "
                       "options.timer instead, or set $DETD_CUDA_LIBRARY",
                       CUDA_DRIVER_, e != NULL ? e : "dlopen failed");
        return -ENODEV;
    }
    return 0;
}

/* See autotune_cuda.h. */
int autotune_cuda_open(struct autotune_cuda **ret) {
    struct autotune_cuda *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return DETD_ENOMEM;
    int rc = cuda_load_(c);
    if (rc < 0)
        goto fail;
    rc = cuda_bind_(c);
    if (rc < 0)
        goto fail;
    char eb[96];
    int err;
    if (c->kind == CUDA_KIND_DRIVER_ && (err = c->cu_init(0)) != 0) {
        wire_set_error("no CUDA device: cuInit in '%s': %s", c->name,
                       cuda_err_(c, err, eb, sizeof eb));
        rc = -ENODEV;
        goto fail;
    }
    int n = 0;
    err = c->cu_count(&n);
    if (err != 0 || n <= 0) {
        wire_set_error(
            "no CUDA device: %s in '%s': %s",
            c->kind == CUDA_KIND_DRIVER_ ? "cuDeviceGetCount"
                                         : "cudaGetDeviceCount",
            c->name, err != 0 ? cuda_err_(c, err, eb, sizeof eb) : "0 devices");
        if (c->kind == CUDA_KIND_RUNTIME_ && c->rt_last_error != NULL)
            c->rt_last_error(); /* leave no error pending */
        rc = -ENODEV;
        goto fail;
    }
    *ret = c;
    return 0;
fail:
    autotune_cuda_close(c);
    return rc;
}

/* See autotune_cuda.h. */
void autotune_cuda_close(struct autotune_cuda *cuda) {
    if (cuda == NULL)
        return;
    if (cuda->dl != NULL)
        dlclose(cuda->dl);
    free(cuda);
}

/* See autotune_cuda.h. */
const char *autotune_cuda_kind(const struct autotune_cuda *cuda) {
    return cuda->kind == CUDA_KIND_DRIVER_ ? "driver" : "runtime";
}

/* See autotune_cuda.h. */
const char *autotune_cuda_name(const struct autotune_cuda *cuda) {
    return cuda->name;
}

static int cuda_event_new_(struct autotune_cuda *c, cuda_event_ *ev) {
    if (c->kind == CUDA_KIND_DRIVER_)
        return c->cu_ev_new(ev, 0);
    return c->rt_ev_new(ev);
}

/* The driver needs a current context; the caller's runtime makes one on
 * its first call (the warmup launches come first for that reason). */
static int cuda_check_ctx_(struct autotune_cuda *c, char *why, size_t n) {
    if (c->kind != CUDA_KIND_DRIVER_)
        return 0;
    void *ctx = NULL;
    int err = c->cu_ctx_current(&ctx);
    if (err != 0 || ctx == NULL) {
        char eb[96];
        snprintf(why, n,
                 "no current CUDA context on this thread after the warmup "
                 "launches (%s): make the kernel's device current first",
                 err != 0 ? cuda_err_(c, err, eb, sizeof eb) : "none");
        return 1;
    }
    return 0;
}

/* A runtime error left by the caller's launches (only visible through
 * the runtime the process loaded: see autotune_cuda.h). */
static int cuda_pending_(struct autotune_cuda *c, const char *what, char *why,
                         size_t n) {
    if (c->kind != CUDA_KIND_RUNTIME_)
        return 0;
    int err = c->rt_last_error();
    if (err == 0)
        return 0;
    char eb[96];
    snprintf(why, n, "%s: %s", what, cuda_err_(c, err, eb, sizeof eb));
    return 1;
}

/* See autotune_cuda.h. */
int autotune_cuda_time(struct autotune_cuda *cuda, void *stream,
                       detd_launch_cb launch, void *launch_user, size_t index,
                       const char *config, unsigned warmup, unsigned reps,
                       double *ret_ms, char *why, size_t why_size) {
    struct autotune_cuda *c = cuda;
    cuda_event_ *ev = NULL;
    unsigned made = 0;
    char eb[96];
    int err, failed = 1;

    for (unsigned w = 0; w < warmup; w++) {
        int lrc = launch(launch_user, index, config);
        if (lrc != 0) {
            snprintf(why, why_size, "warmup launch returned %d", lrc);
            goto out;
        }
    }
    if (cuda_pending_(c, "warmup launch", why, why_size))
        goto out;
    if ((err = c->stream_sync(stream)) != 0) {
        snprintf(why, why_size, "synchronize after warmup: %s",
                 cuda_err_(c, err, eb, sizeof eb));
        cuda_pending_(c, "", eb, sizeof eb);
        goto out;
    }
    if (cuda_check_ctx_(c, why, why_size))
        goto out;
    ev = calloc((size_t)reps + 1, sizeof(*ev));
    if (ev == NULL) {
        snprintf(why, why_size, "out of memory for %u events", reps + 1);
        goto out;
    }
    for (; made <= reps; made++) {
        if ((err = cuda_event_new_(c, &ev[made])) != 0) {
            snprintf(why, why_size, "create event: %s",
                     cuda_err_(c, err, eb, sizeof eb));
            cuda_pending_(c, "", eb, sizeof eb);
            goto out;
        }
    }
    if ((err = c->ev_record(ev[0], stream)) != 0)
        goto event_failed;
    for (unsigned r = 0; r < reps; r++) {
        int lrc = launch(launch_user, index, config);
        if (lrc != 0) {
            snprintf(why, why_size, "launch %u returned %d", r, lrc);
            c->stream_sync(stream);
            goto out;
        }
        if ((err = c->ev_record(ev[r + 1], stream)) != 0)
            goto event_failed;
    }
    if ((err = c->ev_sync(ev[reps])) != 0)
        goto event_failed;
    if (cuda_pending_(c, "launch", why, why_size))
        goto out;
    for (unsigned r = 0; r < reps; r++) {
        float ms = 0;
        if ((err = c->ev_elapsed(&ms, ev[r], ev[r + 1])) != 0)
            goto event_failed;
        ret_ms[r] = (double)ms;
    }
    failed = 0;
    goto out;
event_failed:
    snprintf(why, why_size, "CUDA event: %s", cuda_err_(c, err, eb, sizeof eb));
    cuda_pending_(c, "", eb, sizeof eb);
out:
    for (unsigned i = 0; i < made; i++)
        c->ev_destroy(ev[i]);
    free(ev);
    return failed;
}

/* See autotune_cuda.h. */
int autotune_cuda_arch(struct autotune_cuda *cuda, char *buf, size_t size) {
    struct autotune_cuda *c = cuda;
    int dev = 0, major = 0, minor = 0, err;
    char eb[96];
    if (c->kind == CUDA_KIND_DRIVER_) {
        void *ctx = NULL;
        /* No current context: device 0, where the runtime would start. */
        if (c->cu_ctx_current(&ctx) == 0 && ctx != NULL &&
            (err = c->cu_ctx_device(&dev)) != 0)
            goto fail;
        if ((err = c->cu_attr(&major, CUDA_ATTR_CC_MAJOR_, dev)) != 0 ||
            (err = c->cu_attr(&minor, CUDA_ATTR_CC_MINOR_, dev)) != 0)
            goto fail;
    } else {
        if ((err = c->rt_device(&dev)) != 0 ||
            (err = c->rt_attr(&major, CUDA_ATTR_CC_MAJOR_, dev)) != 0 ||
            (err = c->rt_attr(&minor, CUDA_ATTR_CC_MINOR_, dev)) != 0)
            goto fail;
    }
    int n = snprintf(buf, size, "sm%d%d", major, minor);
    if (n < 0 || (size_t)n >= size) {
        wire_set_error("arch buffer of %zu bytes is too small", size);
        return DETD_ELIMIT;
    }
    return 0;
fail:
    wire_set_error("CUDA device attributes in '%s': %s", c->name,
                   cuda_err_(c, err, eb, sizeof eb));
    cuda_pending_(c, "", eb, sizeof eb);
    return -ENODEV;
}

/* See autotune_cuda.h. */
int autotune_cuda_driver(struct autotune_cuda *cuda, char *buf, size_t size) {
    cuda_fn_count_ fn = (cuda_fn_count_)cuda_sym_(
        cuda->dl,
        cuda->kind == CUDA_KIND_DRIVER_ ? "cuDriverGetVersion"
                                        : "cudaDriverGetVersion",
        NULL);
    int v = 0;
    if (fn == NULL || fn(&v) != 0 || v <= 0)
        return -ENODEV;
    int n = snprintf(buf, size, "cuda %d.%d", v / 1000, v % 1000 / 10);
    return n < 0 || (size_t)n >= size ? DETD_ELIMIT : 0;
}
