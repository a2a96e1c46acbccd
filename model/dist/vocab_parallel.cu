/* model/dist/vocab_parallel.cu - the vocabulary-parallel output layer (model/dist/vocab_parallel.h):
 * the slice's buffers, the step's collectives around kernels/output_layer.h's slice layer and (a tied
 * head) kernels/encoder.cu's slice embedding, and the slice's share of the gradient norm, AdamW and
 * checkpoints.
 * Shapes: R ranks, N rows per rank, NT = R·N, C, Vp, Vs = Vp/R. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/cuda_check.h"
#include "kernels/output_layer.h"
#include "model/cuda/host_transfer.h"
#include "model/dist/vocab_parallel.h"

extern "C" {
#include "model/cpu/vocab_parallel_cpu.h" /* vocab_slice: the split both implementations share */
}

struct VocabParallel {
    const Dist *dist;
    int R, rank, C;
    int tied;                  /* the slice is also the token embedding's rows */
    float embed_scale;         /* tied: the embedding's scale (gpt_embed_scale: Gemma's rounded √C, else 1) */
    int pad_token;             /* tied: the padding_idx row, which gets no gradient (-1: none) */
    size_t N, NT;
    VocabSlice slice;
    size_t elems;              /* Vs·C: every slice buffer's values */
    size_t head_offset;        /* the head row's offset in the table's flat layout */
    HostStaging *staging;      /* the state's copies to and from the host (host_transfer.h), made at the first */
    kbf16 *W;                  /* [Vs, C] the slice's bf16 weights */
    float *master, *grad, *m, *v; /* master, m, v: NULL under bf16 state */
    kbf16 *m_bf16, *v_bf16;       /* bf16 state's moments (else NULL) */
    int state_bf16;
    kbf16 *H_all;              /* [NT, C] every rank's hidden states, in rank order; tied, also the
                                * embedding's rows of every rank before the reduce-scatter and every
                                * rank's d(embedding) (the output layer no longer reads H then): the
                                * three uses follow each other on one stream, in this order */
    int *targets_all;          /* [NT] */
    int *inputs_all;           /* tied: [NT] every rank's tokens, from the embedding to its backward */
    void *embed_scratch;       /* tied: the slice embedding backward's */
    float *stats;              /* [3, NT] this slice's statistics */
    float *stats_all;          /* [R, 3, NT] every slice's, in rank order */
    float *lse;                /* [NT] combined */
    float *dH_all;             /* [NT, C] this slice's part of every row's dH; also the state gathers' staging */
    float *dH;                 /* [N, C] this rank's rows, summed over the slices */
    float *host_lse;           /* [NT] and host_targets [NT]: the mean lse's host copies */
    int *host_targets;
    OutputLayer *out;
    AdamWPlan *adamw;
    size_t bytes;
};

/* Bytes of one slice value's weight, gradient and AdamW state. */
static size_t slice_value_bytes(OptimizerState state) {
    return sizeof(kbf16) + sizeof(float) + (state == OPTIMIZER_STATE_BF16 ? 2 * sizeof(kbf16) : 3 * sizeof(float));
}

size_t vocab_parallel_bytes(const ParamTable *t, int world, int N, OptimizerState state) {
    char err[ERR_LEN];
    if (!vocab_parallel_check(t, world, N, err)) return 0;
    const size_t C = (size_t)t->cfg.dim, NT = (size_t)world * N;
    const size_t Vs = (size_t)t->cfg.padded_vocab_size / (size_t)world;
    /* rank 0's slice stands for every rank's: the streaming path's workspace does not grow with V */
    const VocabSlice s0 = vocab_slice(t->cfg.vocab_size, t->cfg.padded_vocab_size, world, 0);
    const size_t embed =
        t->cfg.untied_head ? 0 : NT * sizeof(int) + encoder_slice_backward_scratch_bytes((int)NT, (int)Vs);
    return Vs * C * slice_value_bytes(state) + NT * C * (sizeof(kbf16) + sizeof(float)) +
           (size_t)N * C * sizeof(float) + NT * (sizeof(int) + (4 + 3 * (size_t)world) * sizeof(float)) +
           output_layer_workspace_bytes(OUTPUT_FUSED, (int64_t)NT, s0.real, (int)C, 0) + embed;
}

