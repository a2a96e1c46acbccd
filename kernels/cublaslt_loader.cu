/* kernels/cublaslt_loader.cu - cuBLASLt loaded at its first call, not when ./train starts.
 *
 * Why: libcublasLt's 370k relocations cost every process that maps it about 25k page faults, 0.13 s
 * on the 2-core workstation, before main. ./train runs that never touch the GPU paid that for
 * nothing: a flag's error, --help, prepare, the CPU backend, and the CPU tests' 637 runs of ./train.
 * So ./train does not link cuBLAS. Each cuBLASLt function the code calls is defined here with the
 * header's own prototype (a mismatch is a compile error: two C declarations of one name), and forwards
 * to the library's, looked up once; the library opens at the first of them. Binaries that link
 * cuBLASLt themselves (the GPU tests, the benchmarks) reach the same library through these.
 * A function the code starts to call needs its line here: the link fails until it has one. */
#include <cublasLt.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static void *library;
static pthread_once_t library_once = PTHREAD_ONCE_INIT;

static void open_library(void) {
    char name[64];
    snprintf(name, sizeof name, "libcublasLt.so.%d", CUBLAS_VER_MAJOR);
    library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        fprintf(stderr,
                "error: cannot load %s, which the GPU's matrix products need (%s): install the CUDA toolkit's "
                "cuBLAS, or add its lib64 directory to LD_LIBRARY_PATH\n",
                name, dlerror());
        exit(1);
    }
}

static void *find(const char *symbol) {
    pthread_once(&library_once, open_library);
    void *p = dlsym(library, symbol);
    if (!p) {
        fprintf(stderr, "error: libcublasLt.so.%d has no %s: this build needs cuBLASLt %d.%d or newer\n",
                CUBLAS_VER_MAJOR, symbol, CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR);
        exit(1);
    }
    return p;
}

/* name's definition: the library's function, found at the first call (threads that race there store
 * the same address) */
#define FORWARD(ret, name, params, args)                                                   \
    extern "C" ret CUBLASWINAPI name params {                                              \
        typedef ret(CUBLASWINAPI * fn_t) params;                                           \
        static fn_t real;                                                                  \
        fn_t f = __atomic_load_n(&real, __ATOMIC_ACQUIRE);                                 \
        if (!f) {                                                                          \
            f = (fn_t)find(#name);                                                         \
            __atomic_store_n(&real, f, __ATOMIC_RELEASE);                                  \
        }                                                                                  \
        return f args;                                                                     \
    }

FORWARD(cublasStatus_t, cublasLtCreate, (cublasLtHandle_t * handle), (handle))
FORWARD(cublasStatus_t, cublasLtDestroy, (cublasLtHandle_t handle), (handle))
FORWARD(const char *, cublasLtGetStatusString, (cublasStatus_t status), (status))
FORWARD(cublasStatus_t, cublasLtMatmul,
        (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
         cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta, const void *C,
         cublasLtMatrixLayout_t Cdesc, void *D, cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
         void *workspace, size_t workspace_bytes, cudaStream_t stream),
        (handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace, workspace_bytes, stream))
FORWARD(cublasStatus_t, cublasLtMatrixLayoutCreate,
        (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld),
        (layout, type, rows, cols, ld))
FORWARD(cublasStatus_t, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout), (layout))
FORWARD(cublasStatus_t, cublasLtMatmulDescCreate,
        (cublasLtMatmulDesc_t * desc, cublasComputeType_t compute, cudaDataType_t scale), (desc, compute, scale))
FORWARD(cublasStatus_t, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc), (desc))
FORWARD(cublasStatus_t, cublasLtMatmulDescSetAttribute,
        (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void *buf, size_t bytes),
        (desc, attr, buf, bytes))
FORWARD(cublasStatus_t, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref), (pref))
FORWARD(cublasStatus_t, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref))
FORWARD(cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,
        (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void *buf, size_t bytes),
        (pref, attr, buf, bytes))
FORWARD(cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,
        (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
         cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
         cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[], int *returned),
        (handle, desc, Adesc, Bdesc, Cdesc, Ddesc, pref, requested, results, returned))
FORWARD(cublasStatus_t, cublasLtMatmulAlgoConfigGetAttribute,
        (const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t attr, void *buf, size_t bytes,
         size_t *written),
        (algo, attr, buf, bytes, written))
