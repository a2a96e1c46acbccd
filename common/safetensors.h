/* common/safetensors.h - reading a safetensors file: its header checked whole, then tensors read as
 * fp32 on demand.
 *
 * The format: an 8-byte little-endian header length N, N bytes of JSON
 * {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data;
 * offsets count from the end of the header, and the tensors cover the data exactly (no overlap,
 * hole or trailing bytes). It knows nothing of models: callers map names to their own tensors. */
#ifndef FUSEDGPT_SAFETENSORS_H
#define FUSEDGPT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/err.h"
#include "common/json.h"

/* The most dimensions a tensor read here has. */
#define ST_MAX_DIMS 4

typedef struct {
    const char *name; /* into the file's header */
    const char *dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end; /* bytes of the data */
} StTensor;

typedef struct {
    char path[4096];
    FILE *f;
    JsonValue *header;
    uint64_t data_start;
    StTensor *tensors; /* every entry but __metadata__, in header order */
    size_t count;
} StFile;

/* Opens path and checks its header: every entry has a dtype safetensors defines, a shape, and
 * data_offsets holding exactly the bytes that shape takes, and the entries cover the data exactly.
 * 0, or -1 with a one-line message in err naming the file and the tensor (nothing left open). */
int st_open(StFile *s, const char *path, char *err);
void st_close(StFile *s);

/* "[3, 4]": the tensor's shape, into buf (n bytes). */
void st_shape_string(const StTensor *t, char *buf, size_t n);

/* Reads tensor t (F32, F16 or BF16; another dtype is refused naming it) as floats into out, all its
 * elements in row-major order. 0, or -1 with a message. */
int st_read_f32(StFile *s, const StTensor *t, float *out, char *err);

#endif
