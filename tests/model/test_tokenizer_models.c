/* Tokenizers on the real vocabularies in ../shared/models.
 *
 *   test_tokenizer_models vocab    every vocab/NAME.gguf.inp / .out pair whose
 *                                  GGUF is there: each case tokenized (no BOS,
 *                                  no special parsing) gives exactly the ids
 *                                  of its .out line, and decodes back to it
 *   test_tokenizer_models stories  stories260K.expected.ids decode to
 *                                  stories260K.expected.txt (whose first
 *                                  token's space is dropped, and whose final
 *                                  newline is the file's), token by token as
 *                                  well, and the text encodes to the ids
 *   test_tokenizer_models threads  four threads tokenizing every case of
 *                                  every vocabulary at once agree with one
 *   test_tokenizer_models data DIR the pairs kept in the source tree
 *                                  (tests/data/vocab: BERT's WordPiece), as
 *                                  vocab does; needs no EXLD_MODELS
 *
 * The others exit 77 (skipped) when EXLD_MODELS is absent.
 *
 * WordPiece lowercases, drops accents and splits punctuation off, so its
 * reference ids cannot decode to the case text; they must decode to text
 * that encodes to them again (when no [UNK], which decodes to nothing, is
 * among them).
 *
 * The .inp/.out conventions are llama.cpp's test-tokenizer-0: cases are
 * separated by "\n__ggml_vocab_test__\n" (text after the last separator, if
 * any, is one more case); .out has one line per case, ids separated by
 * spaces, surrounding whitespace ignored.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/gguf/gguf.h"
#include "daemon/core/tokenizer/tokenizer.h"
#include "read_file.h"
#include "tests/common/check.h"

static const char *models_dir(void)
{
	const char *d = getenv("EXLD_MODELS");
	DIR *dir;

	if (!d || !*d || !(dir = opendir(d))) {
		printf("EXLD_MODELS ('%s') is absent; skipping\n", d ? d : "");
		return NULL;
	}
	closedir(dir);
	return d;
}

static struct exl_tokenizer *open_tok(const char *path)
{
	char err[512];
	struct gguf_file *f = exl_gguf_open(path, err, sizeof(err));
	struct exl_tokenizer *t;

	if (!f) {
		fprintf(stderr, "%s\n", err);
		return NULL;
	}
	t = exl_tokenizer_load(f, err, sizeof(err));
	if (!t)
		fprintf(stderr, "%s: %s\n", path, err);
	exl_gguf_close(f);
	return t;
}

/* One vocabulary's cases. */
struct vcase {
	const char *text;
	size_t len;
	int32_t *ids;
	int n_ids;
};

struct vfile {
	char name[256];
	struct exl_tokenizer *tok;
	char *inp, *out;
	struct vcase *cases;
	int n_cases;
};

static int parse_ids(char *line, int32_t **ids)
{
	int n = 0, cap = 16;
	char *save = NULL;

	*ids = malloc((size_t)cap * sizeof(**ids));
	for (char *w = strtok_r(line, " \t\r", &save); w; w = strtok_r(NULL, " \t\r", &save)) {
		if (n == cap)
			*ids = realloc(*ids, (size_t)(cap *= 2) * sizeof(**ids));
		(*ids)[n++] = (int32_t)strtol(w, NULL, 10);
	}
	return n;
}

/* Loads NAME.gguf and its .inp/.out from dir.  0 when there is nothing to
 * load (no GGUF beside the pair), 1 loaded, -1 broken. */
