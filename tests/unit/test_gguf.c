/* GGUF reader and writer.
 *
 *   test_gguf roundtrip   a file with every value type (nested arrays too)
 *                         and a few tensors, written by gguf_write and read
 *                         back equal, from memory and from disk
 *   test_gguf stories     known values of ../shared/models/stories260K.gguf
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/core/gguf/gguf.h"
#include "daemon/core/gguf/gguf_split.h"
#include "daemon/core/gguf/gguf_write.h"
#include "kernels/formats/dtype.h"
#include "tests/common/check.h"

static bool str_equal(struct gguf_str a, struct gguf_str b)
{
	return a.len == b.len && (a.len == 0 || !memcmp(a.ptr, b.ptr, a.len));
}

static bool array_equal(const struct gguf_array *a, const struct gguf_array *b);

static bool value_equal(const struct gguf_value *a, const struct gguf_value *b)
{
	if (a->type != b->type)
		return false;
	switch (a->type) {
	case GGUF_VT_UINT8:
	case GGUF_VT_UINT16:
	case GGUF_VT_UINT32:
	case GGUF_VT_UINT64:
	case GGUF_VT_BOOL:
		return a->u64 == b->u64;
	case GGUF_VT_INT8:
	case GGUF_VT_INT16:
	case GGUF_VT_INT32:
	case GGUF_VT_INT64:
		return a->i64 == b->i64;
	case GGUF_VT_FLOAT32:
		return (float)a->f64 == (float)b->f64;
	case GGUF_VT_FLOAT64:
		return a->f64 == b->f64;
	case GGUF_VT_STRING:
		return str_equal(a->str, b->str);
	case GGUF_VT_ARRAY:
		return array_equal(&a->arr, &b->arr);
	default:
		return false;
	}
}

static bool array_equal(const struct gguf_array *a, const struct gguf_array *b)
{
	if (a->elem_type != b->elem_type || a->count != b->count)
		return false;
	if (a->elem_type == GGUF_VT_STRING) {
		for (uint64_t i = 0; i < a->count; i++)
			if (!str_equal(a->strs[i], b->strs[i]))
				return false;
		return true;
	}
	if (a->elem_type == GGUF_VT_ARRAY) {
		for (uint64_t i = 0; i < a->count; i++)
			if (!array_equal(&a->arrs[i], &b->arrs[i]))
				return false;
		return true;
	}
	return a->count == 0 ||
	       !memcmp(a->data, b->data, a->count * exl_gguf_vtype_size(a->elem_type));
}

/* Every value the round trip writes, with its key. */
struct kv_case {
	const char *key;
	struct gguf_value v;
};

static const uint8_t arr_u8[] = { 0, 1, 255 };
static const int8_t arr_i8[] = { -128, 0, 127 };
static const uint16_t arr_u16[] = { 0, 65535, 1234 };
static const int16_t arr_i16[] = { -32768, 32767 };
static const uint32_t arr_u32[] = { 0, 4294967295u, 7 };
static const int32_t arr_i32[] = { -2147483647 - 1, 2147483647, -1, 0 };
static const uint64_t arr_u64[] = { 0, UINT64_MAX };
static const int64_t arr_i64[] = { INT64_MIN, INT64_MAX, -5 };
static const float arr_f32[] = { 0.5f, -1e30f, 3.25f };
static const double arr_f64[] = { 3.141592653589793, -0.0, 1e300 };
static const bool arr_bool[] = { true, false, true, true };

static struct gguf_str strs_a[] = { { 5, "hello" }, { 0, "" }, { 3, "a\0b" }, { 4, "\xe2\x96\x81x" } };
static struct gguf_str strs_b[] = { { 1, "z" } };
static const int32_t inner0[] = { 1, 2, 3 };
static const int32_t inner1[] = { -4 };
static struct gguf_array nested_ints[3];
static struct gguf_array nested_strs[2];
static struct gguf_array nested_deep_inner[1];
static struct gguf_array nested_deep[2];

