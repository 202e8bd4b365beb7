// rowsum's variants: one block per row; each thread adds ITEMS elements
// per step with a stride of BLOCK * ITEMS, then the block reduces its
// partial sums in shared memory. BLOCK and ITEMS change the order of the
// additions, hence the bits of y. The last variant asks for 2048 threads
// per block, more than any CUDA device allows: its launch fails, and
// detd_autotune() reports it as a failed candidate.
#include <cuda_runtime.h>

#include "rowsum.h"

template <int BLOCK, int ITEMS>
__global__ void rowsum_kernel(const float *__restrict__ x,
                              float *__restrict__ y, int cols) {
    __shared__ float part[BLOCK];
    const float *row = x + (size_t)blockIdx.x * cols;
    float acc = 0.0f;
    for (int c = threadIdx.x * ITEMS; c < cols; c += BLOCK * ITEMS) {
#pragma unroll
        for (int j = 0; j < ITEMS; j++)
            if (c + j < cols)
                acc += row[c + j];
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        y[blockIdx.x] = part[0];
}

template <int BLOCK, int ITEMS>
static int launch_variant(const float *x, float *y, int rows, int cols,
                          cudaStream_t stream) {
    rowsum_kernel<BLOCK, ITEMS><<<rows, BLOCK, 0, stream>>>(x, y, cols);
    return (int)cudaGetLastError();
}

typedef int (*variant_fn)(const float *, float *, int, int, cudaStream_t);

static const struct {
    const char *config;
    variant_fn fn;
} variants[] = {
    {"BLOCK=64,ITEMS=1", launch_variant<64, 1>},
    {"BLOCK=128,ITEMS=1", launch_variant<128, 1>},
    {"BLOCK=128,ITEMS=4", launch_variant<128, 4>},
    {"BLOCK=256,ITEMS=1", launch_variant<256, 1>},
    {"BLOCK=256,ITEMS=4", launch_variant<256, 4>},
    {"BLOCK=512,ITEMS=2", launch_variant<512, 2>},
    {"BLOCK=1024,ITEMS=1", launch_variant<1024, 1>},
    {"BLOCK=2048,ITEMS=1", launch_variant<2048, 1>}, // fails: too many threads
};

extern "C" int rowsum_variant_count(void) {
    return (int)(sizeof variants / sizeof *variants);
}

extern "C" const char *rowsum_variant_config(int i) {
    return i >= 0 && i < rowsum_variant_count() ? variants[i].config : nullptr;
}

extern "C" int rowsum_launch(int i, const float *x, float *y, int rows,
                             int cols, void *stream) {
    if (i < 0 || i >= rowsum_variant_count())
        return (int)cudaErrorInvalidValue;
    return variants[i].fn(x, y, rows, cols, (cudaStream_t)stream);
}
