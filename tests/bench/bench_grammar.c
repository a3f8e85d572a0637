/* Per-token cost of constrained decoding: the grammar filter's mask and
 * accept for a JSON schema, over real vocabularies.  A benchmark, not a
 * test: never run by meson test.
 *
 *   bench_grammar [--vocab FILE]... [--schema FILE --doc FILE] [--runs N]
 *
 * Default vocabularies: $EXLD_MODELS/vocab/ggml-vocab-llama-spm.gguf
 * (SentencePiece, 32000 tokens) and ggml-vocab-gpt-2.gguf (byte-level BPE,
 * 50257).  For each it reports the vocabulary tree's build time and the
 * schema's compile time, then microseconds per token of mask + accept over
 * two completions:
 *
 *   realistic: a JSON document that satisfies the schema, tokenized by the
 *              vocabulary's own tokenizer and fed token by token, as a
 *              model writing it would (each token is checked to be in the
 *              mask);
 *   sampled:   tokens drawn uniformly from each mask (seeded), ending at
 *              the first complete state after 64 tokens or at 256 tokens:
 *              the worst case, mostly inside strings.
 *
 * Every run starts with a fresh filter (cold mask cache); the first token
 * of the first run also builds nothing but the filter (the tree is shared
 * and was built before timing).  Times are the thread's CPU time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/core/gguf/gguf.h"
#include "daemon/core/grammar/grammar.h"
#include "daemon/core/grammar/grammar_filter.h"
#include "daemon/core/tokenizer/tokenizer.h"
#include "daemon/core/grammar/vocab_trie.h"

static const char default_schema[] =
	"{\"type\":\"object\",\"additionalProperties\":false,"
	"\"required\":[\"id\",\"name\",\"email\",\"born\",\"address\",\"tags\",\"status\"],"
	"\"properties\":{"
	"\"id\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":999999},"
	"\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":64},"
	"\"email\":{\"type\":\"string\",\"pattern\":\"^[a-z0-9._]+@[a-z0-9]+\\\\.[a-z]{2,6}$\"},"
	"\"born\":{\"type\":\"string\",\"format\":\"date\"},"
	"\"score\":{\"type\":\"number\",\"minimum\":0,\"maximum\":100},"
	"\"address\":{\"type\":\"object\",\"additionalProperties\":false,"
	"\"required\":[\"street\",\"city\",\"country\"],\"properties\":{"
	"\"street\":{\"type\":\"string\",\"maxLength\":80},"
	"\"city\":{\"type\":\"string\",\"maxLength\":40},"
	"\"zip\":{\"type\":[\"string\",\"null\"],\"maxLength\":10},"
	"\"country\":{\"enum\":[\"DE\",\"FR\",\"GB\",\"US\",\"JP\"]}}},"
	"\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":20},"
	"\"maxItems\":8},"
	"\"status\":{\"enum\":[\"active\",\"suspended\",\"closed\"]},"
	"\"notes\":{\"type\":\"string\",\"maxLength\":200}}}";

static const char default_doc[] =
	"{\n  \"id\": 48213,\n  \"name\": \"Margarethe Okonkwo-Lindqvist\",\n"
	"  \"email\": \"m.okonkwo@example.org\",\n  \"born\": \"1987-02-28\",\n"
	"  \"score\": 87.25,\n"
	"  \"address\": {\n    \"street\": \"Große Bleichen 12, 3. OG\",\n"
	"    \"city\": \"Hamburg\",\n    \"zip\": \"20354\",\n    \"country\": \"DE\"\n  },\n"
	"  \"tags\": [\"customer\", \"newsletter\", \"vip\"],\n  \"status\": \"active\",\n"
	"  \"notes\": \"Prefers e-mail; called on 3 May about the invoice (#A-1142).\"\n}";

static double cpu_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	if (buf)
		buf[n] = 0;
	fclose(f);
	return buf;
}

struct stats {
	double *t;
	size_t n, cap;
};

static void add(struct stats *s, double v)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 1024;
		s->t = realloc(s->t, s->cap * sizeof(*s->t));
		if (!s->t) {
			fprintf(stderr, "out of memory\n");
			exit(1);
		}
	}
	s->t[s->n++] = v;
}

static void report(const char *what, struct stats *s, size_t tokens, int runs)
{
	double sum = 0;

	if (!s->n)
		return;
	for (size_t i = 0; i < s->n; i++)
		sum += s->t[i];
	qsort(s->t, s->n, sizeof(*s->t), cmp_double);
	printf("  %-10s %4zu tokens x %d runs: mean %8.1f us/token  median %7.1f  p90 %8.1f  "
	       "max %9.1f\n", what, tokens, runs, sum / (double)s->n, s->t[s->n / 2],
	       s->t[s->n * 9 / 10], s->t[s->n - 1]);
}

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* One completion: the given tokens (ids) or, with ids NULL, sampled ones.
 * Returns the token count, -1 on a failure (printed). */
