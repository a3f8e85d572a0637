/* A loaded model whose file is truncated under its mapping (daemon/
 * mapguard.h): the forward pass reads past the new end, the SIGBUS is
 * absorbed, and the pass fails with a message instead of killing the
 * process; a SIGBUS outside any model mapping still kills.  A random-weight
 * model from exld-mkmodel, 2 threads, so the faults land on the pool's
 * workers too.
 *
 *   test_mapguard PATH/TO/exld-mkmodel
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>

#include "daemon/core/model/mapguard.h"
#include "model_test_util.h"

static const char *mkmodel;
static char tmpdir[128];
static struct exl_backend *be;

static int forward_one(struct exl_model *m, char *err, size_t errlen)
{
	struct exl_kvcache *kv = exl_model_kvcache_create(m, 64, 16, err, errlen);
	struct exl_kv_seq seq, *seqs[1] = { &seq };
	int32_t tok[4] = { 1, 5, 9, 13 }, seq_idx[4] = { 0 };
	bool want[4] = { false, false, false, true };
	float *logits = malloc(4 * (size_t)exl_model_hparams(m)->n_vocab * sizeof(float));
	struct exl_batch b = { 4, tok, seq_idx, want, 1, seqs };
	int rc = -1;

	if (!kv || !logits)
		goto out;
	exl_kv_seq_init(&seq);
	if (!exl_kv_seq_reserve(kv, &seq, 4))
		rc = exl_model_forward(m, kv, &b, logits, err, errlen);
	exl_kv_seq_release(kv, &seq);
out:
	exl_kvcache_free(kv);
	free(logits);
	return rc;
}

static void test_truncated(void **state)
{
	char path[256], err[512], why[512];
	const char *args[] = { "--dim", "256", "--layers", "4", "--heads", "4", "--kv-heads", "2",
			       "--ff", "512", NULL };

	(void)state;
	test_mkmodel(mkmodel, tmpdir, "guarded.gguf", path, sizeof(path), args);
	struct exl_model *m = exl_model_load(path, be, err, sizeof(err));
	if (!m)
		fail_msg("load: %s", err);
	assert_int_equal(forward_one(m, err, sizeof(err)), 0);
	assert_int_equal(exl_model_check_file(m, why, sizeof(why)), 0);
	/* what cp does to a loaded model: the inode shrinks; the weights
	 * past 4 KiB are no longer there */
	assert_int_equal(truncate(path, 4096), 0);
	if (forward_one(m, err, sizeof(err)) != -1)
		fail_msg("a forward pass over a truncated file succeeded");
	printf("forward pass after truncation: %s\n", err);
	assert_non_null(strstr(err, "changed on disk"));
	/* and every pass after it, without touching the file again */
	assert_int_equal(forward_one(m, err, sizeof(err)), -1);
	assert_int_equal(exl_model_check_file(m, why, sizeof(why)), 2);
	printf("file check: %s\n", why);
	exl_model_free(m);
	unlink(path);
}

/* Rewritten in place without a fault (same size, new mtime): the stat
 * check catches it. */
static void test_rewritten(void **state)
{
	char path[256], err[512], why[512];
	const char *args[] = { "--dim", "64", "--layers", "1", "--heads", "2", "--ff", "128", NULL };
	struct timespec ts[2] = { { 0, UTIME_OMIT }, { 1, 0 } };

	(void)state;
	test_mkmodel(mkmodel, tmpdir, "rewritten.gguf", path, sizeof(path), args);
	struct exl_model *m = exl_model_load(path, be, err, sizeof(err));
	if (!m)
		fail_msg("load: %s", err);
	assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
	assert_int_equal(exl_model_check_file(m, why, sizeof(why)), 2);
	assert_int_equal(forward_one(m, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "changed on disk"));
	exl_model_free(m);
	/* replaced by another file (mv): the loaded one goes on */
	m = exl_model_load(path, be, err, sizeof(err));
	if (!m)
		fail_msg("load: %s", err);
	char other[300];
	snprintf(other, sizeof(other), "%s.new", path);
	test_mkmodel(mkmodel, tmpdir, "rewritten.gguf.new", other, sizeof(other), args);
	assert_int_equal(rename(other, path), 0);
	assert_int_equal(exl_model_check_file(m, why, sizeof(why)), 1);
	printf("replaced with mv: %s\n", why);
	assert_int_equal(forward_one(m, err, sizeof(err)), 0);
	exl_model_free(m);
	unlink(path);
}

/* A SIGBUS that is not a model's is not swallowed. */
static void test_foreign(void **state)
{
	char path[256];
	int status;

	(void)state;
	snprintf(path, sizeof(path), "%s/foreign", tmpdir);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
		volatile const char *p;
		static const char other[4096];
		atomic_int fault;
		char err[128];

		/* the guard's handler in place (cmocka puts its own in for
		 * each test), guarding another mapping */
		if (exl_mapguard_add(other, sizeof(other), &fault, err, sizeof(err)))
			_exit(4);
		if (fd < 0 || ftruncate(fd, 8192))
			_exit(2);
		p = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED || ftruncate(fd, 0))
			_exit(3);
		(void)p[4096];
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	unlink(path);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS);
}

static int group_setup(void **state)
{
	(void)state;
	return test_tmp_backend_setup("mapguard", tmpdir, sizeof(tmpdir), &be);
}

static int group_teardown(void **state)
{
	(void)state;
	test_tmp_backend_teardown(tmpdir, be);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_rewritten),
		cmocka_unit_test(test_foreign),
	};

	if (argc != 2) {
		fprintf(stderr, "usage: %s PATH/TO/exld-mkmodel\n", argv[0]);
		return 2;
	}
	mkmodel = argv[1];
	return cmocka_run_group_tests_name("mapguard", tests, group_setup, group_teardown);
}
