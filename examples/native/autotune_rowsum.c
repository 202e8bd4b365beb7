/*
 * autotune_rowsum: a C program that picks rowsum's variant for each shape
 * with detd_autotune(), then computes the row sums with it.
 *
 *   autotune_rowsum [--shapes 4096x1024,2048x8192] [--out FILE]
 *
 * The daemon is found through $DETD_SOCKET; $RANK, when set, is this
 * process's rank in the job (shown by detctl). For each shape it prints a
 * JSON line: the key, the chosen variant, whether this process timed it,
 * how many variants failed in its pass, and a digest of the output bits
 * (FNV-1a of y): every process of a job, and every rerun, prints the same
 * variant and the same digest.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "detd/autotune.h"
#include "rowsum.h"

#ifndef ROWSUM_GUARD
#define ROWSUM_GUARD "dev" /* the Makefile passes the source's hash */
#endif

struct job {
    const float *x;
    float *y;
    int rows, cols;
};

/* detd_launch_cb: one asynchronous launch of variant index. */
static int launch(void *user, size_t index, const char *config) {
    const struct job *j = user;
    (void)config;
    return rowsum_launch((int)index, j->x, j->y, j->rows, j->cols, NULL);
}

static uint64_t fnv1a(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static int fail(const char *what, int rc) {
    fprintf(stderr, "autotune_rowsum: %s: %s (%s)\n", what,
            detd_client_last_error(), detd_err_name(rc));
    return 1;
}

int main(int argc, char **argv) {
    const char *shapes = "4096x1024,2048x8192,1024x32768";
    const char *out_path = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--shapes") == 0)
            shapes = argv[i + 1];
        else if (strcmp(argv[i], "--out") == 0)
            out_path = argv[i + 1];
    }
    FILE *out = out_path != NULL ? fopen(out_path, "w") : stdout;
    if (out == NULL) {
        perror(out_path);
        return 1;
    }
    if (cudaSetDevice(0) != cudaSuccess) {
        fprintf(stderr, "autotune_rowsum: no CUDA device\n");
        return 1;
    }

    /* The key's identity: the kernel's id (its source hash as the guard),
     * the device's arch, the variants as candidates. */
    char kernel[128], arch[16];
    int rc = detd_native_kernel_id("examples::rowsum", ROWSUM_GUARD, kernel,
                                   sizeof kernel);
    if (rc < 0)
        return fail("kernel id", rc);
    rc = detd_autotune_arch(arch, sizeof arch);
    if (rc < 0)
        return fail("arch", rc);
    int n = rowsum_variant_count();
    const char **cands = calloc((size_t)n, sizeof(*cands));
    for (int i = 0; i < n; i++)
        cands[i] = rowsum_variant_config(i);

    const char *rank_env = getenv("RANK");
    struct detd_identity id = {
        .rank = rank_env ? atoi(rank_env) : -1, .local_rank = -1, .arch = arch};
    detd_client *client = NULL;
    rc = detd_client_open(NULL, &id, &client);
    if (rc < 0)
        return fail("open", rc);

    char spec[1024];
    snprintf(spec, sizeof spec, "%s", shapes);
    int status = 0;
    for (char *s = strtok(spec, ","); s != NULL; s = strtok(NULL, ",")) {
        struct job j;
        if (sscanf(s, "%dx%d", &j.rows, &j.cols) != 2 || j.rows <= 0 ||
            j.cols <= 0) {
            fprintf(stderr, "autotune_rowsum: bad shape '%s'\n", s);
            return 2;
        }
        size_t nx = (size_t)j.rows * (size_t)j.cols;
        float *hx = malloc(nx * sizeof(float));
        float *hy = malloc((size_t)j.rows * sizeof(float));
        for (size_t i = 0; i < nx; i++)
            hx[i] = (float)((int)(((uint32_t)i * 2654435761u) % 2001u) - 1000) /
                    997.0f;
        float *dx, *dy;
        cudaMalloc((void **)&dx, nx * sizeof(float));
        cudaMalloc((void **)&dy, (size_t)j.rows * sizeof(float));
        cudaMemcpy(dx, hx, nx * sizeof(float), cudaMemcpyHostToDevice);
        j.x = dx;
        j.y = dy;

        char key[128];
        snprintf(key, sizeof key, "rows=%d,cols=%d,dtype=float32", j.rows,
                 j.cols);
        struct detd_key k = {.arch = arch,
                             .kernel = kernel,
                             .key = key,
                             .candidates = cands,
                             .n_candidates = (size_t)n};
        struct detd_autotune_options o;
        detd_autotune_options_init(&o); /* CUDA events, default stream */
        struct detd_autotune_result res = {.size = sizeof res};
        size_t idx;
        rc = detd_autotune(client, &k, launch, &j, &o, &idx, &res);
        if (rc < 0) {
            status = fail(key, rc);
        } else {
            /* The output, computed with the committed variant. */
            cudaMemset(dy, 0, (size_t)j.rows * sizeof(float));
            int lrc = rowsum_launch((int)idx, dx, dy, j.rows, j.cols, NULL);
            cudaDeviceSynchronize();
            cudaMemcpy(hy, dy, (size_t)j.rows * sizeof(float),
                       cudaMemcpyDeviceToHost);
            fprintf(
                out,
                "{\"kernel\": \"%s\", \"key\": \"%s\", \"index\": %zu, "
                "\"config\": \"%s\", \"timed_here\": %d, \"n_failed\": "
                "%zu, \"takeover\": %d, \"launch_rc\": %d, \"digest\": "
                "\"%016llx\"}\n",
                kernel, key, idx, res.config, res.timed_here, res.n_failed,
                res.takeover, lrc,
                (unsigned long long)fnv1a(hy, (size_t)j.rows * sizeof(float)));
            fflush(out);
        }
        cudaFree(dx);
        cudaFree(dy);
        free(hx);
        free(hy);
    }
    detd_client_close(client);
    free(cands);
    if (out != stdout)
        fclose(out);
    return status;
}
