/* GGUF v2/v3 reader: maps the file and validates every count, length and
 * offset against the mapping before it is trusted. */
#include "daemon/core/gguf/gguf.h"
#include "daemon/core/gguf/gguf_split.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/formats/dtype.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
/* Arrays of arrays nest at most this deep; deeper would only serve to
 * exhaust the stack. */
#define GGUF_MAX_NESTING 16

/* Smallest encodings, used to bound counts by the bytes that remain before
 * anything is allocated. */
#define MIN_STR_BYTES 8             /* u64 length, empty string */
#define MIN_KV_BYTES (8 + 1 + 4 + 1) /* non-empty key, type, 1-byte value */
#define MIN_ARR_BYTES (4 + 8)       /* element type, count */
#define MIN_TENSOR_BYTES (8 + 1 + 4 + 8 + 4 + 8)

struct reader {
	const uint8_t *p;
	size_t size;
	size_t pos;
	char *err;
	size_t errlen;
	char where[192]; /* "key 'x'" or "tensor 'y'", for messages */
};

static const char *const vtype_names[GGUF_VT_COUNT] = {
	[GGUF_VT_UINT8] = "uint8",
	[GGUF_VT_INT8] = "int8",
	[GGUF_VT_UINT16] = "uint16",
	[GGUF_VT_INT16] = "int16",
	[GGUF_VT_UINT32] = "uint32",
	[GGUF_VT_INT32] = "int32",
	[GGUF_VT_FLOAT32] = "float32",
	[GGUF_VT_BOOL] = "bool",
	[GGUF_VT_STRING] = "string",
	[GGUF_VT_ARRAY] = "array",
	[GGUF_VT_UINT64] = "uint64",
	[GGUF_VT_INT64] = "int64",
	[GGUF_VT_FLOAT64] = "float64",
};

/* Encoded size of a scalar type; 0 for STRING and ARRAY. */
static const uint8_t vtype_size[GGUF_VT_COUNT] = {
	[GGUF_VT_UINT8] = 1, [GGUF_VT_INT8] = 1, [GGUF_VT_UINT16] = 2,
	[GGUF_VT_INT16] = 2, [GGUF_VT_UINT32] = 4, [GGUF_VT_INT32] = 4,
	[GGUF_VT_FLOAT32] = 4, [GGUF_VT_BOOL] = 1, [GGUF_VT_UINT64] = 8,
	[GGUF_VT_INT64] = 8, [GGUF_VT_FLOAT64] = 8,
};

const char *exl_gguf_vtype_name(enum gguf_vtype t)
{
	if ((unsigned)t >= GGUF_VT_COUNT)
		return "unknown";
	return vtype_names[t];
}

/* Copies s into buf as printable text, truncated with "..." when long. */
static void str_printable(struct gguf_str s, char *buf, size_t buflen)
{
	size_t o = 0;
	const size_t max = 64;

	for (uint64_t i = 0; i < s.len && o + 5 < buflen; i++) {
		unsigned char c = (unsigned char)s.ptr[i];

		if (i == max) {
			memcpy(buf + o, "...", 3);
			o += 3;
			break;
		}
		if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
			buf[o++] = (char)c;
		} else {
			snprintf(buf + o, buflen - o, "\\x%02x", c);
			o += 4;
		}
	}
	buf[o] = '\0';
}

static int fail_at(struct reader *r, size_t off, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (r->errlen) {
		if (r->where[0])
			snprintf(r->err, r->errlen, "gguf: %s: %s (at offset %zu)", r->where, msg, off);
		else
			snprintf(r->err, r->errlen, "gguf: %s (at offset %zu)", msg, off);
	}
	return -1;
}

static size_t remaining(const struct reader *r)
{
	return r->size - r->pos;
}

static int need(struct reader *r, size_t n, const char *what)
{
	if (remaining(r) < n)
		return fail_at(r, r->pos, "file truncated: %s needs %zu bytes, %zu left",
			       what, n, remaining(r));
	return 0;
}

