/* The GGUF reader against broken files: every header prefix, seeded random
 * byte flips, a huge or invalid value in every count, length, type and
 * offset field, and targeted corruptions with the message each must give.
 * Each must be refused with a message ("gguf: ... (at offset N)") or, for a
 * flip that happens to keep the file valid, accepted and walked in full;
 * never a crash, an out-of-bounds read (the sanitizer build checks) or a big
 * allocation (the address space is capped at 1 GiB, so one fails and shows
 * up as "out of memory" in a message, which fails the test).
 *
 *   test_gguf_corrupt synthetic   on a file made by gguf_write
 *   test_gguf_corrupt stories     on ../shared/models/stories260K.gguf
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "daemon/core/gguf/gguf.h"
#include "daemon/core/gguf/gguf_write.h"
#include "kernels/formats/dtype.h"
#include "tests/common/check.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

#ifdef UNDER_ASAN
/* ASan reserves terabytes of address space, so RLIMIT_AS cannot be used;
 * its own cap on one allocation does the same job. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "allocator_may_return_null=1:max_allocation_size_mb=1024";
}
#endif

static unsigned long n_refused, n_accepted;

static uint64_t rng_state;

static uint64_t rng_next(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static volatile uint64_t sink;

static void walk_array(const struct gguf_array *a)
{
	if (a->elem_type == GGUF_VT_STRING) {
		for (uint64_t i = 0; i < a->count; i++)
			if (a->strs[i].len)
				sink += (uint8_t)a->strs[i].ptr[0] + (uint8_t)a->strs[i].ptr[a->strs[i].len - 1];
	} else if (a->elem_type == GGUF_VT_ARRAY) {
		for (uint64_t i = 0; i < a->count; i++)
			walk_array(&a->arrs[i]);
	} else if (a->count) {
		size_t n = a->count * exl_gguf_vtype_size(a->elem_type);

		sink += ((const uint8_t *)a->data)[0] + ((const uint8_t *)a->data)[n - 1];
	}
}

/* Reads everything an accepted file points at, so the sanitizer sees any
 * pointer that escapes the buffer. */
static void walk(const struct gguf_file *f)
{
	for (uint64_t i = 0; i < f->n_kv; i++) {
		const struct gguf_kv *kv = &f->kv[i];

		sink += (uint8_t)kv->key.ptr[0] + (uint8_t)kv->key.ptr[kv->key.len - 1];
		if (kv->val.type == GGUF_VT_STRING && kv->val.str.len)
			sink += (uint8_t)kv->val.str.ptr[kv->val.str.len - 1];
		if (kv->val.type == GGUF_VT_ARRAY)
			walk_array(&kv->val.arr);
	}
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		const struct gguf_tensor *t = &f->tensors[i];
		const uint8_t *d = t->data;

		if (!exl_dtype_info(t->type) || t->n_dims < 1 || t->n_dims > 4 ||
		    t->offset % f->alignment || d < f->base || t->nbytes > f->size ||
		    d + t->nbytes > f->base + f->size)
			FAIL("accepted tensor %llu is invalid", (unsigned long long)i);
		else
			sink += d[0] + d[t->nbytes - 1];
	}
}

/* Parses buf[0..n) and checks the outcome.  Returns 1 when accepted, 0 when
 * refused.  The buffer passed must be exactly n bytes long for the
 * sanitizer to catch an overread. */
static int try_exact(const uint8_t *buf, size_t n, const char *what, char *err, size_t errlen)
{
	struct gguf_file *f;

	err[0] = '\0';
	f = exl_gguf_open_buffer(buf, n, err, errlen);
	check_count++;
	if (f) {
		walk(f);
		exl_gguf_close(f);
		n_accepted++;
		return 1;
	}
	n_refused++;
	if (!err[0] || strncmp(err, "gguf: ", 6) || !strstr(err, "(at offset "))
		FAIL("%s: refused with a malformed message: '%s'", what, err);
	if (strstr(err, "out of memory"))
		FAIL("%s: tried a huge allocation: %s", what, err);
	return 0;
}