static void *device_alloc(size_t bytes, size_t *total) {
    void *p = NULL;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    *total += bytes;
    return p;
}

VocabParallel *vocab_parallel_create(const ParamTable *t, const Dist *d, int N, OptimizerState state, char *err) {
    const int world = d ? d->world : 1;
    if (!vocab_parallel_check(t, world, N, err)) return NULL;
    VocabParallel *vp = (VocabParallel *)calloc(1, sizeof *vp);
    if (!vp) {
        snprintf(err, ERR_LEN, "out of host memory");
        return NULL;
    }
    const ParamInfo *head = param_whole(t, head_role(&t->cfg));
    vp->dist = d;
    vp->tied = !t->cfg.untied_head;
    vp->embed_scale = gpt_embed_scale(&t->cfg);
    vp->pad_token = gpt_embed_pad_token(&t->cfg);
    vp->R = world, vp->rank = d ? d->rank : 0, vp->C = t->cfg.dim;
    vp->N = (size_t)N, vp->NT = (size_t)world * N;
    vp->slice = vocab_slice(t->cfg.vocab_size, t->cfg.padded_vocab_size, world, vp->rank);
    vp->elems = (size_t)vp->slice.rows * vp->C;
    vp->head_offset = head->offset;
    const size_t C = (size_t)vp->C, NT = vp->NT;
    size_t *b = &vp->bytes;
    vp->state_bf16 = state == OPTIMIZER_STATE_BF16;
    vp->W = (kbf16 *)device_alloc(vp->elems * sizeof(kbf16), b);
    vp->grad = (float *)device_alloc(vp->elems * sizeof(float), b);
    if (vp->state_bf16) {
        vp->m_bf16 = (kbf16 *)device_alloc(vp->elems * sizeof(kbf16), b);
        vp->v_bf16 = (kbf16 *)device_alloc(vp->elems * sizeof(kbf16), b);
        CUDA_CHECK(cudaMemset(vp->m_bf16, 0, vp->elems * sizeof(kbf16)));
        CUDA_CHECK(cudaMemset(vp->v_bf16, 0, vp->elems * sizeof(kbf16)));
    } else {
        vp->master = (float *)device_alloc(vp->elems * sizeof(float), b);
        vp->m = (float *)device_alloc(vp->elems * sizeof(float), b);
        vp->v = (float *)device_alloc(vp->elems * sizeof(float), b);
        CUDA_CHECK(cudaMemset(vp->master, 0, vp->elems * sizeof(float)));
        CUDA_CHECK(cudaMemset(vp->m, 0, vp->elems * sizeof(float)));
        CUDA_CHECK(cudaMemset(vp->v, 0, vp->elems * sizeof(float)));
    }
    vp->H_all = (kbf16 *)device_alloc(NT * C * sizeof(kbf16), b);
    vp->targets_all = (int *)device_alloc(NT * sizeof(int), b);
    vp->stats = (float *)device_alloc(3 * NT * sizeof(float), b);
    vp->stats_all = (float *)device_alloc(3 * NT * (size_t)world * sizeof(float), b);
    vp->lse = (float *)device_alloc(NT * sizeof(float), b);
    vp->dH_all = (float *)device_alloc(NT * C * sizeof(float), b);
    vp->dH = (float *)device_alloc(vp->N * C * sizeof(float), b);
    if (vp->tied) {
        vp->inputs_all = (int *)device_alloc(NT * sizeof(int), b);
        vp->embed_scratch = device_alloc(encoder_slice_backward_scratch_bytes((int)NT, vp->slice.rows), b);
    }
    CUDA_CHECK(cudaMemset(vp->W, 0, vp->elems * sizeof(kbf16)));
    CUDA_CHECK(cudaMemset(vp->grad, 0, vp->elems * sizeof(float)));
    vp->host_lse = (float *)malloc(NT * sizeof(float));
    vp->host_targets = (int *)malloc(NT * sizeof(int));
    /* the slice's real words only: its padding rows are never read (their gradient stays zero) */
    vp->out = output_layer_create(OUTPUT_FUSED, (int64_t)NT, vp->slice.real, vp->C, 0);
    if (vp->out) vp->bytes += output_layer_workspace_bytes(OUTPUT_FUSED, (int64_t)NT, vp->slice.real, vp->C, 0);
    const size_t offset = 0, numel = vp->elems;
    const int decay = head->weight_decay;
    vp->adamw = adamw_plan_create(&offset, &numel, &decay, 1);
    if (!vp->host_lse || !vp->host_targets || !vp->out || !vp->adamw) {
        snprintf(err, ERR_LEN, "cannot create the vocabulary-parallel output layer (out of memory, or see the message "
                               "above)");
        vocab_parallel_free(vp);
        return NULL;
    }
    return vp;
}

