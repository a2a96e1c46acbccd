/* model/cuda/host_transfer.cu - device memory to and from pageable host memory at the host link's
 * speed (host_transfer.h). Built with OpenMP: the staging pieces are copied out and in on every core. */
#include "model/cuda/host_transfer.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_check.h"

/* 64 MB a piece: a piece's transfer (about 2 ms) is long beside a launch and an event, and two of
 * them are little pinned memory */
#define STAGING_PIECE ((size_t)64 << 20)
/* the cores copy out in blocks of this many bytes */
#define COPY_BLOCK ((size_t)1 << 20)

struct HostStaging {
    unsigned char *piece[2]; /* pinned */
    cudaEvent_t crossed[2];  /* recorded after a piece's transfer */
};

static HostStaging *staging_create(void) {
    HostStaging *s = (HostStaging *)calloc(1, sizeof *s);
    if (!s) {
        fprintf(stderr, "error: out of host memory for the device-to-host staging buffers\n");
        exit(1);
    }
    for (int b = 0; b < 2; b++) {
        CUDA_CHECK(cudaMallocHost((void **)&s->piece[b], STAGING_PIECE));
        CUDA_CHECK(cudaEventCreateWithFlags(&s->crossed[b], cudaEventDisableTiming));
    }
    return s;
}

void host_staging_free(HostStaging *s) {
    if (!s) return;
    for (int b = 0; b < 2; b++) {
        CUDA_CHECK(cudaEventDestroy(s->crossed[b]));
        CUDA_CHECK(cudaFreeHost(s->piece[b]));
    }
    free(s);
}

static void copy_on_every_core(unsigned char *dst, const unsigned char *src, size_t bytes) {
    const long blocks = (long)((bytes + COPY_BLOCK - 1) / COPY_BLOCK);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < blocks; i++) {
        const size_t at = (size_t)i * COPY_BLOCK, n = bytes - at < COPY_BLOCK ? bytes - at : COPY_BLOCK;
        memcpy(dst + at, src + at, n);
    }
}

void copy_to_host(HostStaging **staging, void *dst, const void *src, size_t bytes, cudaStream_t stream) {
    if (bytes == 0) return;
    if (!*staging) *staging = staging_create();
    HostStaging *s = *staging;
    unsigned char *to = (unsigned char *)dst;
    const unsigned char *from = (const unsigned char *)src;
    size_t before = 0, before_bytes = 0; /* the piece in flight before this one */
    for (size_t at = 0, k = 0; at < bytes; at += STAGING_PIECE, k++) {
        const int b = (int)(k & 1);
        const size_t n = bytes - at < STAGING_PIECE ? bytes - at : STAGING_PIECE;
        /* piece b's last contents (piece k - 2) were copied out in the previous pass */
        CUDA_CHECK(cudaMemcpyAsync(s->piece[b], from + at, n, cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaEventRecord(s->crossed[b], stream));
        if (k > 0) { /* while piece k crosses the link, piece k - 1 goes out */
            CUDA_CHECK(cudaEventSynchronize(s->crossed[!b]));
            copy_on_every_core(to + before, s->piece[!b], before_bytes);
        }
        before = at, before_bytes = n;
    }
    const int last = (int)(((bytes - 1) / STAGING_PIECE) & 1);
    CUDA_CHECK(cudaEventSynchronize(s->crossed[last]));
    copy_on_every_core(to + before, s->piece[last], before_bytes);
}

void copy_to_device(HostStaging **staging, void *dst, const void *src, size_t bytes, cudaStream_t stream) {
    if (bytes == 0) return;
    if (!*staging) *staging = staging_create();
    HostStaging *s = *staging;
    unsigned char *to = (unsigned char *)dst;
    const unsigned char *from = (const unsigned char *)src;
    for (size_t at = 0, k = 0; at < bytes; at += STAGING_PIECE, k++) {
        const int b = (int)(k & 1);
        const size_t n = bytes - at < STAGING_PIECE ? bytes - at : STAGING_PIECE;
        /* piece b may be refilled once piece k - 2 has left it; piece k - 1 crosses meanwhile */
        if (k >= 2) CUDA_CHECK(cudaEventSynchronize(s->crossed[b]));
        copy_on_every_core(s->piece[b], from + at, n);
        CUDA_CHECK(cudaMemcpyAsync(to + at, s->piece[b], n, cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(cudaEventRecord(s->crossed[b], stream));
    }
    /* both pieces free again, and dst whole, before the next call */
    const size_t pieces = (bytes + STAGING_PIECE - 1) / STAGING_PIECE;
    for (size_t k = pieces >= 2 ? pieces - 2 : 0; k < pieces; k++) CUDA_CHECK(cudaEventSynchronize(s->crossed[k & 1]));
}