static uint64_t load_le(const uint8_t *p, unsigned n)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static int rd_u32(struct reader *r, uint32_t *out, const char *what)
{
	if (need(r, 4, what))
		return -1;
	*out = (uint32_t)load_le(r->p + r->pos, 4);
	r->pos += 4;
	return 0;
}

static int rd_u64(struct reader *r, uint64_t *out, const char *what)
{
	if (need(r, 8, what))
		return -1;
	*out = load_le(r->p + r->pos, 8);
	r->pos += 8;
	return 0;
}

static int rd_str(struct reader *r, struct gguf_str *s, const char *what)
{
	size_t at = r->pos;
	uint64_t len;

	if (rd_u64(r, &len, what))
		return -1;
	if (len > remaining(r))
		return fail_at(r, at, "%s of %llu bytes exceeds file size (%zu bytes left)",
			       what, (unsigned long long)len, remaining(r));
	s->len = len;
	s->ptr = (const char *)r->p + r->pos;
	r->pos += (size_t)len;
	return 0;
}

/* Reads a scalar of type t into v. */
static int rd_scalar(struct reader *r, enum gguf_vtype t, struct gguf_value *v)
{
	unsigned n = vtype_size[t];
	uint64_t raw;

	if (need(r, n, exl_gguf_vtype_name(t)))
		return -1;
	raw = load_le(r->p + r->pos, n);
	switch (t) {
	case GGUF_VT_UINT8:
	case GGUF_VT_UINT16:
	case GGUF_VT_UINT32:
	case GGUF_VT_UINT64:
		v->u64 = raw;
		break;
	case GGUF_VT_BOOL:
		if (raw > 1)
			return fail_at(r, r->pos, "bool value %u is neither 0 nor 1", (unsigned)raw);
		v->u64 = raw;
		break;
	case GGUF_VT_INT8:
		v->i64 = (int8_t)raw;
		break;
	case GGUF_VT_INT16:
		v->i64 = (int16_t)raw;
		break;
	case GGUF_VT_INT32:
		v->i64 = (int32_t)raw;
		break;
	case GGUF_VT_INT64:
		v->i64 = (int64_t)raw;
		break;
	case GGUF_VT_FLOAT32: {
		uint32_t bits = (uint32_t)raw;
		float f;

		memcpy(&f, &bits, sizeof(f));
		v->f64 = f;
		break;
	}
	case GGUF_VT_FLOAT64:
		memcpy(&v->f64, &raw, sizeof(v->f64));
		break;
	default:
		return fail_at(r, r->pos, "internal: %s is not a scalar", exl_gguf_vtype_name(t));
	}
	r->pos += n;
	return 0;
}

static void free_array(struct gguf_array *a)
{
	if (a->elem_type == GGUF_VT_ARRAY && a->arrs) {
		for (uint64_t i = 0; i < a->count; i++)
			free_array(&a->arrs[i]);
	}
	free(a->strs);
	free(a->arrs);
	a->strs = NULL;
	a->arrs = NULL;
}

static int rd_array_body(struct reader *r, struct gguf_array *a, int depth);

/* Reads an array's element type and count, then its elements.  On failure a
 * is left freeable by free_array. */
static int rd_array(struct reader *r, struct gguf_array *a, int depth)
{
	uint32_t et;
	size_t at = r->pos;

	memset(a, 0, sizeof(*a));
	if (depth >= GGUF_MAX_NESTING)
		return fail_at(r, at, "arrays nested more than %d deep", GGUF_MAX_NESTING);
	if (rd_u32(r, &et, "array element type"))
		return -1;
	if (et >= GGUF_VT_COUNT)
		return fail_at(r, at, "array of unknown value type %u", et);
	a->elem_type = (enum gguf_vtype)et;
	if (rd_u64(r, &a->count, "array count"))
		return -1;
	return rd_array_body(r, a, depth);
}