#define SCALAR_ARR(t, a) { .type = GGUF_VT_ARRAY, .arr = { .elem_type = t, .count = sizeof(a) / sizeof(a[0]), .data = a } }

static struct kv_case cases[] = {
	{ "t.u8", { .type = GGUF_VT_UINT8, .u64 = 200 } },
	{ "t.i8", { .type = GGUF_VT_INT8, .i64 = -100 } },
	{ "t.u16", { .type = GGUF_VT_UINT16, .u64 = 65535 } },
	{ "t.i16", { .type = GGUF_VT_INT16, .i64 = -32768 } },
	{ "t.u32", { .type = GGUF_VT_UINT32, .u64 = 4000000000u } },
	{ "t.i32", { .type = GGUF_VT_INT32, .i64 = -2000000000 } },
	{ "t.u64", { .type = GGUF_VT_UINT64, .u64 = 0xfffffffffffffff0ull } },
	{ "t.i64", { .type = GGUF_VT_INT64, .i64 = INT64_MIN } },
	{ "t.f32", { .type = GGUF_VT_FLOAT32, .f64 = 1.5 } },
	{ "t.f64", { .type = GGUF_VT_FLOAT64, .f64 = 2.718281828459045 } },
	{ "t.bool", { .type = GGUF_VT_BOOL, .u64 = 1 } },
	{ "t.false", { .type = GGUF_VT_BOOL, .u64 = 0 } },
	{ "t.str", { .type = GGUF_VT_STRING, .str = { 11, "hello world" } } },
	{ "t.empty_str", { .type = GGUF_VT_STRING, .str = { 0, "" } } },
	{ "t.nul_str", { .type = GGUF_VT_STRING, .str = { 3, "x\0y" } } },
	{ "t.arr.u8", SCALAR_ARR(GGUF_VT_UINT8, arr_u8) },
	{ "t.arr.i8", SCALAR_ARR(GGUF_VT_INT8, arr_i8) },
	{ "t.arr.u16", SCALAR_ARR(GGUF_VT_UINT16, arr_u16) },
	{ "t.arr.i16", SCALAR_ARR(GGUF_VT_INT16, arr_i16) },
	{ "t.arr.u32", SCALAR_ARR(GGUF_VT_UINT32, arr_u32) },
	{ "t.arr.i32", SCALAR_ARR(GGUF_VT_INT32, arr_i32) },
	{ "t.arr.u64", SCALAR_ARR(GGUF_VT_UINT64, arr_u64) },
	{ "t.arr.i64", SCALAR_ARR(GGUF_VT_INT64, arr_i64) },
	{ "t.arr.f32", SCALAR_ARR(GGUF_VT_FLOAT32, arr_f32) },
	{ "t.arr.f64", SCALAR_ARR(GGUF_VT_FLOAT64, arr_f64) },
	{ "t.arr.bool", SCALAR_ARR(GGUF_VT_BOOL, arr_bool) },
	{ "t.arr.str", { .type = GGUF_VT_ARRAY, .arr = { .elem_type = GGUF_VT_STRING, .count = 4, .strs = strs_a } } },
	{ "t.arr.empty", { .type = GGUF_VT_ARRAY, .arr = { .elem_type = GGUF_VT_INT32, .count = 0 } } },
	{ "t.arr.nested_ints", { .type = GGUF_VT_ARRAY, .arr = { .elem_type = GGUF_VT_ARRAY, .count = 3, .arrs = nested_ints } } },
	{ "t.arr.nested_strs", { .type = GGUF_VT_ARRAY, .arr = { .elem_type = GGUF_VT_ARRAY, .count = 2, .arrs = nested_strs } } },
	{ "t.arr.nested_deep", { .type = GGUF_VT_ARRAY, .arr = { .elem_type = GGUF_VT_ARRAY, .count = 2, .arrs = nested_deep } } },
};

#define N_CASES (sizeof(cases) / sizeof(cases[0]))

