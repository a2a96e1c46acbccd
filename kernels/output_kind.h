/* kernels/output_kind.h - which output layer runs, and the fused layer's default budget: plain C
 * without CUDA headers, so that the command line and the CPU backend (model/backend.h) name them
 * as kernels/output_layer.h does. */
#ifndef FUSEDGPT_OUTPUT_KIND_H
#define FUSEDGPT_OUTPUT_KIND_H

#include <stddef.h>

/* fused: the logits never exist in memory (kernels/output_fused.cu); canonical: llm.c's way, all
 * logits in bf16 (kernels/output_canonical.cu), the baseline. The CPU backend has both in fp32. */
typedef enum { OUTPUT_FUSED = 0, OUTPUT_CANONICAL = 1 } OutputKind;

/* The fused layer's budget for its chunks of scaled exponentials when the caller has no other
 * figure (the trainer's --logits-mb default): 4096 rows at V = 262144, 2 bytes per logit plus 4 per
 * row and 256-column tile, 4096 x (262144 x 2 + 1024 x 4) bytes = 2064 MiB. That is under a quarter
 * of what torch.compile holds at 16384 rows; each chunk row also takes 6 d bytes beside it (its fp32
 * E W and bf16 H / S). Every chunk re-reads and re-writes dW (8 V d bytes), about 7 % of a
 * 4096-row chunk's GEMMs on an H100: a larger budget buys speed with memory
 * (kernels/output_fused.cu). */
#define OUTPUT_FUSED_DEFAULT_BUDGET_MIB 2064
#define OUTPUT_FUSED_DEFAULT_BUDGET ((size_t)OUTPUT_FUSED_DEFAULT_BUDGET_MIB << 20)

/* The loss options every output layer takes (GPU and CPU alike); zeroed, the plain cross-entropy,
 * bit for bit as without them. Per valid row, over the real vocabulary V only (padded rows get no
 * mass and are no class of the smoothing):
 *   z'  = logit_softcap·tanh(z / logit_softcap)            (z' = z when logit_softcap is 0)
 *   lse = log Σ_v exp(z'_v),   ce = lse − z'_target        (the loss every layer reports)
 *   objective = (1 − label_smoothing)·ce + label_smoothing·(lse − Σ_v z'_v / V) + z_loss·lse²
 * The gradients are the objective's: dz_v = (p_v·(1 + 2·z_loss·lse) − (1 − label_smoothing)·[v = t]
 * − label_smoothing / V)·(1 − tanh²(z_v / logit_softcap)). Label smoothing is PyTorch's
 * (cross_entropy's label_smoothing: (1 − ε)·ce + ε·mean over classes of −log p), z-loss PaLM's. */
typedef struct {
    float z_loss;          /* >= 0 */
    float logit_softcap;   /* > 0, or 0: none */
    float label_smoothing; /* in [0, 1) */
} OutputLossOptions;

/* Whether the objective differs from the cross-entropy (softcapping changes both alike). */
static inline int output_loss_has_objective(const OutputLossOptions *o) {
    return o->z_loss != 0.0f || o->label_smoothing != 0.0f;
}

/* NULL when the options are valid, else what is wrong with them, for an error line. */
static inline const char *output_loss_options_invalid(const OutputLossOptions *o) {
    if (!(o->z_loss >= 0.0f && o->z_loss < 1e30f)) return "z-loss must be a finite number >= 0";
    if (!(o->logit_softcap >= 0.0f && o->logit_softcap < 1e30f))
        return "logit softcap must be a finite number > 0 (or 0: none)";
    if (!(o->label_smoothing >= 0.0f && o->label_smoothing < 1.0f)) return "label smoothing must be in [0, 1)";
    return NULL;
}

#endif
