/* GGUF v3 writer. */
#include "daemon/core/gguf/gguf_write.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/formats/dtype.h"

#define GGUF_VERSION 3
#define DEFAULT_ALIGNMENT 32
#define MAX_NESTING 16 /* as deep as the reader accepts */

struct buf {
	uint8_t *p;
	size_t len;
	size_t cap;
};

struct wtensor {
	char *name;
	uint32_t type;
	uint32_t n_dims;
	uint64_t ne[GGUF_MAX_DIMS];
	uint64_t nbytes;
	const void *data;
	gguf_fill_fn fill;
	void *ctx;
};

struct gguf_writer {
	struct buf kv; /* encoded kv pairs */
	uint64_t n_kv;
	char **keys;
	size_t cap_keys;
	struct wtensor *tensors;
	size_t n_tensors;
	size_t cap_tensors;
	uint32_t alignment;
	bool failed;
	char err[256];
};

static int wfail(struct gguf_writer *w, const char *fmt, ...)
{
	va_list ap;

	if (w->failed)
		return -1;
	va_start(ap, fmt);
	vsnprintf(w->err, sizeof(w->err), fmt, ap);
	va_end(ap);
	w->failed = true;
	return -1;
}

static int grow(struct gguf_writer *w, void **p, size_t *cap, size_t need, size_t elem)
{
	size_t ncap = *cap ? *cap : 16;
	void *np;

	if (need <= *cap)
		return 0;
	while (ncap < need) {
		if (ncap > SIZE_MAX / 2)
			return wfail(w, "gguf_write: out of memory");
		ncap *= 2;
	}
	if (ncap > SIZE_MAX / elem)
		return wfail(w, "gguf_write: out of memory");
	np = realloc(*p, ncap * elem);
	if (!np)
		return wfail(w, "gguf_write: out of memory");
	*p = np;
	*cap = ncap;
	return 0;
}

static int put(struct gguf_writer *w, struct buf *b, const void *p, size_t n)
{
	if (n > SIZE_MAX - b->len)
		return wfail(w, "gguf_write: out of memory");
	if (grow(w, (void **)&b->p, &b->cap, b->len + n, 1))
		return -1;
	if (n)
		memcpy(b->p + b->len, p, n);
	b->len += n;
	return 0;
}

static int put_le(struct gguf_writer *w, struct buf *b, uint64_t v, unsigned n)
{
	uint8_t tmp[8];

	for (unsigned i = 0; i < n; i++)
		tmp[i] = (uint8_t)(v >> (8 * i));
	return put(w, b, tmp, n);
}

static int put_str(struct gguf_writer *w, struct buf *b, const char *s, uint64_t len)
{
	if (len > SIZE_MAX)
		return wfail(w, "gguf_write: string too long");
	if (put_le(w, b, len, 8))
		return -1;
	return put(w, b, s, (size_t)len);
}

struct gguf_writer *exl_gguf_writer_new(void)
{
	struct gguf_writer *w = calloc(1, sizeof(*w));

	if (w)
		w->alignment = DEFAULT_ALIGNMENT;
	return w;
}

void exl_gguf_writer_free(struct gguf_writer *w)
{
	if (!w)
		return;
	for (uint64_t i = 0; i < w->n_kv; i++)
		free(w->keys[i]);
	free(w->keys);
	for (size_t i = 0; i < w->n_tensors; i++)
		free(w->tensors[i].name);
	free(w->tensors);
	free(w->kv.p);
	free(w);
}

const char *exl_gguf_writer_error(const struct gguf_writer *w)
{
	return w->failed ? w->err : NULL;
}

