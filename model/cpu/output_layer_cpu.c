/* model/cpu/output_layer_cpu.c - canonical and fused output layers, fp32 CPU reference.
 * Both compute each logit with the same dot product in the same order, so they differ only in how
 * the softmax statistics are gathered (two passes vs online); tests hold them to 1e-6. */
#include "model/cpu/output_layer_cpu.h"

#include <math.h>
#include <string.h>

/* Vocabulary columns per tile in the fused layer: the tile of logits is what would live in
 * registers on the GPU; here it just bounds the scratch on the stack. */
#define FUSED_TILE 64

int output_layer_count_valid(const int *targets, int N) {
    int n = 0;
    for (int i = 0; i < N; i++) n += targets[i] != -1;
    return n;
}

size_t output_layer_canonical_cpu_workspace(int N, int V) {
    return (size_t)N * V;
}

size_t output_layer_fused_cpu_workspace(int N) {
    return 2 * (size_t)N;
}

static double sum_rows(const float *losses, int N) {
    double total = 0.0;
    for (int n = 0; n < N; n++) total += losses[n];
    return total;
}

static inline float dot(const float *a, const float *b, int C) {
    float s = 0.0f;
    for (int i = 0; i < C; i++) s += a[i] * b[i];
    return s;
}

/* The loss options' per-element parts (kernels/output_kind.h). */
static inline float cap_logit(float z, float cap) {
    return cap > 0.0f ? cap * tanhf(z / cap) : z;
}
/* dz'/dz = 1 − tanh²(z / cap), from z itself (not from the rounded z'/cap, whose 1 − t² cancels) */
static inline float cap_slope(float z, float cap) {
    if (!(cap > 0.0f)) return 1.0f;
    const float c = coshf(z / cap);
    return 1.0f / (c * c);
}

/* Per valid row: the gradient of the objective w.r.t. the capped logit z'_v is
 * p_v·p_scale − onehot·t_coef − uniform (times the cap's slope for z). */
typedef struct {
    float p_scale, t_coef, uniform;
} RowGrad;

static RowGrad row_grad(const OutputLossOptions *o, float lse, int V) {
    return (RowGrad){1.0f + 2.0f * o->z_loss * lse, 1.0f - o->label_smoothing, o->label_smoothing / (float)V};
}

static inline float grad_of(const RowGrad *g, float zc, float lse, int is_target) {
    return expf(zc - lse) * g->p_scale - (is_target ? g->t_coef : 0.0f) - g->uniform;
}

/* Row n's outputs from its lse, target logit and sum of logits (all capped). */
static void finish_row(const OutputLayerCpu *a, int n, float lse, float zt, double zsum) {
    const OutputLossOptions *o = &a->opt;
    const float ce = lse - zt;
    a->losses[n] = ce;
    if (a->lses) a->lses[n] = lse;
    if (a->objectives)
        a->objectives[n] = (float)((1.0 - o->label_smoothing) * ce +
                                   o->label_smoothing * ((double)lse - zsum / a->V) +
                                   (double)o->z_loss * lse * lse);
}

static void ignore_row(const OutputLayerCpu *a, int n) {
    a->losses[n] = 0.0f;
    if (a->lses) a->lses[n] = 0.0f;
    if (a->objectives) a->objectives[n] = 0.0f;
}

double output_layer_canonical_cpu(const OutputLayerCpu *a, float *logits) {
    const int N = a->N, C = a->C, V = a->V;
    const float cap = a->opt.logit_softcap;
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        float *z = logits + (size_t)n * V;
        const float *h = a->H + (size_t)n * C;
        for (int v = 0; v < V; v++) z[v] = dot(h, a->W + (size_t)v * C, C);
        int y = a->targets[n];
        if (y == -1) {
            ignore_row(a, n);
            continue;
        }
        float m = -INFINITY;
        double zsum = 0.0;
        for (int v = 0; v < V; v++) {
            const float zc = cap_logit(z[v], cap);
            m = fmaxf(m, zc);
            zsum += zc;
        }
        double s = 0.0;
        for (int v = 0; v < V; v++) s += exp((double)cap_logit(z[v], cap) - m);
        float lse = m + (float)log(s);
        finish_row(a, n, lse, cap_logit(z[y], cap), zsum);
        /* z becomes dlogits = grad_scale·(softmax − onehot) in place, as on the GPU. */
        const RowGrad g = row_grad(&a->opt, lse, V);
        for (int v = 0; v < V; v++)
            z[v] = a->grad_scale * grad_of(&g, cap_logit(z[v], cap), lse, v == y) * cap_slope(z[v], cap);
    }
    double total = sum_rows(a->losses, N);
    if (!a->dH) return total;
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        if (a->targets[n] == -1) continue;
        const float *g = logits + (size_t)n * V;
        float *dh = a->dH + (size_t)n * C;
        for (int v = 0; v < V; v++) {
            const float *w = a->W + (size_t)v * C;
            for (int i = 0; i < C; i++) dh[i] += g[v] * w[i];
        }
    }