static int try_copy(const uint8_t *buf, size_t n, const char *what, char *err, size_t errlen)
{
	uint8_t *copy = malloc(n ? n : 1);
	int rc;

	if (!copy) {
		FAIL("out of memory for a %zu-byte copy", n);
		return 0;
	}
	memcpy(copy, buf, n);
	rc = try_exact(copy, n, what, err, errlen);
	free(copy);
	return rc;
}

static void put_le(uint8_t *p, uint64_t v, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* A copy of the file with one field overwritten must be refused, and the
 * message must contain want (when not NULL). */
static void expect_refused(uint8_t *work, size_t size, size_t off, uint64_t v, unsigned width,
			   const char *what, const char *want)
{
	char err[512], desc[160];
	uint8_t saved[8];

	if (off + width > size) {
		FAIL("%s: field at %zu is outside the file", what, off);
		return;
	}
	memcpy(saved, work + off, width);
	put_le(work + off, v, width);
	snprintf(desc, sizeof(desc), "%s = %llu at offset %zu", what, (unsigned long long)v, off);
	if (try_exact(work, size, desc, err, sizeof(err)))
		FAIL("%s: accepted", desc);
	else if (want && !strstr(err, want))
		FAIL("%s: message '%s' lacks '%s'", desc, err, want);
	memcpy(work + off, saved, width);
}

static const uint64_t huge64[] = {
	UINT64_MAX, INT64_MAX, 1ull << 63, 0xffffffffull, 1ull << 32, 1ull << 40, 1ull << 62,
	0x7fffffffffffffe0ull,
};
static const uint32_t bad32[] = { 0xffffffffu, 0x80000000u, 0x10000u, 1000u };

static void huge_u64(uint8_t *work, size_t size, size_t off, const char *what)
{
	for (size_t i = 0; i < sizeof(huge64) / sizeof(huge64[0]); i++)
		expect_refused(work, size, off, huge64[i], 8, what, NULL);
	expect_refused(work, size, off, size, 8, what, NULL);
	expect_refused(work, size, off, (uint64_t)size + 1, 8, what, NULL);
}

static void bad_u32(uint8_t *work, size_t size, size_t off, const char *what)
{
	for (size_t i = 0; i < sizeof(bad32) / sizeof(bad32[0]); i++)
		expect_refused(work, size, off, bad32[i], 4, what, NULL);
}

static size_t at(const struct gguf_file *f, const void *p)
{
	return (size_t)((const uint8_t *)p - f->base);
}

/* Huge or invalid values in every count, length, type and offset field of
 * the (valid) file f, whose bytes are work[0..size). */
static void huge_fields(const struct gguf_file *f, uint8_t *work, size_t size)
{
	huge_u64(work, size, 8, "n_tensors");
	huge_u64(work, size, 16, "n_kv");
	for (uint64_t i = 0; i < f->n_kv; i++) {
		const struct gguf_kv *kv = &f->kv[i];
		size_t type_at = (size_t)kv->offset + 8 + (size_t)kv->key.len;

		huge_u64(work, size, (size_t)kv->offset, "key length");
		bad_u32(work, size, type_at, "value type");
		expect_refused(work, size, type_at, GGUF_VT_COUNT, 4, "value type", "unknown value type 13");
		if (kv->val.type == GGUF_VT_STRING)
			huge_u64(work, size, type_at + 4, "string length");
		if (kv->val.type != GGUF_VT_ARRAY)
			continue;

		const struct gguf_array *a = &kv->val.arr;

		bad_u32(work, size, type_at + 4, "array element type");
		huge_u64(work, size, type_at + 8, "array count");
		if (a->elem_type == GGUF_VT_STRING && a->count) {
			huge_u64(work, size, at(f, a->strs[0].ptr) - 8, "first array string length");
			huge_u64(work, size, at(f, a->strs[a->count - 1].ptr) - 8, "last array string length");
		}
		for (uint64_t j = 0; a->elem_type == GGUF_VT_ARRAY && j < a->count && j < 4; j++) {
			const struct gguf_array *in = &a->arrs[j];

			if (in->elem_type == GGUF_VT_STRING && in->count)
				huge_u64(work, size, at(f, in->strs[0].ptr) - 16, "nested array count");
			else if (in->elem_type != GGUF_VT_STRING && in->elem_type != GGUF_VT_ARRAY)
				huge_u64(work, size, at(f, in->data) - 8, "nested array count");
		}
	}
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		const struct gguf_tensor *t = &f->tensors[i];
		size_t name_at = at(f, t->name.ptr) - 8;
		size_t dims_at = at(f, t->name.ptr) + (size_t)t->name.len;
		size_t type_at = dims_at + 4 + 8 * t->n_dims;

		huge_u64(work, size, name_at, "tensor name length");
		bad_u32(work, size, dims_at, "n_dims");
		expect_refused(work, size, dims_at, 0, 4, "n_dims", "n_dims 0 is not in 1..4");
		expect_refused(work, size, dims_at, 5, 4, "n_dims", "n_dims 5 is not in 1..4");
		for (uint32_t d = 0; d < t->n_dims; d++) {
			huge_u64(work, size, dims_at + 4 + 8 * d, "dimension");
			expect_refused(work, size, dims_at + 4 + 8 * d, 0, 8, "dimension", "is 0");
		}
		bad_u32(work, size, type_at, "tensor type");
		expect_refused(work, size, type_at, 4, 4, "tensor type", "unknown tensor type 4");
		expect_refused(work, size, type_at, EXL_DTYPE_COUNT, 4, "tensor type", "unknown tensor type");
		huge_u64(work, size, type_at + 4, "tensor offset");
		expect_refused(work, size, type_at + 4, t->offset + 1, 8, "tensor offset",
			       "not a multiple of the alignment");
	}
}