void vocab_parallel_free(VocabParallel *vp) {
    if (!vp) return;
    if (vp->adamw) adamw_plan_free(vp->adamw);
    if (vp->out) output_layer_destroy(vp->out);
    host_staging_free(vp->staging);
    free(vp->host_targets);
    free(vp->host_lse);
    CUDA_CHECK(cudaFree(vp->embed_scratch));
    CUDA_CHECK(cudaFree(vp->inputs_all));
    CUDA_CHECK(cudaFree(vp->dH));
    CUDA_CHECK(cudaFree(vp->dH_all));
    CUDA_CHECK(cudaFree(vp->lse));
    CUDA_CHECK(cudaFree(vp->stats_all));
    CUDA_CHECK(cudaFree(vp->stats));
    CUDA_CHECK(cudaFree(vp->targets_all));
    CUDA_CHECK(cudaFree(vp->H_all));
    CUDA_CHECK(cudaFree(vp->v_bf16));
    CUDA_CHECK(cudaFree(vp->m_bf16));
    CUDA_CHECK(cudaFree(vp->v));
    CUDA_CHECK(cudaFree(vp->m));
    CUDA_CHECK(cudaFree(vp->grad));
    CUDA_CHECK(cudaFree(vp->master));
    CUDA_CHECK(cudaFree(vp->W));
    free(vp);
}

/* The collectives, or in a world of one (no communicator) the copy each one amounts to. */
static void all_gather(const VocabParallel *vp, const void *send, void *recv, size_t count, DistType type,
                       cudaStream_t s) {
    if (vp->dist && vp->dist->nccl)
        dist_allgather(vp->dist, send, recv, count, type, s);
    else if (send != recv)
        CUDA_CHECK(cudaMemcpyAsync(recv, send, count * dist_type_bytes(type), cudaMemcpyDeviceToDevice, s));
}

static void reduce_scatter(const VocabParallel *vp, const void *send, void *recv, size_t count, DistType type,
                           cudaStream_t s) {
    if (vp->dist && vp->dist->nccl)
        dist_reduce_scatter_sum(vp->dist, send, recv, count, type, s);
    else
        CUDA_CHECK(cudaMemcpyAsync(recv, send, count * dist_type_bytes(type), cudaMemcpyDeviceToDevice, s));
}

static void check_launch(int rc, const char *what) {
    if (rc == 0) return;
    fprintf(stderr, "error: the vocabulary-parallel output layer rejected its arguments in %s\n", what);
    exit(1);
}

void vocab_parallel_output(VocabParallel *vp, const kbf16 *H, const int *targets, float loss_scale, kbf16 *dH,
                           float *loss, cudaStream_t s) {
    const size_t C = (size_t)vp->C, N = vp->N, NT = vp->NT;
    all_gather(vp, H, vp->H_all, N * C, DIST_BFLOAT16, s);
    all_gather(vp, targets, vp->targets_all, N, DIST_INT32, s);
    OutputSliceArgs a;
    memset(&a, 0, sizeof a);
    a.H = vp->H_all;
    a.W = vp->W;
    a.targets = vp->targets_all;
    a.N = (int64_t)NT;
    a.v0 = vp->slice.begin;
    a.reduction = OUTPUT_REDUCE_MEAN;
    a.grad_scale = loss_scale;
    a.stats = vp->stats;
    check_launch(output_slice_forward(vp->out, &a, s), "output_slice_forward");
    all_gather(vp, vp->stats, vp->stats_all, 3 * NT, DIST_FLOAT32, s);
    check_launch(output_slices_combine(vp->out, &a, vp->stats_all, vp->R, vp->lse, loss, s), "output_slices_combine");
    if (!dH) return;
    a.lse = vp->lse;
    a.dH = vp->dH_all;
    a.dW = vp->grad;
    check_launch(output_slice_backward(vp->out, &a, s), "output_slice_backward");
    reduce_scatter(vp, vp->dH_all, vp->dH, N * C, DIST_FLOAT32, s);
    convert_fp32_to_bf16(dH, vp->dH, N * C, s);
}

