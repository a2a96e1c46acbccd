/* model/train/hf_weights.h - reading a Hugging Face GPT2LMHeadModel checkpoint (config.json +
 * model.safetensors): ours, or GPT-2's own (tensor names without the "transformer." prefix). Both
 * store the attention and MLP matrices in Conv1D's [in, out] orientation; they are transposed into
 * our [out, in] layout. The JSON is read with common/json.h. */
#ifndef FUSEDGPT_HF_WEIGHTS_H
#define FUSEDGPT_HF_WEIGHTS_H

#include "model/gpt.h"

/* The model <dir>/config.json describes (n_layer, n_head, n_embd, n_positions, vocab_size; Vp
 * filled in). A config that is not a GPT-2 this trainer computes (another model_type or activation,
 * untied output layer, n_inner other than 4C, ...) is refused naming the field, and so is a field
 * whose JSON type is not the one transformers writes. 0, or -1 with a one-line message in err
 * (ERR_LEN bytes). */
int hf_read_config(const char *dir, GPTConfig *cfg, char *err);

/* The weights of <dir>/model.safetensors into params (t->total floats, t's layout; F32, F16 or
 * BF16 tensors; the padded vocabulary rows set to 0). Every entry of the header must hold the bytes
 * its dtype and shape take, and the entries must cover the data exactly (no overlap, hole or
 * trailing bytes). Every tensor of the table must be there with its shape; a tensor GPT2LMHeadModel does not have, or an lm_head.weight that is not the token
 * embedding, is refused. 0, or -1 with a one-line message in err (ERR_LEN bytes). */
int hf_read_weights(const char *dir, const ParamTable *t, float *params, char *err);

#endif
