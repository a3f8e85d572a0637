/* Models split by llama.cpp's gguf-split into PREFIX-00001-of-0000N.gguf,
 * PREFIX-00002-of-0000N.gguf, ...: the first part holds the model's
 * metadata with split.count N, each part (split.no, from 0) a GGUF of its
 * own with a share of the tensors.  exl_gguf_open joins them: opened at
 * the first part, the file lists every part's tensors, each pointing into
 * its own part's mapping, which the file keeps (struct gguf_file's
 * parts). */
#ifndef EXL_GGUF_SPLIT_H
#define EXL_GGUF_SPLIT_H

#include <stdbool.h>
#include <stddef.h>

#include "daemon/core/gguf/gguf.h"

#define EXL_GGUF_MAX_SPLITS 256

/* Whether a file name (with or without ".gguf", or a path) ends as part k
 * of n: "-%05d-of-%05d", 1 <= k <= n, n >= 2. */
bool exl_gguf_split_name(const char *name, size_t len, int *k, int *n);

/* The path of part k (1..n) of the set whose first part is at first; -1
 * when first is not named as part 1 of n or out is too small. */
int exl_gguf_split_path(const char *first, int k, int n, char *out, size_t outlen);

/* Opens the other parts of f (opened from path) when it is the first of
 * a split set, and appends their tensors; 0 with nothing to do for a
 * whole file.  -1 with a message: f is a later part, a part is missing or
 * disagrees, a tensor is in two parts. */
int exl_gguf_join_split(struct gguf_file *f, const char *path, char *err, size_t errlen);

/* exl_gguf_open without the joining, for the parts themselves. */
struct gguf_file *exl_gguf_open_part(const char *path, char *err, size_t errlen);

#endif
