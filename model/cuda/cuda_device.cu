#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include "common/err.h"
#include "kernels/cuda_check.h"
#include "model/cuda/cuda_device.h"

extern "C" int cuda_device_count(char *why) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        snprintf(why, ERR_LEN, "%s", cudaGetErrorString(err));
        return 0;
    }
    if (n == 0) snprintf(why, ERR_LEN, "the CUDA runtime reports no devices");
    return n;
}

extern "C" void cuda_profiler_range(int on) {
    if (on)
        CUDA_CHECK(cudaProfilerStart());
    else
        CUDA_CHECK(cudaProfilerStop());
}