static int put_array(struct gguf_writer *w, const char *key, const struct gguf_array *a, int depth)
{
	size_t esize;

	if (depth >= MAX_NESTING)
		return wfail(w, "gguf_write: key '%s': arrays nested more than %d deep", key, MAX_NESTING);
	if ((unsigned)a->elem_type >= GGUF_VT_COUNT)
		return wfail(w, "gguf_write: key '%s': unknown array element type %d", key, (int)a->elem_type);
	if (put_le(w, &w->kv, a->elem_type, 4) || put_le(w, &w->kv, a->count, 8))
		return -1;
	if (a->elem_type == GGUF_VT_STRING) {
		if (a->count && !a->strs)
			return wfail(w, "gguf_write: key '%s': string array without strings", key);
		for (uint64_t i = 0; i < a->count; i++)
			if (put_str(w, &w->kv, a->strs[i].ptr, a->strs[i].len))
				return -1;
		return 0;
	}
	if (a->elem_type == GGUF_VT_ARRAY) {
		if (a->count && !a->arrs)
			return wfail(w, "gguf_write: key '%s': nested array without arrays", key);
		for (uint64_t i = 0; i < a->count; i++)
			if (put_array(w, key, &a->arrs[i], depth + 1))
				return -1;
		return 0;
	}
	esize = exl_gguf_vtype_size(a->elem_type);
	if (a->count > SIZE_MAX / esize)
		return wfail(w, "gguf_write: key '%s': array of %llu elements too large", key,
			     (unsigned long long)a->count);
	if (a->count && !a->data)
		return wfail(w, "gguf_write: key '%s': array without data", key);
	if (a->elem_type == GGUF_VT_BOOL) {
		const uint8_t *d = a->data;

		for (uint64_t i = 0; i < a->count; i++)
			if (d[i] > 1)
				return wfail(w, "gguf_write: key '%s': bool element %llu is %u", key,
					     (unsigned long long)i, d[i]);
	}
	return put(w, &w->kv, a->data, (size_t)a->count * esize);
}

static int put_value(struct gguf_writer *w, const char *key, const struct gguf_value *v)
{
	uint32_t f32bits;
	float f;
	uint64_t bits;

	if (put_le(w, &w->kv, v->type, 4))
		return -1;
	switch (v->type) {
	case GGUF_VT_UINT8:
	case GGUF_VT_UINT16:
	case GGUF_VT_UINT32:
	case GGUF_VT_UINT64: {
		unsigned n = (unsigned)exl_gguf_vtype_size(v->type);

		if (n < 8 && v->u64 >> (8 * n))
			return wfail(w, "gguf_write: key '%s': %llu does not fit %s", key,
				     (unsigned long long)v->u64, exl_gguf_vtype_name(v->type));
		return put_le(w, &w->kv, v->u64, n);
	}
	case GGUF_VT_INT8:
	case GGUF_VT_INT16:
	case GGUF_VT_INT32:
	case GGUF_VT_INT64: {
		unsigned n = (unsigned)exl_gguf_vtype_size(v->type);

		if (n < 8) {
			int64_t lim = (int64_t)1 << (8 * n - 1);

			if (v->i64 < -lim || v->i64 >= lim)
				return wfail(w, "gguf_write: key '%s': %lld does not fit %s", key,
					     (long long)v->i64, exl_gguf_vtype_name(v->type));
		}
		return put_le(w, &w->kv, (uint64_t)v->i64, n);
	}
	case GGUF_VT_BOOL:
		if (v->u64 > 1)
			return wfail(w, "gguf_write: key '%s': bool value %llu", key,
				     (unsigned long long)v->u64);
		return put_le(w, &w->kv, v->u64, 1);
	case GGUF_VT_FLOAT32:
		f = (float)v->f64;
		memcpy(&f32bits, &f, sizeof(f32bits));
		return put_le(w, &w->kv, f32bits, 4);
	case GGUF_VT_FLOAT64:
		memcpy(&bits, &v->f64, sizeof(bits));
		return put_le(w, &w->kv, bits, 8);
	case GGUF_VT_STRING:
		if (v->str.len && !v->str.ptr)
			return wfail(w, "gguf_write: key '%s': NULL string", key);
		return put_str(w, &w->kv, v->str.ptr, v->str.len);
	case GGUF_VT_ARRAY:
		return put_array(w, key, &v->arr, 0);
	default:
		return wfail(w, "gguf_write: key '%s': unknown value type %d", key, (int)v->type);
	}
}

int exl_gguf_writer_set(struct gguf_writer *w, const char *key, const struct gguf_value *v)
{
	size_t mark;
	char *k;

	if (w->failed)
		return -1;
	if (!key || !key[0])
		return wfail(w, "gguf_write: empty key");
	for (uint64_t i = 0; i < w->n_kv; i++)
		if (!strcmp(w->keys[i], key))
			return wfail(w, "gguf_write: duplicate key '%s'", key);
	if (!strcmp(key, "general.alignment")) {
		if (v->type != GGUF_VT_UINT32 || v->u64 == 0 || v->u64 > UINT32_MAX ||
		    (v->u64 & (v->u64 - 1)))
			return wfail(w, "gguf_write: general.alignment must be a uint32 power of two");
		w->alignment = (uint32_t)v->u64;
	}
	if (grow(w, (void **)&w->keys, &w->cap_keys, (size_t)w->n_kv + 1, sizeof(*w->keys)))
		return -1;
	k = strdup(key);
	if (!k)
		return wfail(w, "gguf_write: out of memory");
	mark = w->kv.len;
	if (put_str(w, &w->kv, key, strlen(key)) || put_value(w, key, v)) {
		w->kv.len = mark;
		free(k);
		return -1;
	}
	w->keys[w->n_kv++] = k;
	return 0;
}

