/* The local KV pool of models that mix sliding-window and global layers
 * (kvcache.h, exl_kvcache_create_mixed), on random-weight gemma2 and gemma3
 * files from exld-mkmodel with a window of 8 and pages of 4:
 *
 *   - two sequences generated greedily together well past the window
 *     (PROMPT + N_GEN positions) give the same ids and the same logits,
 *     bit for bit, as through one pool that keeps every page (the cache
 *     every mixed model had before the local pool: its layers' op calls
 *     are unchanged);
 *   - the local pool's pages in use stay within window / page + 2 per
 *     sequence at every step while the global pool holds every position;
 *   - a rewind of 3 tokens, a rewind past the window (the sequence then
 *     forgets everything and computes its tokens again), a fork written on
 *     both sides (copy on write in both pools) and a released sequence's
 *     prefix shared again (the local pages through their companions) all
 *     give the same last logits.  (A sequence that computed again pages the
 *     prefix cache already holds does not register its own: the test maps
 *     back the sequence that never rewound.)
 *
 *   test_model_swa PATH/TO/exld-mkmodel
 */
#include "model_test_util.h"

#define PS 4
#define WINDOW 8
#define N_SEQS 2
#define PROMPT 13
#define N_GEN 120
#define N_ALL (PROMPT + N_GEN)

static const char *mkmodel;
static char tmpdir[128];
static struct exl_backend *be;

struct run {
	int32_t tok[N_SEQS][N_ALL];
	int n[N_SEQS];
	float *last[N_SEQS];   /* logits of the last step, per sequence */
	int max_local;         /* most local pages in use at once */
};

/* Feeds tokens[from..to) of s alone; the last row's logits into out. */
static void feed(struct exl_model *m, struct exl_kvcache *kv, struct exl_kv_seq *s,
		 const int32_t *tokens, int from, int to, float *out)
{
	int n = to - from;
	int32_t seq[N_ALL];
	bool want[N_ALL];
	struct exl_kv_seq *seqs[1] = { s };
	char err[256];

	assert_int_equal(s->n_pos, from);
	for (int i = 0; i < n; i++) {
		seq[i] = 0;
		want[i] = i == n - 1;
	}
	assert_int_equal(exl_kv_seq_reserve(kv, s, n), 0);
	struct exl_batch b = { n, tokens + from, seq, want, 1, seqs };
	if (exl_model_forward(m, kv, &b, out, err, sizeof(err)))
		fail_msg("forward: %s", err);
}

/* Both sequences: their prompts in one pass, then one token each per pass
 * until N_ALL positions, greedy. */
static void generate(struct exl_model *m, struct exl_kvcache *kv, struct exl_kv_seq *s,
		     struct run *r)
{
	int n_vocab = exl_model_hparams(m)->n_vocab;
	float *logits = malloc((size_t)N_SEQS * (size_t)n_vocab * sizeof(float));
	int32_t tokens[N_SEQS * PROMPT], seq[N_SEQS * PROMPT];
	bool want[N_SEQS * PROMPT];
	struct exl_kv_seq *seqs[N_SEQS];
	char err[256];

	assert_non_null(logits);
	r->max_local = 0;
	for (int j = 0; j < N_SEQS; j++) {
		exl_kv_seq_init(&s[j]);
		seqs[j] = &s[j];
		r->n[j] = PROMPT - 3 * j;
		for (int i = 0; i < r->n[j]; i++)
			r->tok[j][i] = 3 + (int32_t)((i * 37 + j * 101 + 11) % (n_vocab - 3));
	}
	while (r->n[0] < N_ALL) {
		int n = 0;

		for (int j = 0; j < N_SEQS; j++) {
			int k = r->n[j] - s[j].n_pos;

			assert_int_equal(exl_kv_seq_reserve(kv, &s[j], k), 0);
			for (int i = 0; i < k; i++) {
				tokens[n] = r->tok[j][s[j].n_pos + i];
				seq[n] = j;
				want[n++] = i == k - 1;
			}
		}
		struct exl_batch b = { n, tokens, seq, want, N_SEQS, seqs };
		if (exl_model_forward(m, kv, &b, logits, err, sizeof(err)))
			fail_msg("forward: %s", err);
		for (int j = 0; j < N_SEQS; j++) {
			const float *row = logits + (size_t)j * (size_t)n_vocab;

			memcpy(r->last[j], row, (size_t)n_vocab * sizeof(float));
			if (r->n[j] < N_ALL)
				r->tok[j][r->n[j]++] = test_argmax(row, n_vocab);
		}
		int used = exl_kvcache_local_n_pages(kv) - exl_kvcache_local_free_pages(kv);
		if (used > r->max_local)
			r->max_local = used;
	}
	free(logits);
}

