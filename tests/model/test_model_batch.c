/* Continuous batching must not change results: eight prompts run together,
 * one forward pass per step carrying every sequence that has work (prefill
 * chunks of the late starters mixed with the early ones' decode tokens, and
 * one sequence reusing another's cached prefix pages), give each the greedy
 * tokens it gives when run alone; so does a sequence that rewinds into a
 * page it shares. */
#include "daemon/core/tokenizer/tokenizer.h"
#include "model_test_util.h"

#define N_SEQ 8
#define N_GEN 24
#define CHUNK 3
#define PAGE 4
#define MAX_PROMPT 32

static const char *const prompts[N_SEQ] = {
	"Once upon a time",
	"Lily wanted to",
	"The little dog",
	"Tom and Sue went to the park",
	"One day, a bird",
	"She was very happy because",
	"The sun was",
	/* Extends prompt 0: starts from its cached pages. */
	"Once upon a time, there was a big tree",
};

struct job {
	int32_t prompt[MAX_PROMPT];
	int n_prompt;
	int fed;           /* prompt tokens in the cache */
	int32_t gen[N_GEN];
	int n_gen;
	float *first_logits;
	struct exl_kv_seq seq;
};

static const char *models;
static struct exl_backend *be;
static struct exl_model *model;

static void test_batch_matches_alone(void **state)
{
	(void)state;
	const struct exl_hparams *hp = exl_model_hparams(model);
	const struct exl_tokenizer *tok = exl_model_tokenizer(model);
	static struct job jobs[N_SEQ];
	int32_t alone[N_SEQ][N_GEN];
	char err[512];
	int nv = hp->n_vocab;

	for (int j = 0; j < N_SEQ; j++) {
		int32_t *ids;
		int n = exl_tok_encode(tok, prompts[j], strlen(prompts[j]), true, false, &ids, err,
				     sizeof(err));
		if (n < 0)
			fail_msg("tokenize: %s", err);
		assert_true(n >= 2 && n <= MAX_PROMPT);
		memcpy(jobs[j].prompt, ids, (size_t)n * sizeof(int32_t));
		free(ids);
		jobs[j].n_prompt = n;
		jobs[j].fed = 0;
		jobs[j].n_gen = 0;
		jobs[j].first_logits = malloc((size_t)nv * sizeof(float));
		assert_non_null(jobs[j].first_logits);
		exl_kv_seq_init(&jobs[j].seq);
	}
	/* Each alone, its prompt in one pass. */
	float *ref_first = malloc((size_t)N_SEQ * (size_t)nv * sizeof(float));
	assert_non_null(ref_first);
	for (int j = 0; j < N_SEQ; j++)
		test_greedy(model, PAGE, jobs[j].prompt, jobs[j].n_prompt, jobs[j].n_prompt, N_GEN,
			    alone[j], ref_first + (size_t)j * (size_t)nv);

	struct exl_kvcache *kv = exl_model_kvcache_create(model, N_SEQ * (MAX_PROMPT + N_GEN),
							  PAGE, err, sizeof(err));
	if (!kv)
		fail_msg("kv cache: %s", err);
	int32_t tokens[N_SEQ * CHUNK], seq_of[N_SEQ * CHUNK];
	bool want[N_SEQ * CHUNK];
	struct exl_kv_seq *seqs[N_SEQ];
	int owner[N_SEQ * CHUNK];
	float *logits = malloc((size_t)N_SEQ * (size_t)nv * sizeof(float));
	int mixed_steps = 0, shared = 0;
	assert_non_null(logits);

	for (int step = 0;; step++) {
		int n = 0, ns = 0, n_out = 0, n_prefill = 0, n_decode = 0;

		for (int j = 0; j < N_SEQ && j <= step; j++) {
			struct job *jb = &jobs[j];
			int take;

			if (jb->n_gen == N_GEN)
				continue;
			if (jb->fed == 0 && jb->seq.n_pos == 0) {
				jb->fed = exl_kv_seq_share_prefix(kv, &jb->seq, jb->prompt,
								  jb->n_prompt);
				shared += jb->fed;
			}
			if (jb->fed < jb->n_prompt) {
				take = jb->n_prompt - jb->fed < CHUNK ? jb->n_prompt - jb->fed : CHUNK;
				memcpy(tokens + n, jb->prompt + jb->fed, (size_t)take * sizeof(int32_t));
				jb->fed += take;
				n_prefill++;
			} else {
				take = 1;
				tokens[n] = jb->gen[jb->n_gen - 1];
				n_decode++;
			}
			assert_int_equal(exl_kv_seq_reserve(kv, &jb->seq, take), 0);
			for (int t = 0; t < take; t++) {
				seq_of[n + t] = ns;
				want[n + t] = t == take - 1 && jb->fed == jb->n_prompt;
				if (want[n + t])
					owner[n_out++] = j;
			}
			seqs[ns++] = &jb->seq;
			n += take;
		}
		if (n == 0)
			break;
		mixed_steps += n_prefill > 0 && n_decode > 0;
		struct exl_batch b = { n, tokens, seq_of, want, ns, seqs };
		if (exl_model_forward(model, kv, &b, logits, err, sizeof(err)))
			fail_msg("step %d: forward: %s", step, err);
		for (int r = 0; r < n_out; r++) {
			struct job *jb = &jobs[owner[r]];
			const float *row = logits + (size_t)r * (size_t)nv;

			if (jb->n_gen == 0)
				memcpy(jb->first_logits, row, (size_t)nv * sizeof(float));
			jb->gen[jb->n_gen++] = test_argmax(row, nv);
		}
	}
	assert_true(mixed_steps >= 4);
	assert_true(shared > 0);

	double max_diff = 0;
	for (int j = 0; j < N_SEQ; j++) {
		for (int i = 0; i < N_GEN; i++)
			if (jobs[j].gen[i] != alone[j][i])
				fail_msg("prompt %d token %d: batched %d, alone %d", j, i,
					 jobs[j].gen[i], alone[j][i]);
		for (int v = 0; v < nv; v++) {
			double d = fabs((double)jobs[j].first_logits[v] -
					ref_first[(size_t)j * (size_t)nv + (size_t)v]);
			max_diff = d > max_diff ? d : max_diff;
		}
		exl_kv_seq_release(kv, &jobs[j].seq);
		free(jobs[j].first_logits);
	}
	printf("max |logit difference| batched vs alone after the prompt: %g\n", max_diff);
	assert_true(max_diff <= 1e-4);
	assert_int_equal(exl_kvcache_free_pages(kv), exl_kvcache_n_pages(kv));
	exl_kvcache_free(kv);
	free(logits);
	free(ref_first);
}