static long one_run(const struct exl_tokenizer *tok, const char *schema, const int32_t *ids,
		    int n_ids, uint64_t seed, struct stats *st)
{
	char err[512];
	int n_vocab = exl_tokenizer_n_vocab(tok);
	size_t words = ((size_t)n_vocab + 31) / 32;
	uint32_t *mask = malloc(words * sizeof(*mask));
	struct exl_filter *f = exl_grammar_filter_create(tok, EXL_CONSTRAINT_JSON_SCHEMA, schema,
							 strlen(schema), NULL, err, sizeof(err));
	long n = 0;

	if (!f || !mask) {
		fprintf(stderr, "bench_grammar: %s\n", f ? "out of memory" : err);
		free(mask);
		return -1;
	}
	for (int i = 0; ids ? i < n_ids : i < 256; i++) {
		double t0 = cpu_us();
		int32_t t;

		memset(mask, 0, words * sizeof(*mask));
		if (f->ops->allowed(f, mask, n_vocab, err, sizeof(err)))
			goto fail;
		if (ids) {
			t = ids[i];
			if (!(mask[t >> 5] >> (t & 31) & 1)) {
				fprintf(stderr, "bench_grammar: token %d (#%d of the document) is not "
					"allowed: the document does not satisfy the schema?\n", t, i);
				goto fail_quiet;
			}
		} else {
			size_t count = 0;

			for (size_t w = 0; w < words; w++)
				count += (size_t)__builtin_popcount(mask[w]);
			if (!count || (i >= 64 && f->ops->is_complete(f)))
				break;
			size_t k = rng_next(&seed) % count;

			t = -1;
			for (size_t w = 0; w < words && t < 0; w++) {
				size_t c = (size_t)__builtin_popcount(mask[w]);

				if (k >= c) {
					k -= c;
					continue;
				}
				for (int b = 0; b < 32; b++)
					if (mask[w] >> b & 1 && k-- == 0) {
						t = (int32_t)(w * 32 + (size_t)b);
						break;
					}
			}
		}
		if (f->ops->accept(f, t, err, sizeof(err)))
			goto fail;
		add(st, cpu_us() - t0);
		n++;
	}
	if (ids && !f->ops->is_complete(f)) {
		fprintf(stderr, "bench_grammar: the document is not complete under the schema\n");
		goto fail_quiet;
	}
	f->ops->free(f);
	free(mask);
	return n;
fail:
	fprintf(stderr, "bench_grammar: %s\n", err);
fail_quiet:
	f->ops->free(f);
	free(mask);
	return -1;
}

