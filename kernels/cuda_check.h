/* kernels/cuda_check.h - checked CUDA, cuBLAS and cuBLASLt calls.
 *
 * Every call into CUDA goes through one of these macros: on failure it prints what failed, the
 * error string and file:line, and exits with status 1. After a kernel launch use
 * CUDA_CHECK(cudaGetLastError()) so launch-configuration errors are caught where they happen. */
#ifndef FUSEDGPT_CUDA_CHECK_H
#define FUSEDGPT_CUDA_CHECK_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

static inline void cuda_check_impl(cudaError_t err, const char *what, const char *file, int line) {
    if (err != cudaSuccess) {
        fprintf(stderr, "error: CUDA call %s failed at %s:%d: %s\n", what, file, line,
                cudaGetErrorString(err));
        exit(1);
    }
}

static inline void cublas_check_impl(cublasStatus_t st, const char *what, const char *file, int line) {
    if (st != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "error: cuBLAS call %s failed at %s:%d: %s\n", what, file, line,
                cublasLtGetStatusString(st));
        exit(1);
    }
}

#define CUDA_CHECK(call) cuda_check_impl((call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(call) cublas_check_impl((call), #call, __FILE__, __LINE__)

#endif
