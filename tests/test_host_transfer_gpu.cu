/* copy_to_host and copy_to_device (model/cuda/host_transfer.cu): device memory to and from pageable
 * host memory through two pinned staging pieces of 64 MB, against the bytes put there, at sizes
 * around a piece's and at unaligned addresses; in order with the stream's other work. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_check.h"
#include "model/cuda/host_transfer.h"
#include "tests/test.h"

#define PIECE ((size_t)64 << 20)

static void fill(unsigned char *p, size_t n, uint64_t seed) {
    uint64_t x = seed;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (unsigned char)(x >> 56);
    }
}

TEST(copy_to_host_gives_every_byte_at_sizes_around_its_pieces_and_unaligned_addresses) {
    const size_t sizes[] = {1, 3, 4096 + 5, PIECE - 1, PIECE, PIECE + 7, 2 * PIECE, 3 * PIECE + 4099};
    const size_t most = 3 * PIECE + 4099 + 16;
    unsigned char *want = (unsigned char *)malloc(most), *got = (unsigned char *)malloc(most + 16);
    REQUIRE(want && got, "host memory");
    fill(want, most, 11);
    unsigned char *dev = NULL;
    CUDA_CHECK(cudaMalloc(&dev, most));
    CUDA_CHECK(cudaMemcpy(dev, want, most, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaDeviceSynchronize()); /* from pageable memory cudaMemcpy may return before the bytes land */
    cudaStream_t s; /* non-blocking: no implicit order with the legacy default stream */
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    HostStaging *staging = NULL;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const size_t n = sizes[k], from = k % 5, to = (k * 3) % 7; /* odd offsets on both sides */
        memset(got, 0xA5, most + 16);
        copy_to_host(&staging, got + to, dev + from, n, s);
        CHECK(memcmp(got + to, want + from, n) == 0, "size %zu (device +%zu, host +%zu): bytes differ", n, from, to);
        /* nothing around the destination is touched */
        int outside = 0;
        for (size_t i = 0; i < to; i++) outside |= got[i] != 0xA5;
        for (size_t i = to + n; i < to + n + 16 && i < most + 16; i++) outside |= got[i] != 0xA5;
        CHECK(!outside, "size %zu: bytes outside the destination changed", n);
    }
    /* a copy of nothing makes nothing and touches nothing */
    HostStaging *none = NULL;
    got[0] = 0x5A;
    copy_to_host(&none, got, dev, 0, s);
    CHECK(none == NULL && got[0] == 0x5A, "a copy of 0 bytes made staging or wrote");
    /* the copy comes after what the stream already holds: a memset queued behind milliseconds of copies */
    for (int i = 0; i < 50; i++) CUDA_CHECK(cudaMemcpyAsync(dev + PIECE, dev, PIECE, cudaMemcpyDeviceToDevice, s));
    CUDA_CHECK(cudaMemsetAsync(dev, 0x3C, PIECE + 9, s));
    copy_to_host(&staging, got, dev, PIECE + 9, s);
    int all = 1;
    for (size_t i = 0; i < PIECE + 9; i++) all &= got[i] == 0x3C;
    CHECK(all, "the copy did not wait for the stream's earlier work");
    host_staging_free(staging);
    host_staging_free(NULL);
    CUDA_CHECK(cudaStreamDestroy(s));
    CUDA_CHECK(cudaFree(dev));
    free(got);
    free(want);
}

