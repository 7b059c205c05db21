/* safetensors: mmap-based reader with a bounded header parser, and a writer.
 * Validation on open: 8-byte header length within the file and below a fixed cap, header is a
 * JSON object, every tensor has a known dtype, shape product x dtype size == byte length, every
 * byte range inside the data section, no two ranges overlap. `__metadata__` is kept. */
#ifndef MLXCEL_IO_SAFETENSORS_H
#define MLXCEL_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/error.h"

#define ST_MAX_DIMS 8

typedef struct st_tensor {
    char *name;
    mx_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t offset;        /* from the start of the data section */
    uint64_t nbytes;
    const void *data;       /* points into the mapping */
} st_tensor;

typedef struct st_file {
    char *path;
    void *map;              /* whole-file mapping */
    size_t map_size;
    uint64_t header_len;
    const uint8_t *data;    /* start of the data section */
    uint64_t data_len;
    int n_tensors;
    st_tensor *tensors;     /* sorted by name */
    int n_meta;
    char **meta_keys;       /* __metadata__ (string -> string) */
    char **meta_vals;
} st_file;

int st_open(st_file *f, const char *path, mx_error *err);
/* Parses a header held in memory (fuzzing, tests). data_len is the size of the data section. */
int st_parse_header(st_file *f, const char *json, size_t json_len, uint64_t data_len, mx_error *err);
/* Validates a whole safetensors image held in memory (8-byte length, header, data) exactly as
 * st_open does; tensors point into `buf`, which must outlive `f`. `name` labels errors. */
int st_parse_buffer(st_file *f, const void *buf, size_t size, const char *name, mx_error *err);
void st_close(st_file *f);
const st_tensor *st_find(const st_file *f, const char *name);
const char *st_meta(const st_file *f, const char *key);

/* ---- writer ---- */
typedef struct st_write_tensor {
    const char *name;
    mx_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;       /* nbytes = prod(shape) * dtype size */
} st_write_tensor;

/* Writes tensors in the given order (8-byte aligned offsets); metadata pairs may be NULL. */
int st_write(const char *path, const st_write_tensor *tensors, int n, const char *const *meta_keys,
             const char *const *meta_vals, int n_meta, mx_error *err);

#endif