/* Every prefix up to past the tensor infos, then a sample beyond, up to
 * the end of the last tensor's data (what follows is padding). */
static void truncations(const uint8_t *buf, size_t size, size_t header_end, size_t data_end)
{
	char err[512], what[64];
	size_t step;

	for (size_t n = 0; n <= header_end + 64 && n < data_end; n++) {
		snprintf(what, sizeof(what), "prefix of %zu bytes", n);
		if (try_copy(buf, n, what, err, sizeof(err)))
			FAIL("%s: accepted", what);
	}
	step = size / 97 + 1;
	for (size_t n = header_end + 64; n < data_end; n += step + (rng_next() % 64)) {
		snprintf(what, sizeof(what), "prefix of %zu bytes", n);
		if (try_copy(buf, n, what, err, sizeof(err)))
			FAIL("%s: accepted", what);
	}
	snprintf(what, sizeof(what), "prefix of %zu bytes", data_end - 1);
	if (try_copy(buf, data_end - 1, what, err, sizeof(err)))
		FAIL("%s: accepted", what);
	for (size_t n = data_end; n <= size; n++) {
		snprintf(what, sizeof(what), "prefix of %zu bytes (padding cut)", n);
		if (!try_copy(buf, n, what, err, sizeof(err)))
			FAIL("%s: refused: %s", what, err);
	}
}