TEST(copy_to_device_gives_every_byte_at_sizes_around_its_pieces_and_unaligned_addresses) {
    const size_t sizes[] = {1, 5, 4096 + 3, PIECE - 3, PIECE, PIECE + 1, 2 * PIECE + 11, 3 * PIECE, 4 * PIECE + 7};
    const size_t most = 4 * PIECE + 7 + 16;
    unsigned char *src = (unsigned char *)malloc(most), *back = (unsigned char *)malloc(most);
    REQUIRE(src && back, "host memory");
    unsigned char *dev = NULL;
    CUDA_CHECK(cudaMalloc(&dev, most + 16));
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    HostStaging *staging = NULL;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const size_t n = sizes[k], from = (k * 3) % 7, to = k % 5;
        fill(src, most, 100 + k);
        CUDA_CHECK(cudaMemsetAsync(dev, 0xA5, most + 16, s));
        copy_to_device(&staging, dev + to, src + from, n, s);
        /* returned: the source is the caller's again, and what the device holds must not change */
        memset(src + from, 0, n);
        CUDA_CHECK(cudaStreamSynchronize(s));
        CUDA_CHECK(cudaMemcpy(back, dev, to + n + 16, cudaMemcpyDeviceToHost));
        unsigned char *want = (unsigned char *)malloc(n);
        REQUIRE(want, "host memory");
        fill(src, most, 100 + k);
        memcpy(want, src + from, n);
        CHECK(memcmp(back + to, want, n) == 0, "size %zu (host +%zu, device +%zu): bytes differ", n, from, to);
        int outside = 0;
        for (size_t i = 0; i < to; i++) outside |= back[i] != 0xA5;
        for (size_t i = to + n; i < to + n + 16; i++) outside |= back[i] != 0xA5;
        CHECK(!outside, "size %zu: bytes outside the destination changed", n);
        free(want);
    }
    /* in order with the stream: after milliseconds of copies into the destination, before a copy out
     * of it queued after the call */
    fill(src, most, 7);
    for (int i = 0; i < 50; i++) CUDA_CHECK(cudaMemcpyAsync(dev, dev + PIECE, PIECE, cudaMemcpyDeviceToDevice, s));
    copy_to_device(&staging, dev, src, PIECE + 9, s);
    CUDA_CHECK(cudaMemcpyAsync(dev + 2 * PIECE, dev, PIECE + 9, cudaMemcpyDeviceToDevice, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaMemcpy(back, dev + 2 * PIECE, PIECE + 9, cudaMemcpyDeviceToHost));
    CHECK(memcmp(back, src, PIECE + 9) == 0, "the copy was not in order with the stream's other work");
    HostStaging *none = NULL;
    copy_to_device(&none, dev, src, 0, s);
    CHECK(none == NULL, "a copy of 0 bytes made staging");
    host_staging_free(staging);
    CUDA_CHECK(cudaStreamDestroy(s));
    CUDA_CHECK(cudaFree(dev));
    free(back);
    free(src);
}

/* Keeps a stream busy for about `cycles` SM clocks. */
__global__ void spin_kernel(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

/* With the stream held up (a kernel of ~0.1 s ahead of the copies), copy_to_device still refills a
 * staging piece only after its last transfer left it, and returns only once the device holds every
 * byte: read back at once through another stream, which has no order with the first. Two calls in a
 * row, of three pieces and a tail each. */
TEST(copy_to_device_refills_a_piece_only_after_it_crossed_and_returns_with_every_byte_there) {
    const size_t n = 3 * PIECE + 5;
    unsigned char *src[2] = {(unsigned char *)malloc(n), (unsigned char *)malloc(n)};
    unsigned char *back = (unsigned char *)malloc(n);
    REQUIRE(src[0] && src[1] && back, "host memory");
    unsigned char *dev[2] = {NULL, NULL};
    cudaStream_t s, other; /* non-blocking: neither waits for the other nor for the default stream */
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    HostStaging *staging = NULL;
    for (int c = 0; c < 2; c++) {
        fill(src[c], n, 50 + c);
        CUDA_CHECK(cudaMalloc(&dev[c], n));
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int c = 0; c < 2; c++) {
        spin_kernel<<<1, 1, 0, s>>>(150000000LL);
        CUDA_CHECK(cudaGetLastError());
        copy_to_device(&staging, dev[c], src[c], n, s);
        CUDA_CHECK(cudaMemcpyAsync(back, dev[c], n, cudaMemcpyDeviceToHost, other));
        CUDA_CHECK(cudaStreamSynchronize(other));
        size_t first = n;
        for (size_t i = 0; i < n && first == n; i++)
            if (back[i] != src[c][i]) first = i;
        CHECK(first == n, "call %d: the device differs from byte %zu on (piece %zu)", c, first, first / PIECE);
    }
    host_staging_free(staging);
    CUDA_CHECK(cudaStreamDestroy(other));
    CUDA_CHECK(cudaStreamDestroy(s));
    CUDA_CHECK(cudaFree(dev[1]));
    CUDA_CHECK(cudaFree(dev[0]));
    free(back);
    free(src[1]);
    free(src[0]);
}