static int rd_array_body(struct reader *r, struct gguf_array *a, int depth)
{
	size_t at = r->pos - 8; /* the count field */
	uint64_t n = a->count;
	const char *tn = exl_gguf_vtype_name(a->elem_type);

	if (a->elem_type == GGUF_VT_STRING) {
		if (n > remaining(r) / MIN_STR_BYTES)
			return fail_at(r, at, "array of %llu strings exceeds file size",
				       (unsigned long long)n);
		/* calloc(0) may return NULL; keep a valid pointer either way */
		a->strs = calloc(n ? n : 1, sizeof(*a->strs));
		if (!a->strs)
			return fail_at(r, at, "out of memory for %llu strings", (unsigned long long)n);
		for (uint64_t i = 0; i < n; i++)
			if (rd_str(r, &a->strs[i], "array string"))
				return -1;
		return 0;
	}
	if (a->elem_type == GGUF_VT_ARRAY) {
		if (n > remaining(r) / MIN_ARR_BYTES)
			return fail_at(r, at, "array of %llu arrays exceeds file size",
				       (unsigned long long)n);
		a->arrs = calloc(n ? n : 1, sizeof(*a->arrs));
		if (!a->arrs)
			return fail_at(r, at, "out of memory for %llu arrays", (unsigned long long)n);
		for (uint64_t i = 0; i < n; i++) {
			if (rd_array(r, &a->arrs[i], depth + 1)) {
				/* only elements 0..i hold anything */
				a->count = i + 1;
				return -1;
			}
		}
		return 0;
	}
	if (n > remaining(r) / vtype_size[a->elem_type])
		return fail_at(r, at, "array of %llu %s exceeds file size (%zu bytes left)",
			       (unsigned long long)n, tn, remaining(r));
	a->data = r->p + r->pos;
	if (a->elem_type == GGUF_VT_BOOL) {
		for (uint64_t i = 0; i < n; i++)
			if (r->p[r->pos + i] > 1)
				return fail_at(r, r->pos + (size_t)i,
					       "bool array element %llu is %u, neither 0 nor 1",
					       (unsigned long long)i, r->p[r->pos + i]);
	}
	r->pos += (size_t)n * vtype_size[a->elem_type];
	return 0;
}

static int rd_value(struct reader *r, struct gguf_value *v)
{
	switch (v->type) {
	case GGUF_VT_STRING:
		return rd_str(r, &v->str, "string value");
	case GGUF_VT_ARRAY:
		return rd_array(r, &v->arr, 0);
	default:
		return rd_scalar(r, v->type, v);
	}
}

static void free_value(struct gguf_value *v)
{
	if (v->type == GGUF_VT_ARRAY)
		free_array(&v->arr);
}

void exl_gguf_close(struct gguf_file *f)
{
	if (!f)
		return;
	if (f->kv) {
		for (uint64_t i = 0; i < f->n_kv; i++)
			free_value(&f->kv[i].val);
		free(f->kv);
	}
	free(f->tensors);
	for (uint32_t i = 0; i < f->n_parts; i++)
		exl_gguf_close(f->parts[i]);
	free(f->parts);
	if (f->mapped && f->base)
		munmap((void *)f->base, f->size);
	free(f);
}

static int str_cmp(struct gguf_str a, struct gguf_str b)
{
	size_t n = a.len < b.len ? (size_t)a.len : (size_t)b.len;
	int c = n ? memcmp(a.ptr, b.ptr, n) : 0;

	if (c)
		return c;
	return (a.len > b.len) - (a.len < b.len);
}

static int str_ptr_cmp(const void *pa, const void *pb)
{
	const struct gguf_str *a = *(const struct gguf_str *const *)pa;
	const struct gguf_str *b = *(const struct gguf_str *const *)pb;
	int c = str_cmp(*a, *b);

	if (c)
		return c;
	/* ties by position, so the later duplicate is the one reported */
	return (a > b) - (a < b);
}

/* Finds a duplicate among n names laid out with the given stride; returns
 * the later duplicate's index, n when none, or -1 on allocation failure. */
static int64_t find_duplicate(const void *first, size_t stride, uint64_t n)
{
	const struct gguf_str **v;
	int64_t dup = (int64_t)n;

	if (n < 2)
		return (int64_t)n;
	v = malloc(n * sizeof(*v));
	if (!v)
		return -1;
	for (uint64_t i = 0; i < n; i++)
		v[i] = (const struct gguf_str *)((const char *)first + i * stride);
	qsort(v, n, sizeof(*v), str_ptr_cmp);
	for (uint64_t i = 1; i < n; i++) {
		if (!str_cmp(*v[i - 1], *v[i])) {
			int64_t idx = (int64_t)(((const char *)v[i] - (const char *)first) / stride);

			if (idx < dup)
				dup = idx;
		}
	}
	free(v);
	return dup;
}

