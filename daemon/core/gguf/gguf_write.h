/* A small GGUF v3 writer, for tools and tests.
 *
 * Build up metadata and tensors, then write them out in one go.  Errors are
 * sticky: a setter that fails returns -1 and remembers its message, every
 * later call is a no-op returning -1, and the write functions report the
 * first message.  So a caller may check each call or only the write.
 *
 * Tensors are laid out as GGUF readers (and llama.cpp) expect: in the order
 * added, each at the next multiple of the alignment (general.alignment,
 * default 32) in the data section.
 */
#ifndef EXL_GGUF_WRITE_H
#define EXL_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/core/gguf/gguf.h"

struct gguf_writer;

/* NULL only when out of memory. */
struct gguf_writer *exl_gguf_writer_new(void);
void exl_gguf_writer_free(struct gguf_writer *w);

/* The first error, or NULL when there was none. */
const char *exl_gguf_writer_error(const struct gguf_writer *w);

/* Adds key with a copy of v (strings and nested arrays included; scalar
 * array data is count packed little-endian elements, as struct gguf_array
 * holds it, so a value read by gguf.h can be copied over as is).  A key may
 * be added once.  "general.alignment" must be a uint32 power of two; it sets
 * the alignment used for the data section. */
int exl_gguf_writer_set(struct gguf_writer *w, const char *key, const struct gguf_value *v);

int exl_gguf_writer_set_u8(struct gguf_writer *w, const char *key, uint8_t v);
int exl_gguf_writer_set_i8(struct gguf_writer *w, const char *key, int8_t v);
int exl_gguf_writer_set_u16(struct gguf_writer *w, const char *key, uint16_t v);
int exl_gguf_writer_set_i16(struct gguf_writer *w, const char *key, int16_t v);
int exl_gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v);
int exl_gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v);
int exl_gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v);
int exl_gguf_writer_set_i64(struct gguf_writer *w, const char *key, int64_t v);
int exl_gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v);
int exl_gguf_writer_set_f64(struct gguf_writer *w, const char *key, double v);
int exl_gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v);
int exl_gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *s);

/* A scalar array: data holds n packed little-endian elements of elem_type
 * (on a little-endian host, a plain C array: uint32_t[] for UINT32, float[]
 * for FLOAT32, bool[] for BOOL). */
int exl_gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_vtype elem_type,
			    const void *data, uint64_t n);
/* An array of n NUL-terminated strings. */
int exl_gguf_writer_set_str_arr(struct gguf_writer *w, const char *key, const char *const *strs,
				uint64_t n);
/* The same with explicit lengths (strings may hold NUL bytes). */
int exl_gguf_writer_set_strn_arr(struct gguf_writer *w, const char *key, const char *const *strs,
				 const uint64_t *lens, uint64_t n);

/* Sets general.alignment (a power of two). */
int exl_gguf_writer_set_alignment(struct gguf_writer *w, uint32_t alignment);

/* Adds a tensor of n_dims (1..4) dims ne[] (ne[0] is the row) and GGML type.
 * data holds its exl_dtype_row_bytes(type, ne[0]) * rows bytes; it is not
 * copied and must stay valid until the file is written. */
int exl_gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type,
			       uint32_t n_dims, const uint64_t *ne, const void *data);

/* Fills dst (nbytes, the tensor's size) with a tensor's data when the file is
 * written; returns 0, or -1 after writing a message into err. */
typedef int (*gguf_fill_fn)(void *ctx, void *dst, size_t nbytes, char *err, size_t errlen);

/* Like exl_gguf_writer_add_tensor, but the data is produced at write time by
 * fill(ctx, ...), one tensor at a time, so a large model never has to be in
 * memory whole. */
int exl_gguf_writer_add_tensor_fill(struct gguf_writer *w, const char *name, uint32_t type,
				    uint32_t n_dims, const uint64_t *ne, gguf_fill_fn fill,
				    void *ctx);

/* Writes the file to path (through a temporary file renamed into place). */
int exl_gguf_writer_write_file(struct gguf_writer *w, const char *path, char *err, size_t errlen);

/* Writes the file into a malloc'd buffer the caller frees. */
int exl_gguf_writer_write_mem(struct gguf_writer *w, void **buf, size_t *size, char *err,
			      size_t errlen);

#endif