int vocab_parallel_tied(const VocabParallel *vp) {
    return vp && vp->tied;
}

void vocab_parallel_embed(VocabParallel *vp, kbf16 *out, const int *inputs, const kbf16 *wpe, int T, cudaStream_t s) {
    const size_t C = (size_t)vp->C, N = vp->N, NT = vp->NT;
    all_gather(vp, inputs, vp->inputs_all, N, DIST_INT32, s);
    encoder_slice_forward(vp->H_all, vp->inputs_all, vp->W, wpe, vp->embed_scale, vp->slice.begin, vp->slice.rows,
                          (int)NT, T, (int)C, s);
    /* one rank's row and the others' zeros: the sum is that row, in bf16 as in fp32 */
    reduce_scatter(vp, vp->H_all, out, N * C, DIST_BFLOAT16, s);
}

void vocab_parallel_embed_backward(VocabParallel *vp, const kbf16 *dout, cudaStream_t s) {
    const size_t C = (size_t)vp->C, N = vp->N, NT = vp->NT;
    all_gather(vp, dout, vp->H_all, N * C, DIST_BFLOAT16, s);
    encoder_slice_backward(vp->grad, vp->embed_scratch, vp->H_all, vp->inputs_all, vp->embed_scale, vp->pad_token,
                           vp->slice.begin, vp->slice.rows, (int)NT, (int)C, s);
}