/* Seeded random byte changes, mostly in the header where they matter. */
static void flips(uint8_t *work, size_t size, size_t header_end, int iterations)
{
	char err[512], what[96];
	size_t pos[4];
	uint8_t old[4];

	for (int it = 0; it < iterations; it++) {
		int n = 1 + (int)(rng_next() % 4);

		for (int k = 0; k < n; k++) {
			bool in_header = rng_next() % 100 < 90;

			pos[k] = (size_t)(rng_next() % (in_header && header_end ? header_end : size));
			old[k] = work[pos[k]];
			switch (rng_next() % 4) {
			case 0: work[pos[k]] ^= (uint8_t)(1u << (rng_next() % 8)); break;
			case 1: work[pos[k]] = 0xff; break;
			case 2: work[pos[k]] = 0; break;
			default: work[pos[k]] = (uint8_t)rng_next(); break;
			}
		}
		snprintf(what, sizeof(what), "flip iteration %d (first at %zu)", it, pos[0]);
		try_exact(work, size, what, err, sizeof(err));
		for (int k = n - 1; k >= 0; k--)
			work[pos[k]] = old[k];
	}
}

/* Offset just past the last tensor info (or the kv pairs). */
static size_t header_end(const struct gguf_file *f)
{
	if (f->n_tensors) {
		const struct gguf_tensor *t = &f->tensors[f->n_tensors - 1];

		return at(f, t->name.ptr) + (size_t)t->name.len + 4 + 8 * t->n_dims + 4 + 8;
	}
	return f->size;
}

static void corrupt_all(const uint8_t *orig, size_t size, int flip_iterations)
{
	char err[512];
	uint8_t *work = malloc(size);
	struct gguf_file *f;
	size_t hend;

	CHECK(work != NULL);
	if (!work)
		return;
	memcpy(work, orig, size);
	f = exl_gguf_open_buffer(work, size, err, sizeof(err));
	if (!f) {
		FAIL("the uncorrupted file is refused: %s", err);
		free(work);
		return;
	}
	hend = header_end(f);
	size_t data_end = f->n_tensors ? (size_t)f->data_offset : size;

	for (uint64_t i = 0; i < f->n_tensors; i++) {
		size_t end = (size_t)(f->data_offset + f->tensors[i].offset + f->tensors[i].nbytes);

		if (end > data_end)
			data_end = end;
	}
	truncations(orig, size, hend, data_end);
	huge_fields(f, work, size);
	CHECK(!memcmp(work, orig, size));
	exl_gguf_close(f);
	flips(work, size, hend, flip_iterations);
	CHECK(!memcmp(work, orig, size));
	free(work);
}

/* Messages of a few targeted corruptions of stories260K. */
static void stories_messages(const uint8_t *orig, size_t size)
{
	uint8_t *work = malloc(size);
	struct gguf_file *f;
	char err[512], want[160];
	const struct gguf_kv *kv;
	const struct gguf_tensor *t;

	memcpy(work, orig, size);
	f = exl_gguf_open_buffer(orig, size, err, sizeof(err));
	CHECK(f != NULL);
	if (!f) {
		free(work);
		return;
	}
	kv = exl_gguf_find_kv(f, "tokenizer.ggml.tokens");
	CHECK(kv != NULL);
	if (kv) {
		size_t count_at = (size_t)kv->offset + 8 + (size_t)kv->key.len + 4 + 4;

		snprintf(want, sizeof(want),
			 "gguf: key 'tokenizer.ggml.tokens': array of 4294967295 strings exceeds file size (at offset %zu)",
			 count_at);
		expect_refused(work, size, count_at, 4294967295u, 8, "token count", want);
	}
	expect_refused(work, size, 16, 1ull << 40, 8, "n_kv", "1099511627776 kv pairs exceed file size");
	expect_refused(work, size, 4, 1, 4, "version", "GGUF version 1 is not supported");
	expect_refused(work, size, 4, 4, 4, "version", "unsupported GGUF version 4");
	expect_refused(work, size, 4, 0x03000000, 4, "version", "big-endian");
	expect_refused(work, size, 0, 0x46554748, 4, "magic", "bad magic 48 47 55 46");

	/* tokenizer.ggml.eos_token_id -> tokenizer.ggml.bos_token_id */
	kv = exl_gguf_find_kv(f, "tokenizer.ggml.eos_token_id");
	CHECK(kv != NULL);
	if (kv)
		expect_refused(work, size, (size_t)kv->offset + 8 + 15, 'b', 1, "key",
			       "duplicate key 'tokenizer.ggml.bos_token_id'");
	/* blk.1.attn_q.weight -> blk.0.attn_q.weight */
	t = exl_gguf_find_tensor(f, "blk.1.attn_q.weight");
	CHECK(t != NULL);
	if (t)
		expect_refused(work, size, at(f, t->name.ptr) + 4, '0', 1, "tensor name",
			       "duplicate tensor name 'blk.0.attn_q.weight'");
	/* token_embd.weight rows of 64 are not whole q4_k blocks */
	t = exl_gguf_find_tensor(f, "token_embd.weight");
	if (t)
		expect_refused(work, size, at(f, t->name.ptr) + (size_t)t->name.len + 4 + 16, EXL_Q4_K, 4,
			       "tensor type", "tensor 'token_embd.weight': row of 64 elements is not a whole number of q4_k blocks");
	/* the last tensor ends the file: one more row runs past it */
	t = &f->tensors[f->n_tensors - 1];
	expect_refused(work, size, at(f, t->name.ptr) + (size_t)t->name.len + 4 + 8 * (t->n_dims - 1),
		       t->ne[t->n_dims - 1] + 1, 8, "last dimension", "runs past the end of the file");
	CHECK(!memcmp(work, orig, size));
	exl_gguf_close(f);
	free(work);
}

