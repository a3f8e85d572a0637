/* exld's logits against llama.cpp's, stored (tests/data/peer/README.md):
 * for each weight type a random llama file from exld-mkmodel, the prompt
 * ids and 15 more fed one at a time, and at each of the 16 positions the
 * peer's logit range and its logits at every 16th id and at its 8 largest.
 * exld must be within 3e-2 of the range at every stored logit.
 *
 * The two engines read the same weight bytes but quantize activations
 * their own ways, so their logits differ by about 1e-2 of the range (the
 * README lists each type's full-vocabulary figure when the data were made);
 * a weight misread moves them by far more (the same floats as Q4_1 and as
 * Q5_0 give logits 0.14 of the range apart, Q5_0 and F32 0.05).
 *
 *   test_model_peer PATH/TO/exld-mkmodel DATA_DIR [TYPE...]
 */
#include <dirent.h>

#include "kernels/cpu/matmul.h"
#include "model_test_util.h"

#define N_STEPS 16
#define MAX_PROMPT 64
#define MAX_IDS 128
#define TOL 3e-2
/* F32 weights leave only the order of float sums between exld and
 * llama.cpp (the architecture cases: 4e-4 at most), so a wrong detail of
 * an architecture (a window on the wrong layers moved gpt-oss's by 0.011)
 * must show far below TOL */
#define TOL_F32 3e-3

struct peer_pos {
	double lo, hi;
	int n;
	int32_t id[MAX_IDS];
	double val[MAX_IDS];
};

struct peer_case {
	char type[16];
	char opts[512];
	int n_prompt;
	int32_t prompt[MAX_PROMPT];
	int32_t teacher[N_STEPS - 1];
	struct peer_pos pos[N_STEPS];
};

static const char *mkmodel;
static const char *data_dir;
static char tmpdir[128];
static struct exl_backend *be;

/* Reads DATA_DIR/TYPE.txt (format in the README). */
static void read_case(const char *type, struct peer_case *c)
{
	char path[4096], line[16384];
	int got_pos = 0, got_teacher = 0;
	FILE *f;

	memset(c, 0, sizeof(*c));
	snprintf(c->type, sizeof(c->type), "%s", type);
	snprintf(path, sizeof(path), "%s/%s.txt", data_dir, type);
	f = fopen(path, "r");
	if (!f)
		fail_msg("cannot open %s", path);
	while (fgets(line, sizeof(line), f)) {
		char *p = line, *end;

		if (!strncmp(line, "# exld-mkmodel ", 15)) {
			size_t len = strcspn(line + 15, "\n");

			if (len >= sizeof(c->opts))
				fail_msg("%s: the options are too long", path);
			memcpy(c->opts, line + 15, len);
			c->opts[len] = '\0';
		} else if (!strncmp(line, "prompt ", 7)) {
			for (p = line + 7; c->n_prompt < MAX_PROMPT; p = end) {
				long v = strtol(p, &end, 10);

				if (end == p)
					break;
				c->prompt[c->n_prompt++] = (int32_t)v;
			}
		} else if (!strncmp(line, "teacher ", 8)) {
			for (p = line + 8; got_teacher < N_STEPS - 1; p = end) {
				long v = strtol(p, &end, 10);

				if (end == p)
					break;
				c->teacher[got_teacher++] = (int32_t)v;
			}
		} else if (!strncmp(line, "pos ", 4)) {
			int i = (int)strtol(line + 4, &end, 10);
			struct peer_pos *pp;

			if (i < 0 || i >= N_STEPS || i != got_pos)
				fail_msg("%s: position %d out of order", path, i);
			pp = &c->pos[got_pos++];
			pp->lo = strtod(end, &end);
			pp->hi = strtod(end, &end);
			for (p = end; pp->n < MAX_IDS; p = end) {
				long id = strtol(p, &end, 10);

				if (end == p || *end != ':')
					break;
				pp->id[pp->n] = (int32_t)id;
				p = end + 1;
				pp->val[pp->n] = strtod(p, &end);
				if (end == p)
					fail_msg("%s: position %d: a value is missing", path, i);
				pp->n++;
			}
			if (!(pp->hi > pp->lo) || pp->n < 8)
				fail_msg("%s: position %d: range %g..%g, %d logits", path, i, pp->lo,
					 pp->hi, pp->n);
		}
	}
	fclose(f);
	if (!c->opts[0] || c->n_prompt < 1 || got_teacher != N_STEPS - 1 || got_pos != N_STEPS)
		fail_msg("%s: incomplete (options, %d prompt ids, %d teacher ids, %d positions)", path,
			 c->n_prompt, got_teacher, got_pos);
}

/* exld's logits after the prompt (one pass) and after each teacher id
 * (one pass each), as the peer computed them. */