static void init_nested(void)
{
	nested_ints[0] = (struct gguf_array){ .elem_type = GGUF_VT_INT32, .count = 3, .data = inner0 };
	nested_ints[1] = (struct gguf_array){ .elem_type = GGUF_VT_INT32, .count = 0 };
	nested_ints[2] = (struct gguf_array){ .elem_type = GGUF_VT_INT32, .count = 1, .data = inner1 };
	nested_strs[0] = (struct gguf_array){ .elem_type = GGUF_VT_STRING, .count = 4, .strs = strs_a };
	nested_strs[1] = (struct gguf_array){ .elem_type = GGUF_VT_STRING, .count = 1, .strs = strs_b };
	nested_deep_inner[0] = (struct gguf_array){ .elem_type = GGUF_VT_ARRAY, .count = 2, .arrs = nested_ints };
	nested_deep[0] = (struct gguf_array){ .elem_type = GGUF_VT_ARRAY, .count = 1, .arrs = nested_deep_inner };
	nested_deep[1] = (struct gguf_array){ .elem_type = GGUF_VT_ARRAY, .count = 0 };
}

static float tdata_f32[2][3] = { { 1, 2, 3 }, { -4, 5.5f, 1e-3f } };
static uint8_t tdata_q8[2 * 34];

static int fill_bytes(void *ctx, void *dst, size_t nbytes, char *err, size_t errlen)
{
	uint8_t *d = dst;

	(void)err;
	(void)errlen;
	for (size_t i = 0; i < nbytes; i++)
		d[i] = (uint8_t)(i * 7 + *(int *)ctx);
	return 0;
}

static int fill_fail(void *ctx, void *dst, size_t nbytes, char *err, size_t errlen)
{
	(void)ctx;
	(void)dst;
	(void)nbytes;
	snprintf(err, errlen, "fill refused");
	return -1;
}

static struct gguf_writer *build(int *fill_seed)
{
	struct gguf_writer *w = exl_gguf_writer_new();
	static const uint64_t ne_f32[] = { 3, 2 };
	static const uint64_t ne_q8[] = { 64 };
	static const uint64_t ne_fill[] = { 5, 3, 2, 1 };

	for (size_t i = 0; i < sizeof(tdata_q8); i++)
		tdata_q8[i] = (uint8_t)(i ^ 0x5a);
	CHECK(w != NULL);
	CHECK(exl_gguf_writer_set_alignment(w, 64) == 0);
	for (size_t i = 0; i < N_CASES; i++)
		CHECK(exl_gguf_writer_set(w, cases[i].key, &cases[i].v) == 0);
	CHECK(exl_gguf_writer_set_str(w, "general.architecture", "llama") == 0);
	CHECK(exl_gguf_writer_add_tensor(w, "a.weight", EXL_F32, 2, ne_f32, tdata_f32) == 0);
	CHECK(exl_gguf_writer_add_tensor(w, "b.weight", EXL_Q8_0, 1, ne_q8, tdata_q8) == 0);
	CHECK(exl_gguf_writer_add_tensor_fill(w, "c.weight", EXL_I8, 4, ne_fill, fill_bytes, fill_seed) == 0);
	CHECK(exl_gguf_writer_error(w) == NULL);
	return w;
}

