/* kernels/attention.cu - causal grouped-query self-attention in the flash-attention manner, forward
 * and backward, on bf16 tensor cores with fp32 accumulation: Hopper's warpgroup MMA (wgmma), or
 * mma.sync m16n8k16 when attention_use_wgmma(0) (the reference the tests hold it to). Both paths share
 * the blocks, the order of work and the arithmetic below; only how the products are issued differs.
 *
 * Shapes (AttentionShape in kernels.h): qkv [B,T,(NH+2·NKV)·HS] per token NH query heads, then NKV
 * key heads, then NKV value heads; query head h reads key/value head h / (NH/NKV), which is never
 * copied. out [B,T,NH·HS], lse [B,NH,T] fp32, dqkv like qkv; HS ∈ {64, 128, 256}; any T >= 1.
 * The wgmma kernels hold a [64][HS] tile as HS/64 128-byte-swizzled [64][64] panels. HS 256
 * (Gemma 3) runs on the wgmma kernels only: the forward at two blocks per SM with one V buffer,
 * the backward at one, its dK,dV block as two warpgroups that each own 128 of the 256 columns
 * (attention_backward.cuh says why).
 * Math: S = scale·q·kᵀ (the caller's scale: 1/√HS for GPT-2, Llama, Qwen), causal (key ≤ query)
 *   and within the window when there is one, P = softmax(S), out = P·v.
 *   The kernels work in base 2: s2 = S·log2(e), P = exp2(s2 − lse2), and lse stores
 *   lse2 = max + log2(Σ exp2(s2 − max)) per query row: the one statistic the backward needs.
 *
 * Forward: grid (⌈T/64⌉, B·NH), 4 warps; a block owns 64 query rows (16 per warp, Q fragments in
 *   registers; wgmma reads them from shared memory), loops over 64-key tiles up to the diagonal
 *   (K, V double-buffered through cp.async; the wgmma kernel, HS 256, keeps one buffer of each,
 *   which fits a second block per SM, and issues S of the next tile behind P·V of this one),
 *   online softmax in registers; no T×T tensor ever exists. Heaviest (last) query tiles start
 *   first. On Hopper at HS 64 and 128 the forward is attention_forward_tma.cuh's instead: blocks of
 *   128 rows as two warpgroups that take turns on the tensor cores, K and V tiles of 128 keys
 *   streamed by the copy engine, the same softmax and masks.
 * Backward (deterministic, no atomics): D = rowsum(dout ∘ out) first; then
 *   dK,dV kernel: a block owns 64 keys of one key/value head (16 per warp), loops over the query
 *     heads of its group and, for each, over the query tiles that see its keys (from the diagonal
 *     on, up to the window's end), recomputes Pᵀ = exp2(K·Qᵀ·c − lse), dV += Pᵀ·dO, dPᵀ = V·dOᵀ,
 *     dSᵀ = Pᵀ∘(dPᵀ − D), dK += dSᵀ·Q;
 *   dQ kernel: a block owns 64 queries, loops over the key tiles they see (up to the diagonal, from
 *     the window's start), recomputes P and dP, dQ += dS·K. P is recomputed twice (7 products
 *     instead of FA2's 5) in exchange for no atomics.
 *   On Hopper at HS 64 and 128 one kernel does both (attention_backward_tma.cuh): blocks of 128 keys
 *   as two warpgroups of 64, query tiles (128 rows at HS 64, 64 at 128) streamed by the copy engine, the same masks and
 *   arithmetic, and dQ += dS·K in the same step (5 products), its shares summed over key blocks in
 *   fp32 in the key blocks' order, which a count per query tile enforces: still no atomics. The
 *   block on a query tile's diagonal, the last to add to it, stores the tile's dQ.
 * Sliding window W > 0: query i sees keys i − W < j <= i (attention_mask.cuh); every loop is bounded
 *   by it, so a windowed layer's work grows with T·W. Documents (pos): query i sees keys from
 *   i − pos[i] on, its own document's; the loops are bounded by the documents too.
 * FLOPs (causal, ≈ half of T²): forward 2·B·NH·T²·HS (two products over T²/2 pairs); backward
 *   ≈ 7/2 of that (5/2 in the Hopper kernel). Bytes: forward reads qkv once per query tile (K, V
 *   re-read ⌈T/64⌉/2 times from L2), writes out and lse; compute bound for T ≳ 256.
 *
 * Fragment layouts used below (PTX ISA, mma.m16n8k16 .bf16): with g = lane/4, t = lane%4,
 *   A (16×16, row): a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
 *   B (16×8, col):  b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g)
 *   C (16×8):       c0,c1 (g, 2t..2t+1), c2,c3 (g+8, 2t..2t+1)
 * ldmatrix.x4 gives lane the row lane/4, columns 2·(lane%4).. of each of its four 8×8 matrices
 * (the transposed element with .trans), so a C fragment pair of adjacent n-tiles is exactly an A
 * fragment: this is how P and dS go from accumulators straight into the next product.
 *
 * The kernels live in headers by role, compiled in this one file with the launchers below:
 * attention_tiles.cuh (block constants, loads into shared memory), attention_mma.cuh (mma.sync and
 * wgmma products), attention_mask.cuh, attention_store.cuh (results from registers),
 * attention_forward.cuh, attention_forward_tma.cuh, attention_backward.cuh and
 * attention_backward_tma.cuh (the kernels). */