static int parse_kv(struct reader *r, struct gguf_file *f)
{
	char name[96];

	f->kv = calloc(f->n_kv ? f->n_kv : 1, sizeof(*f->kv));
	if (!f->kv)
		return fail_at(r, 16, "out of memory for %llu kv pairs", (unsigned long long)f->n_kv);
	for (uint64_t i = 0; i < f->n_kv; i++) {
		struct gguf_kv *kv = &f->kv[i];
		uint32_t t;
		size_t at;

		snprintf(r->where, sizeof(r->where), "kv pair %llu", (unsigned long long)i);
		kv->offset = r->pos;
		/* A failed value must stay freeable: type UINT8 owns nothing. */
		kv->val.type = GGUF_VT_UINT8;
		if (rd_str(r, &kv->key, "key"))
			return -1;
		if (kv->key.len == 0)
			return fail_at(r, (size_t)kv->offset, "empty key");
		str_printable(kv->key, name, sizeof(name));
		snprintf(r->where, sizeof(r->where), "key '%s'", name);
		at = r->pos;
		if (rd_u32(r, &t, "value type"))
			return -1;
		if (t >= GGUF_VT_COUNT)
			return fail_at(r, at, "unknown value type %u", t);
		kv->val.type = (enum gguf_vtype)t;
		if (rd_value(r, &kv->val))
			return -1;
	}
	r->where[0] = '\0';

	int64_t dup = find_duplicate(&f->kv[0].key, sizeof(f->kv[0]), f->n_kv);

	if (dup < 0)
		return fail_at(r, 16, "out of memory checking keys");
	if ((uint64_t)dup < f->n_kv) {
		str_printable(f->kv[dup].key, name, sizeof(name));
		return fail_at(r, (size_t)f->kv[dup].offset, "duplicate key '%s'", name);
	}
	return 0;
}

static int value_as_u64(const struct gguf_value *v, uint64_t *out)
{
	switch (v->type) {
	case GGUF_VT_UINT8:
	case GGUF_VT_UINT16:
	case GGUF_VT_UINT32:
	case GGUF_VT_UINT64:
		*out = v->u64;
		return 0;
	case GGUF_VT_INT8:
	case GGUF_VT_INT16:
	case GGUF_VT_INT32:
	case GGUF_VT_INT64:
		if (v->i64 < 0)
			return -1;
		*out = (uint64_t)v->i64;
		return 0;
	default:
		return -1;
	}
}

static int value_as_i64(const struct gguf_value *v, int64_t *out)
{
	switch (v->type) {
	case GGUF_VT_UINT8:
	case GGUF_VT_UINT16:
	case GGUF_VT_UINT32:
	case GGUF_VT_UINT64:
		if (v->u64 > (uint64_t)INT64_MAX)
			return -1;
		*out = (int64_t)v->u64;
		return 0;
	case GGUF_VT_INT8:
	case GGUF_VT_INT16:
	case GGUF_VT_INT32:
	case GGUF_VT_INT64:
		*out = v->i64;
		return 0;
	default:
		return -1;
	}
}

static int parse_alignment(struct reader *r, struct gguf_file *f)
{
	const struct gguf_kv *kv = exl_gguf_find_kv(f, "general.alignment");
	uint64_t a;

	f->alignment = GGUF_DEFAULT_ALIGNMENT;
	if (!kv)
		return 0;
	snprintf(r->where, sizeof(r->where), "key 'general.alignment'");
	if (value_as_u64(&kv->val, &a))
		return fail_at(r, (size_t)kv->offset, "must be a non-negative integer, not %s",
			       exl_gguf_vtype_name(kv->val.type));
	if (a == 0 || a > UINT32_MAX || (a & (a - 1)))
		return fail_at(r, (size_t)kv->offset, "alignment %llu is not a nonzero power of two",
			       (unsigned long long)a);
	f->alignment = (uint32_t)a;
	r->where[0] = '\0';
	return 0;
}

