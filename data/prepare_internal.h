/* data/prepare_internal.h - what the two ways of `./train prepare` share: the whole text in memory
 * (data/prepare.c: train.bin and val.bin) and a text of any size streamed through a given tokenizer
 * (data/prepare_stream.c: train_000000.bin, ... and val_000000.bin, ...). Both write a set of
 * shards and their tokenizer into one folder under staging names and put it in place only once all
 * of it is whole; the helpers below check what a folder holds before any work, encode a part of the
 * text, and take away an earlier set's files once the new one is in. */
#ifndef FUSEDGPT_PREPARE_INTERNAL_H
#define FUSEDGPT_PREPARE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "data/prepare.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    uint32_t vocab;
    double val_fraction;
    int threads;
    const char *tokenizer_in; /* encode with this tokenizer instead of training one */
    uint64_t shard_tokens;    /* tokens a numbered shard holds (prepare_stream); 0: train.bin and val.bin */
    int documents;            /* mark each document's first token (SHARD_DOCUMENTS): training keeps the
                               * attention and positions inside a document */
    int assistant_only_loss;  /* --prompt-completion's conversations: only what {% generation %} marks is a target */
    const char *chat_template; /* --prompt-completion's conversations: render with this template file */
} PrepareOptions;

/* The fewest tokens --shard-tokens takes: smaller shards would be more files than data. */
#define PREPARE_MIN_SHARD_TOKENS 1024u

/* Room kept after a file's name for the staging suffixes its writes add (".new", then ".tmp"). */
#define PREPARE_STAGING_ROOM 8

double prepare_seconds(void);

/* dir/name into dst (PREPARE_PATH_LEN bytes, staging room kept); -1 + message when too long. */
int prepare_path_join(char *dst, const char *dir, const char *name, char *err);

/* make_dirs with a message; -1 + message. */
int prepare_make_dirs(const char *path, char *err);

/* A folder this prepare made and then failed to fill: its lock goes, and the folder if empty. */
void prepare_remove_made_folder(const char *dir);

/* Refuses an output folder that cannot be made or written into, before any work. */
int prepare_check_out_dir(const char *dir, char *err);

/* Takes dir's lock (another prepare writing into it is refused): the descriptor, or -1 + message. */
int prepare_lock_out_dir(const char *dir, char *err);

/* A text file opened for reading, or NULL + a message naming what it is and the fix. */
FILE *prepare_open_text(const char *path, char *err);

/* The message for a zero byte at byte `at` of a text file: no UTF-8 text holds one. */
void prepare_zero_byte_err(const char *path, uint64_t at, char *err);

/* Says where validation starts when it is not a document boundary (cut: its byte in the joined
 * text; exact: the tokenizer's pieces are sure to end there). */
void prepare_note_val_cut(double fraction, uint64_t cut, int imported, int exact, const char *eot, size_t eot_len);

/* What -o holds must be free to replace: train.bin and val.bin, the numbered shards, their staged
 * names, and the tokenizer (tokenizer_name; other_name is the other kind, removed once the new set
 * is in); for a numbered set (numbered_set), no other file the patterns train_*.bin and val_*.bin
 * match. `given`: the --tokenizer file (NULL when prepare trains one). -1 + message. */
int prepare_check_replaceable(const char *dir, int numbered_set, const char *tokenizer_name, const char *other_name,
                              const char *given, char *err);

/* Once the new set is in place: removes what is left of an earlier one in dir, so that the folder
 * holds one set: numbered shards past the new set's n_train and n_val (all of them for a set of
 * train.bin and val.bin), any stopped prepare's staged shards, train.bin and val.bin when the new
 * set is numbered (numbered = 1), and the tokenizer of the other kind (other_name). Says what it
 * removed; a file it cannot remove is named in a note. */
void prepare_remove_earlier_set(const char *dir, int numbered, uint64_t n_train, uint64_t n_val,
                                const char *other_name, const char *tokenizer_path);

/* prepare_encode_part's marks: SHARD_DOC_START on each document's first id (the separator's, or the
 * first of the post-processor's tokens before a document: Llama 3's <|begin_of_text|>, Gemma's
 * <bos>), and on the part's first id, which starts a document when the part does. */
#define PREPARE_MARK_DOCUMENTS 1
#define PREPARE_STARTS_DOCUMENT 2

