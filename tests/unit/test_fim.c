/* Fill-in-the-middle prompts (struct exl_gen_settings' fim): on a model
 * with StarCoder's vocabulary, a job's prompt is PRE prefix SUF suffix MID
 * with each part tokenized alone; a too-long one loses the start of its
 * prefix to truncation (the markers and the suffix stay), and no more than
 * the prefix; a model without the tokens, an ids prompt and token healing
 * are refused by name.
 *
 *   test_fim PATH/TO/exld-mkmodel
 */
#include <unistd.h>

#include "daemon/core/generator/generator_internal.h"
#include "daemon/core/tokenizer/tokenizer.h"
#include "model_test_util.h"

static const char *mkmodel;
static char tmpdir[128];
static struct exl_backend *be;
static struct exl_model *coder, *stories;

static int on_chunk(struct exl_job *job, const struct exl_chunk *c, void *user)
{
	(void)job;
	(void)c;
	(void)user;
	return 0;
}

static void on_done(struct exl_job *job, const struct exl_gen_result *r, void *user)
{
	(void)job;
	(void)r;
	(void)user;
}

static const struct exl_job_callbacks cb = { .on_chunk = on_chunk, .on_done = on_done };

static int encode(const char *text, int32_t **ids)
{
	char err[256];
	int n = exl_tok_encode(exl_model_tokenizer(coder), text, strlen(text), false, false, ids,
			       err, sizeof(err));

	if (n < 0)
		fail_msg("encode: %s", err);
	return n;
}

static struct exl_job *fim_job(struct exl_model *m, const char *prefix, const char *suffix,
			       struct exl_gen_settings *s, char *err, size_t errlen)
{
	struct exl_prompt p = { prefix, strlen(prefix), NULL, 0 };

	s->fim = true;
	s->fim_suffix = suffix;
	s->fim_suffix_len = strlen(suffix);
	return exl_job_create(m, s, &p, NULL, &cb, NULL, err, errlen);
}

/* The job's prompt equals PRE pre SUF suf MID. */
static void expect_layout(const struct exl_job *job, const int32_t *pre, int np, const int32_t *suf,
			  int ns)
{
	int32_t fim[3];
	const struct exl_gen_seq *q = &job->seq[0];

	assert_true(exl_tokenizer_fim(exl_model_tokenizer(coder), fim));
	assert_int_equal(q->prompt_len, np + ns + 3);
	assert_int_equal(q->tokens[0], fim[0]);
	assert_memory_equal(q->tokens + 1, pre, (size_t)np * sizeof(int32_t));
	assert_int_equal(q->tokens[1 + np], fim[1]);
	assert_memory_equal(q->tokens + 2 + np, suf, (size_t)ns * sizeof(int32_t));
	assert_int_equal(q->tokens[2 + np + ns], fim[2]);
	assert_int_equal(job->fim_prefix_at, 1);
	assert_int_equal(job->fim_suffix_at, 1 + np);
}

static void test_layout(void **state)
{
	static const char prefix[] = "def add(a, b):\n    ", suffix[] = "\n    return c\n";
	struct exl_gen_settings s;
	int32_t *pre, *suf;
	char err[256];

	(void)state;
	exl_gen_settings_init(&s);
	int np = encode(prefix, &pre), ns = encode(suffix, &suf);
	struct exl_job *job = fim_job(coder, prefix, suffix, &s, err, sizeof(err));

	if (!job)
		fail_msg("fim job: %s", err);
	expect_layout(job, pre, np, suf, ns);
	printf("PRE + %d + SUF + %d + MID\n", np, ns);
	exl_job_free(job);
	free(pre);
	free(suf);
}

/* Truncation to a context of 40 with 8 new tokens keeps 32: the last
 * 32 - 3 - |suffix| tokens of the prefix. */
static void test_truncate(void **state)
{
	static const char suffix[] = "\n    return total\n";
	char prefix[2048] = "", err[256];
	struct exl_gen_settings s;
	int32_t *pre, *suf;

	(void)state;
	for (int i = 0; i < 20; i++)
		strcat(prefix, "x = x + 1\n");
	exl_gen_settings_init(&s);
	s.truncate = true;
	s.max_new_tokens = 8;
	int np = encode(prefix, &pre), ns = encode(suffix, &suf);
	struct exl_job *job = fim_job(coder, prefix, suffix, &s, err, sizeof(err));

	if (!job)
		fail_msg("fim job: %s", err);
	assert_true(np + ns + 3 > 32);
	exl_gen_truncate(job, 40);
	int kept = 32 - 3 - ns;

	expect_layout(job, pre + np - kept, kept, suf, ns);
	assert_int_equal(job->truncated, np - kept);
	printf("truncated %d of %d prefix tokens\n", job->truncated, np);
	exl_job_free(job);

	/* a suffix longer than the context: all of the prefix goes, no more */
	exl_gen_settings_init(&s);
	s.truncate = true;
	s.max_new_tokens = 8;
	job = fim_job(coder, "a = 1\n", prefix, &s, err, sizeof(err));
	if (!job)
		fail_msg("fim job: %s", err);
	free(suf);
	ns = encode(prefix, &suf);
	exl_gen_truncate(job, 16);
	expect_layout(job, NULL, 0, suf, ns);
	exl_job_free(job);
	free(pre);
	free(suf);
}

static void test_refused(void **state)
{
	struct exl_gen_settings s;
	int32_t ids[2] = { 10, 11 };
	struct exl_prompt p = { NULL, 0, ids, 2 };
	char err[256];

	(void)state;
	exl_gen_settings_init(&s);
	assert_null(fim_job(stories, "a", "b", &s, err, sizeof(err)));
	assert_non_null(strstr(err, "no fill-in-the-middle tokens"));
	exl_gen_settings_init(&s);
	s.fim = true;
	s.fim_suffix = "b";
	s.fim_suffix_len = 1;
	assert_null(exl_job_create(coder, &s, &p, NULL, &cb, NULL, err, sizeof(err)));
	assert_non_null(strstr(err, "a suffix needs a text prompt"));
	exl_gen_settings_init(&s);
	s.token_healing = true;
	assert_null(fim_job(coder, "a", "b", &s, err, sizeof(err)));
	assert_non_null(strstr(err, "does not combine with token healing"));
}

static int group_setup(void **state)
{
	char path[256], vocab[4096], models_path[4096], err[512];

	(void)state;
	if (test_tmp_backend_setup("fim", tmpdir, sizeof(tmpdir), &be))
		return -1;
	test_model_path(vocab, sizeof(vocab), test_models_dir(), "vocab/ggml-vocab-starcoder.gguf");
	const char *args[] = { "--dim", "64", "--layers", "1", "--vocab-from", vocab, NULL };
	test_mkmodel(mkmodel, tmpdir, "coder.gguf", path, sizeof(path), args);
	coder = exl_model_load(path, be, err, sizeof(err));
	test_model_path(models_path, sizeof(models_path), test_models_dir(), "stories260K.gguf");
	stories = exl_model_load(models_path, be, err, sizeof(err));
	unlink(path);
	return coder && stories ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	exl_model_free(coder);
	exl_model_free(stories);
	test_tmp_backend_teardown(tmpdir, be);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_layout),
		cmocka_unit_test(test_truncate),
		cmocka_unit_test(test_refused),
	};

	if (argc < 2) {
		fprintf(stderr, "usage: %s PATH/TO/exld-mkmodel\n", argv[0]);
		return 2;
	}
	mkmodel = argv[1];
	if (!test_models_dir())
		return SKIP_STATUS;
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
