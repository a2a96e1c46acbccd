/* common/json.h - a small JSON reader: the whole document into a tree of values.
 *
 * It reads what Hugging Face writes (tokenizer.json, config.json, a safetensors header): RFC 8259
 * JSON, strings decoded to UTF-8 (\uXXXX escapes and surrogate pairs included, so a string may hold
 * a NUL: use its len), numbers as double. Anything else (a trailing comma, a comment, a lone
 * surrogate, nesting deeper than JSON_MAX_DEPTH, bytes after the value) is an error naming the line
 * and column. It knows nothing of the rest of the project. */
#ifndef FUSEDGPT_JSON_H
#define FUSEDGPT_JSON_H

#include <stddef.h>

#include "common/err.h"

#define JSON_MAX_DEPTH 200

typedef enum { JSON_NULL, JSON_FALSE, JSON_TRUE, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;

typedef struct JsonValue JsonValue;
typedef struct JsonMember JsonMember;

struct JsonValue {
    JsonType type;
    size_t len;          /* string: bytes (a NUL follows them); array, object: elements */
    double number;       /* JSON_NUMBER */
    int integer;         /* JSON_NUMBER written as an integer: no fraction, no exponent (Python's json
                          * reads 512.0 and 5e2 as floats, which transformers' sizes and safetensors'
                          * shapes refuse) */
    char *string;        /* JSON_STRING */
    JsonValue *items;    /* JSON_ARRAY: len values */
    JsonMember *members; /* JSON_OBJECT: len members, in document order */
};

struct JsonMember {
    char *key; /* NUL after key_len bytes */
    size_t key_len;
    JsonValue value;
};

/* Parses text[0..len). NULL with a one-line message in err (ERR_LEN bytes) naming `what` (a
 * file name, for the message), the line and column, and what was expected. */
JsonValue *json_parse(const char *text, size_t len, const char *what, char *err);
void json_free(JsonValue *v);

/* The value of key in an object (the last one if the key repeats, as most readers do), or NULL
 * when v is not an object or has no such key. */
const JsonValue *json_get(const JsonValue *v, const char *key);
/* The string of v when it is one, else NULL. */
const char *json_string(const JsonValue *v);
/* 1 when v is a number written as an integer (512, not 512.0 or 5.12e2) in [lo, hi], stored in *out. */
int json_int(const JsonValue *v, long long lo, long long hi, long long *out);
/* Python's obj[new_key] = obj.pop(key) on an object: the member key (the last of that name), if
 * any, takes the name new_key and moves to the end; a member already named new_key keeps its place
 * and takes the value instead. 0 (also when key is missing), or -1 when memory runs out. */
int json_rename_member(JsonValue *obj, const char *key, const char *new_key);
/* The type's name, for messages ("an object", "a string", ...). */
const char *json_type_name(JsonType t);

#endif