static int bench_vocab(const char *path, const char *schema, const char *doc, int runs)
{
	char err[512];
	struct gguf_file *g = exl_gguf_open(path, err, sizeof(err));
	struct exl_tokenizer *tok = g ? exl_tokenizer_load(g, err, sizeof(err)) : NULL;
	struct stats real = { 0 }, sampled = { 0 };
	int32_t *ids = NULL;
	int n_ids, rc = -1;
	long n_real = 0, n_sampled = 0;

	exl_gguf_close(g);
	if (!tok) {
		fprintf(stderr, "bench_grammar: %s: %s\n", path, err);
		return -1;
	}
	printf("%s: %s, %d tokens\n", path, exl_tokenizer_kind_name(tok),
	       (int)exl_tokenizer_n_vocab(tok));
	double t0 = cpu_us();
	struct exl_vocab_trie *t = exl_vocab_trie_get(tok, err, sizeof(err));
	double t1 = cpu_us();

	if (!t) {
		fprintf(stderr, "bench_grammar: %s\n", err);
		goto out;
	}
	struct exl_vocab_trie *t2 = exl_vocab_trie_get(tok, err, sizeof(err));
	double t2t = cpu_us();

	printf("  vocabulary tree: %u nodes, built in %.1f ms; a cached get %.2f ms\n", t->n_nodes,
	       (t1 - t0) / 1e3, (t2t - t1) / 1e3);
	exl_vocab_trie_put(t2);
	double c0 = cpu_us();
	struct exl_grammar *gr = exl_constraint_compile(EXL_CONSTRAINT_JSON_SCHEMA, schema,
							strlen(schema), err, sizeof(err));
	double c1 = cpu_us();

	if (!gr) {
		fprintf(stderr, "bench_grammar: %s\n", err);
		exl_vocab_trie_put(t);
		goto out;
	}
	printf("  schema compiled in %.2f ms: %zu rules, %zu elements\n", (c1 - c0) / 1e3,
	       exl_grammar_n_rules(gr), exl_grammar_n_elems(gr));
	exl_grammar_free(gr);
	n_ids = exl_tok_encode(tok, doc, strlen(doc), false, false, &ids, err, sizeof(err));
	if (n_ids < 0) {
		fprintf(stderr, "bench_grammar: %s\n", err);
		exl_vocab_trie_put(t);
		goto out;
	}
	for (int r = 0; r < runs; r++) {
		n_real = one_run(tok, schema, ids, n_ids, 0, &real);
		if (n_real < 0)
			break;
		n_sampled = one_run(tok, schema, NULL, 0, 0x9E3779B97F4A7C15ull * (uint64_t)(r + 1),
				    &sampled);
		if (n_sampled < 0)
			break;
	}
	exl_vocab_trie_put(t);
	if (n_real < 0 || n_sampled < 0)
		goto out;
	report("realistic", &real, (size_t)n_real, runs);
	report("sampled", &sampled, sampled.n / (size_t)runs, runs);
	rc = 0;
out:
	free(ids);
	free(real.t);
	free(sampled.t);
	exl_tokenizer_free(tok);
	return rc;
}

int main(int argc, char **argv)
{
	const char *vocabs[16];
	int n_vocabs = 0, runs = 5;
	char *schema = NULL, *doc = NULL;
	char def[2][4096];

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--vocab") && i + 1 < argc && n_vocabs < 16) {
			vocabs[n_vocabs++] = argv[++i];
		} else if (!strcmp(argv[i], "--schema") && i + 1 < argc) {
			schema = read_file(argv[++i]);
			if (!schema) {
				fprintf(stderr, "bench_grammar: cannot read %s\n", argv[i]);
				return 1;
			}
		} else if (!strcmp(argv[i], "--doc") && i + 1 < argc) {
			doc = read_file(argv[++i]);
			if (!doc) {
				fprintf(stderr, "bench_grammar: cannot read %s\n", argv[i]);
				return 1;
			}
		} else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
			runs = atoi(argv[++i]);
			if (runs < 1)
				runs = 1;
		} else {
			fprintf(stderr, "usage: bench_grammar [--vocab FILE]... [--schema FILE --doc FILE] "
				"[--runs N]\n");
			return 2;
		}
	}
	if (!n_vocabs) {
		const char *dir = getenv("EXLD_MODELS");

		if (!dir || !*dir)
			dir = "../shared/models";
		snprintf(def[0], sizeof(def[0]), "%s/vocab/ggml-vocab-llama-spm.gguf", dir);
		snprintf(def[1], sizeof(def[1]), "%s/vocab/ggml-vocab-gpt-2.gguf", dir);
		vocabs[n_vocabs++] = def[0];
		vocabs[n_vocabs++] = def[1];
	}
	if (!!schema != !!doc) {
		fprintf(stderr, "bench_grammar: --schema and --doc go together\n");
		return 2;
	}
	int rc = 0;

	for (int i = 0; i < n_vocabs; i++)
		if (bench_vocab(vocabs[i], schema ? schema : default_schema, doc ? doc : default_doc,
				runs))
			rc = 1;
	free(schema);
	free(doc);
	return rc;
}