static int parse_tensor_info(struct reader *r, struct gguf_tensor *t, uint64_t idx)
{
	char name[96];
	size_t at = r->pos;
	const struct exl_dtype_info *info;
	uint64_t nrows = 1, nelem;
	size_t row;

	snprintf(r->where, sizeof(r->where), "tensor %llu", (unsigned long long)idx);
	if (rd_str(r, &t->name, "tensor name"))
		return -1;
	if (t->name.len == 0)
		return fail_at(r, at, "empty tensor name");
	str_printable(t->name, name, sizeof(name));
	snprintf(r->where, sizeof(r->where), "tensor '%s'", name);
	at = r->pos;
	if (rd_u32(r, &t->n_dims, "n_dims"))
		return -1;
	if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
		return fail_at(r, at, "n_dims %u is not in 1..%d", t->n_dims, GGUF_MAX_DIMS);
	for (int d = 0; d < GGUF_MAX_DIMS; d++)
		t->ne[d] = 1;
	for (uint32_t d = 0; d < t->n_dims; d++) {
		at = r->pos;
		if (rd_u64(r, &t->ne[d], "dimension"))
			return -1;
		if (t->ne[d] == 0 || t->ne[d] > (uint64_t)INT64_MAX)
			return fail_at(r, at, "dimension %u is %llu", d, (unsigned long long)t->ne[d]);
	}
	nelem = t->ne[0];
	for (int d = 1; d < GGUF_MAX_DIMS; d++) {
		if (nelem > (uint64_t)INT64_MAX / t->ne[d])
			return fail_at(r, at, "element count overflows");
		nelem *= t->ne[d];
		nrows *= t->ne[d];
	}
	at = r->pos;
	if (rd_u32(r, &t->type, "tensor type"))
		return -1;
	info = exl_dtype_info(t->type);
	if (!info)
		return fail_at(r, at, "unknown tensor type %u", t->type);
	if (t->ne[0] % info->block_elems)
		return fail_at(r, at, "row of %llu elements is not a whole number of %s blocks of %u",
			       (unsigned long long)t->ne[0], info->name, info->block_elems);
	row = exl_dtype_row_bytes(t->type, t->ne[0]);
	if (row == 0 || nrows > SIZE_MAX / row)
		return fail_at(r, at, "tensor byte size overflows");
	t->nbytes = (uint64_t)row * nrows;
	if (rd_u64(r, &t->offset, "tensor offset"))
		return -1;
	return 0;
}

