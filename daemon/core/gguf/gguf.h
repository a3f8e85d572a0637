/* GGUF v2/v3 reader.
 *
 * The file is mapped read-only and every length, count and offset in it is
 * validated against the mapping before it is used, so a truncated or lying
 * file is refused with a message and never read out of bounds.  Strings and
 * scalar arrays point into the mapping; they are not NUL-terminated.
 */
#ifndef EXL_GGUF_H
#define EXL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GGUF_MAX_DIMS 4

enum gguf_vtype {
	GGUF_VT_UINT8 = 0,
	GGUF_VT_INT8 = 1,
	GGUF_VT_UINT16 = 2,
	GGUF_VT_INT16 = 3,
	GGUF_VT_UINT32 = 4,
	GGUF_VT_INT32 = 5,
	GGUF_VT_FLOAT32 = 6,
	GGUF_VT_BOOL = 7,
	GGUF_VT_STRING = 8,
	GGUF_VT_ARRAY = 9,
	GGUF_VT_UINT64 = 10,
	GGUF_VT_INT64 = 11,
	GGUF_VT_FLOAT64 = 12,
	GGUF_VT_COUNT
};

struct gguf_str {
	uint64_t len;
	const char *ptr; /* into the mapping, not NUL-terminated */
};

struct gguf_value;

struct gguf_array {
	enum gguf_vtype elem_type;
	uint64_t count;
	/* Exactly one of these is used, by elem_type:
	 * scalars: data points at count packed little-endian elements
	 * (possibly unaligned: read with memcpy or gguf_arr_get_*);
	 * STRING: strs[count]; ARRAY: arrs[count] (nested arrays). */
	const void *data;
	struct gguf_str *strs;
	struct gguf_array *arrs;
};

struct gguf_value {
	enum gguf_vtype type;
	union {
		uint64_t u64; /* every unsigned integer type, and BOOL */
		int64_t i64;  /* every signed integer type */
		double f64;   /* FLOAT32 and FLOAT64 */
		struct gguf_str str;
		struct gguf_array arr;
	};
};

struct gguf_kv {
	struct gguf_str key;
	uint64_t offset; /* file offset of the key, for messages */
	struct gguf_value val;
};

struct gguf_tensor {
	struct gguf_str name;
	uint32_t n_dims;
	uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the contiguous (row) dim; unused dims are 1 */
	uint32_t type;              /* enum exl_dtype */
	uint64_t offset;            /* relative to the data section */
	uint64_t nbytes;
	const void *data;           /* into the mapping */
};

struct gguf_file {
	uint32_t version;
	uint64_t n_kv;
	struct gguf_kv *kv;
	uint64_t n_tensors;
	struct gguf_tensor *tensors;
	uint32_t alignment;
	uint64_t data_offset; /* file offset of the tensor data section */
	const uint8_t *base;  /* the whole file */
	size_t size;
	bool mapped;          /* base is an mmap we own (else a caller's buffer) */
	/* A split model's other parts (gguf_split.h), owned: tensors point
	 * into their mappings too.  NULL / 0 for a whole file. */
	struct gguf_file **parts;
	uint32_t n_parts;
};

/* Opens and validates PATH.  On failure returns NULL and writes a message
 * naming the problem and its file offset into err.  The first part of a
 * model split by gguf-split opens the whole set (gguf_split.h). */
struct gguf_file *exl_gguf_open(const char *path, char *err, size_t errlen);

/* The same over a caller-owned buffer that must outlive the result (tests,
 * fuzzing). */
struct gguf_file *exl_gguf_open_buffer(const void *buf, size_t size, char *err, size_t errlen);

void exl_gguf_close(struct gguf_file *f);

/* Gives back the memory of the whole pages within [p, p + len) of a mapped
 * file (a tensor the backend now holds in a copy of its own); a later read
 * there maps the file's bytes in again.  Nothing for a caller's buffer. */
void exl_gguf_drop_pages(const struct gguf_file *f, const void *p, size_t len);

const struct gguf_kv *exl_gguf_find_kv(const struct gguf_file *f, const char *key);
const struct gguf_tensor *exl_gguf_find_tensor(const struct gguf_file *f, const char *name);

/* Typed getters: return false when the key is absent or of an incompatible
 * type.  Integer getters accept any integer type whose value fits. */
bool exl_gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out);
bool exl_gguf_get_u64(const struct gguf_file *f, const char *key, uint64_t *out);
bool exl_gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out);
bool exl_gguf_get_f32(const struct gguf_file *f, const char *key, float *out);
bool exl_gguf_get_bool(const struct gguf_file *f, const char *key, bool *out);
/* Copies into a NUL-terminated buffer; false when absent, not a string or too long. */
bool exl_gguf_get_str(const struct gguf_file *f, const char *key, char *buf, size_t buflen);
const struct gguf_array *exl_gguf_get_arr(const struct gguf_file *f, const char *key);

/* True when s equals the C string c. */
bool exl_gguf_str_eq(struct gguf_str s, const char *c);

const char *exl_gguf_vtype_name(enum gguf_vtype t);

/* Encoded bytes of one element of a scalar type; 0 for STRING, ARRAY and
 * unknown types. */
size_t exl_gguf_vtype_size(enum gguf_vtype t);

/* Element i of a scalar array (the data may be unaligned; these read it
 * safely).  exl_gguf_arr_get_i64 takes any integer element type whose
 * value fits; exl_gguf_arr_get_f64 also takes FLOAT32/FLOAT64.  False when
 * i is out of range or the element type does not convert. */
bool exl_gguf_arr_get_i64(const struct gguf_array *a, uint64_t i, int64_t *out);
bool exl_gguf_arr_get_f64(const struct gguf_array *a, uint64_t i, double *out);

#endif