/* Encodes one part of the text (flags: which end of it the text goes on from, tokenizer.h) and
 * gives each of its documents the post-processor's tokens, and with marks, marks where they start:
 * *ids (malloc'ed), *n. -1 + message. */
int prepare_encode_part(const Tokenizer *tok, const char *text, size_t len, int flags, int marks, int threads,
                        uint32_t **ids, size_t *n, char *err);

/* Writes the tokenizer beside the shards: an imported one's tokenizer.json as it was read, ours as
 * tokenizer.bin. -1 + message. */
int prepare_save_tokenizer(const Tokenizer *tok, const char *path, char *err);

/* The files an imported tokenizer brings beside its tokenizer.json, which a set carries with it (so
 * that training with --tokenizer DIR/tokenizer.json sees the model's eos_token, special tokens and
 * chat template, and hands them on in checkpoints): their names, and what each is, for messages. */
extern const char *const tokenizer_file_names[2];
extern const char *const tokenizer_file_roles[2];

/* Writes those tok has (an imported tokenizer's tokenizer_config.json and chat_template.jinja) whole
 * under staging names in dir: staged[k] names each, empty for one it lacks. -1 + message. */
int prepare_stage_tokenizer_files(const Tokenizer *tok, const char *dir, char staged[2][PREPARE_PATH_LEN],
                                  char *err);

/* Renames the staged files into place (emptying staged[k]), and removes an earlier set's file of a
 * name the new tokenizer lacks. -1 + message when a rename fails. */
int prepare_install_tokenizer_files(const char *dir, char staged[2][PREPARE_PATH_LEN], char *err);

/* Checks text[0..len), bytes [offset, offset + len) of the file `path`, against a given tokenizer's
 * normalizer (NULL: none), and adds its bytes outside UTF-8 to *stray (the first at *first_stray
 * when it is the first). -1 + message naming the file and the byte. */
int prepare_check_file_text(const Tokenizer *given, const char *path, const char *text, size_t len, uint64_t offset,
                            uint64_t *stray, uint64_t *first_stray, char *err);

/* The note for a file with bytes outside UTF-8 (none when stray is 0). */
void prepare_note_stray_bytes(const char *path, uint64_t stray, uint64_t first_stray);

/* A set of shards and their tokenizer being written into out_dir (prepare_begin_set): train.bin and
 * val.bin, or numbered shards that their writer stages and installs (prepare_stream's); the folder's
 * lock and the files' staging names. */
typedef struct {
    const char *out_dir;
    PreparedData *out; /* its paths: the final names */
    int imported, made_here, lock;
    int numbered;      /* numbered shards: install_shards puts them in place, abort_shards takes them back */
    int (*install_shards)(void *ctx, char *err);
    void (*abort_shards)(void *ctx);
    void *shards;      /* their context */
    uint64_t n_train, n_val; /* numbered shards the new set holds, set before prepare_end_set */
    char train_new[PREPARE_PATH_LEN], val_new[PREPARE_PATH_LEN], tok_new[PREPARE_PATH_LEN];
    char tok_files_new[2][PREPARE_PATH_LEN]; /* prepare_stage_tokenizer_files's */
} SetInProgress;

/* Makes out_dir (if need be), names the set's files in out (numbered: the patterns train_*.bin and
 * val_*.bin) and their staging names in set, and takes the folder's lock. -1 + message: then nothing
 * is to be released (and a folder that another prepare's lock holds is left to it). */
int prepare_begin_set(const char *out_dir, int imported, int numbered, PreparedData *out, SetInProgress *set,
                      char *err);

/* rc == 0 (the shards written under their staging names): writes the tokenizer's files, puts the
 * set in place, takes away what an earlier set left. rc != 0: takes the staged files back. Either
 * way releases the lock, and on failure removes a folder the set made. The final rc. */
int prepare_end_set(SetInProgress *set, int rc, const Tokenizer *tok, char *err);

/* JSON Lines of prompt-completion pairs into masked train.bin and val.bin (prepare_pairs.c),
 * tokenized by tok. 0, or -1 + message. */
int prepare_pairs(const char *const *files, int n_files, const PrepareOptions *opt, Tokenizer *tok,
                  const char *out_dir, PreparedData *out, char *err);

/* The text files, streamed: prepare_stream.c. Same contract as prepare_text. */
int prepare_stream(const char *const *files, int n_files, const PrepareOptions *opt, Tokenizer *given,
                   const char *out_dir, PreparedData *out, char *err);

#endif