#define SETTER(fn, vt, field, ctype)                                               \
	int fn(struct gguf_writer *w, const char *key, ctype x)                   \
	{                                                                          \
		struct gguf_value v = { .type = vt };                              \
		v.field = x;                                                       \
		return exl_gguf_writer_set(w, key, &v);                                \
	}

SETTER(exl_gguf_writer_set_u8, GGUF_VT_UINT8, u64, uint8_t)
SETTER(exl_gguf_writer_set_i8, GGUF_VT_INT8, i64, int8_t)
SETTER(exl_gguf_writer_set_u16, GGUF_VT_UINT16, u64, uint16_t)
SETTER(exl_gguf_writer_set_i16, GGUF_VT_INT16, i64, int16_t)
SETTER(exl_gguf_writer_set_u32, GGUF_VT_UINT32, u64, uint32_t)
SETTER(exl_gguf_writer_set_i32, GGUF_VT_INT32, i64, int32_t)
SETTER(exl_gguf_writer_set_u64, GGUF_VT_UINT64, u64, uint64_t)
SETTER(exl_gguf_writer_set_i64, GGUF_VT_INT64, i64, int64_t)
SETTER(exl_gguf_writer_set_f32, GGUF_VT_FLOAT32, f64, float)
SETTER(exl_gguf_writer_set_f64, GGUF_VT_FLOAT64, f64, double)
SETTER(exl_gguf_writer_set_bool, GGUF_VT_BOOL, u64, bool)

int exl_gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *s)
{
	struct gguf_value v = { .type = GGUF_VT_STRING };

	if (!s)
		return wfail(w, "gguf_write: key '%s': NULL string", key ? key : "");
	v.str.ptr = s;
	v.str.len = strlen(s);
	return exl_gguf_writer_set(w, key, &v);
}

int exl_gguf_writer_set_alignment(struct gguf_writer *w, uint32_t alignment)
{
	return exl_gguf_writer_set_u32(w, "general.alignment", alignment);
}

int exl_gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_vtype elem_type,
			    const void *data, uint64_t n)
{
	struct gguf_value v = { .type = GGUF_VT_ARRAY };

	if (!exl_gguf_vtype_size(elem_type))
		return wfail(w, "gguf_write: key '%s': %s is not a scalar element type",
			     key ? key : "", exl_gguf_vtype_name(elem_type));
	v.arr.elem_type = elem_type;
	v.arr.count = n;
	v.arr.data = data;
	return exl_gguf_writer_set(w, key, &v);
}

int exl_gguf_writer_set_strn_arr(struct gguf_writer *w, const char *key, const char *const *strs,
				 const uint64_t *lens, uint64_t n)
{
	struct gguf_value v = { .type = GGUF_VT_ARRAY };
	int rc;

	if (w->failed)
		return -1;
	if (n > SIZE_MAX / sizeof(struct gguf_str))
		return wfail(w, "gguf_write: key '%s': too many strings", key ? key : "");
	v.arr.elem_type = GGUF_VT_STRING;
	v.arr.count = n;
	v.arr.strs = malloc((n ? n : 1) * sizeof(struct gguf_str));
	if (!v.arr.strs)
		return wfail(w, "gguf_write: out of memory");
	for (uint64_t i = 0; i < n; i++) {
		v.arr.strs[i].ptr = strs[i];
		v.arr.strs[i].len = lens ? lens[i] : strlen(strs[i]);
	}
	rc = exl_gguf_writer_set(w, key, &v);
	free(v.arr.strs);
	return rc;
}

int exl_gguf_writer_set_str_arr(struct gguf_writer *w, const char *key, const char *const *strs,
				uint64_t n)
{
	return exl_gguf_writer_set_strn_arr(w, key, strs, NULL, n);
}

