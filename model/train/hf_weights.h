/* model/train/hf_weights.h - Hugging Face checkpoints of every family: config.json into our config
 * and back, and the weights (model.safetensors, or shards listed by model.safetensors.index.json)
 * into our parameter layout.
 *
 * GPT2LMHeadModel: ours, or GPT-2's own (tensor names without the "transformer." prefix); both store
 * the attention and MLP matrices in Conv1D's [in, out] orientation, transposed into our [out, in].
 * LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM: nn.Linear's [out, in] as
 * ours; the packed q/k/v and gate/up rows of the table are filled from their HF tensors. A multimodal
 * Gemma3ForConditionalGeneration is read as its text model: config.json's text_config, and the text
 * weights under their prefix (language_model.model. or model.language_model.), the vision tower's
 * passed over. */
#ifndef FUSEDGPT_HF_WEIGHTS_H
#define FUSEDGPT_HF_WEIGHTS_H

#include <stddef.h>

#include "model/gpt.h"

/* The model <dir>/config.json describes, Vp filled in. model_type gpt2, llama, qwen2, qwen3,
 * gemma3_text or gemma3 (its text_config); a field left out takes the default of the family's
 * transformers config class. A config this trainer does not compute (another model_type, activation
 * or rope_type, biases the table has no rows for, a sliding window outside Gemma 3, attention
 * soft-capping, ...) is refused naming the field, and so is a field whose JSON type is not the one
 * transformers writes. 0, or -1 with a one-line message in err (ERR_LEN bytes). */
int hf_read_config(const char *dir, GPTConfig *cfg, char *err);

/* The dropout probabilities of family's config class that <dir>/config.json sets above 0
 * ("resid_pdrop 0.1, embd_pdrop 0.1"), into out (n bytes): training here uses no dropout, so
 * --init-from notes them. How many. */
int hf_dropout_note(const char *dir, ModelFamily family, char *out, size_t n);

/* config.json's eos_token_id (a list's first) when it is a token below vocab_size, else -1: where a
 * sample from a checkpoint without a tokenizer starts a new document. */
int hf_read_eos_token(const char *dir, int vocab_size);

/* The ids that end a reply, as transformers' generate takes them: generation_config.json's
 * eos_token_id (one or a list), else config.json's, in dir; each below vocab_size, at most max into
 * ids, without repeats. Their count (0 when neither file names one). */
int hf_read_stop_tokens(const char *dir, int vocab_size, int *ids, int max);

/* The weights of <dir> into params (t->total floats, t's layout; F32, F16 or BF16 tensors; the
 * padded vocabulary rows set to 0): model.safetensors, else the shards that
 * model.safetensors.index.json's weight_map names, every one checked whole (safetensors.h) and
 * holding exactly the tensors the map gives it. Every tensor of the table must be there once with
 * its HF shape; a tensor the family's model does not have is refused naming it; lm_head.weight of
 * a tied model must equal the token embedding. The names and shapes are all checked from the files'
 * headers before a value is read. 0, or -1 with a one-line message in err. */
int hf_read_weights(const char *dir, const ParamTable *t, float *params, char *err);

/* hf_read_weights into memory of its own (malloc'd, the caller frees), taken only once the headers
 * match t: a config.json of other sizes is named by the tensor that disagrees, not by the memory a
 * model of its sizes would take. NULL with a one-line message in err. */
float *hf_load_weights(const char *dir, const ParamTable *t, char *err);

/* The class transformers loads a family's checkpoint with ("LlamaForCausalLM"). */
const char *hf_architecture(ModelFamily family);

/* config.json as transformers writes it for cfg's family (every field of its config class), into
 * buf (n bytes); bos, eos: the tokenizer's ids of the token that opens a text and of its separator
 * (-1: no tokenizer, written as null: a class default such as GPT-2's 50256 could lie outside the
 * vocabulary). The length, or -1 when buf is too small. */
int hf_config_json(const GPTConfig *cfg, int bos, int eos, char *buf, size_t n);

#endif