/* A sequence that maps another's cached pages and rewinds into one of them
 * (as banned strings and token healing do) writes a different continuation
 * into its own copy: it continues as it would alone, and so does the
 * sequence it shared with. */
static void test_rewind_into_shared_page(void **state)
{
	(void)state;
	const struct exl_hparams *hp = exl_model_hparams(model);
	const struct exl_tokenizer *tok = exl_model_tokenizer(model);
	int nv = hp->n_vocab;
	const char *text = "Once upon a time, there was a little girl named Lily. She loved to play";
	const char *other = " big red dog";
	int32_t *p, *q, alone_a[8], alone_b[8], gen_b[8], mixed[64];
	char err[512];
	int n = exl_tok_encode(tok, text, strlen(text), true, false, &p, err, sizeof(err));
	int nq = exl_tok_encode(tok, other, strlen(other), false, false, &q, err, sizeof(err));

	assert_true(n > 17 && n < 48);
	assert_true(nq > 0 && nq < 8);
	struct exl_kvcache *kv = exl_model_kvcache_create(model, 4 * (n + 16), PAGE, err,
							  sizeof(err));
	struct exl_kv_seq a, b, *sa[1] = { &a }, *sb[1] = { &b };
	float *logits = malloc((size_t)nv * sizeof(float));
	int32_t *zero = calloc((size_t)n, sizeof(int32_t));
	bool *want = calloc((size_t)n, sizeof(bool));
	assert_non_null(kv);
	assert_non_null(logits);
	assert_non_null(zero);
	assert_non_null(want);
	exl_kv_seq_init(&a);
	exl_kv_seq_init(&b);

	/* a: the whole prompt. */
	test_greedy(model, PAGE, p, n, n, 8, alone_a, NULL);
	want[n - 1] = true;
	struct exl_batch ba = { n, p, zero, want, 1, sa };
	assert_int_equal(exl_kv_seq_reserve(kv, &a, n), 0);
	if (exl_model_forward(model, kv, &ba, logits, err, sizeof(err)))
		fail_msg("forward: %s", err);
	assert_int_equal(test_argmax(logits, nv), alone_a[0]);

	/* b: a's full pages, back into the middle of the last one, then other
	 * tokens from there. */
	int shared = exl_kv_seq_share_prefix(kv, &b, p, n);
	assert_true(shared >= 2 * PAGE);
	int rewind = shared - PAGE / 2;
	memcpy(mixed, p, (size_t)rewind * sizeof(int32_t));
	memcpy(mixed + rewind, q, (size_t)nq * sizeof(int32_t));
	test_greedy(model, PAGE, mixed, rewind + nq, rewind + nq, 8, alone_b, NULL);

	int32_t page = b.pages[rewind / PAGE];
	assert_int_equal(exl_kvcache_page_refcount(kv, page), 2);
	exl_kv_seq_truncate(kv, &b, rewind);
	memset(want, 0, (size_t)n * sizeof(bool));
	want[nq - 1] = true;
	struct exl_batch bb = { nq, q, zero, want, 1, sb };
	assert_int_equal(exl_kv_seq_reserve(kv, &b, nq), 0);
	assert_int_not_equal(b.pages[rewind / PAGE], page);
	assert_int_equal(exl_kvcache_page_refcount(kv, page), 1);
	if (exl_model_forward(model, kv, &bb, logits, err, sizeof(err)))
		fail_msg("forward: %s", err);
	gen_b[0] = test_argmax(logits, nv);
	for (int i = 1; i < 8; i++) {
		bool w = true;
		struct exl_batch b1 = { 1, &gen_b[i - 1], zero, &w, 1, sb };
		assert_int_equal(exl_kv_seq_reserve(kv, &b, 1), 0);
		if (exl_model_forward(model, kv, &b1, logits, err, sizeof(err)))
			fail_msg("forward: %s", err);
		gen_b[i] = test_argmax(logits, nv);
	}
	assert_memory_equal(gen_b, alone_b, sizeof(alone_b));

	/* a was not disturbed: its continuation is still the one alone. */
	for (int i = 1; i < 8; i++) {
		bool w = true;
		struct exl_batch a1 = { 1, &alone_a[i - 1], zero, &w, 1, sa };
		assert_int_equal(exl_kv_seq_reserve(kv, &a, 1), 0);
		if (exl_model_forward(model, kv, &a1, logits, err, sizeof(err)))
			fail_msg("forward: %s", err);
		assert_int_equal(test_argmax(logits, nv), alone_a[i]);
	}

	exl_kv_seq_release(kv, &a);
	exl_kv_seq_release(kv, &b);
	assert_int_equal(exl_kvcache_free_pages(kv), exl_kvcache_n_pages(kv));
	exl_kvcache_free(kv);
	free(p);
	free(q);
	free(logits);
	free(zero);
	free(want);
}