/* A file of one key holding arrays nested depth deep. */
static uint8_t *nested_file(int depth, size_t *size)
{
	size_t n = 24 + 8 + 1 + 4 + (size_t)depth * 12 + 12;
	uint8_t *b = malloc(n), *p = b;

	put_le(p, 0x46554747, 4); /* "GGUF" */
	put_le(p + 4, 3, 4);
	put_le(p + 8, 0, 8);
	put_le(p + 16, 1, 8);
	p += 24;
	put_le(p, 1, 8);
	p[8] = 'n';
	put_le(p + 9, GGUF_VT_ARRAY, 4);
	p += 13;
	for (int i = 0; i < depth; i++, p += 12) {
		put_le(p, GGUF_VT_ARRAY, 4);
		put_le(p + 4, 1, 8);
	}
	put_le(p, GGUF_VT_INT32, 4);
	put_le(p + 4, 0, 8);
	*size = n;
	return b;
}

/* A file of alignment `align` holding an I8 tensor of n_i8 bytes, then an
 * F16 tensor of 2 and an F32 one of 1: malloc'ed, its size in *size. */
static uint8_t *small_aligned(uint32_t align, uint64_t n_i8, size_t *size)
{
	static const uint8_t bytes[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	struct gguf_writer *w = exl_gguf_writer_new();
	uint64_t ne_i8[] = { n_i8 }, ne_f16[] = { 2 }, ne_f32[] = { 1 };
	void *buf = NULL;
	char err[512];

	exl_gguf_writer_set_alignment(w, align);
	exl_gguf_writer_set_str(w, "general.architecture", "llama");
	exl_gguf_writer_add_tensor(w, "a", EXL_I8, 1, ne_i8, bytes);
	exl_gguf_writer_add_tensor(w, "b", EXL_F16, 1, ne_f16, bytes);
	exl_gguf_writer_add_tensor(w, "c", EXL_F32, 1, ne_f32, bytes);
	CHECK(exl_gguf_writer_write_mem(w, &buf, size, err, sizeof(err)) == 0);
	exl_gguf_writer_free(w);
	return buf;
}

/* general.alignment 1 is a power of two, so valid, but it can leave a
 * tensor where its elements cannot be read in place: refused by name.
 * With alignment 1 nothing pads, so the F16 tensor starts n_i8 bytes into
 * the data section, which starts 8 + n_i8 + 4 + 4 bytes before the end. */
static void misaligned_tensors(void)
{
	char err[512];
	size_t size;

	for (uint64_t n = 1; n <= 4; n++) {
		uint8_t *buf = small_aligned(1, n, &size);
		size_t data = size - (size_t)n - 4 - 4, b_at = data + n, c_at = b_at + 4;
		struct gguf_file *f;

		if (!buf)
			continue;
		f = exl_gguf_open_buffer(buf, size, err, sizeof(err));
		check_count++;
		if (b_at % 2)
			CHECK(!f && strstr(err, "tensor 'b'") &&
			      strstr(err, "is not aligned to the 2 bytes a f16 element needs "
					  "(general.alignment is 1)"));
		else if (c_at % 4)
			CHECK(!f && strstr(err, "tensor 'c'") &&
			      strstr(err, "not aligned to the 4 bytes a f32 element needs"));
		else
			CHECK(f != NULL);
		if (!f && !strstr(err, "not aligned"))
			fprintf(stderr, "alignment 1, %llu bytes of i8: %s\n", (unsigned long long)n, err);
		exl_gguf_close(f);
		free(buf);
	}
	/* the same tensors with the default alignment are read */
	uint8_t *buf = small_aligned(32, 3, &size);
	struct gguf_file *f = buf ? exl_gguf_open_buffer(buf, size, err, sizeof(err)) : NULL;

	CHECK(f != NULL);
	exl_gguf_close(f);
	free(buf);
}

static int synthetic(void)
{
	struct gguf_writer *w = exl_gguf_writer_new();
	static const uint64_t ne_q8[] = { 64, 3 };
	static const uint64_t ne_f16[] = { 4, 2, 2 };
	static const uint32_t ids[] = { 1, 2, 3 };
	static const bool flags[] = { true, false };
	static const char *const toks[] = { "<unk>", "<s>", "</s>", "a", "bb" };
	static uint8_t q8[3 * 2 * 34], f16[32];
	char err[512];
	void *buf = NULL;
	size_t size = 0;
	struct gguf_file *f;

	for (size_t i = 0; i < sizeof(q8); i++)
		q8[i] = (uint8_t)(i * 13);
	exl_gguf_writer_set_alignment(w, 64);
	exl_gguf_writer_set_str(w, "general.architecture", "llama");
	exl_gguf_writer_set_bool(w, "t.flag", true);
	exl_gguf_writer_set_arr(w, "t.ids", GGUF_VT_UINT32, ids, 3);
	exl_gguf_writer_set_arr(w, "t.flags", GGUF_VT_BOOL, flags, 2);
	exl_gguf_writer_set_str_arr(w, "tokenizer.ggml.tokens", toks, 5);
	exl_gguf_writer_set_f32(w, "t.eps", 1e-5f);

	struct gguf_array inner[2] = {
		{ .elem_type = GGUF_VT_UINT32, .count = 3, .data = ids },
		{ .elem_type = GGUF_VT_UINT32, .count = 2, .data = ids },
	};
	struct gguf_value nested = { .type = GGUF_VT_ARRAY,
		.arr = { .elem_type = GGUF_VT_ARRAY, .count = 2, .arrs = inner } };

	exl_gguf_writer_set(w, "t.nested", &nested);
	exl_gguf_writer_add_tensor(w, "w.q8", EXL_Q8_0, 2, ne_q8, q8);
	exl_gguf_writer_add_tensor(w, "w.f16", EXL_F16, 3, ne_f16, f16);
	CHECK(exl_gguf_writer_write_mem(w, &buf, &size, err, sizeof(err)) == 0);
	exl_gguf_writer_free(w);
	if (!buf)
		return 0;

	corrupt_all(buf, size, 4000);

	f = exl_gguf_open_buffer(buf, size, err, sizeof(err));
	CHECK(f != NULL);
	if (f) {
		const struct gguf_kv *kv = exl_gguf_find_kv(f, "general.alignment");
		size_t val_at = (size_t)kv->offset + 8 + 17 + 4;

		expect_refused(buf, size, val_at, 48, 4, "alignment", "alignment 48 is not a nonzero power of two");
		expect_refused(buf, size, val_at, 0, 4, "alignment", "alignment 0 is not a nonzero power of two");
		expect_refused(buf, size, val_at - 4, GGUF_VT_FLOAT32, 4, "alignment type",
			       "must be a non-negative integer, not float32");
		kv = exl_gguf_find_kv(f, "t.flag");
		expect_refused(buf, size, (size_t)kv->offset + 8 + 6 + 4, 2, 1, "bool", "neither 0 nor 1");
		kv = exl_gguf_find_kv(f, "t.flags");
		expect_refused(buf, size, at(f, kv->val.arr.data) + 1, 7, 1, "bool array",
			       "bool array element 1 is 7");
		exl_gguf_close(f);
	}
	free(buf);

	/* 16 levels of nesting are read, 17 and a stack-busting depth are not */
	for (int depth = 15; depth <= 16; depth++) {
		uint8_t *b = nested_file(depth, &size);

		f = exl_gguf_open_buffer(b, size, err, sizeof(err));
		if (depth == 15) {
			CHECK(f != NULL);
			if (!f)
				fprintf(stderr, "depth 15: %s\n", err);
		} else {
			CHECK(f == NULL && strstr(err, "nested more than 16 deep"));
		}
		exl_gguf_close(f);
		free(b);
	}
	buf = nested_file(1000000, &size);
	CHECK(try_exact(buf, size, "deep nesting", err, sizeof(err)) == 0);
	free(buf);

	misaligned_tensors();

	/* v2 is read like v3 */
	buf = nested_file(0, &size);
	put_le(buf, 0x46554747, 4);
	((uint8_t *)buf)[4] = 2;
	f = exl_gguf_open_buffer(buf, size, err, sizeof(err));
	CHECK(f && f->version == 2);
	exl_gguf_close(f);
	free(buf);

	/* exl_gguf_open: missing file, empty file */
	f = exl_gguf_open("/nonexistent/x.gguf", err, sizeof(err));
	CHECK(!f && strstr(err, "cannot open /nonexistent/x.gguf"));
	f = exl_gguf_open("/dev/null", err, sizeof(err));
	CHECK(!f && strstr(err, "not a regular file"));
	return 0;
}

static int stories(void)
{
	const char *dir = getenv("EXLD_MODELS");
	char path[4096];
	uint8_t *buf;
	long size;
	FILE *fp;

	if (!dir || !*dir) {
		printf("EXLD_MODELS is not set; skipping\n");
		return 77;
	}
	snprintf(path, sizeof(path), "%s/stories260K.gguf", dir);
	fp = fopen(path, "rb");
	if (!fp) {
		printf("%s not found; skipping\n", path);
		return 77;
	}
	fseek(fp, 0, SEEK_END);
	size = ftell(fp);
	fseek(fp, 0, SEEK_SET);
	buf = malloc((size_t)size);
	CHECK(buf && fread(buf, 1, (size_t)size, fp) == (size_t)size);
	fclose(fp);
	if (!buf)
		return 0;
	corrupt_all(buf, (size_t)size, 3000);
	stories_messages(buf, (size_t)size);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	int rc;

	if (argc != 2 || (strcmp(argv[1], "synthetic") && strcmp(argv[1], "stories"))) {
		fprintf(stderr, "usage: test_gguf_corrupt synthetic|stories\n");
		return 2;
	}
#ifndef UNDER_ASAN
	struct rlimit lim = { 1ull << 30, 1ull << 30 };

	if (setrlimit(RLIMIT_AS, &lim))
		perror("setrlimit");
#endif
	rng_state = 0x5eed;
	rc = !strcmp(argv[1], "synthetic") ? synthetic() : stories();
	if (rc == 77)
		return 77;
	printf("%d checks (%lu refused, %lu accepted), %d failed\n", check_count, n_refused,
	       n_accepted, check_failures);
	return check_failures ? 1 : 0;
}