#include <math.h>

#include <algorithm>

#include "kernels/attention_forward.cuh"
#include "kernels/attention_forward_tma.cuh"
#include "kernels/attention_backward.cuh"
#include "kernels/attention_backward_tma.cuh"
#include "kernels/kernels.h"

/* ------------------------------------------------------------------------------------------ */
static AttMask att_mask(const AttentionShape *s) {
    return AttMask{s->window, s->T, s->pos};
}

static void check_shape(const AttentionShape *s) {
    if (s->HS != 64 && s->HS != 128 && s->HS != 256) {
        fprintf(stderr, "error: CUDA attention supports head sizes 64, 128 and 256, got %d (change the head size)\n",
                s->HS);
        exit(1);
    }
    if (s->NH <= 0 || s->NKV <= 0 || s->NH % s->NKV != 0) {
        fprintf(stderr, "error: attention needs query heads a multiple of key/value heads, got NH=%d NKV=%d "
                        "(change the heads or the KV heads)\n", s->NH, s->NKV);
        exit(1);
    }
    if (s->B < 1 || s->T < 1 || (long long)s->B * s->NH > 65535) { /* B·NH is the grid's y dimension */
        fprintf(stderr, "error: attention needs B >= 1, T >= 1 and B*NH <= 65535, got B=%d T=%d NH=%d "
                        "(lower the batch size)\n", s->B, s->T, s->NH);
        exit(1);
    }
    if (!(s->scale > 0.0f) || !isfinite(s->scale)) {
        fprintf(stderr, "error: attention needs a finite positive softmax scale, got %g\n", (double)s->scale);
        exit(1);
    }
    if (s->window < 0) {
        fprintf(stderr, "error: attention needs a sliding window >= 0 (0: none), got %d\n", s->window);
        exit(1);
    }
}

