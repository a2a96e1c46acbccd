/* model/cpu/vocab_parallel_cpu.c - the vocabulary-parallel output layer over simulated ranks: the
 * collectives, the per-rank steps (each takes one rank's data only) and the driver that calls them
 * in the order a multi-GPU version would. The design is at the top of vocab_parallel_cpu.h. */
#include "model/cpu/vocab_parallel_cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "model/cpu/output_layer_cpu.h"

VocabSlice vocab_slice(int V, int Vp, int R, int r) {
    int base = Vp / R, extra = Vp % R;
    VocabSlice s = {r * base + (r < extra ? r : extra), base + (r < extra), 0};
    int real = V - s.begin;
    s.real = real < 0 ? 0 : real > s.rows ? s.rows : real;
    return s;
}

/* ---- collectives ---- */

void vp_all_gather(int R, const void *const *send, const size_t *counts, size_t elem_bytes, void *const *recv) {
    for (int dst = 0; dst < R; dst++) {
        char *out = recv[dst];
        for (int src = 0; src < R; src++) {
            if (counts[src]) memcpy(out, send[src], counts[src] * elem_bytes);
            out += counts[src] * elem_bytes;
        }
    }
}

void vp_all_reduce_max(int R, float *const *buf, size_t count) {
    for (size_t i = 0; i < count; i++) {
        float m = buf[0][i];
        for (int r = 1; r < R; r++) m = fmaxf(m, buf[r][i]);
        for (int r = 0; r < R; r++) buf[r][i] = m;
    }
}

void vp_all_reduce_sum(int R, float *const *buf, size_t count) {
    for (size_t i = 0; i < count; i++) {
        float s = buf[0][i];
        for (int r = 1; r < R; r++) s += buf[r][i];
        for (int r = 0; r < R; r++) buf[r][i] = s;
    }
}

void vp_reduce_scatter_sum(int R, const float *const *send, const size_t *counts, float *const *recv) {
    size_t offset = 0;
    for (int dst = 0; dst < R; dst++) {
        for (size_t i = 0; i < counts[dst]; i++) {
            float s = send[0][offset + i];
            for (int r = 1; r < R; r++) s += send[r][offset + i];
            recv[dst][i] = s;
        }
        offset += counts[dst];
    }
}

/* ---- a tied head's token embedding ---- */

void vocab_parallel_embed_cpu(float *out, const int *inp, const float *W_slice, VocabSlice s, float scale, size_t N,
                              int C) {
    for (size_t n = 0; n < N; n++) {
        const int row = inp[n] - s.begin;
        const int mine = row >= 0 && row < s.rows;
        for (int i = 0; i < C; i++) out[n * C + i] = mine ? W_slice[(size_t)row * C + i] * scale : 0.0f;
    }
}

void vocab_parallel_embed_backward_cpu(float *dW_slice, const float *dout, const int *inp, VocabSlice s, float scale,
                                       int pad, size_t N, int C) {
    for (size_t n = 0; n < N; n++) {
        const int row = inp[n] - s.begin;
        if (row < 0 || row >= s.rows || inp[n] == pad) continue;
        float *d = dW_slice + (size_t)row * C;
        for (int i = 0; i < C; i++) d[i] += dout[n * C + i] * scale;
    }
}

/* ---- one rank's buffers ---- */

/* At least one element, so that a rank without rows still gets a pointer to tell from a failure. */
static float *alloc_floats(size_t n) {
    return malloc((n ? n : 1) * sizeof(float));
}

int vocab_parallel_work_alloc(VocabParallelWork *w, int N, int N_rank, int C, char *err) {
    const size_t NC = (size_t)N * C;
    memset(w, 0, sizeof *w);
    w->H = alloc_floats(NC);
    w->targets = malloc((N ? (size_t)N : 1) * sizeof(int));
    w->slice_max = alloc_floats(N);
    w->max = alloc_floats(N);
    w->sums = alloc_floats(2 * (size_t)N);
    w->lse = alloc_floats(N);
    w->losses = alloc_floats(N);
    w->dH_partial = alloc_floats(NC);
    w->dH_own = alloc_floats((size_t)N_rank * C);
    if (w->H && w->targets && w->slice_max && w->max && w->sums && w->lse && w->losses && w->dH_partial &&
        w->dH_own)
        return 0;
    snprintf(err, ERR_LEN, "out of memory for the vocabulary-parallel layer's buffers of %d rows of width %d "
                           "(fewer rows per step)", N, C);
    return -1;
}

