/* Shared bits of the model tests: finding the test models (skipping when
 * they are absent), loading, and greedy argmax. */
#ifndef EXL_MODEL_TEST_UTIL_H
#define EXL_MODEL_TEST_UTIL_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/core/model/kvcache.h"
#include "daemon/core/model/model.h"
#include "kernels/backend.h"

#define SKIP_STATUS 77

/* The models directory, or NULL after printing why the tests skip. */
static inline const char *test_models_dir(void)
{
	const char *dir = getenv("EXLD_MODELS");
	struct stat st;

	if (!dir || !*dir) {
		printf("EXLD_MODELS is not set; skipping the model tests\n");
		return NULL;
	}
	if (stat(dir, &st) || !S_ISDIR(st.st_mode)) {
		printf("%s is absent; skipping the model tests\n", dir);
		return NULL;
	}
	return dir;
}

static inline void test_model_path(char *buf, size_t len, const char *dir, const char *file)
{
	snprintf(buf, len, "%s/%s", dir, file);
}

/* First maximum wins, as llama2.c's run.c and llama.cpp pick. */
static inline int32_t test_argmax(const float *logits, int n)
{
	int32_t best = 0;

	for (int i = 1; i < n; i++)
		if (logits[i] > logits[best])
			best = i;
	return best;
}

/* Generates n_gen greedy ids after prompt[0..n_prompt) into out; the prompt
 * is prefilled in chunks of chunk tokens, and the logits after it are copied
 * to first_logits unless NULL.  Fails the test on non-finite logits. */
static inline void test_greedy(struct exl_model *m, int page_size, const int32_t *prompt,
			       int n_prompt, int chunk, int n_gen, int32_t *out,
			       float *first_logits)
{
	const struct exl_hparams *hp = exl_model_hparams(m);
	char err[512];
	struct exl_kvcache *kv = exl_model_kvcache_create(m, n_prompt + n_gen, page_size, err,
							  sizeof(err));
	struct exl_kv_seq seq, *seqs[1] = { &seq };
	float *logits = malloc((size_t)hp->n_vocab * sizeof(float));
	int32_t *seq_idx = calloc((size_t)n_prompt, sizeof(int32_t));
	bool *want = calloc((size_t)n_prompt, sizeof(bool));

	if (!kv)
		fail_msg("kv cache: %s", err);
	assert_non_null(logits);
	assert_non_null(seq_idx);
	assert_non_null(want);
	exl_kv_seq_init(&seq);

	for (int off = 0; off < n_prompt; off += chunk) {
		int n = n_prompt - off < chunk ? n_prompt - off : chunk;
		struct exl_batch b = { n, prompt + off, seq_idx, want, 1, seqs };

		memset(want, 0, (size_t)n * sizeof(bool));
		want[n - 1] = off + n == n_prompt;
		assert_int_equal(exl_kv_seq_reserve(kv, &seq, n), 0);
		if (exl_model_forward(m, kv, &b, logits, err, sizeof(err)))
			fail_msg("forward: %s", err);
	}
	if (first_logits)
		memcpy(first_logits, logits, (size_t)hp->n_vocab * sizeof(float));
	for (int i = 0; i < n_gen; i++) {
		for (int v = 0; v < hp->n_vocab; v++)
			if (!isfinite(logits[v]))
				fail_msg("step %d: logit %d is %f", i, v, logits[v]);
		out[i] = test_argmax(logits, hp->n_vocab);
		if (i + 1 == n_gen)
			break;
		bool w = true;
		int32_t zero = 0;
		struct exl_batch b = { 1, &out[i], &zero, &w, 1, seqs };
		assert_int_equal(exl_kv_seq_reserve(kv, &seq, 1), 0);
		if (exl_model_forward(m, kv, &b, logits, err, sizeof(err)))
			fail_msg("forward: %s", err);
	}
	assert_int_equal(seq.n_pos, n_prompt + n_gen - 1);
	exl_kv_seq_release(kv, &seq);
	exl_kvcache_free(kv);
	free(logits);
	free(seq_idx);
	free(want);
}

/* Runs exld-mkmodel (path mkmodel) with args (NULL-terminated, at most 40)
 * writing tmpdir/name; its path goes to path.  Fails the test when it
 * fails. */
static inline void test_mkmodel(const char *mkmodel, const char *tmpdir, const char *name,
				char *path, size_t pathlen, const char *const *args)
{
	const char *argv[48];
	int n = 0, status;
	pid_t pid;

	snprintf(path, pathlen, "%s/%s", tmpdir, name);
	argv[n++] = mkmodel;
	for (int i = 0; args[i] && n < 40; i++)
		argv[n++] = args[i];
	argv[n++] = "--threads";
	argv[n++] = "1";
	argv[n++] = "-o";
	argv[n++] = path;
	argv[n] = NULL;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		execv(mkmodel, (char *const *)argv);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		fail_msg("%s failed for %s", mkmodel, name);
}

/* A cmocka group's fixture for tests that write models: a private
 * directory /tmp/exld-test-NAME-XXXXXX and a 2-thread CPU backend. */
static inline int test_tmp_backend_setup(const char *name, char *tmpdir, size_t len,
					 struct exl_backend **be)
{
	char err[256];

	snprintf(tmpdir, len, "/tmp/exld-test-%s-XXXXXX", name);
	if (!mkdtemp(tmpdir)) {
		print_error("mkdtemp failed\n");
		return -1;
	}
	*be = exl_backend_cpu_create(2, err, sizeof(err));
	if (!*be) {
		print_error("cpu backend: %s\n", err);
		rmdir(tmpdir);
		return -1;
	}
	return 0;
}

static inline void test_tmp_backend_teardown(const char *tmpdir, struct exl_backend *be)
{
	be->ops->destroy(be);
	rmdir(tmpdir);
}

#endif