template <int HS>
static void launch_forward(bf16 *out, float *lse, const bf16 *qkv, const bf16 *vsrc, const AttentionShape *s,
                           cudaStream_t stream) {
    size_t smem = (size_t)5 * ATT_TILE * (HS + 8) * sizeof(bf16);
    static bool attr_set = false; /* once per instantiation */
    if (!attr_set) {
        CUDA_CHECK(cudaFuncSetAttribute(attention_forward_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
        attr_set = true;
    }
    dim3 grid(ceil_div(s->T, ATT_TILE), s->B * s->NH);
    attention_forward_kernel<HS><<<grid, ATT_THREADS, smem, stream>>>(out, lse, qkv, vsrc, s->T, s->NH, s->NKV,
                                                                      att_mask(s), LOG2E * s->scale);
    CUDA_CHECK(cudaGetLastError());
}

static int use_wgmma = 1;
extern "C" void attention_use_wgmma(int on) {
    use_wgmma = on;
}

template <int HS>
static void launch_forward_wgmma(bf16 *out, float *lse, const bf16 *qkv, const bf16 *vsrc, const AttentionShape *s,
                                 cudaStream_t stream) {
    const size_t smem = 3 * ATT_TILE * HS * sizeof(bf16) + 1024; /* Q, K, V; + alignment to 1024 bytes */
    static bool attr_set = false; /* once per instantiation */
    if (!attr_set) {
        CUDA_CHECK(cudaFuncSetAttribute(attention_forward_wgmma_kernel<HS>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attr_set = true;
    }
    dim3 grid(ceil_div(s->T, ATT_TILE), s->B * s->NH);
    attention_forward_wgmma_kernel<HS><<<grid, ATT_THREADS, smem, stream>>>(out, lse, qkv, vsrc, s->T, s->NH, s->NKV,
                                                                            att_mask(s), LOG2E * s->scale);
    CUDA_CHECK(cudaGetLastError());
}

/* The persistent forward's work queues: one per (device, stream), zero between launches. Launches on
 * one stream run one after another and may share a queue; launches on two streams may overlap. The
 * table assumes one host thread launching (as each trainer process has) and no CUDA graph capture,
 * whose replays could put one queue on two streams. */
#define ATT_TMA_MAX_STREAMS 64
__device__ AttTmaQueue att_tma_forward_queues[ATT_TMA_MAX_STREAMS];

static AttTmaQueue *forward_queue(int device, cudaStream_t stream) {
    static struct {
        int device;
        cudaStream_t stream;
        AttTmaQueue *queue;
    } known[ATT_TMA_MAX_STREAMS * 8];
    static int nknown;
    int on_device = 0;
    for (int i = 0; i < nknown; i++) {
        if (known[i].device != device) continue;
        if (known[i].stream == stream) return known[i].queue;
        on_device++;
    }
    if (on_device == ATT_TMA_MAX_STREAMS || nknown == ATT_TMA_MAX_STREAMS * 8) {
        fprintf(stderr, "error: the attention forward ran on more than %d streams (%d of one device): its work "
                        "queues are full; issue it on fewer streams\n", nknown, ATT_TMA_MAX_STREAMS);
        exit(1);
    }
    AttTmaQueue *queues;
    CUDA_CHECK(cudaGetSymbolAddress((void **)&queues, att_tma_forward_queues));
    known[nknown].device = device, known[nknown].stream = stream, known[nknown].queue = queues + on_device;
    return known[nknown++].queue;
}

/* The copy engine reads qkv as [B][T][(NH+2·NKV)·HS] in boxes of 128 tokens × 64 columns, the value
 * heads through a second map of the same shape over vsrc: rows past T (of the last block of each
 * sequence) arrive as zeros, never as the next sequence's rows. */
template <int HS>
static void launch_forward_tma(bf16 *out, float *lse, const bf16 *qkv, const bf16 *vsrc, const AttentionShape *s,
                               cudaStream_t stream) {
    const size_t smem = att_tma_smem_bytes(HS);
    static bool attr_set = false; /* once per instantiation */
    if (!attr_set) {
        CUDA_CHECK(cudaFuncSetAttribute(attention_forward_tma_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
        attr_set = true;
    }
    const size_t C3 = packed_qkv_width(s->NH, s->NKV, HS);
    const cuuint64_t dims[3] = {C3, (cuuint64_t)s->T, (cuuint64_t)s->B};
    const cuuint64_t strides[2] = {C3 * sizeof(bf16), (cuuint64_t)s->T * C3 * sizeof(bf16)};
    const cuuint32_t box[3] = {64, ATT_TMA_BM, 1};
    const CUtensorMap tm = tma_tensor_map_bf16(qkv, 3, dims, strides, box, "attention forward");
    const CUtensorMap tm_v = tma_tensor_map_bf16(vsrc, 3, dims, strides, box, "attention forward");
    /* A section: the query heads whose key/value heads (2·T·HS bf16 each) fit in its share of L2. */
    const int group = s->NH / s->NKV;
    const size_t kv_head_bytes = (size_t)2 * s->T * HS * sizeof(bf16);
    const int section = (int)std::max<size_t>(1, ATT_TMA_SECTION_BYTES / kv_head_bytes) * group;
    const int nqb = ceil_div(s->T, ATT_TMA_BM), nitems = nqb * s->B * s->NH;
    int device;
    CUDA_CHECK(cudaGetDevice(&device));
    attention_forward_tma_kernel<HS><<<std::min(nitems, device_sms()), ATT_TMA_THREADS, smem, stream>>>(
        tm, tm_v, out, lse, s->T, s->NH, s->NKV, att_mask(s), LOG2E * s->scale, nqb, section, nitems,
        forward_queue(device, stream));
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void attention_forward(kbf16 *out, float *lse, const kbf16 *qkv, const kbf16 *v, const AttentionShape *s,
                                  cudaStream_t stream) {
    check_shape(s);
    const bf16 *vsrc = v ? v : qkv;
    if (s->HS == 256)
        launch_forward_wgmma<256>(out, lse, qkv, vsrc, s, stream);
    else if (s->HS == 64 && use_wgmma)
        launch_forward_tma<64>(out, lse, qkv, vsrc, s, stream);
    else if (use_wgmma)
        launch_forward_tma<128>(out, lse, qkv, vsrc, s, stream);
    else if (s->HS == 64)
        launch_forward<64>(out, lse, qkv, vsrc, s, stream);
    else
        launch_forward<128>(out, lse, qkv, vsrc, s, stream);
}

/* Scratch: D = rowsum(dout·out) [B·NH·T], the qkv bias partials [B·tiles][(NH+2·NKV)·HS], and for
 * the Hopper backward (HS 64, 128) dQ's fp32 sums [B·NH·qtiles][BQ·HS] over its query tiles of BQ
 * rows (att_bwd_tma_query_rows), their counts [B·NH·qtiles] and the blocks' start tickets (one
 * counter). */
static size_t dsum_floats(const AttentionShape *s) {
    return (size_t)round_up((int64_t)s->B * s->NH * s->T, 64); /* the partials start 256-byte aligned */
}
static size_t bias_part_floats(const AttentionShape *s) {
    return (size_t)s->B * ceil_div(s->T, ATT_TILE) * packed_qkv_width(s->NH, s->NKV, s->HS);
}
static size_t dq_tiles(const AttentionShape *s) {
    return (size_t)s->B * s->NH * ceil_div(s->T, att_bwd_tma_query_rows(s->HS));
}
static size_t dq_tile_floats(const AttentionShape *s) {
    return (size_t)att_bwd_tma_query_rows(s->HS) * s->HS;
}
static bool backward_is_tma(const AttentionShape *s) {
    return s->HS != 256;
}

extern "C" size_t attention_backward_scratch_bytes(const AttentionShape *s) {
    size_t floats = dsum_floats(s) + bias_part_floats(s);
    if (backward_is_tma(s)) floats += dq_tiles(s) * (dq_tile_floats(s) + 1) + 1; /* + the start tickets */
    return floats * sizeof(float);
}

/* dK,dV blocks are one per (key tile, batch, key/value head); dQ blocks one per (query tile, batch,
 * query head). Both write their columns of the same row of bias partials, indexed by tile. */
template <int HS, int BQ>
static void launch_backward(bf16 *dqkv, float *bias_part, float *D, const bf16 *dout, const bf16 *qkv,
                            const bf16 *vsrc, const float *lse, const AttentionShape *s, cudaStream_t stream) {
    size_t smem_dq = (size_t)6 * ATT_TILE * (HS + 8) * sizeof(bf16);
    size_t smem_kv = (size_t)(2 * ATT_TILE + 4 * BQ) * (HS + 8) * sizeof(bf16) + 4 * BQ * sizeof(float);
    static bool attr_set = false;
    if (!attr_set) {
        CUDA_CHECK(cudaFuncSetAttribute(attention_backward_dq_kernel<HS>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_dq));
        CUDA_CHECK(cudaFuncSetAttribute(attention_backward_dkdv_kernel<HS, BQ>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_kv));
        attr_set = true;
    }
    float scale = s->scale, sl2 = LOG2E * scale;
    int tiles = ceil_div(s->T, ATT_TILE);
    attention_backward_dkdv_kernel<HS, BQ><<<dim3(tiles, s->B * s->NKV), ATT_THREADS, smem_kv, stream>>>(
        dqkv, bias_part, qkv, vsrc, dout, lse, D, s->T, s->NH, s->NKV, att_mask(s), sl2, scale);
    CUDA_CHECK(cudaGetLastError());
    attention_backward_dq_kernel<HS><<<dim3(tiles, s->B * s->NH), ATT_THREADS, smem_dq, stream>>>(
        dqkv, bias_part, qkv, vsrc, dout, lse, D, s->T, s->NH, s->NKV, att_mask(s), sl2, scale);
    CUDA_CHECK(cudaGetLastError());
}

/* Head size 256 (Gemma 3): the 64-row wgmma kernels, dK,dV as two warpgroups. */
static void launch_backward_wgmma256(bf16 *dqkv, float *bias_part, float *D, const bf16 *dout, const bf16 *qkv,
                                     const bf16 *vsrc, const float *lse, const AttentionShape *s,
                                     cudaStream_t stream) {
    constexpr int HS = 256;
    const size_t smem = 6 * ATT_TILE * HS * sizeof(bf16) + 1024; /* + alignment to 1024 bytes */
    /* The dK,dV kernel's two warpgroups also hand over 32 words a thread. */
    const size_t smem_kv = smem + (size_t)32 * ATT_BWD256_THREADS / 2 * sizeof(uint32_t);
    static bool attr_set = false;
    if (!attr_set) {
        CUDA_CHECK(cudaFuncSetAttribute(attention_backward_dq_wgmma_kernel<HS>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        CUDA_CHECK(cudaFuncSetAttribute(attention_backward_dkdv_wgmma256_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_kv));
        attr_set = true;
    }
    float scale = s->scale, sl2 = LOG2E * scale;
    int tiles = ceil_div(s->T, ATT_TILE);
    attention_backward_dkdv_wgmma256_kernel<<<dim3(tiles, s->B * s->NKV), ATT_BWD256_THREADS, smem_kv, stream>>>(
        dqkv, bias_part, qkv, vsrc, dout, lse, D, s->T, s->NH, s->NKV, att_mask(s), sl2, scale);
    CUDA_CHECK(cudaGetLastError());
    attention_backward_dq_wgmma_kernel<HS><<<dim3(tiles, s->B * s->NH), ATT_THREADS, smem, stream>>>(
        dqkv, bias_part, qkv, vsrc, dout, lse, D, s->T, s->NH, s->NKV, att_mask(s), sl2, scale);
    CUDA_CHECK(cudaGetLastError());
}

/* The kernel streams query tiles of Q and dO (128 rows at HS 64, 64 at 128) in boxes of 64 rows and
 * reads its block's K and V in boxes of 128; rows past T arrive as zeros. A section is the key/value heads whose query heads' Q
 * and dO (2·T·HS bf16 each) fit in L2's share. dQ's sums over key blocks go through dq_acc, in an
 * order the counts enforce (zeroed here); the block on a query tile's diagonal, its last key block,
 * turns the tile's sums into bf16. */
template <int HS>
static void launch_backward_tma(bf16 *dqkv, float *bias_part, float *dq_acc, unsigned *dq_count, const float *D,
                                const bf16 *dout, const bf16 *qkv, const bf16 *vsrc, const float *lse,
                                const AttentionShape *s, cudaStream_t stream) {
    const size_t smem = att_bwd_tma_smem_bytes(HS);
    static bool attr_set = false; /* once per instantiation */
    if (!attr_set) {
        CUDA_CHECK(cudaFuncSetAttribute(attention_backward_tma_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
        attr_set = true;
    }
    const size_t C3 = packed_qkv_width(s->NH, s->NKV, HS), C = (size_t)s->NH * HS;
    const cuuint64_t qkv_dims[3] = {C3, (cuuint64_t)s->T, (cuuint64_t)s->B};
    const cuuint64_t qkv_strides[2] = {C3 * sizeof(bf16), (cuuint64_t)s->T * C3 * sizeof(bf16)};
    const cuuint64_t do_dims[3] = {C, (cuuint64_t)s->T, (cuuint64_t)s->B};
    const cuuint64_t do_strides[2] = {C * sizeof(bf16), (cuuint64_t)s->T * C * sizeof(bf16)};
    const cuuint32_t box128[3] = {64, ATT_BWD_TMA_ROWS, 1}, box64[3] = {64, ATT_TILE, 1};
    const char *who = "attention backward";
    const CUtensorMap qkv128 = tma_tensor_map_bf16(qkv, 3, qkv_dims, qkv_strides, box128, who);
    const CUtensorMap v128 = tma_tensor_map_bf16(vsrc, 3, qkv_dims, qkv_strides, box128, who);
    const CUtensorMap qkv64 = tma_tensor_map_bf16(qkv, 3, qkv_dims, qkv_strides, box64, who);
    const CUtensorMap do64 = tma_tensor_map_bf16(dout, 3, do_dims, do_strides, box64, who);
    const int group = s->NH / s->NKV, nblk = ceil_div(s->T, ATT_BWD_TMA_ROWS);
    const size_t head_bytes = (size_t)2 * s->T * HS * sizeof(bf16);
    const int kv_section = (int)std::max<size_t>(1, ATT_TMA_SECTION_BYTES / (head_bytes * group));
    const float sl2 = LOG2E * s->scale;
    unsigned *started = dq_count + dq_tiles(s);
    CUDA_CHECK(cudaMemsetAsync(dq_count, 0, (dq_tiles(s) + 1) * sizeof(unsigned), stream));
    attention_backward_tma_kernel<HS><<<nblk * s->B * s->NKV, ATT_TMA_THREADS, smem, stream>>>(
        qkv128, v128, qkv64, do64, dqkv, bias_part, dq_acc, dq_count, started, lse, D, s->T, s->NH, s->NKV, att_mask(s), sl2,
        s->scale, nblk, kv_section);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void attention_backward(kbf16 *dqkv, float *dbias_qkv, void *scratch, const kbf16 *dout,
                                   const kbf16 *qkv, const kbf16 *v, const kbf16 *out, const float *lse,
                                   const AttentionShape *s, cudaStream_t stream) {
    check_shape(s);
    const bf16 *vsrc = v ? v : qkv;
    const int T = s->T, NH = s->NH, HS = s->HS;
    float *D = (float *)scratch;
    float *bias_part = dbias_qkv ? D + dsum_floats(s) : NULL;
    float *dq_acc = D + dsum_floats(s) + bias_part_floats(s);
    unsigned *dq_count = (unsigned *)(dq_acc + (backward_is_tma(s) ? dq_tiles(s) * dq_tile_floats(s) : 0));
    size_t rows = (size_t)s->B * T * NH, threads = rows * (HS / 8);
    if (HS == 64)
        attention_backward_dsum_kernel<64><<<ceil_div(threads, 256), 256, 0, stream>>>(D, dout, out, T, NH, rows);
    else if (HS == 128)
        attention_backward_dsum_kernel<128><<<ceil_div(threads, 256), 256, 0, stream>>>(D, dout, out, T, NH, rows);
    else
        attention_backward_dsum_kernel<256><<<ceil_div(threads, 256), 256, 0, stream>>>(D, dout, out, T, NH, rows);
    CUDA_CHECK(cudaGetLastError());
    if (HS == 256)
        launch_backward_wgmma256(dqkv, bias_part, D, dout, qkv, vsrc, lse, s, stream);
    else if (HS == 64 && use_wgmma)
        launch_backward_tma<64>(dqkv, bias_part, dq_acc, dq_count, D, dout, qkv, vsrc, lse, s, stream);
    else if (use_wgmma)
        launch_backward_tma<128>(dqkv, bias_part, dq_acc, dq_count, D, dout, qkv, vsrc, lse, s, stream);
    else if (HS == 64)
        launch_backward<64, ATT_BQ64>(dqkv, bias_part, D, dout, qkv, vsrc, lse, s, stream);
    else
        launch_backward<128, 32>(dqkv, bias_part, D, dout, qkv, vsrc, lse, s, stream);
    if (dbias_qkv) {
        int tiles = ceil_div(T, ATT_TILE);
        size_t width = packed_qkv_width(NH, s->NKV, HS);
        add_partial_sums(PartialSumOutputs{{dbias_qkv, NULL, NULL}}, 1, bias_part, s->B * tiles, width, (int)width,
                         stream);
    }
}