#pragma omp parallel for
    for (int v = 0; v < V; v++) {
        float *dw = a->dW + (size_t)v * C;
        for (int n = 0; n < N; n++) {
            if (a->targets[n] == -1) continue;
            float g = logits[(size_t)n * V + v];
            const float *h = a->H + (size_t)n * C;
            for (int i = 0; i < C; i++) dw[i] += g * h[i];
        }
    }
    return total;
}

/* output_fused_row_stats_cpu, and with zsum also the sum of the (capped) logits. */
static void row_stats(const OutputLayerCpu *a, int vocab_offset, int n, float *max, double *sum, float *target_logit,
                      double *zsum) {
    const int C = a->C, V = a->V;
    const float cap = a->opt.logit_softcap;
    const int y = a->targets[n] - vocab_offset; /* in [0, V) only when the target is one of W's rows */
    const float *h = a->H + (size_t)n * C;
    float m = -INFINITY;
    double s = 0.0, zs = 0.0;
    float zt = 0.0f;
    float tile[FUSED_TILE];
    for (int v0 = 0; v0 < V; v0 += FUSED_TILE) {
        int width = V - v0 < FUSED_TILE ? V - v0 : FUSED_TILE;
        float tile_max = -INFINITY;
        for (int j = 0; j < width; j++) {
            tile[j] = cap_logit(dot(h, a->W + (size_t)(v0 + j) * C, C), cap);
            tile_max = fmaxf(tile_max, tile[j]);
            zs += tile[j];
        }
        if (y >= v0 && y < v0 + width) zt = tile[y - v0];
        float m_new = fmaxf(m, tile_max);
        s *= exp((double)m - m_new); /* rescale the old sum to the new max */
        for (int j = 0; j < width; j++) s += exp((double)tile[j] - m_new);
        m = m_new;
    }
    *max = m;
    *sum = s;
    *target_logit = zt;
    if (zsum) *zsum = zs;
}

void output_fused_row_stats_cpu(const OutputLayerCpu *a, int vocab_offset, int n, float *max, double *sum,
                                float *target_logit) {
    row_stats(a, vocab_offset, n, max, sum, target_logit, NULL);
}

void output_fused_backward_cpu(const OutputLayerCpu *a, int vocab_offset, int full_V, const float *lse) {
    const int N = a->N, C = a->C, V = a->V;
    const float cap = a->opt.logit_softcap;
    /* Backward (Algorithm 2): recompute each logit from the saved lse; never store a row of P.
     * dH is owned by rows, dW by vocabulary entries, so both loops write without races. */
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        if (a->targets[n] == -1) continue;
        int y = a->targets[n] - vocab_offset;
        const RowGrad rg = row_grad(&a->opt, lse[n], full_V);
        const float *h = a->H + (size_t)n * C;
        float *dh = a->dH + (size_t)n * C;
        for (int v = 0; v < V; v++) {
            const float *w = a->W + (size_t)v * C;
            const float z = dot(h, w, C);
            float g = a->grad_scale * grad_of(&rg, cap_logit(z, cap), lse[n], v == y) * cap_slope(z, cap);
            for (int i = 0; i < C; i++) dh[i] += g * w[i];
        }
    }
#pragma omp parallel for
    for (int v = 0; v < V; v++) {
        const float *w = a->W + (size_t)v * C;
        float *dw = a->dW + (size_t)v * C;
        for (int n = 0; n < N; n++) {
            if (a->targets[n] == -1) continue;
            int y = a->targets[n] - vocab_offset;
            const RowGrad rg = row_grad(&a->opt, lse[n], full_V);
            const float *h = a->H + (size_t)n * C;
            const float z = dot(h, w, C);
            float g = a->grad_scale * grad_of(&rg, cap_logit(z, cap), lse[n], v == y) * cap_slope(z, cap);
            for (int i = 0; i < C; i++) dw[i] += g * h[i];
        }
    }
}

double output_layer_fused_cpu(const OutputLayerCpu *a, float *row_stats_ws) {
    const int N = a->N;
    float *lse = row_stats_ws, *target_logit = row_stats_ws + N;
    /* Forward (Algorithm 1): one sweep over vocabulary tiles per row, online softmax. */
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        if (a->targets[n] == -1) {
            ignore_row(a, n);
            lse[n] = 0.0f;
            target_logit[n] = 0.0f;
            continue;
        }
        float m;
        double s, zsum;
        row_stats(a, 0, n, &m, &s, &target_logit[n], &zsum);
        lse[n] = m + (float)log(s);
        finish_row(a, n, lse[n], target_logit[n], zsum);
    }
    double total = sum_rows(a->losses, N);
    if (a->dH) output_fused_backward_cpu(a, 0, a->V, lse);
    return total;
}