static void check_model(const char *name, const char *const *args)
{
	char path[256], err[256];
	struct exl_model *m;
	struct exl_kvcache *plain, *mixed;
	struct exl_kv_seq sp[N_SEQS], sm[N_SEQS], fork_seq, again;
	static struct run rp, rm;
	float *out;

	test_mkmodel(mkmodel, tmpdir, name, path, sizeof(path), args);
	m = exl_model_load(path, be, err, sizeof(err));
	if (!m)
		fail_msg("%s: %s", name, err);
	const struct exl_hparams *hp = exl_model_hparams(m);
	int nv = hp->n_vocab;

	out = malloc((size_t)nv * sizeof(float));
	for (int j = 0; j < N_SEQS; j++) {
		rp.last[j] = malloc((size_t)nv * sizeof(float));
		rm.last[j] = malloc((size_t)nv * sizeof(float));
		assert_true(rp.last[j] && rm.last[j]);
	}
	assert_non_null(out);
	plain = exl_kvcache_create(be, hp->n_layer, hp->n_head_kv, hp->head_dim,
				   N_SEQS * (N_ALL + PS), PS, err, sizeof(err));
	mixed = exl_model_kvcache_create_for(m, N_SEQS * (N_ALL + PS), PS, N_SEQS, PROMPT, err,
					     sizeof(err));
	if (!plain || !mixed)
		fail_msg("%s: kv cache: %s", name, err);
	int span = exl_kvcache_local_span(mixed, PROMPT);
	assert_true(exl_kvcache_local_n_pages(mixed) > 0);
	assert_int_equal(exl_kvcache_local_n_pages(mixed), N_SEQS * span);

	generate(m, plain, sp, &rp);
	generate(m, mixed, sm, &rm);
	for (int j = 0; j < N_SEQS; j++) {
		assert_memory_equal(rp.tok[j], rm.tok[j], sizeof(rp.tok[j]));
		assert_memory_equal(rp.last[j], rm.last[j], (size_t)nv * sizeof(float));
	}
	/* the local pool holds each sequence's window and a page or two; the
	 * global one every position */
	int used_g = exl_kvcache_n_pages(mixed) - exl_kvcache_free_pages(mixed);
	int used_l = exl_kvcache_local_n_pages(mixed) - exl_kvcache_local_free_pages(mixed);
	int expect_g = 0;
	for (int j = 0; j < N_SEQS; j++)
		expect_g += (sm[j].n_pos + PS - 1) / PS;
	printf("%s: %d layers (%d local), after %d and %d positions: global pool %d pages "
	       "(%d positions) in use, local pool %d pages (%d positions), at most %d; "
	       "KV bytes %llu with the local pool, %llu in one pool\n", name, hp->n_layer,
	       (int)(hp->n_layer - (exl_kvcache_bytes(mixed) - exl_kvcache_local_bytes(mixed)) /
		     (4ull * hp->n_head_kv * hp->head_dim * exl_kvcache_n_pages(mixed) * PS)),
	       sm[0].n_pos, sm[1].n_pos, used_g, used_g * PS, used_l, used_l * PS, rm.max_local,
	       (unsigned long long)exl_kvcache_bytes(mixed),
	       (unsigned long long)exl_kvcache_bytes(plain));
	assert_int_equal(used_g, expect_g);
	assert_true(rm.max_local <= N_SEQS * (WINDOW / PS + 2));
	assert_true(used_l <= N_SEQS * (WINDOW / PS + 2));
	assert_true(used_g > 4 * used_l);

	/* seq 1 released, then mapped again from the prefix cache: the global
	 * pages and, through their companions, the local ones of its window */
	const int32_t *t1 = rm.tok[1];
	int n1 = sm[1].n_pos;

	exl_kv_seq_release(mixed, &sm[1]);
	assert_true(exl_kvcache_local_cached_pages(mixed) > 0);
	exl_kv_seq_init(&again);
	int shared = exl_kv_seq_share_prefix(mixed, &again, t1, n1);
	printf("%s: %d of %d positions mapped back from the prefix cache\n", name, shared, n1);
	assert_int_equal(shared, (n1 - 1) / PS * PS);
	assert_true(again.n_ldropped > 0);
	feed(m, mixed, &again, t1, shared, n1, out);
	assert_memory_equal(out, rp.last[1], (size_t)nv * sizeof(float));
	exl_kv_seq_release(mixed, &again);

	/* the logits that chose seq 0's last token, from the plain cache */
	struct exl_kv_seq *s = &sm[0];
	int n = s->n_pos;
	const int32_t *t = rm.tok[0];

	/* a short rewind (speculative decoding, banned strings) */
	exl_kv_seq_truncate(mixed, s, n - 3);
	assert_int_equal(s->n_pos, n - 3);
	feed(m, mixed, s, t, n - 3, n, out);
	assert_memory_equal(out, rp.last[0], (size_t)nv * sizeof(float));
	/* past the window's kept page: everything is computed again */
	exl_kv_seq_truncate(mixed, s, n - 2 * WINDOW);
	assert_int_equal(s->n_pos, 0);
	assert_int_equal(s->n_pages, 0);
	for (int at = 0; at < n; at += PROMPT)
		feed(m, mixed, s, t, at, at + PROMPT < n ? at + PROMPT : n, out);
	assert_memory_equal(out, rp.last[0], (size_t)nv * sizeof(float));
	/* a fork written on both sides: each copies the shared last page */
	exl_kv_seq_truncate(mixed, s, n - 1);
	exl_kv_seq_init(&fork_seq);
	assert_int_equal(exl_kv_seq_fork(mixed, &fork_seq, s), 0);
	feed(m, mixed, &fork_seq, t, n - 1, n, out);
	assert_memory_equal(out, rp.last[0], (size_t)nv * sizeof(float));
	feed(m, mixed, s, t, n - 1, n, out);
	assert_memory_equal(out, rp.last[0], (size_t)nv * sizeof(float));
	assert_int_not_equal(fork_seq.lpages[(n - 1) / PS], s->lpages[(n - 1) / PS]);
	exl_kv_seq_release(mixed, &fork_seq);
	exl_kv_seq_release(mixed, s);
	assert_int_equal(exl_kvcache_local_free_pages(mixed), exl_kvcache_local_n_pages(mixed));
	assert_int_equal(exl_kvcache_free_pages(mixed), exl_kvcache_n_pages(mixed));

	exl_kv_seq_release(plain, &sp[0]);
	exl_kv_seq_release(plain, &sp[1]);
	exl_kvcache_free(plain);
	exl_kvcache_free(mixed);
	for (int j = 0; j < N_SEQS; j++) {
		free(rp.last[j]);
		free(rm.last[j]);
	}
	free(out);
	exl_model_free(m);
	unlink(path);
}