float vocab_parallel_mean_lse(VocabParallel *vp, cudaStream_t s) {
    CUDA_CHECK(cudaMemcpyAsync(vp->host_lse, vp->lse, vp->NT * sizeof(float), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaMemcpyAsync(vp->host_targets, vp->targets_all, vp->NT * sizeof(int), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    double sum = 0.0;
    size_t valid = 0;
    for (size_t i = 0; i < vp->NT; i++)
        if (vp->host_targets[i] >= 0) sum += vp->host_lse[i], valid++;
    return valid ? (float)(sum / (double)valid) : 0.0f;
}

void vocab_parallel_zero_grad(VocabParallel *vp, cudaStream_t s) {
    CUDA_CHECK(cudaMemsetAsync(vp->grad, 0, vp->elems * sizeof(float), s));
}

double vocab_parallel_grad_sumsq(VocabParallel *vp, double *sumsq, void *scratch, cudaStream_t s) {
    global_sumsq(sumsq, scratch, vp->grad, vp->elems, s);
    if (vp->dist && vp->dist->nccl) dist_allreduce_sum(vp->dist, sumsq, 1, DIST_FLOAT64, s);
    double h = 0.0;
    CUDA_CHECK(cudaMemcpyAsync(&h, sumsq, sizeof h, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return h;
}

void vocab_parallel_adamw(VocabParallel *vp, const AdamWStep *st, cudaStream_t s) {
    if (vp->state_bf16) /* the random bits keyed by each value's index in the whole table, as on one GPU */
        adamw_update_bf16(vp->adamw, vp->W, vp->grad, vp->m_bf16, vp->v_bf16,
                          vp->head_offset + (size_t)vp->slice.begin * vp->C, st->lr, st->beta1, st->beta2, st->eps,
                          st->weight_decay, st->grad_scale, st->step, s);
    else
        adamw_update(vp->adamw, vp->master, vp->W, vp->grad, vp->m, vp->v, st->lr, st->beta1, st->beta2, st->eps,
                     st->weight_decay, st->grad_scale, st->step, s);
}

/* Every rank's slice of `from` into host [Vp, C] (NULL: the collective still runs), through dH_all
 * in pieces of at most N rows per rank: no memory beyond the step's. */
static void gather_to_host(VocabParallel *vp, const float *from, float *host, cudaStream_t s) {
    const size_t C = (size_t)vp->C, rows = (size_t)vp->slice.rows;
    for (size_t r0 = 0; r0 < rows; r0 += vp->N) {
        const size_t n = rows - r0 < vp->N ? rows - r0 : vp->N;
        all_gather(vp, from + r0 * C, vp->dH_all, n * C, DIST_FLOAT32, s);
        /* each returns once its rows are on the host: the next piece may then overwrite dH_all */
        for (int q = 0; host && q < vp->R; q++)
            copy_to_host(&vp->staging, host + ((size_t)q * rows + r0) * C, vp->dH_all + (size_t)q * n * C,
                         n * C * sizeof(float), s);
        CUDA_CHECK(cudaStreamSynchronize(s));
    }
}

void vocab_parallel_read(VocabParallel *vp, float *params, float *m, float *v, cudaStream_t s) {
    if (!vp->state_bf16) {
        gather_to_host(vp, vp->master, params ? params + vp->head_offset : NULL, s);
        gather_to_host(vp, vp->m, m ? m + vp->head_offset : NULL, s);
        gather_to_host(vp, vp->v, v ? v + vp->head_offset : NULL, s);
        return;
    }
    /* bf16 state: each widened into the slice's gradient, which the step no longer needs */
    const kbf16 *state[3] = {vp->W, vp->m_bf16, vp->v_bf16};
    float *host[3] = {params, m, v};
    for (int i = 0; i < 3; i++) {
        convert_bf16_to_fp32(vp->grad, state[i], vp->elems, s);
        gather_to_host(vp, vp->grad, host[i] ? host[i] + vp->head_offset : NULL, s);
    }
}

void vocab_parallel_read_grads(VocabParallel *vp, float *grads, cudaStream_t s) {
    gather_to_host(vp, vp->grad, grads + vp->head_offset, s);
}

void vocab_parallel_write(VocabParallel *vp, const float *params, const float *m, const float *v, cudaStream_t s) {
    const size_t first = vp->head_offset + (size_t)vp->slice.begin * vp->C, bytes = vp->elems * sizeof(float);
    if (!vp->state_bf16) {
        if (params) {
            copy_to_device(&vp->staging, vp->master, params + first, bytes, s);
            convert_fp32_to_bf16(vp->W, vp->master, vp->elems, s);
        }
        if (m) copy_to_device(&vp->staging, vp->m, m + first, bytes, s);
        if (v) copy_to_device(&vp->staging, vp->v, v + first, bytes, s);
    } else {
        /* bf16 state: through the slice's gradient (zeroed below), rounded to nearest */
        const float *host[3] = {params, m, v};
        kbf16 *state[3] = {vp->W, vp->m_bf16, vp->v_bf16};
        for (int i = 0; i < 3; i++) {
            if (!host[i]) continue;
            copy_to_device(&vp->staging, vp->grad, host[i] + first, bytes, s);
            convert_fp32_to_bf16(state[i], vp->grad, vp->elems, s);
        }
    }
    vocab_parallel_zero_grad(vp, s);
    CUDA_CHECK(cudaStreamSynchronize(s));
}

int vocab_parallel_memory_items(const VocabParallel *vp, MemoryItem *items) {
    const size_t slice = vp->elems * slice_value_bytes(vp->state_bf16 ? OPTIMIZER_STATE_BF16 : OPTIMIZER_STATE_FP32);
    items[0] = MemoryItem{vp->tied ? vp->state_bf16 ? "tied head slice, lm_head and token embedding (bf16, gradient, bf16 "
                                                      "AdamW m, v)"
                                                    : "tied head slice, lm_head and token embedding (bf16, fp32 "
                                                      "master, gradient, AdamW m, v)"
                                   : vp->state_bf16 ? "lm_head slice (bf16, gradient, bf16 AdamW m, v)"
                                                    : "lm_head slice (bf16, fp32 master, gradient, AdamW m, v)",
                          slice, 0};
    items[1] = MemoryItem{vp->tied ? "vocabulary-parallel buffers (gathered H, dH, statistics, tokens) and workspace"
                                   : "vocabulary-parallel buffers (gathered H, dH, statistics) and workspace",
                          vp->bytes - slice, 0};
    return 2;
}

void vocab_parallel_describe(const VocabParallel *vp, char *out, size_t n) {
    snprintf(out, n, "vocabulary-parallel fused streaming: %s rows [%d, %d) of %zu on this rank, %d ranks",
             vp->tied ? "tied head and token embedding" : "lm_head", vp->slice.begin, vp->slice.begin + vp->slice.rows,
             (size_t)vp->slice.rows * (size_t)vp->R, vp->R);
}