static int parse_tensors(struct reader *r, struct gguf_file *f)
{
	char name[96];
	size_t data_size;

	f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof(*f->tensors));
	if (!f->tensors)
		return fail_at(r, 8, "out of memory for %llu tensors", (unsigned long long)f->n_tensors);

	/* Where each tensor info starts, for messages after the loop. */
	size_t *info_off = malloc((f->n_tensors ? f->n_tensors : 1) * sizeof(*info_off));

	if (!info_off)
		return fail_at(r, 8, "out of memory for %llu tensors", (unsigned long long)f->n_tensors);
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		info_off[i] = r->pos;
		if (parse_tensor_info(r, &f->tensors[i], i))
			goto fail;
	}
	r->where[0] = '\0';

	int64_t dup = find_duplicate(&f->tensors[0].name, sizeof(f->tensors[0]), f->n_tensors);

	if (dup < 0) {
		fail_at(r, r->pos, "out of memory checking tensor names");
		goto fail;
	}
	if ((uint64_t)dup < f->n_tensors) {
		str_printable(f->tensors[dup].name, name, sizeof(name));
		fail_at(r, info_off[dup], "duplicate tensor name '%s'", name);
		goto fail;
	}

	/* The data section starts at the next multiple of the alignment. */
	size_t pad = (f->alignment - r->pos % f->alignment) % f->alignment;

	if (pad > SIZE_MAX - r->pos) {
		fail_at(r, r->pos, "data section offset overflows");
		goto fail;
	}
	f->data_offset = r->pos + pad;
	if (f->n_tensors && f->data_offset > r->size) {
		fail_at(r, r->pos, "file truncated: data section would start at %llu, file is %zu bytes",
			(unsigned long long)f->data_offset, r->size);
		goto fail;
	}
	data_size = f->data_offset <= r->size ? r->size - (size_t)f->data_offset : 0;
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		struct gguf_tensor *t = &f->tensors[i];
		/* the offset field is the last 8 bytes of the info */
		size_t off_at = (i + 1 < f->n_tensors ? info_off[i + 1] : r->pos) - 8;

		str_printable(t->name, name, sizeof(name));
		snprintf(r->where, sizeof(r->where), "tensor '%s'", name);
		if (t->offset % f->alignment) {
			fail_at(r, off_at, "data offset %llu is not a multiple of the alignment %u",
				(unsigned long long)t->offset, f->alignment);
			goto fail;
		}
		/* Tensors are read in place, as elements or block structs: a
		 * general.alignment under 8 (a power of two, so valid) can
		 * leave one where its type cannot be read. */
		size_t need = exl_dtype_align(t->type);
		if ((f->data_offset + t->offset) % need) {
			fail_at(r, off_at, "data at file offset %llu is not aligned to the %zu bytes "
				"a %s element needs (general.alignment is %u)",
				(unsigned long long)(f->data_offset + t->offset), need,
				exl_dtype_info(t->type)->name, f->alignment);
			goto fail;
		}
		if (t->offset > data_size || t->nbytes > data_size - t->offset) {
			fail_at(r, off_at, "data [%llu, +%llu) runs past the end of the file (data section is %zu bytes)",
				(unsigned long long)t->offset, (unsigned long long)t->nbytes, data_size);
			goto fail;
		}
		t->data = r->p + f->data_offset + t->offset;
	}
	r->where[0] = '\0';
	free(info_off);
	return 0;
fail:
	free(info_off);
	return -1;
}

static struct gguf_file *parse(const uint8_t *base, size_t size, char *err, size_t errlen)
{
	struct reader r = { .p = base, .size = size, .err = err, .errlen = errlen };
	struct gguf_file *f;
	uint64_t min_bytes;

	if (errlen)
		err[0] = '\0';
	if (size < 4 || memcmp(base, GGUF_MAGIC, 4)) {
		if (size < 4)
			fail_at(&r, 0, "not a GGUF file: only %zu bytes", size);
		else
			fail_at(&r, 0, "not a GGUF file: bad magic %02x %02x %02x %02x",
				base[0], base[1], base[2], base[3]);
		return NULL;
	}
	r.pos = 4;
	f = calloc(1, sizeof(*f));
	if (!f) {
		fail_at(&r, 0, "out of memory");
		return NULL;
	}
	f->base = base;
	f->size = size;
	if (rd_u32(&r, &f->version, "version"))
		goto fail;
	if (f->version == 1) {
		fail_at(&r, 4, "GGUF version 1 is not supported (it predates 64-bit counts; reconvert the model)");
		goto fail;
	}
	if (f->version == 0x02000000 || f->version == 0x03000000) {
		fail_at(&r, 4, "big-endian GGUF is not supported");
		goto fail;
	}
	if (f->version != 2 && f->version != 3) {
		fail_at(&r, 4, "unsupported GGUF version %u (2 and 3 are)", f->version);
		goto fail;
	}
	if (rd_u64(&r, &f->n_tensors, "tensor count") || rd_u64(&r, &f->n_kv, "kv count"))
		goto fail;
	if (f->n_tensors > remaining(&r) / MIN_TENSOR_BYTES) {
		fail_at(&r, 8, "%llu tensors exceed file size (each takes at least %d bytes, %zu left)",
			(unsigned long long)f->n_tensors, MIN_TENSOR_BYTES, remaining(&r));
		goto fail;
	}
	if (f->n_kv > remaining(&r) / MIN_KV_BYTES) {
		fail_at(&r, 16, "%llu kv pairs exceed file size (each takes at least %d bytes, %zu left)",
			(unsigned long long)f->n_kv, MIN_KV_BYTES, remaining(&r));
		goto fail;
	}
	min_bytes = f->n_tensors * MIN_TENSOR_BYTES + f->n_kv * MIN_KV_BYTES;
	if (min_bytes > remaining(&r)) {
		fail_at(&r, 8, "%llu tensors and %llu kv pairs exceed file size (%zu bytes left)",
			(unsigned long long)f->n_tensors, (unsigned long long)f->n_kv, remaining(&r));
		goto fail;
	}
	if (parse_kv(&r, f) || parse_alignment(&r, f) || parse_tensors(&r, f))
		goto fail;
	return f;
fail:
	/* exl_gguf_close must not unmap a buffer the caller owns */
	f->mapped = false;
	exl_gguf_close(f);
	return NULL;
}

