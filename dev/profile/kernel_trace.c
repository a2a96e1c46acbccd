/* kernel_trace.c - the GPU's timeline of a process without Nsight Systems: a CUPTI injection library
 * that records every kernel, copy and memset (start, duration, name, grid) and writes them as CSV with the
 * columns of `nsys stats --report cuda_gpu_trace`, for dev/profile/timeline_gaps.py.
 *
 *   make build/kernel_trace.so
 *   CUDA_INJECTION64_PATH=$PWD/build/kernel_trace.so KERNEL_TRACE_OUT=trace.csv ./train ...
 *
 * A "%p" in KERNEL_TRACE_OUT becomes the process id, so the ranks of `./train -g N` (each a process
 * of its own, inheriting the environment) write a file each.
 *
 * The driver loads the library at cuInit and calls InitializeInjection; the records are flushed at
 * exit. Not part of the product: a development probe. */
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BUF_BYTES (8u << 20)
static FILE *out;

#define CUPTI_OK(call)                                                                             \
    do {                                                                                           \
        CUptiResult r_ = (call);                                                                   \
        if (r_ != CUPTI_SUCCESS) {                                                                 \
            const char *msg_ = "?";                                                                \
            cuptiGetResultString(r_, &msg_);                                                       \
            fprintf(stderr, "kernel_trace: %s failed: %s (%s:%d)\n", #call, msg_, __FILE__, __LINE__); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void CUPTIAPI give_buffer(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(8, BUF_BYTES);
    if (!*buffer) {
        fprintf(stderr, "kernel_trace: out of host memory for a %u-byte record buffer\n", BUF_BYTES);
        exit(1);
    }
    *size = BUF_BYTES;
    *max_records = 0;
}

static void CUPTIAPI take_buffer(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *rec = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
            fprintf(out, "%llu,%llu,\"%s\",%d,%d,%d\n", (unsigned long long)k->start,
                    (unsigned long long)(k->end - k->start), k->name, k->gridX, k->gridY, k->gridZ);
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
            fprintf(out, "%llu,%llu,\"[memcpy]\",0,0,0\n", (unsigned long long)m->start,
                    (unsigned long long)(m->end - m->start));
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
            fprintf(out, "%llu,%llu,\"[memset]\",0,0,0\n", (unsigned long long)m->start,
                    (unsigned long long)(m->end - m->start));
        }
    }
    free(buffer);
}

static void flush_at_exit(void) {
    cuptiActivityFlushAll(1);
    if (out) fclose(out);
}

/* KERNEL_TRACE_OUT with its first "%p" replaced by the process id */
static void trace_path(char *path, size_t size) {
    const char *given = getenv("KERNEL_TRACE_OUT");
    if (!given) given = "kernel_trace.csv";
    const char *p = strstr(given, "%p");
    if (p)
        snprintf(path, size, "%.*s%ld%s", (int)(p - given), given, (long)getpid(), p + 2);
    else
        snprintf(path, size, "%s", given);
}

int InitializeInjection(void) {
    char path[4096];
    trace_path(path, sizeof path);
    out = fopen(path, "w");
    if (!out) {
        fprintf(stderr, "kernel_trace: cannot write %s\n", path);
        exit(1);
    }
    fprintf(out, "Start (ns),Duration (ns),Name,GrdX,GrdY,GrdZ\n");
    CUPTI_OK(cuptiActivityRegisterCallbacks(give_buffer, take_buffer));
    CUPTI_OK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    CUPTI_OK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY));
    CUPTI_OK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET));
    atexit(flush_at_exit);
    return 1;
}
