/* Model files the loader must refuse with a message naming the problem:
 * copies of stories260K with one thing broken (a tensor missing, misshaped
 * or of an unsupported type, another architecture, a missing key). */
#include <unistd.h>

#include "daemon/core/gguf/gguf.h"
#include "daemon/core/gguf/gguf_write.h"
#include "model_test_util.h"
#include "kernels/formats/dtype.h"

static const char *models;
static struct exl_backend *be;
static struct gguf_file *src;
static char tmpdir[256];

enum edit_kind { EDIT_NONE, EDIT_DROP_TENSOR, EDIT_SHAPE, EDIT_TYPE, EDIT_SET_STR, EDIT_DROP_KEY,
		 EDIT_ADD_TENSOR };

struct edit {
	enum edit_kind kind;
	const char *name;  /* tensor or key */
	const char *str;   /* EDIT_SET_STR value */
	uint64_t ne0, ne1; /* EDIT_SHAPE; EDIT_ADD_TENSOR: an F32 vector of ne0 */
	uint32_t type;     /* EDIT_TYPE */
};

static char *cstr(struct gguf_str s)
{
	char *c = malloc(s.len + 1);

	assert_non_null(c);
	memcpy(c, s.ptr, s.len);
	c[s.len] = '\0';
	return c;
}

/* Writes a copy of stories260K with edit e applied; returns its path. */
static void write_edited(const struct edit *e, char *path, size_t pathlen)
{
	struct gguf_writer *w = exl_gguf_writer_new();
	void *zeros = NULL;
	char err[512];

	assert_non_null(w);
	for (uint64_t i = 0; i < src->n_kv; i++) {
		char *key = cstr(src->kv[i].key);

		if ((e->kind == EDIT_SET_STR || e->kind == EDIT_DROP_KEY) && !strcmp(key, e->name)) {
			if (e->kind == EDIT_SET_STR)
				exl_gguf_writer_set_str(w, key, e->str);
		} else {
			exl_gguf_writer_set(w, key, &src->kv[i].val);
		}
		free(key);
	}
	for (uint64_t i = 0; i < src->n_tensors; i++) {
		const struct gguf_tensor *t = &src->tensors[i];
		char *name = cstr(t->name);
		bool hit = e->name && !strcmp(name, e->name);
		uint64_t ne[GGUF_MAX_DIMS];

		memcpy(ne, t->ne, sizeof(ne));
		if (hit && e->kind == EDIT_DROP_TENSOR) {
			free(name);
			continue;
		}
		if (hit && e->kind == EDIT_SHAPE) {
			ne[0] = e->ne0;
			ne[1] = e->ne1;
		}
		if (hit && e->kind == EDIT_TYPE) {
			size_t bytes = exl_dtype_row_bytes(e->type, ne[0]) * ne[1];
			assert_true(bytes > 0);
			zeros = calloc(1, bytes);
			assert_non_null(zeros);
			exl_gguf_writer_add_tensor(w, name, e->type, t->n_dims, ne, zeros);
		} else {
			exl_gguf_writer_add_tensor(w, name, t->type, t->n_dims, ne, t->data);
		}
		free(name);
	}
	if (e->kind == EDIT_ADD_TENSOR) {
		uint64_t ne[GGUF_MAX_DIMS] = { e->ne0, 1, 1, 1 };

		zeros = calloc(e->ne0, sizeof(float));
		assert_non_null(zeros);
		exl_gguf_writer_add_tensor(w, e->name, EXL_F32, 1, ne, zeros);
	}
	snprintf(path, pathlen, "%s/bad.gguf", tmpdir);
	if (exl_gguf_writer_write_file(w, path, err, sizeof(err)))
		fail_msg("writing %s: %s", path, err);
	exl_gguf_writer_free(w);
	free(zeros);
}

/* Loading the edited copy fails with a message containing want. */
static void expect_refused(const struct edit *e, const char *want)
{
	char path[512], err[512] = "";
	struct exl_model *m;

	write_edited(e, path, sizeof(path));
	m = exl_model_load(path, be, err, sizeof(err));
	if (m) {
		exl_model_free(m);
		fail_msg("loaded, expected an error containing \"%s\"", want);
	}
	if (!strstr(err, want))
		fail_msg("error \"%s\" does not contain \"%s\"", err, want);
	printf("refused as expected: %s\n", err);
	unlink(path);
}

