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

#endif