static int add_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
		      const uint64_t *ne, const void *data, gguf_fill_fn fill, void *ctx)
{
	const struct exl_dtype_info *info = exl_dtype_info(type);
	struct wtensor *t;
	uint64_t rows = 1;
	size_t row;

	if (w->failed)
		return -1;
	if (!name || !name[0])
		return wfail(w, "gguf_write: empty tensor name");
	for (size_t i = 0; i < w->n_tensors; i++)
		if (!strcmp(w->tensors[i].name, name))
			return wfail(w, "gguf_write: duplicate tensor '%s'", name);
	if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
		return wfail(w, "gguf_write: tensor '%s': n_dims %u not in 1..%d", name, n_dims,
			     GGUF_MAX_DIMS);
	if (!info)
		return wfail(w, "gguf_write: tensor '%s': unknown type %u", name, type);
	for (uint32_t d = 0; d < n_dims; d++)
		if (ne[d] == 0 || ne[d] > (uint64_t)INT64_MAX)
			return wfail(w, "gguf_write: tensor '%s': dimension %u is %llu", name, d,
				     (unsigned long long)ne[d]);
	row = exl_dtype_row_bytes(type, ne[0]);
	if (!row)
		return wfail(w, "gguf_write: tensor '%s': row of %llu is not a whole number of %s blocks",
			     name, (unsigned long long)ne[0], info->name);
	for (uint32_t d = 1; d < n_dims; d++) {
		if (rows > SIZE_MAX / ne[d])
			return wfail(w, "gguf_write: tensor '%s': too large", name);
		rows *= ne[d];
	}
	if (rows > SIZE_MAX / row)
		return wfail(w, "gguf_write: tensor '%s': too large", name);
	if (!data && !fill)
		return wfail(w, "gguf_write: tensor '%s': no data", name);
	if (grow(w, (void **)&w->tensors, &w->cap_tensors, w->n_tensors + 1, sizeof(*w->tensors)))
		return -1;
	t = &w->tensors[w->n_tensors];
	memset(t, 0, sizeof(*t));
	t->name = strdup(name);
	if (!t->name)
		return wfail(w, "gguf_write: out of memory");
	t->type = type;
	t->n_dims = n_dims;
	for (int d = 0; d < GGUF_MAX_DIMS; d++)
		t->ne[d] = (uint32_t)d < n_dims ? ne[d] : 1;
	t->nbytes = (uint64_t)row * rows;
	t->data = data;
	t->fill = fill;
	t->ctx = ctx;
	w->n_tensors++;
	return 0;
}

int exl_gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type,
			       uint32_t n_dims, const uint64_t *ne, const void *data)
{
	return add_tensor(w, name, type, n_dims, ne, data, NULL, NULL);
}

int exl_gguf_writer_add_tensor_fill(struct gguf_writer *w, const char *name, uint32_t type,
				    uint32_t n_dims, const uint64_t *ne, gguf_fill_fn fill,
				    void *ctx)
{
	if (!fill)
		return wfail(w, "gguf_write: tensor '%s': no fill function", name ? name : "");
	return add_tensor(w, name, type, n_dims, ne, NULL, fill, ctx);
}

static uint64_t pad_to(uint64_t n, uint32_t a)
{
	return (a - n % a) % a;
}

/* The header, kv pairs and tensor infos, padded to the alignment. */
static int build_header(struct gguf_writer *w, struct buf *h)
{
	uint64_t off = 0;
	static const uint8_t zeros[64];

	if (put(w, h, "GGUF", 4) || put_le(w, h, GGUF_VERSION, 4) ||
	    put_le(w, h, w->n_tensors, 8) || put_le(w, h, w->n_kv, 8) ||
	    put(w, h, w->kv.p, w->kv.len))
		return -1;
	for (size_t i = 0; i < w->n_tensors; i++) {
		const struct wtensor *t = &w->tensors[i];

		if (put_str(w, h, t->name, strlen(t->name)) || put_le(w, h, t->n_dims, 4))
			return -1;
		for (uint32_t d = 0; d < t->n_dims; d++)
			if (put_le(w, h, t->ne[d], 8))
				return -1;
		if (put_le(w, h, t->type, 4) || put_le(w, h, off, 8))
			return -1;
		off += t->nbytes + pad_to(t->nbytes, w->alignment);
	}
	for (uint64_t p = pad_to(h->len, w->alignment); p > 0;) {
		size_t n = p < sizeof(zeros) ? (size_t)p : sizeof(zeros);

		if (put(w, h, zeros, n))
			return -1;
		p -= n;
	}
	return 0;
}

/* Where the bytes go: a file descriptor or a memory buffer. */
struct sink {
	int fd;
	uint8_t *mem;
	size_t pos;
	const char *path;
	char *err;
	size_t errlen;
};

static int sink_write(struct sink *s, const void *p, size_t n)
{
	const uint8_t *b = p;

	if (s->mem) {
		if (p != s->mem + s->pos) /* a fill wrote in place */
			memcpy(s->mem + s->pos, p, n);
		s->pos += n;
		return 0;
	}
	while (n) {
		ssize_t k = write(s->fd, b, n);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			snprintf(s->err, s->errlen, "gguf_write: writing %s: %s", s->path, strerror(errno));
			return -1;
		}
		b += k;
		n -= (size_t)k;
		s->pos += (size_t)k;
	}
	return 0;
}