void vocab_parallel_work_free(VocabParallelWork *w) {
    free(w->dH_own);
    free(w->dH_partial);
    free(w->losses);
    free(w->lse);
    free(w->sums);
    free(w->max);
    free(w->slice_max);
    free(w->targets);
    free(w->H);
    memset(w, 0, sizeof *w);
}

/* ---- per-rank steps: each reads and writes one rank's data only ---- */

/* The layer over this rank's slice, as the unsplit fused layer sees it: W from the slice's first
 * word, its real rows only (padding is never read). */
static OutputLayerCpu slice_layer(const VocabParallelCpu *p, VocabSlice s, int N, const VocabParallelRank *rk,
                                  float grad_scale) {
    const VocabParallelWork *w = &rk->work;
    return (OutputLayerCpu){.H = w->H, .W = rk->W, .targets = w->targets, .N = N, .C = p->C, .V = s.real,
                            .grad_scale = grad_scale, .dH = w->dH_partial, .dW = rk->dW};
}

/* Step 2: the slice's max, sum relative to it and target logit per row (ignored rows: zeros, which
 * stay zeros through the combination). */
static void rank_slice_stats(const VocabParallelCpu *p, VocabSlice s, int N, VocabParallelRank *rk) {
    VocabParallelWork *w = &rk->work;
    OutputLayerCpu a = slice_layer(p, s, N, rk, 0.0f);
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        float m = 0.0f, zt = 0.0f;
        double sum = 0.0;
        if (w->targets[n] != -1) output_fused_row_stats_cpu(&a, s.begin, n, &m, &sum, &zt);
        w->slice_max[n] = m;
        w->sums[n] = (float)sum;
        w->sums[N + n] = zt;
    }
    memcpy(w->max, w->slice_max, (size_t)N * sizeof(float));
}

/* Step 3, between the two all-reduces: the slice's sum, relative to its own max, made relative to
 * the row's max over the whole vocabulary (a slice without words: max −∞, sum 0, and 0 stays). */
static void rank_rescale_sums(int N, VocabParallelWork *w) {
    for (int n = 0; n < N; n++) w->sums[n] = (float)(w->sums[n] * exp((double)w->slice_max[n] - w->max[n]));
}

/* Every rank holds every target after step 1, so each counts the valid rows of all ranks itself. */
static int rank_valid_rows(int N, const VocabParallelWork *w) {
    return output_layer_count_valid(w->targets, N);
}

/* Step 3, after the all-reduces: lse and loss per row, and the loss (the same on every rank, since
 * every input here is). */
static double rank_loss(const VocabParallelCpu *p, int N, VocabParallelWork *w) {
    double total = 0.0;
    for (int n = 0; n < N; n++) {
        if (w->targets[n] == -1) {
            w->lse[n] = w->losses[n] = 0.0f;
            continue;
        }
        w->lse[n] = w->max[n] + (float)log(w->sums[n]);
        w->losses[n] = w->lse[n] - w->sums[N + n];
        total += w->losses[n];
    }
    int valid = rank_valid_rows(N, w);
    return p->mean ? (valid ? total / valid : 0.0) : total;
}

/* Step 4: the slice's dW rows (added) and its part of every row's dH (overwritten). */
static void rank_backward(const VocabParallelCpu *p, VocabSlice s, int N, VocabParallelRank *rk) {
    int valid = rank_valid_rows(N, &rk->work);
    float grad_scale = p->mean ? (valid ? p->grad_scale / valid : 0.0f) : p->grad_scale;
    memset(rk->work.dH_partial, 0, (size_t)N * p->C * sizeof(float));
    OutputLayerCpu a = slice_layer(p, s, N, rk, grad_scale);
    output_fused_backward_cpu(&a, s.begin, p->V, rk->work.lse);
}

/* Step 4, after the reduce-scatter: this rank's rows' dH, added as the unsplit layer adds it. */
static void rank_add_dH(const VocabParallelCpu *p, VocabParallelRank *rk) {
    for (size_t i = 0; i < (size_t)rk->N * p->C; i++) rk->dH[i] += rk->work.dH_own[i];
}

/* ---- the driver ---- */