static void exl_logits(struct exl_model *m, const struct peer_case *c, float *out)
{
	int nv = exl_model_hparams(m)->n_vocab;
	char err[512];
	struct exl_kvcache *kv = exl_model_kvcache_create(m, c->n_prompt + N_STEPS, 16, err,
							  sizeof(err));
	struct exl_kv_seq seq, *seqs[1] = { &seq };
	int32_t seq_idx[MAX_PROMPT] = { 0 };
	bool want[MAX_PROMPT] = { false };

	if (!kv)
		fail_msg("kv cache: %s", err);
	exl_kv_seq_init(&seq);
	want[c->n_prompt - 1] = true;
	for (int s = 0; s < N_STEPS; s++) {
		struct exl_batch b = { s ? 1 : c->n_prompt, s ? &c->teacher[s - 1] : c->prompt,
				       seq_idx, s ? &want[c->n_prompt - 1] : want, 1, seqs };

		assert_int_equal(exl_kv_seq_reserve(kv, &seq, b.n_tokens), 0);
		if (exl_model_forward(m, kv, &b, out + (size_t)s * (size_t)nv, err, sizeof(err)))
			fail_msg("forward: %s", err);
	}
	exl_kv_seq_release(kv, &seq);
	exl_kvcache_free(kv);
}

static void test_type(void **state)
{
	const char *type = *state;
	struct peer_case *c = malloc(sizeof(*c));
	const char *args[40];
	char opts[512], path[256], name[64], err[512];
	int n = 0;

	assert_non_null(c);
	read_case(type, c);
	/* the options as exld-mkmodel was run, less --threads and -o */
	snprintf(opts, sizeof(opts), "%s", c->opts);
	for (char *tok = strtok(opts, " "); tok && n < 38; tok = strtok(NULL, " "))
		args[n++] = tok;
	args[n] = NULL;
	snprintf(name, sizeof(name), "peer-%s.gguf", type);
	test_mkmodel(mkmodel, tmpdir, name, path, sizeof(path), args);

	struct exl_model *m = exl_model_load(path, be, err, sizeof(err));
	if (!m)
		fail_msg("load %s: %s", path, err);
	int nv = exl_model_hparams(m)->n_vocab;
	float *logits = malloc((size_t)N_STEPS * (size_t)nv * sizeof(float));

	assert_non_null(logits);
	exl_logits(m, c, logits);

	double worst = 0;
	int worst_pos = 0, worst_id = 0;
	for (int s = 0; s < N_STEPS; s++) {
		const struct peer_pos *pp = &c->pos[s];

		for (int k = 0; k < pp->n; k++) {
			if (pp->id[k] < 0 || pp->id[k] >= nv)
				fail_msg("%s: id %d outside the vocabulary of %d", type, pp->id[k], nv);
			double got = logits[(size_t)s * (size_t)nv + (size_t)pp->id[k]];
			double d = fabs(got - pp->val[k]) / (pp->hi - pp->lo);

			if (!isfinite(got))
				fail_msg("%s: position %d logit %d is %f", type, s, pp->id[k], got);
			if (d > worst) {
				worst = d;
				worst_pos = s;
				worst_id = pp->id[k];
			}
		}
	}
	const double tol = strstr(c->opts, "--type f32") ? TOL_F32 : TOL;

	printf("%s (%s): max |exld - llama.cpp| / range %.4f (position %d, id %d), bound %g\n",
	       type, exl_cpu_kernels_name(), worst, worst_pos, worst_id, tol);
	if (worst > tol)
		fail_msg("%s: logits %.4f of the range from llama.cpp's (position %d, id %d)", type,
			 worst, worst_pos, worst_id);
	free(logits);
	exl_model_free(m);
	unlink(path);
	free(c);
}

static int group_setup(void **state)
{
	(void)state;
	return test_tmp_backend_setup("model-peer", tmpdir, sizeof(tmpdir), &be);
}

static int group_teardown(void **state)
{
	(void)state;
	test_tmp_backend_teardown(tmpdir, be);
	return 0;
}

#define MAX_TYPES 64

int main(int argc, char **argv)
{
	static char names[MAX_TYPES][32];
	struct CMUnitTest tests[MAX_TYPES];
	int n = 0;

	if (argc < 3) {
		fprintf(stderr, "usage: %s PATH/TO/exld-mkmodel DATA_DIR [TYPE...]\n", argv[0]);
		return 2;
	}
	mkmodel = argv[1];
	data_dir = argv[2];
	if (argc > 3) {
		for (int i = 3; i < argc && n < MAX_TYPES; i++)
			snprintf(names[n++], sizeof(names[0]), "%s", argv[i]);
	} else {
		/* every TYPE.txt of the data directory */
		DIR *d = opendir(data_dir);
		struct dirent *e;

		if (!d) {
			fprintf(stderr, "cannot open %s\n", data_dir);
			return 1;
		}
		while ((e = readdir(d))) {
			size_t len = strlen(e->d_name);

			if (len <= 4 || strcmp(e->d_name + len - 4, ".txt"))
				continue;
			/* a case left out would pass unseen */
			if (n == MAX_TYPES || len - 4 >= sizeof(names[0])) {
				fprintf(stderr, "%s: more than %d cases, or a name over %zu bytes "
					"(%s)\n", data_dir, MAX_TYPES, sizeof(names[0]) - 1,
					e->d_name);
				closedir(d);
				return 1;
			}
			snprintf(names[n++], sizeof(names[0]), "%.*s", (int)(len - 4), e->d_name);
		}
		closedir(d);
	}
	for (int i = 0; i < n; i++)
		tests[i] = (struct CMUnitTest){ names[i], test_type, NULL, NULL, names[i] };
	return _cmocka_run_group_tests("model_peer", tests, (size_t)n, group_setup, group_teardown);
}