static int vfile_load(struct vfile *v, const char *dir, const char *inp_name)
{
	static const char sep[] = "\n__ggml_vocab_test__\n";
	char path[2048];
	size_t inp_len, out_len, base_len = strlen(inp_name) - 4;
	int n_lines = 0;
	FILE *f;

	memset(v, 0, sizeof(*v));
	snprintf(v->name, sizeof(v->name), "%.*s", (int)base_len, inp_name);
	snprintf(path, sizeof(path), "%s/%s", dir, v->name);
	f = fopen(path, "rb");
	if (!f) {
		printf("%s: no GGUF beside it, not tested\n", inp_name);
		return 0;
	}
	fclose(f);
	v->tok = open_tok(path);
	snprintf(path, sizeof(path), "%s/%s.inp", dir, v->name);
	v->inp = test_read_file(path, &inp_len);
	snprintf(path, sizeof(path), "%s/%s.out", dir, v->name);
	v->out = test_read_file(path, &out_len);
	if (!v->tok || !v->inp || !v->out) {
		fprintf(stderr, "%s: cannot load the vocabulary or its test files\n", v->name);
		return -1;
	}
	v->cases = calloc(inp_len + 1, sizeof(*v->cases));
	for (size_t pos = 0; pos < inp_len;) {
		const char *next = strstr(v->inp + pos, sep);
		size_t end = next ? (size_t)(next - v->inp) : inp_len;

		v->cases[v->n_cases].text = v->inp + pos;
		v->cases[v->n_cases].len = end - pos;
		v->n_cases++;
		if (!next)
			break;
		pos = end + sizeof(sep) - 1;
	}
	for (char *line = v->out, *nl; *line; line = nl + 1) {
		nl = strchr(line, '\n');
		if (!nl)
			nl = line + strlen(line) - 1;
		else
			*nl = '\0';
		if (n_lines < v->n_cases)
			v->cases[n_lines].n_ids = parse_ids(line, &v->cases[n_lines].ids);
		n_lines++;
	}
	if (n_lines != v->n_cases) {
		fprintf(stderr, "%s: %d cases but %d result lines\n", v->name, v->n_cases, n_lines);
		return -1;
	}
	return 1;
}