static void check_read(const struct gguf_file *f, int fill_seed)
{
	const struct gguf_tensor *t;
	uint32_t u32;
	uint64_t u64;
	int64_t i64;
	float f32;
	bool b;
	char buf[16];

	CHECK(f->version == 3);
	CHECK(f->alignment == 64);
	CHECK(f->n_kv == N_CASES + 2);
	CHECK(f->n_tensors == 3);
	CHECK(f->data_offset % 64 == 0);
	for (size_t i = 0; i < N_CASES; i++) {
		const struct gguf_kv *kv = exl_gguf_find_kv(f, cases[i].key);

		CHECK(kv != NULL);
		if (kv && !value_equal(&kv->val, &cases[i].v)) {
			fprintf(stderr, "value of %s differs\n", cases[i].key);
			CHECK(0);
		}
	}
	/* key order is kept */
	CHECK(exl_gguf_str_eq(f->kv[0].key, "general.alignment"));
	CHECK(exl_gguf_str_eq(f->kv[1].key, "t.u8"));

	/* getters and their coercion */
	CHECK(exl_gguf_get_u32(f, "t.u8", &u32) && u32 == 200);
	CHECK(exl_gguf_get_u32(f, "t.u16", &u32) && u32 == 65535);
	CHECK(exl_gguf_get_u32(f, "t.u32", &u32) && u32 == 4000000000u);
	CHECK(!exl_gguf_get_u32(f, "t.u64", &u32));   /* does not fit */
	CHECK(!exl_gguf_get_u32(f, "t.i8", &u32));    /* negative */
	CHECK(!exl_gguf_get_u32(f, "t.str", &u32));   /* not an integer */
	CHECK(!exl_gguf_get_u32(f, "t.missing", &u32));
	CHECK(exl_gguf_get_u64(f, "t.u64", &u64) && u64 == 0xfffffffffffffff0ull);
	CHECK(exl_gguf_get_i64(f, "t.i8", &i64) && i64 == -100);
	CHECK(exl_gguf_get_i64(f, "t.i64", &i64) && i64 == INT64_MIN);
	CHECK(exl_gguf_get_i64(f, "t.u32", &i64) && i64 == 4000000000ll);
	CHECK(!exl_gguf_get_i64(f, "t.u64", &i64));   /* above INT64_MAX */
	CHECK(exl_gguf_get_f32(f, "t.f32", &f32) && f32 == 1.5f);
	CHECK(exl_gguf_get_f32(f, "t.f64", &f32) && fabsf(f32 - 2.7182817f) < 1e-6f);
	CHECK(exl_gguf_get_f32(f, "t.i16", &f32) && f32 == -32768.0f);
	CHECK(!exl_gguf_get_f32(f, "t.str", &f32));
	CHECK(exl_gguf_get_bool(f, "t.bool", &b) && b);
	CHECK(exl_gguf_get_bool(f, "t.false", &b) && !b);
	CHECK(!exl_gguf_get_bool(f, "t.u8", &b));
	CHECK(exl_gguf_get_str(f, "t.str", buf, sizeof(buf)) && !strcmp(buf, "hello world"));
	CHECK(!exl_gguf_get_str(f, "t.str", buf, 11)); /* no room for the NUL */
	CHECK(exl_gguf_get_str(f, "t.empty_str", buf, sizeof(buf)) && buf[0] == '\0');
	CHECK(!exl_gguf_get_str(f, "t.u8", buf, sizeof(buf)));
	CHECK(exl_gguf_get_arr(f, "t.arr.str") && exl_gguf_get_arr(f, "t.arr.str")->count == 4);
	CHECK(exl_gguf_get_arr(f, "t.str") == NULL);

	const struct gguf_array *a = exl_gguf_get_arr(f, "t.arr.i32");
	double d;

	CHECK(a && exl_gguf_arr_get_i64(a, 0, &i64) && i64 == INT32_MIN);
	CHECK(a && exl_gguf_arr_get_i64(a, 2, &i64) && i64 == -1);
	CHECK(a && !exl_gguf_arr_get_i64(a, 4, &i64));
	a = exl_gguf_get_arr(f, "t.arr.f32");
	CHECK(a && exl_gguf_arr_get_f64(a, 2, &d) && d == 3.25);
	CHECK(a && !exl_gguf_arr_get_i64(a, 0, &i64));
	a = exl_gguf_get_arr(f, "t.arr.u64");
	CHECK(a && !exl_gguf_arr_get_i64(a, 1, &i64));
	a = exl_gguf_get_arr(f, "t.arr.nested_deep");
	CHECK(a && a->arrs[0].arrs[0].arrs[0].count == 3);
	CHECK(a && exl_gguf_arr_get_i64(&a->arrs[0].arrs[0].arrs[0], 2, &i64) && i64 == 3);

	t = exl_gguf_find_tensor(f, "a.weight");
	CHECK(t && t->type == EXL_F32 && t->n_dims == 2 && t->ne[0] == 3 && t->ne[1] == 2 &&
	      t->ne[2] == 1 && t->nbytes == sizeof(tdata_f32) &&
	      !memcmp(t->data, tdata_f32, sizeof(tdata_f32)) && t->offset == 0);
	t = exl_gguf_find_tensor(f, "b.weight");
	CHECK(t && t->type == EXL_Q8_0 && t->n_dims == 1 && t->ne[0] == 64 && t->nbytes == 68 &&
	      !memcmp(t->data, tdata_q8, 68) && t->offset == 64);
	t = exl_gguf_find_tensor(f, "c.weight");
	CHECK(t && t->type == EXL_I8 && t->n_dims == 4 && t->ne[0] == 5 && t->ne[1] == 3 &&
	      t->ne[2] == 2 && t->ne[3] == 1 && t->nbytes == 30 && t->offset == 192);
	if (t) {
		const uint8_t *p = t->data;
		bool same = true;

		for (size_t i = 0; i < 30; i++)
			same &= p[i] == (uint8_t)(i * 7 + fill_seed);
		CHECK(same);
		CHECK((const uint8_t *)t->data + 30 <= f->base + f->size);
	}
	CHECK(exl_gguf_find_tensor(f, "missing") == NULL);
}