struct gguf_file *exl_gguf_open_buffer(const void *buf, size_t size, char *err, size_t errlen)
{
	if (!buf && size) {
		snprintf(err, errlen, "gguf: NULL buffer of %zu bytes", size);
		return NULL;
	}
	return parse(buf ? buf : "", size, err, errlen);
}

struct gguf_file *exl_gguf_open(const char *path, char *err, size_t errlen)
{
	struct gguf_file *f = exl_gguf_open_part(path, err, errlen);

	if (f && exl_gguf_join_split(f, path, err, errlen)) {
		exl_gguf_close(f);
		return NULL;
	}
	return f;
}

struct gguf_file *exl_gguf_open_part(const char *path, char *err, size_t errlen)
{
	struct gguf_file *f;
	struct stat st;
	void *map;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(err, errlen, "gguf: cannot open %s: %s", path, strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st)) {
		snprintf(err, errlen, "gguf: cannot stat %s: %s", path, strerror(errno));
		close(fd);
		return NULL;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "gguf: %s is not a regular file", path);
		close(fd);
		return NULL;
	}
	if (st.st_size == 0) {
		snprintf(err, errlen, "gguf: %s is empty", path);
		close(fd);
		return NULL;
	}
	if ((uint64_t)st.st_size > SIZE_MAX) {
		snprintf(err, errlen, "gguf: %s is too large to map", path);
		close(fd);
		return NULL;
	}
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED) {
		snprintf(err, errlen, "gguf: cannot map %s: %s", path, strerror(errno));
		return NULL;
	}
	f = parse(map, (size_t)st.st_size, err, errlen);
	if (!f) {
		munmap(map, (size_t)st.st_size);
		return NULL;
	}
	f->mapped = true;
	return f;
}

void exl_gguf_drop_pages(const struct gguf_file *f, const void *p, size_t len)
{
	const long page = sysconf(_SC_PAGESIZE);

	if (!f->mapped || !len || page <= 0)
		return;
	uintptr_t a = ((uintptr_t)p + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
	uintptr_t e = ((uintptr_t)p + len) & ~((uintptr_t)page - 1);

	/* advice: on failure the pages stay resident, and nothing else changes */
	if (e > a)
		(void)madvise((void *)a, e - a, MADV_DONTNEED);
}

bool exl_gguf_str_eq(struct gguf_str s, const char *c)
{
	size_t n = strlen(c);

	return s.len == n && (n == 0 || !memcmp(s.ptr, c, n));
}

const struct gguf_kv *exl_gguf_find_kv(const struct gguf_file *f, const char *key)
{
	for (uint64_t i = 0; i < f->n_kv; i++)
		if (exl_gguf_str_eq(f->kv[i].key, key))
			return &f->kv[i];
	return NULL;
}

const struct gguf_tensor *exl_gguf_find_tensor(const struct gguf_file *f, const char *name)
{
	for (uint64_t i = 0; i < f->n_tensors; i++)
		if (exl_gguf_str_eq(f->tensors[i].name, name))
			return &f->tensors[i];
	return NULL;
}

bool exl_gguf_get_u64(const struct gguf_file *f, const char *key, uint64_t *out)
{
	const struct gguf_kv *kv = exl_gguf_find_kv(f, key);

	return kv && !value_as_u64(&kv->val, out);
}

bool exl_gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out)
{
	uint64_t v;

	if (!exl_gguf_get_u64(f, key, &v) || v > UINT32_MAX)
		return false;
	*out = (uint32_t)v;
	return true;
}