static void test_unedited_copy_loads(void **state)
{
	(void)state;
	struct edit e = { .kind = EDIT_NONE };
	char path[512], err[512];

	write_edited(&e, path, sizeof(path));
	struct exl_model *m = exl_model_load(path, be, err, sizeof(err));
	if (!m)
		fail_msg("the unedited copy does not load: %s", err);
	exl_model_free(m);
	unlink(path);
}

static void test_missing_tensor(void **state)
{
	(void)state;
	struct edit e = { .kind = EDIT_DROP_TENSOR, .name = "blk.3.attn_v.weight" };

	expect_refused(&e, "missing tensor 'blk.3.attn_v.weight'");
	e.name = "output_norm.weight";
	expect_refused(&e, "missing tensor 'output_norm.weight'");
}

static void test_misshaped_tensor(void **state)
{
	(void)state;
	/* ffn_up is [64, 172]; the same bytes declared transposed. */
	struct edit e = { .kind = EDIT_SHAPE, .name = "blk.2.ffn_up.weight", .ne0 = 172, .ne1 = 64 };

	expect_refused(&e, "tensor 'blk.2.ffn_up.weight' has shape [172, 64], expected [64, 172]");
}

static void test_unsupported_type(void **state)
{
	(void)state;
	/* attn_q is [64, 64]: whole q8_1 blocks, a type GGML knows and the
	 * matmul lacks (it is GGML's activation format). */
	struct edit e = { .kind = EDIT_TYPE, .name = "blk.0.attn_q.weight", .type = EXL_Q8_1 };

	expect_refused(&e, "tensor 'blk.0.attn_q.weight' has unsupported type q8_1 (type 9)");
	/* Norms must be f32. */
	e.name = "blk.1.attn_norm.weight";
	e.type = EXL_F16;
	expect_refused(&e, "tensor 'blk.1.attn_norm.weight' has unsupported type f16");
}

/* Biases llama.cpp would add and exld has no place for: refused, not
 * dropped. */
static void test_unapplied_bias(void **state)
{
	(void)state;
	struct edit e = { .kind = EDIT_ADD_TENSOR, .name = "blk.1.attn_output.bias", .ne0 = 64 };

	expect_refused(&e, "tensor 'blk.1.attn_output.bias' is not supported");
	e.name = "blk.4.ffn_down.bias";
	expect_refused(&e, "tensor 'blk.4.ffn_down.bias' is not supported");
	e.name = "output.bias";
	e.ne0 = 512;
	expect_refused(&e, "tensor 'output.bias' is not supported");
}

static void test_unsupported_arch(void **state)
{
	(void)state;
	struct edit e = { .kind = EDIT_SET_STR, .name = "general.architecture", .str = "gpt2" };

	expect_refused(&e, "unsupported architecture 'gpt2'");
}

static void test_missing_key(void **state)
{
	(void)state;
	struct edit e = { .kind = EDIT_DROP_KEY, .name = "llama.embedding_length" };

	expect_refused(&e, "missing metadata key 'llama.embedding_length'");
}

static void test_not_gguf(void **state)
{
	(void)state;
	char path[512], err[512] = "";
	FILE *f;

	snprintf(path, sizeof(path), "%s/junk.gguf", tmpdir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("this is not a model\n", f);
	fclose(f);
	assert_null(exl_model_load(path, be, err, sizeof(err)));
	assert_non_null(strstr(err, path));
	printf("refused as expected: %s\n", err);
	unlink(path);
	assert_null(exl_model_load("/nonexistent/model.gguf", be, err, sizeof(err)));
	assert_non_null(strstr(err, "/nonexistent/model.gguf"));
}

static int group_setup(void **state)
{
	char path[4096], err[512];

	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/exld-test-model-bad-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		print_error("mkdtemp failed\n");
		return -1;
	}
	be = exl_backend_cpu_create(1, err, sizeof(err));
	if (!be) {
		print_error("cpu backend: %s\n", err);
		return -1;
	}
	test_model_path(path, sizeof(path), models, "stories260K.gguf");
	src = exl_gguf_open(path, err, sizeof(err));
	if (!src) {
		print_error("%s\n", err);
		return -1;
	}
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	exl_gguf_close(src);
	be->ops->destroy(be);
	rmdir(tmpdir);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unedited_copy_loads),
		cmocka_unit_test(test_missing_tensor),
		cmocka_unit_test(test_misshaped_tensor),
		cmocka_unit_test(test_unsupported_type),
		cmocka_unit_test(test_unapplied_bias),
		cmocka_unit_test(test_unsupported_arch),
		cmocka_unit_test(test_missing_key),
		cmocka_unit_test(test_not_gguf),
	};

	models = test_models_dir();
	if (!models)
		return SKIP_STATUS;
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