static void check_writer_errors(void)
{
	struct gguf_writer *w = exl_gguf_writer_new();
	static const uint64_t ne_bad[] = { 33 };
	char err[256];
	void *buf;
	size_t size;

	CHECK(exl_gguf_writer_set_u32(w, "k", 1) == 0);
	CHECK(exl_gguf_writer_set_u32(w, "k", 2) == -1); /* duplicate */
	CHECK(exl_gguf_writer_error(w) && strstr(exl_gguf_writer_error(w), "duplicate key 'k'"));
	CHECK(exl_gguf_writer_set_u32(w, "other", 2) == -1); /* errors are sticky */
	CHECK(exl_gguf_writer_write_mem(w, &buf, &size, err, sizeof(err)) == -1);
	CHECK(strstr(err, "duplicate key 'k'") != NULL);
	exl_gguf_writer_free(w);

	w = exl_gguf_writer_new();
	CHECK(exl_gguf_writer_add_tensor(w, "q", EXL_Q8_0, 1, ne_bad, tdata_q8) == -1);
	CHECK(exl_gguf_writer_error(w) && strstr(exl_gguf_writer_error(w), "whole number"));
	exl_gguf_writer_free(w);

	w = exl_gguf_writer_new();
	CHECK(exl_gguf_writer_set_alignment(w, 48) == -1);
	exl_gguf_writer_free(w);

	w = exl_gguf_writer_new();
	CHECK(exl_gguf_writer_add_tensor_fill(w, "x", EXL_F32, 1, ne_bad, fill_fail, NULL) == 0);
	CHECK(exl_gguf_writer_write_mem(w, &buf, &size, err, sizeof(err)) == -1);
	CHECK(strstr(err, "fill refused") != NULL);
	exl_gguf_writer_free(w);
}

