/* common/safetensors.c - the safetensors reader (see safetensors.h). */
#include "common/safetensors.h"

#include "common/parallel_read.h"
#include "common/paths.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MAX_HEADER (100u << 20) /* a larger header is no model's */
/* What to do about a file that is not whole: it is a copy to make again, whichever wrote it (a
 * checkpoint of ours: another step's, or a new export; a download: again). */
#define DAMAGED_FIX "; the file is damaged or incomplete: copy, download or export it again (or use another checkpoint)"
/* Offsets and dimensions above this (a petabyte) are corrupt; below 2^53 a double holds them exactly. */
#define MAX_OFFSET (1ll << 50)

/* safetensors' dtypes and their bytes per element. */
static const struct {
    const char *name;
    uint64_t width;
} dtypes[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},   {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
              {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"I64", 8},     {"U64", 8}, {"F64", 8}};

/* Bytes per element of a dtype, 0 for a name safetensors does not define. */
static uint64_t dtype_width(const char *dtype) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (strcmp(dtypes[i].name, dtype) == 0) return dtypes[i].width;
    return 0;
}

/* a * b, or UINT64_MAX where that does not fit: a byte count no file holds, refused as such */
static uint64_t mul_saturating(uint64_t a, uint64_t b) {
    return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

void st_shape_string(const StTensor *t, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* One entry of the header: a known dtype, a shape, and data_offsets within the data that hold
 * exactly the bytes the shape takes in that dtype. */
static int check_entry(const char *name, const JsonValue *v, uint64_t data_len, const char *path, StTensor *t,
                       char *err) {
    const JsonValue *shape = json_get(v, "shape"), *off = json_get(v, "data_offsets");
    const JsonValue *dtype_value = json_get(v, "dtype");
    const char *dtype = json_string(dtype_value);
    if (dtype && strlen(dtype) != dtype_value->len) dtype = NULL; /* a NUL inside: not the name it starts with */
    long long b, e, d;
    int ok = dtype && shape && shape->type == JSON_ARRAY && off && off->type == JSON_ARRAY && off->len == 2 &&
             json_int(&off->items[0], 0, MAX_OFFSET, &b) && json_int(&off->items[1], 0, MAX_OFFSET, &e) && b <= e;
    if (ok && shape->len > ST_MAX_DIMS) {
        snprintf(err, ERR_LEN, "%s: tensor %s has %zu dimensions; at most %d are read", path, name, shape->len,
                 ST_MAX_DIMS);
        return -1;
    }
    memset(t, 0, sizeof *t);
    uint64_t elems = 1;
    for (size_t i = 0; ok && i < shape->len; i++) {
        ok = json_int(&shape->items[i], 0, MAX_OFFSET, &d);
        elems = mul_saturating(elems, (uint64_t)d);
        t->shape[i] = d;
    }
    if (!ok) {
        snprintf(err, ERR_LEN, "%s: tensor %s has no valid dtype, shape or data_offsets (corrupt header)", path, name);
        return -1;
    }
    *t = (StTensor){name, dtype, (int)shape->len, {t->shape[0], t->shape[1], t->shape[2], t->shape[3]},
                    (uint64_t)b, (uint64_t)e};
    char dims[160];
    st_shape_string(t, dims, sizeof dims);
    const uint64_t width = dtype_width(dtype), bytes = mul_saturating(elems, width);
    if (!width) {
        snprintf(err, ERR_LEN, "%s: tensor %s has dtype %s, which safetensors does not define (corrupt header)" DAMAGED_FIX,
                 path, name, dtype);
        return -1;
    }
    if ((uint64_t)e > data_len) {
        snprintf(err, ERR_LEN, "%s: tensor %s ends at byte %lld of the data, past its end at %llu (truncated?)" DAMAGED_FIX,
                 path, name, e, (unsigned long long)data_len);
        return -1;
    }
    if ((uint64_t)(e - b) != bytes) {
        snprintf(err, ERR_LEN, "%s: tensor %s holds %lld bytes but %s %s takes %llu (corrupt header)", path, name, e - b,
                 dtype, dims, (unsigned long long)bytes);
        return -1;
    }
    return 0;
}

static int by_offset(const void *a, const void *b) {
    const StTensor *x = *(const StTensor *const *)a, *y = *(const StTensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

static int by_name(const void *a, const void *b) {
    return strcmp((*(const StTensor *const *)a)->name, (*(const StTensor *const *)b)->name);
}

/* The file's tensors in the order cmp gives (malloc'ed), or NULL with a message. */
static const StTensor **sorted_tensors(const StFile *s, int (*cmp)(const void *, const void *), char *err) {
    const StTensor **order = malloc((s->count ? s->count : 1) * sizeof *order);
    if (!order) {
        snprintf(err, ERR_LEN, "out of memory reading %s", s->path);
        return NULL;
    }
    for (size_t i = 0; i < s->count; i++) order[i] = &s->tensors[i];
    qsort(order, s->count, sizeof *order, cmp);
    return order;
}

/* A name the header lists twice: which of the two entries would be read is a guess. */
static int check_unique_names(const StFile *s, char *err) {
    const StTensor **order = sorted_tensors(s, by_name, err);
    if (!order) return -1;
    int rc = 0;
    for (size_t i = 1; rc == 0 && i < s->count; i++)
        if (strcmp(order[i - 1]->name, order[i]->name) == 0) {
            snprintf(err, ERR_LEN, "%s: tensor %s is listed twice in the header (corrupt file; re-export it)", s->path,
                     order[i]->name);
            rc = -1;
        }
    free(order);
    return rc;
}

/* The tensors cover the data exactly, as the format requires: no overlap (two tensors read from the
 * same bytes), no hole and no bytes after the last tensor (data that is no tensor's: a corrupt,
 * concatenated or crafted file). */
static int check_coverage(const StFile *s, uint64_t data_len, char *err) {
    const StTensor **order = sorted_tensors(s, by_offset, err);
    if (!order) return -1;
    int rc = 0;
    uint64_t covered = 0; /* the data before it is some tensor's */
    for (size_t i = 0; rc == 0 && i < s->count; i++) {
        if (order[i]->begin < covered) {
            snprintf(err, ERR_LEN, "%s: tensors %s and %s overlap in the data (corrupt file; re-export it)", s->path,
                     order[i - 1]->name, order[i]->name);
            rc = -1;
        } else if (order[i]->begin > covered) {
            snprintf(err, ERR_LEN, "%s: bytes %llu to %llu of the data belong to no tensor (corrupt file; re-export it)",
                     s->path, (unsigned long long)covered, (unsigned long long)order[i]->begin);
            rc = -1;
        }
        covered = order[i]->end;
    }
    if (rc == 0 && covered != data_len) {
        snprintf(err, ERR_LEN, "%s has %llu bytes after its last tensor (a corrupt or concatenated file; re-export it)",
                 s->path, (unsigned long long)(data_len - covered));
        rc = -1;
    }
    free(order);
    return rc;
}

int st_open(StFile *s, const char *path, char *err) {
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s", path);
    char why[ERR_LEN];
    if (!(s->f = open_regular(path, why))) {
        if (why[0])
            snprintf(err, ERR_LEN, "%s", why);
        else if (errno == EISDIR)
            snprintf(err, ERR_LEN, "%s is a directory, not a safetensors file", path);
        else
            snprintf(err, ERR_LEN, "cannot open %s: %s%s", path, strerror(errno),
                     errno == ENOENT ? " (a file of the weights is missing: is the directory whole?)" : "");
        return -1;
    }
    uint64_t hlen = 0, file_len = 0;
    uint8_t b8[8];
    if (fseek(s->f, 0, SEEK_END) == 0) file_len = (uint64_t)ftell(s->f);
    rewind(s->f);
    if (fread(b8, 1, 8, s->f) != 8) {
        snprintf(err, ERR_LEN, "%s is shorter than a safetensors header" DAMAGED_FIX, path);
        st_close(s);
        return -1;
    }
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b8[i];
    char *text = hlen <= MAX_HEADER && 8 + hlen <= file_len ? malloc(hlen + 1) : NULL;
    if (!text || fread(text, 1, hlen, s->f) != hlen) {
        free(text);
        snprintf(err, ERR_LEN, "%s has a header of %llu bytes in a %llu-byte file (not a safetensors file?)" DAMAGED_FIX,
                 path, (unsigned long long)hlen, (unsigned long long)file_len);
        st_close(s);
        return -1;
    }
    char jerr[ERR_LEN];
    s->header = json_parse(text, hlen, path, jerr);
    free(text);
    if (!s->header || s->header->type != JSON_OBJECT) {
        if (s->header)
            snprintf(err, ERR_LEN, "%s: the safetensors header is not a JSON object (not a safetensors file?)" DAMAGED_FIX,
                     path);
        else snprintf(err, ERR_LEN, "%s", jerr);
        st_close(s);
        return -1;
    }
    s->data_start = 8 + hlen;
    const JsonValue *h = s->header;
    if (!(s->tensors = malloc((h->len ? h->len : 1) * sizeof *s->tensors))) {
        snprintf(err, ERR_LEN, "out of memory reading %s", path);
        st_close(s);
        return -1;
    }
    for (size_t i = 0; i < h->len; i++) {
        if (strlen(h->members[i].key) != h->members[i].key_len) {
            snprintf(err, ERR_LEN, "%s: the tensor name \"%s\" goes on past a NUL character (corrupt header)" DAMAGED_FIX,
                     path, h->members[i].key);
            st_close(s);
            return -1;
        }
        if (strcmp(h->members[i].key, "__metadata__") == 0) continue;
        if (check_entry(h->members[i].key, &h->members[i].value, file_len - s->data_start, path,
                        &s->tensors[s->count++], err) != 0) {
            st_close(s);
            return -1;
        }
    }
    if (check_unique_names(s, err) != 0 || check_coverage(s, file_len - s->data_start, err) != 0) {
        st_close(s);
        return -1;
    }
    return 0;
}

void st_close(StFile *s) {
    if (s->f) fclose(s->f);
    json_free(s->header);
    free(s->tensors);
    s->f = NULL;
    s->header = NULL;
    s->tensors = NULL;
    s->count = 0;
}

int st_read_f32(StFile *s, const StTensor *t, float *out, char *err) {
    const uint64_t width = dtype_width(t->dtype);
    if (strcmp(t->dtype, "F32") && strcmp(t->dtype, "F16") && strcmp(t->dtype, "BF16")) {
        snprintf(err, ERR_LEN, "%s: tensor %s is %s; F32, F16 and BF16 are supported", s->path, t->name, t->dtype);
        return -1;
    }
    const size_t n = (size_t)((t->end - t->begin) / width);
    const off_t at = (off_t)(s->data_start + t->begin);
    const int fd = fileno(s->f);
    const int ok = width == 4 ? read_on_every_core(fd, out, n * sizeof(float), at)
                              : read_widened_on_every_core(fd, out, n, at, strcmp(t->dtype, "BF16") == 0);
    const int e = ok ? 0 : errno;
    if (e == EIO)
        snprintf(err, ERR_LEN, "cannot read tensor %s from %s (truncated?)" DAMAGED_FIX, t->name, s->path);
    else if (e)
        snprintf(err, ERR_LEN, "cannot read tensor %s from %s: %s", t->name, s->path, strerror(e));
    return e ? -1 : 0;
}