/* A batch the forward pass must refuse, with the cache left as it was. */
static void test_bad_batches(void **state)
{
	(void)state;
	char err[512];
	struct exl_kvcache *kv = exl_model_kvcache_create(model, 64, PAGE, err, sizeof(err));
	struct exl_kv_seq a, b, *seqs[2] = { &a, &b };
	float *logits = malloc((size_t)exl_model_hparams(model)->n_vocab * 6 * sizeof(float));
	int32_t tokens[6] = { 1, 2, 3, 4, 5, 6 };
	bool want[6] = { true, true, true, true, true, true };

	assert_non_null(kv);
	assert_non_null(logits);
	exl_kv_seq_init(&a);
	exl_kv_seq_init(&b);
	assert_int_equal(exl_kv_seq_reserve(kv, &a, 2), 0);
	assert_int_equal(exl_kv_seq_reserve(kv, &b, 2), 0);

	int32_t split[4] = { 0, 1, 0, 1 };
	struct exl_batch bad = { 4, tokens, split, want, 2, seqs };
	assert_int_equal(exl_model_forward(model, kv, &bad, logits, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "not consecutive"));

	int32_t range[4] = { 0, 0, 1, 2 };
	bad.seq = range;
	assert_int_equal(exl_model_forward(model, kv, &bad, logits, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "out of range"));

	int32_t ok[4] = { 0, 0, 1, 1 };
	int32_t big[4] = { 1, 2, 3, 100000 };
	bad.seq = ok;
	bad.tokens = big;
	assert_int_equal(exl_model_forward(model, kv, &bad, logits, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "id 100000"));

	/* Five tokens for a that reserved two (one page of four). */
	int32_t over[6] = { 0, 0, 0, 0, 0, 1 };
	bad.n_tokens = 6;
	bad.seq = over;
	bad.tokens = tokens;
	assert_int_equal(exl_model_forward(model, kv, &bad, logits, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "not reserved"));
	assert_int_equal(a.n_pos, 0);
	assert_int_equal(b.n_pos, 0);

	bad.n_tokens = 4;
	bad.seq = ok;
	assert_int_equal(exl_model_forward(model, kv, &bad, logits, err, sizeof(err)), 0);
	assert_int_equal(a.n_pos, 2);
	assert_int_equal(b.n_pos, 2);
	exl_kv_seq_release(kv, &a);
	exl_kv_seq_release(kv, &b);
	exl_kvcache_free(kv);
	free(logits);
}

static int group_setup(void **state)
{
	char path[4096], err[512];

	(void)state;
	be = exl_backend_cpu_create(2, err, sizeof(err));
	if (!be) {
		print_error("cpu backend: %s\n", err);
		return -1;
	}
	test_model_path(path, sizeof(path), models, "stories260K.gguf");
	model = exl_model_load(path, be, err, sizeof(err));
	if (!model) {
		print_error("load: %s\n", err);
		return -1;
	}
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	exl_model_free(model);
	be->ops->destroy(be);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_batch_matches_alone),
		cmocka_unit_test(test_rewind_into_shared_page),
		cmocka_unit_test(test_bad_batches),
	};

	models = test_models_dir();
	if (!models)
		return SKIP_STATUS;
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