/* The names of a split model's parts (gguf_split.h). */
static void check_split_names(void)
{
	static const struct { const char *name; int k, n; } cases[] = {
		{ "m-00001-of-00003.gguf", 1, 3 }, { "/d/m-00003-of-00003.gguf", 3, 3 },
		{ "m-00001-of-00003", 1, 3 }, { "Qwen3-32B-Q8_0-00002-of-00002.gguf", 2, 2 },
		{ "m-00001-of-00001.gguf", 0, 0 }, { "m-00004-of-00003.gguf", 0, 0 },
		{ "m-00000-of-00003.gguf", 0, 0 }, { "m-0001-of-00003.gguf", 0, 0 },
		{ "m-000a1-of-00003.gguf", 0, 0 }, { "m-00001_of-00003.gguf", 0, 0 },
		{ "-00001-of-00002", 1, 2 }, { "model.gguf", 0, 0 }, { "", 0, 0 },
		{ "m--0001-of-00003.gguf", 0, 0 }, { "m-00001-of--0003.gguf", 0, 0 },
	};
	char out[64];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int k = 0, n = 0;
		bool is = exl_gguf_split_name(cases[i].name, strlen(cases[i].name), &k, &n);

		CHECK(is == (cases[i].n > 0) && (!is || (k == cases[i].k && n == cases[i].n)));
		if (is != (cases[i].n > 0))
			fprintf(stderr, "split name '%s': %d (%d of %d)\n", cases[i].name, is, k, n);
	}
	CHECK(exl_gguf_split_path("/d/m-00001-of-00003.gguf", 3, 3, out, sizeof(out)) == 0 &&
	      !strcmp(out, "/d/m-00003-of-00003.gguf"));
	CHECK(exl_gguf_split_path("/d/m-00002-of-00003.gguf", 3, 3, out, sizeof(out)) == -1);
	CHECK(exl_gguf_split_path("/d/m-00001-of-00003.gguf", 4, 3, out, sizeof(out)) == -1);
	CHECK(exl_gguf_split_path("/d/m-00001-of-00003.gguf", 2, 3, out, 8) == -1);
	CHECK(exl_gguf_split_path("m-00001-of-00003", 2, 3, out, sizeof(out)) == -1);
}

static int roundtrip(void)
{
	char err[512], path[] = "/tmp/test_gguf_XXXXXX";
	struct gguf_writer *w;
	struct gguf_file *f;
	void *buf = NULL;
	size_t size = 0;
	int seed = 11, fd;

	init_nested();
	w = build(&seed);
	CHECK(exl_gguf_writer_write_mem(w, &buf, &size, err, sizeof(err)) == 0);
	f = exl_gguf_open_buffer(buf, size, err, sizeof(err));
	if (!f)
		fprintf(stderr, "open_buffer: %s\n", err);
	CHECK(f != NULL);
	if (f) {
		CHECK(f->size == size && !f->mapped);
		check_read(f, seed);
		exl_gguf_close(f);
	}

	fd = mkstemp(path);
	CHECK(fd >= 0);
	close(fd);
	seed = 3;
	CHECK(exl_gguf_writer_write_file(w, path, err, sizeof(err)) == 0);
	f = exl_gguf_open(path, err, sizeof(err));
	if (!f)
		fprintf(stderr, "open: %s\n", err);
	CHECK(f != NULL);
	if (f) {
		CHECK(f->mapped);
		check_read(f, seed);
		/* the file and the buffer differ only in the fill tensor */
		CHECK(f->size == size);
		exl_gguf_close(f);
	}
	unlink(path);
	free(buf);
	exl_gguf_writer_free(w);

	check_writer_errors();
	check_split_names();
	return 0;
}

