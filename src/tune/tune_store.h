/* Persistent autotune records: ${MLXCEL_CACHE_DIR:-$HOME/.cache/mlxcel}/autotune/, one JSON file
 * per key (op, device id, shape bucket, dtype), written atomically (temp file + fsync + rename).
 * A record carries the schema version and the mlxcel version that wrote it; a stale or corrupt
 * record is reported and ignored, never trusted. */
#ifndef MLXCEL_TUNE_STORE_H
#define MLXCEL_TUNE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define TUNE_SCHEMA_VERSION 1

typedef struct tune_key {
    char op[32];
    char device[256];
    char bucket[128];
    char dtype[16];
} tune_key;

typedef struct tune_record {
    tune_key key;
    int value;         /* the winner (may equal the default) */
    int default_value; /* what the built-in policy picked when this was measured */
    double best_us, spread_us, default_us, speedup;
    int reps;
    int64_t created;   /* unix seconds */
} tune_record;

/* "<op>|<device>|<bucket>|<dtype>" (what the file name hashes). */
void tune_key_string(const tune_key *k, char *buf, size_t n);
/* "<op>-<16 hex of xxh64(key string)>.json" */
void tune_key_filename(const tune_key *k, char *buf, size_t n);

/* <cache_dir>/autotune from mx_env(). Pure string work: touches no file. */
void tune_store_dir(char *buf, size_t n);

/* Creates dir (and parents) and writes the record atomically. */
int tune_store_write(const char *dir, const tune_record *r, mx_error *err);

/* 1: found and valid (*out filled); 0: no record for the key; 2: a record exists but is stale
 * (other schema or mlxcel version) or corrupt (err says why, the caller warns); -1: I/O error. */
#define TUNE_READ_MISSING 0
#define TUNE_READ_OK 1
#define TUNE_READ_IGNORED 2
int tune_store_read(const char *dir, const tune_key *k, tune_record *out, mx_error *err);

/* Number of filesystem calls the store has made in this process (open, stat, mkdir, rename,
 * ...). Lets tests prove that MLXCEL_AUTOTUNE unset touches no file. */
long tune_store_fs_calls(void);

#endif