static int check_args(const VocabParallelCpu *p, const VocabParallelRank *ranks, char *err) {
    if (p->R < 1 || p->R > VOCAB_PARALLEL_MAX_RANKS || p->R > p->Vp) {
        snprintf(err, ERR_LEN, "vocabulary-parallel layer over %d ranks (use 1 to %d, and no more than the %d rows "
                               "of W)", p->R, VOCAB_PARALLEL_MAX_RANKS, p->Vp);
        return -1;
    }
    if (p->C < 1 || p->V < 1 || p->Vp < p->V) {
        snprintf(err, ERR_LEN, "vocabulary-parallel layer with width %d, vocabulary %d padded to %d (the width and "
                               "vocabulary must be positive and the padded vocabulary at least the vocabulary)",
                 p->C, p->V, p->Vp);
        return -1;
    }
    for (int r = 0; r < p->R; r++) {
        const VocabParallelRank *rk = &ranks[r];
        if (rk->N < 0) {
            snprintf(err, ERR_LEN, "rank %d of the vocabulary-parallel layer has %d rows (a rank has 0 rows or "
                                   "more)", r, rk->N);
            return -1;
        }
        if (!rk->dW != !ranks[0].dW || (rk->dW && rk->N && !rk->dH)) {
            snprintf(err, ERR_LEN, "rank %d of the vocabulary-parallel layer has %s (pass dH and dW on every rank, "
                                   "or on none for the loss alone)",
                     r, !rk->dW != !ranks[0].dW ? (rk->dW ? "dW while rank 0 has none" : "no dW while rank 0 has one")
                                                : "dW but no dH");
            return -1;
        }
        for (int n = 0; n < rk->N; n++)
            if (rk->targets[n] < -1 || rk->targets[n] >= p->V) {
                snprintf(err, ERR_LEN, "target %d of row %d on rank %d is outside the vocabulary of %d (targets are "
                                       "-1, ignored, or a word below the vocabulary size)",
                         rk->targets[n], n, r, p->V);
                return -1;
            }
    }
    return 0;
}

int vocab_parallel_cpu(const VocabParallelCpu *p, VocabParallelRank *ranks, char *err) {
    if (check_args(p, ranks, err)) return -1;
    const int R = p->R, C = p->C;
    int N = 0;
    for (int r = 0; r < R; r++) N += ranks[r].N;
    /* Each rank's buffers for one collective, and the per-rank element counts of the uneven ones. */
    const void *send[VOCAB_PARALLEL_MAX_RANKS];
    void *recv[VOCAB_PARALLEL_MAX_RANKS];
    const float *fsend[VOCAB_PARALLEL_MAX_RANKS];
    float *bufs[VOCAB_PARALLEL_MAX_RANKS];
    size_t counts[VOCAB_PARALLEL_MAX_RANKS];

    /* 1. every row's hidden state and target on every rank */
    for (int r = 0; r < R; r++) send[r] = ranks[r].H, recv[r] = ranks[r].work.H, counts[r] = (size_t)ranks[r].N * C;
    vp_all_gather(R, send, counts, sizeof(float), recv);
    for (int r = 0; r < R; r++) send[r] = ranks[r].targets, recv[r] = ranks[r].work.targets, counts[r] = ranks[r].N;
    vp_all_gather(R, send, counts, sizeof(int), recv);

    /* 2. each slice's statistics */
    for (int r = 0; r < R; r++) rank_slice_stats(p, vocab_slice(p->V, p->Vp, R, r), N, &ranks[r]);

    /* 3. combined into lse and loss */
    for (int r = 0; r < R; r++) bufs[r] = ranks[r].work.max;
    vp_all_reduce_max(R, bufs, N);
    for (int r = 0; r < R; r++) rank_rescale_sums(N, &ranks[r].work);
    for (int r = 0; r < R; r++) bufs[r] = ranks[r].work.sums;
    vp_all_reduce_sum(R, bufs, 2 * (size_t)N);
    for (int r = 0; r < R; r++) ranks[r].loss = rank_loss(p, N, &ranks[r].work);
    if (!ranks[0].dW) return 0;

    /* 4. gradients: dW stays on its slice, dH goes back to the rows' ranks */
    for (int r = 0; r < R; r++) rank_backward(p, vocab_slice(p->V, p->Vp, R, r), N, &ranks[r]);
    for (int r = 0; r < R; r++) {
        fsend[r] = ranks[r].work.dH_partial;
        bufs[r] = ranks[r].work.dH_own;
        counts[r] = (size_t)ranks[r].N * C;
    }
    vp_reduce_scatter_sum(R, fsend, counts, bufs);
    for (int r = 0; r < R; r++) rank_add_dH(p, &ranks[r]);
    return 0;
}
