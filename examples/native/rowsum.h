/*
 * rowsum: y[r] = sum of row r of a rows x cols float matrix, in several
 * tile variants (rowsum_kernels.cu). Each variant adds the row's elements
 * in its own order, so variants give different bits: the reason a row sum
 * must use the same variant in every process.
 */
#ifndef ROWSUM_H
#define ROWSUM_H

#ifdef __cplusplus
extern "C" {
#endif

/* The number of variants and variant i's canonical config string
 * ("BLOCK=256,ITEMS=4"), static. */
int rowsum_variant_count(void);
const char *rowsum_variant_config(int i);

/*
 * Launch variant i on stream (a cudaStream_t; NULL: the default stream),
 * asynchronously: x and y are device pointers. Returns 0, or the CUDA
 * error of the launch (cudaGetLastError()) as an int, e.g. for a variant
 * whose block is too large for the device.
 */
int rowsum_launch(int i, const float *x, float *y, int rows, int cols,
                  void *stream);

#ifdef __cplusplus
}
#endif

#endif /* ROWSUM_H */
