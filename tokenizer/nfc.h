/* tokenizer/nfc.h - whether a text is its own Unicode NFC, exactly: the tokenizer.json normalizer NFC
 * (Qwen 2's) is honoured by refusing text it would rewrite. */
#ifndef FUSEDGPT_NFC_H
#define FUSEDGPT_NFC_H

#include <stddef.h>
#include <stdint.h>

/* 1 when NFC leaves the UTF-8 text s[0..len) as it is; 0 when it rewrites some stretch, with the
 * first code point there that NFC may change and its byte offset in *cp and *at; -1 out of memory.
 * Bytes that are not UTF-8 are left to the caller: they end a stretch. */
int nfc_is_normal(const uint8_t *s, size_t len, uint32_t *cp, size_t *at);

#endif