static int stories(void)
{
	const char *dir = getenv("EXLD_MODELS");
	char path[4096], err[512], buf[64];
	const struct gguf_array *tok;
	const struct gguf_tensor *t;
	struct gguf_file *f;
	uint32_t u;
	float eps;

	if (!dir || !*dir) {
		printf("EXLD_MODELS is not set; skipping\n");
		return 77;
	}
	snprintf(path, sizeof(path), "%s/stories260K.gguf", dir);
	if (access(path, R_OK)) {
		printf("%s not found; skipping\n", path);
		return 77;
	}
	f = exl_gguf_open(path, err, sizeof(err));
	if (!f) {
		fprintf(stderr, "%s\n", err);
		CHECK(0);
		return 0;
	}
	CHECK(f->version == 3);
	CHECK(f->alignment == 32);
	CHECK(f->n_kv == 19);
	CHECK(f->n_tensors == 48);
	CHECK(f->size == 1185376);
	CHECK(exl_gguf_get_str(f, "general.architecture", buf, sizeof(buf)) &&
	      !strcmp(buf, "llama"));
	CHECK(exl_gguf_get_u32(f, "llama.embedding_length", &u) && u == 64);
	CHECK(exl_gguf_get_u32(f, "llama.block_count", &u) && u == 5);
	CHECK(exl_gguf_get_u32(f, "llama.attention.head_count", &u) && u == 8);
	CHECK(exl_gguf_get_u32(f, "llama.attention.head_count_kv", &u) && u == 4);
	CHECK(exl_gguf_get_u32(f, "llama.feed_forward_length", &u) && u == 172);
	CHECK(exl_gguf_get_u32(f, "llama.context_length", &u) && u == 2048);
	CHECK(exl_gguf_get_u32(f, "llama.rope.dimension_count", &u) && u == 8);
	CHECK(exl_gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps) && eps == 1e-5f);
	CHECK(exl_gguf_get_str(f, "tokenizer.ggml.model", buf, sizeof(buf)) &&
	      !strcmp(buf, "llama"));
	CHECK(exl_gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &u) && u == 1);
	CHECK(exl_gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &u) && u == 2);
	tok = exl_gguf_get_arr(f, "tokenizer.ggml.tokens");
	CHECK(tok && tok->elem_type == GGUF_VT_STRING && tok->count == 512);
	if (tok && tok->elem_type == GGUF_VT_STRING && tok->count == 512) {
		CHECK(exl_gguf_str_eq(tok->strs[0], "<unk>"));
		CHECK(exl_gguf_str_eq(tok->strs[1], "<s>"));
		CHECK(exl_gguf_str_eq(tok->strs[3], "<0x00>"));
	}
	tok = exl_gguf_get_arr(f, "tokenizer.ggml.token_type");
	CHECK(tok && tok->elem_type == GGUF_VT_INT32 && tok->count == 512);

	t = exl_gguf_find_tensor(f, "token_embd.weight");
	CHECK(t && t->type == EXL_F32 && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 512 &&
	      t->nbytes == 64 * 512 * 4);
	t = exl_gguf_find_tensor(f, "blk.0.attn_k.weight");
	CHECK(t && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 32);
	t = exl_gguf_find_tensor(f, "blk.4.ffn_down.weight");
	CHECK(t && t->n_dims == 2 && t->ne[0] == 172 && t->ne[1] == 64);
	t = exl_gguf_find_tensor(f, "output_norm.weight");
	CHECK(t && t->n_dims == 1 && t->ne[0] == 64);
	/* an RMSNorm weight of a trained model: finite and not all zero */
	if (t) {
		float v[64];
		bool finite = true, nonzero = false;

		memcpy(v, t->data, sizeof(v));
		for (int i = 0; i < 64; i++) {
			finite &= isfinite(v[i]);
			nonzero |= v[i] != 0;
		}
		CHECK(finite && nonzero);
	}
	CHECK(exl_gguf_find_tensor(f, "blk.5.attn_q.weight") == NULL);

	uint64_t params = 0;

	for (uint64_t i = 0; i < f->n_tensors; i++) {
		const struct gguf_tensor *x = &f->tensors[i];

		params += x->ne[0] * x->ne[1] * x->ne[2] * x->ne[3];
		CHECK(x->offset % f->alignment == 0);
	}
	CHECK(params == 292800);
	exl_gguf_close(f);
	return 0;
}

int main(int argc, char **argv)
{
	int rc;

	if (argc != 2 || (strcmp(argv[1], "roundtrip") && strcmp(argv[1], "stories"))) {
		fprintf(stderr, "usage: test_gguf roundtrip|stories\n");
		return 2;
	}
	rc = !strcmp(argv[1], "roundtrip") ? roundtrip() : stories();
	if (rc == 77)
		return 77;
	printf("%d checks, %d failed\n", check_count, check_failures);
	return check_failures ? 1 : 0;
}
