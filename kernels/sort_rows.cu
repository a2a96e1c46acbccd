/* kernels/sort_rows.cu - row indices grouped by an int32 key per row (a token, a target), for the
 * backward passes that sum each key's rows in a fixed order: the encoder's dwte and the fused output
 * layer's one-hot part of dW.
 *
 * rows_sorted = 0..n-1 stably sorted by keys[row]: a key's rows lie together in increasing row
 * order, whatever the timing, so sums over them are deterministic. One iota pass (4n bytes) and
 * CUB's radix sort over bits [0, end_bit) of the keys. */
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda_check.h"
#include "kernels/device_util.cuh"

__global__ void iota_kernel(int32_t *out, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (int32_t)i;
}

size_t sort_rows_by_key_temp_bytes(int n, int end_bit) {
    size_t bytes = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(NULL, bytes, (const int32_t *)NULL, (int32_t *)NULL,
                                               (const int32_t *)NULL, (int32_t *)NULL, n, 0, end_bit));
    return bytes;
}

void sort_rows_by_key(const int32_t *keys, int32_t *keys_sorted, int32_t *rows, int32_t *rows_sorted, void *temp,
                      size_t temp_bytes, int n, int end_bit, cudaStream_t stream) {
    iota_kernel<<<(unsigned)ceil_div(n, 256), 256, 0, stream>>>(rows, n);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, keys_sorted, rows, rows_sorted, n, 0, end_bit,
                                               stream));
}