bool exl_gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out)
{
	const struct gguf_kv *kv = exl_gguf_find_kv(f, key);

	return kv && !value_as_i64(&kv->val, out);
}

bool exl_gguf_get_f32(const struct gguf_file *f, const char *key, float *out)
{
	const struct gguf_kv *kv = exl_gguf_find_kv(f, key);
	int64_t i;

	if (!kv)
		return false;
	if (kv->val.type == GGUF_VT_FLOAT32 || kv->val.type == GGUF_VT_FLOAT64) {
		*out = (float)kv->val.f64;
		return true;
	}
	if (!value_as_i64(&kv->val, &i)) {
		*out = (float)i;
		return true;
	}
	return false;
}

bool exl_gguf_get_bool(const struct gguf_file *f, const char *key, bool *out)
{
	const struct gguf_kv *kv = exl_gguf_find_kv(f, key);

	if (!kv || kv->val.type != GGUF_VT_BOOL)
		return false;
	*out = kv->val.u64 != 0;
	return true;
}

bool exl_gguf_get_str(const struct gguf_file *f, const char *key, char *buf, size_t buflen)
{
	const struct gguf_kv *kv = exl_gguf_find_kv(f, key);

	if (!kv || kv->val.type != GGUF_VT_STRING || kv->val.str.len >= buflen)
		return false;
	if (kv->val.str.len)
		memcpy(buf, kv->val.str.ptr, (size_t)kv->val.str.len);
	buf[kv->val.str.len] = '\0';
	return true;
}

const struct gguf_array *exl_gguf_get_arr(const struct gguf_file *f, const char *key)
{
	const struct gguf_kv *kv = exl_gguf_find_kv(f, key);

	if (!kv || kv->val.type != GGUF_VT_ARRAY)
		return NULL;
	return &kv->val.arr;
}

/* Element i of a scalar array, as its raw little-endian bits. */
static bool arr_raw(const struct gguf_array *a, uint64_t i, uint64_t *raw)
{
	unsigned n;

	if (!a || a->elem_type >= GGUF_VT_COUNT || i >= a->count)
		return false;
	n = vtype_size[a->elem_type];
	if (!n)
		return false;
	*raw = load_le((const uint8_t *)a->data + i * n, n);
	return true;
}

bool exl_gguf_arr_get_i64(const struct gguf_array *a, uint64_t i, int64_t *out)
{
	uint64_t raw;

	if (!arr_raw(a, i, &raw))
		return false;
	switch (a->elem_type) {
	case GGUF_VT_UINT8:
	case GGUF_VT_UINT16:
	case GGUF_VT_UINT32:
		*out = (int64_t)raw;
		return true;
	case GGUF_VT_UINT64:
		if (raw > (uint64_t)INT64_MAX)
			return false;
		*out = (int64_t)raw;
		return true;
	case GGUF_VT_INT8:
		*out = (int8_t)raw;
		return true;
	case GGUF_VT_INT16:
		*out = (int16_t)raw;
		return true;
	case GGUF_VT_INT32:
		*out = (int32_t)raw;
		return true;
	case GGUF_VT_INT64:
		*out = (int64_t)raw;
		return true;
	default:
		return false;
	}
}

bool exl_gguf_arr_get_f64(const struct gguf_array *a, uint64_t i, double *out)
{
	uint64_t raw;
	int64_t v;

	if (!arr_raw(a, i, &raw))
		return false;
	if (a->elem_type == GGUF_VT_FLOAT32) {
		uint32_t bits = (uint32_t)raw;
		float f;

		memcpy(&f, &bits, sizeof(f));
		*out = f;
		return true;
	}
	if (a->elem_type == GGUF_VT_FLOAT64) {
		memcpy(out, &raw, sizeof(*out));
		return true;
	}
	if (!exl_gguf_arr_get_i64(a, i, &v))
		return false;
	*out = (double)v;
	return true;
}

size_t exl_gguf_vtype_size(enum gguf_vtype t)
{
	if ((unsigned)t >= GGUF_VT_COUNT)
		return 0;
	return vtype_size[t];
}