static int write_all(struct gguf_writer *w, struct sink *s)
{
	static const uint8_t zeros[256];
	struct buf h = { 0 };
	uint8_t *scratch = NULL;
	size_t scratch_cap = 0;
	int rc = -1;

	if (w->failed || build_header(w, &h)) {
		snprintf(s->err, s->errlen, "%s", w->err);
		goto out;
	}
	if (sink_write(s, h.p, h.len))
		goto out;
	for (size_t i = 0; i < w->n_tensors; i++) {
		const struct wtensor *t = &w->tensors[i];
		const void *data = t->data;

		if (t->fill) {
			if (s->mem) {
				data = s->mem + s->pos;
			} else {
				if (t->nbytes > scratch_cap) {
					free(scratch);
					scratch = malloc((size_t)t->nbytes);
					scratch_cap = scratch ? (size_t)t->nbytes : 0;
					if (!scratch) {
						snprintf(s->err, s->errlen,
							 "gguf_write: out of memory for tensor '%s' (%llu bytes)",
							 t->name, (unsigned long long)t->nbytes);
						goto out;
					}
				}
				data = scratch;
			}
			if (t->fill(t->ctx, (void *)data, (size_t)t->nbytes, s->err, s->errlen))
				goto out;
		}
		if (sink_write(s, data, (size_t)t->nbytes))
			goto out;
		for (uint64_t p = pad_to(t->nbytes, w->alignment); p > 0;) {
			size_t n = p < sizeof(zeros) ? (size_t)p : sizeof(zeros);

			if (sink_write(s, zeros, n))
				goto out;
			p -= n;
		}
	}
	rc = 0;
out:
	free(scratch);
	free(h.p);
	return rc;
}

/* Bytes of the whole file, or 0 on overflow. */
static size_t file_size(struct gguf_writer *w, size_t header_len)
{
	size_t total = header_len;

	for (size_t i = 0; i < w->n_tensors; i++) {
		uint64_t n = w->tensors[i].nbytes + pad_to(w->tensors[i].nbytes, w->alignment);

		if (n > SIZE_MAX - total)
			return 0;
		total += (size_t)n;
	}
	return total;
}

int exl_gguf_writer_write_mem(struct gguf_writer *w, void **buf, size_t *size, char *err,
			      size_t errlen)
{
	struct sink s = { .fd = -1, .path = "memory", .err = err, .errlen = errlen };
	struct buf h = { 0 };
	size_t total;

	if (w->failed || build_header(w, &h)) {
		free(h.p);
		snprintf(err, errlen, "%s", w->err);
		return -1;
	}
	total = file_size(w, h.len);
	free(h.p);
	if (!total) {
		snprintf(err, errlen, "gguf_write: file too large");
		return -1;
	}
	s.mem = malloc(total);
	if (!s.mem) {
		snprintf(err, errlen, "gguf_write: out of memory for %zu bytes", total);
		return -1;
	}
	if (write_all(w, &s)) {
		free(s.mem);
		return -1;
	}
	*buf = s.mem;
	*size = s.pos;
	return 0;
}

int exl_gguf_writer_write_file(struct gguf_writer *w, const char *path, char *err, size_t errlen)
{
	struct sink s = { .path = path, .err = err, .errlen = errlen };
	size_t plen = strlen(path);
	char *tmp;
	int rc = -1;

	if (w->failed) {
		snprintf(err, errlen, "%s", w->err);
		return -1;
	}
	tmp = malloc(plen + 8);
	if (!tmp) {
		snprintf(err, errlen, "gguf_write: out of memory");
		return -1;
	}
	snprintf(tmp, plen + 8, "%s.part", path);
	s.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (s.fd < 0) {
		snprintf(err, errlen, "gguf_write: cannot create %s: %s", tmp, strerror(errno));
		goto out;
	}
	if (write_all(w, &s)) {
		close(s.fd);
		unlink(tmp);
		goto out;
	}
	if (close(s.fd)) {
		snprintf(err, errlen, "gguf_write: writing %s: %s", tmp, strerror(errno));
		unlink(tmp);
		goto out;
	}
	if (rename(tmp, path)) {
		snprintf(err, errlen, "gguf_write: cannot rename %s to %s: %s", tmp, path, strerror(errno));
		unlink(tmp);
		goto out;
	}
	rc = 0;
out:
	free(tmp);
	return rc;
}