static void vfile_free(struct vfile *v)
{
	for (int i = 0; i < v->n_cases; i++)
		free(v->cases[i].ids);
	free(v->cases);
	free(v->inp);
	free(v->out);
	exl_tokenizer_free(v->tok);
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The vocabularies with test pairs in dir, sorted by name. */
static int load_dir(const char *dir, struct vfile **out)
{
	char *names[256];
	int n_names = 0, n = 0;
	struct vfile *v;
	DIR *d;
	struct dirent *e;

	d = opendir(dir);
	if (!d) {
		fprintf(stderr, "%s: cannot open\n", dir);
		return -1;
	}
	while ((e = readdir(d)) && n_names < 256) {
		size_t l = strlen(e->d_name);

		if (l > 9 && !strcmp(e->d_name + l - 9, ".gguf.inp"))
			names[n_names++] = strdup(e->d_name);
	}
	closedir(d);
	qsort(names, (size_t)n_names, sizeof(names[0]), cmp_names);
	v = calloc((size_t)n_names + 1, sizeof(*v));
	for (int i = 0; i < n_names; i++) {
		int rc = vfile_load(&v[n], dir, names[i]);

		free(names[i]);
		if (rc < 0) {
			check_failures++;
			vfile_free(&v[n]);
		} else if (rc > 0) {
			n++;
		}
	}
	*out = v;
	return n;
}

static int load_all(const char *models, struct vfile **out)
{
	char dir[1024];

	snprintf(dir, sizeof(dir), "%s/vocab", models);
	return load_dir(dir, out);
}

static bool ids_equal(const int32_t *a, int na, const int32_t *b, int nb)
{
	return na == nb && (na == 0 || !memcmp(a, b, (size_t)na * sizeof(*a)));
}

static void print_case(const struct vfile *v, int i, const int32_t *got, int n_got)
{
	const struct vcase *c = &v->cases[i];

	fprintf(stderr, "%s case %d (\"%.*s\"):\n  want", v->name, i, (int)(c->len > 60 ? 60 : c->len),
		c->text);
	for (int k = 0; k < c->n_ids; k++)
		fprintf(stderr, " %d", c->ids[k]);
	fprintf(stderr, "\n  got ");
	for (int k = 0; k < n_got; k++)
		fprintf(stderr, " %d", got[k]);
	fprintf(stderr, "\n");
}

/* WordPiece: the text of ids encodes to them again (true when an unknown
 * token, which decodes to nothing, is among them). */
static bool decodes_to_itself(const struct exl_tokenizer *t, const int32_t *ids, int n,
			      const char *text)
{
	char err[256];
	int32_t *again;
	int k;
	bool ok;

	if (!text)
		return false;
	for (int i = 0; i < n; i++)
		if (exl_tokenizer_is_special(t, ids[i]))
			return true;
	k = exl_tok_encode(t, text, strlen(text), false, false, &again, err, sizeof(err));
	ok = k >= 0 && ids_equal(again, k, ids, n);
	free(again);
	return ok;
}

/* Every pair in dir (models/vocab, or the source tree's). */
static int test_vocab_dir(const char *dir)
{
	struct vfile *v;
	int n;

	n = load_dir(dir, &v);
	CHECK(n > 0);
	if (n < 0)
		return 1;
	for (int f = 0; f < n; f++) {
		int bad = 0, bad_text = 0;

		for (int i = 0; i < v[f].n_cases; i++) {
			const struct vcase *c = &v[f].cases[i];
			char err[256];
			int32_t *ids;
			int k = exl_tok_encode(v[f].tok, c->text, c->len, false, false, &ids, err, sizeof(err));
			char *text;

			if (k < 0) {
				fprintf(stderr, "%s case %d: %s\n", v[f].name, i, err);
				bad++;
				continue;
			}
			if (!ids_equal(ids, k, c->ids, c->n_ids)) {
				print_case(&v[f], i, ids, k);
				bad++;
			}
			/* decoding the reference ids gives the text back */
			text = exl_tok_decode(v[f].tok, c->ids, (size_t)c->n_ids, false, true);
			if (exl_tokenizer_kind(v[f].tok) == EXL_TOK_WPM) {
				if (!decodes_to_itself(v[f].tok, c->ids, c->n_ids, text)) {
					fprintf(stderr, "%s case %d decodes to \"%s\", which does "
						"not encode back\n", v[f].name, i, text ? text : "(null)");
					bad_text++;
				}
			} else if (!text || strlen(text) != c->len || memcmp(text, c->text, c->len)) {
				fprintf(stderr, "%s case %d decodes to \"%s\"\n", v[f].name, i,
					text ? text : "(null)");
				bad_text++;
			}
			free(text);
			free(ids);
		}
		printf("%s (%s, pre %s): %d cases, %d wrong, %d decode wrong\n", v[f].name,
		       exl_tokenizer_kind_name(v[f].tok), exl_tokenizer_pre_name(v[f].tok),
		       v[f].n_cases, bad, bad_text);
		CHECK(v[f].n_cases > 0);
		CHECK(bad == 0);
		CHECK(bad_text == 0);
		vfile_free(&v[f]);
	}
	free(v);
	return 0;
}

static int test_vocab(void)
{
	const char *models = models_dir();
	char dir[1024];

	if (!models)
		return 77;
	snprintf(dir, sizeof(dir), "%s/vocab", models);
	return test_vocab_dir(dir);
}

static int test_stories(void)
{
	const char *models = models_dir();
	char path[1024], err[256];
	struct exl_tokenizer *t;
	char *ids_txt, *text, *dec, *stream = NULL;
	size_t ids_len, text_len, stream_len = 0, stream_cap = 0;
	int32_t *want, *got;
	int n_want, n_got;
	struct exl_detok d;

	if (!models)
		return 77;
	snprintf(path, sizeof(path), "%s/stories260K.gguf", models);
	t = open_tok(path);
	snprintf(path, sizeof(path), "%s/stories260K.expected.ids", models);
	ids_txt = test_read_file(path, &ids_len);
	snprintf(path, sizeof(path), "%s/stories260K.expected.txt", models);
	text = test_read_file(path, &text_len);
	CHECK(t && ids_txt && text);
	if (!t || !ids_txt || !text)
		return 1;
	for (char *p = ids_txt; *p; p++)
		if (*p == '\n')
			*p = ' ';
	n_want = parse_ids(ids_txt, &want);
	CHECK(n_want == 200);
	/* the file ends its one line of text with a newline no token makes */
	CHECK(text_len > 0 && text[text_len - 1] == '\n');
	text[--text_len] = '\0';

	dec = exl_tok_decode(t, want, (size_t)n_want, false, true);
	CHECK(dec && !strcmp(dec, text));
	if (dec && strcmp(dec, text))
		fprintf(stderr, "decoded:\n%s\nwant:\n%s\n", dec, text);

	exl_detok_init(&d, t, false, true);
	for (int i = 0; i < n_want; i++)
		CHECK(!exl_detok_push(&d, want[i], &stream, &stream_len, &stream_cap));
	CHECK(!exl_detok_flush(&d, &stream, &stream_len, &stream_cap));
	CHECK(stream_len == text_len && !memcmp(stream, text, text_len));

	n_got = exl_tok_encode(t, text, text_len, false, false, &got, err, sizeof(err));
	CHECK(ids_equal(got, n_got, want, n_want));
	free(got);
	n_got = exl_tok_encode(t, text, text_len, exl_tokenizer_add_bos(t), false, &got, err, sizeof(err));
	CHECK(n_got == n_want + 1 && got[0] == exl_tokenizer_bos(t) && got[0] == 1 &&
	      ids_equal(got + 1, n_got - 1, want, n_want));
	free(got);
	/* The README's prompt. */
	n_got = exl_tok_encode(t, "Once upon a time", 16, true, false, &got, err, sizeof(err));
	CHECK(n_got == 5 && got[0] == 1);
	free(got);

	free(dec);
	free(stream);
	free(want);
	free(ids_txt);
	free(text);
	exl_tokenizer_free(t);
	return 0;
}

struct worker {
	const struct vfile *v;
	int n;
	int mismatches;
};

static void *work(void *arg)
{
	struct worker *w = arg;

	for (int round = 0; round < 3; round++)
		for (int f = 0; f < w->n; f++)
			for (int i = 0; i < w->v[f].n_cases; i++) {
				const struct vcase *c = &w->v[f].cases[i];
				char err[256];
				int32_t *ids;
				int k = exl_tok_encode(w->v[f].tok, c->text, c->len, false, false, &ids,
						     err, sizeof(err));

				if (k < 0 || !ids_equal(ids, k, c->ids, c->n_ids))
					w->mismatches++;
				free(ids);
			}
	return NULL;
}

static int test_threads(void)
{
	const char *models = models_dir();
	struct vfile *v;
	struct worker w[4];
	pthread_t th[4];
	int n;

	if (!models)
		return 77;
	n = load_all(models, &v);
	CHECK(n > 0);
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){ .v = v, .n = n };
		CHECK(!pthread_create(&th[i], NULL, work, &w[i]));
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		CHECK(w[i].mismatches == 0);
	}
	for (int f = 0; f < n; f++)
		vfile_free(&v[f]);
	free(v);
	return 0;
}

int main(int argc, char **argv)
{
	int rc;

	if (argc == 3 && !strcmp(argv[1], "data")) {
		rc = test_vocab_dir(argv[2]);
		if (rc)
			check_failures++;
		printf("%d checks, %d failed\n", check_count, check_failures);
		return check_failures ? 1 : 0;
	}
	if (argc != 2) {
		fprintf(stderr, "usage: test_tokenizer_models vocab|stories|threads|data DIR\n");
		return 2;
	}
	if (!strcmp(argv[1], "vocab"))
		rc = test_vocab();
	else if (!strcmp(argv[1], "stories"))
		rc = test_stories();
	else if (!strcmp(argv[1], "threads"))
		rc = test_threads();
	else
		return 2;
	if (rc == 77)
		return 77;
	if (rc)
		check_failures++;
	printf("%d checks, %d failed\n", check_count, check_failures);
	return check_failures ? 1 : 0;
}