static void test_gemma2(void **state)
{
	(void)state;
	check_model("gemma2.gguf", (const char *const[]){ "--arch", "gemma2", "--dim", "64",
		"--layers", "2", "--heads", "4", "--kv-heads", "2", "--ff", "128", "--swa", "8",
		NULL });
}

static void test_gemma3(void **state)
{
	(void)state;
	check_model("gemma3.gguf", (const char *const[]){ "--arch", "gemma3", "--dim", "64",
		"--layers", "2", "--heads", "4", "--kv-heads", "2", "--ff", "128", "--swa", "8",
		"--swa-pattern", "2", NULL });
}

/* gemma3's 5 local : 1 global */
static void test_gemma3_6(void **state)
{
	(void)state;
	check_model("gemma3_6.gguf", (const char *const[]){ "--arch", "gemma3", "--dim", "64",
		"--layers", "6", "--heads", "4", "--kv-heads", "1", "--head-dim", "32", "--ff",
		"128", "--swa", "8", "--tied", NULL });
}

static int setup(void **state)
{
	(void)state;
	return test_tmp_backend_setup("swa", tmpdir, sizeof(tmpdir), &be);
}

static int teardown(void **state)
{
	(void)state;
	test_tmp_backend_teardown(tmpdir, be);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s PATH/TO/exld-mkmodel\n", argv[0]);
		return 2;
	}
	mkmodel = argv[1];
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gemma2),
		cmocka_unit_test(test_gemma3),
		cmocka_unit_test(test_gemma3_6),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
