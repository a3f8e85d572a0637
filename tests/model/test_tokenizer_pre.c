/* Every pre-tokenizer (tokenizer.ggml.pre) that has no vocabulary file of
 * its own in ../shared/models/vocab, against llama.cpp's ids.
 *
 * For each NAME of DATA/names.txt (and gpt-2, the baseline), exld-mkmodel
 * writes a GGUF with GPT-2's vocabulary and merges (from
 * ../shared/models/vocab/ggml-vocab-gpt-2.gguf) and tokenizer.ggml.pre =
 * NAME; every case of DATA/cases.txt (separated by the line "__case__")
 * tokenized without BOS and without special tokens must give exactly the
 * ids of its line in DATA/NAME.out, which llama.cpp gave (DATA/README.md
 * says how they were made), and decode back to the case's text.
 *
 *   test_tokenizer_pre MKMODEL DATA
 *
 * Exits 77 (skipped) when EXLD_MODELS or the GPT-2 vocabulary is absent.
 */
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/core/gguf/gguf.h"
#include "daemon/core/tokenizer/tokenizer.h"
#include "read_file.h"
#include "tests/common/check.h"

#define MAX_CASES 4096
#define MAX_SHOWN 3 /* mismatches printed in full per name */
#define MAX_LISTED 64 /* mismatching case numbers listed per name */

extern char **environ;

struct tcase {
	const char *text;
	size_t len;
};

/* Splits buf (len bytes) at every "\n__case__\n", as peer-tokenize.mjs does:
 * the text after the last separator is the last case.  -1 when there are
 * more than MAX_CASES. */
static int split_cases(const char *buf, size_t len, struct tcase *cases)
{
	static const char sep[] = "\n__case__\n";
	const size_t sl = sizeof(sep) - 1;
	const char *p = buf, *end = buf + len;
	int n = 0;

	for (;;) {
		const char *s = NULL;

		if (n == MAX_CASES)
			return -1;

		for (const char *q = p; q + sl <= end; q++) {
			if (!memcmp(q, sep, sl)) {
				s = q;
				break;
			}
		}
		cases[n].text = p;
		cases[n].len = (size_t)((s ? s : end) - p);
		n++;
		if (!s)
			break;
		p = s + sl;
	}
	return n;
}

/* Writes text with control and non-ASCII bytes escaped, cut at 60 bytes. */
static void print_escaped(const char *text, size_t len)
{
	fputc('"', stderr);
	for (size_t i = 0; i < len && i < 60; i++) {
		unsigned char c = (unsigned char)text[i];

		if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
			fputc(c, stderr);
		else
			fprintf(stderr, "\\x%02x", c);
	}
	fprintf(stderr, "\"%s", len > 60 ? "..." : "");
}

static void print_ids(const char *label, const int32_t *ids, int n)
{
	fprintf(stderr, "    %s:", label);
	for (int i = 0; i < n; i++)
		fprintf(stderr, " %d", ids[i]);
	fputc('\n', stderr);
}

/* Parses one line of ids into ids (at most cap); the count, or -1. */
static int parse_line(const char *line, size_t len, int32_t *ids, int cap)
{
	int n = 0;
	size_t i = 0;

	while (i < len) {
		long v = 0;
		size_t start;

		while (i < len && line[i] == ' ')
			i++;
		if (i == len)
			break;
		start = i;
		while (i < len && line[i] >= '0' && line[i] <= '9' && v < 1 << 24)
			v = v * 10 + (line[i++] - '0');
		if (i == start || (i < len && line[i] != ' ') || n == cap)
			return -1;
		ids[n++] = (int32_t)v;
	}
	return n;
}

static int run_mkmodel(const char *mkmodel, const char *vocab, const char *pre, const char *out)
{
	const char *argv[] = { mkmodel, "--vocab-from", vocab, "--pre", pre, "--dim", "32",
			       "--heads", "2", "--ff", "32", "--layers", "1", "--tied",
			       "--threads", "1", "-o", out, NULL };
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int status;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	if (posix_spawn(&pid, mkmodel, &fa, NULL, (char *const *)argv, environ)) {
		posix_spawn_file_actions_destroy(&fa);
		return -1;
	}
	posix_spawn_file_actions_destroy(&fa);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
		return -1;
	return 0;
}

/* The ids of case c of name's stored outputs, or -1. */
static int stored_ids(const char *data, const char *name, int c, int32_t *ids, int cap)
{
	char path[4096];
	size_t len;
	char *buf;
	int n = -1;

	snprintf(path, sizeof(path), "%s/%s.out", data, name);
	buf = test_read_file(path, &len);
	if (!buf)
		return -1;
	char *line = buf;
	for (int i = 0; i < c && line; i++) {
		line = strchr(line, '\n');
		line = line ? line + 1 : NULL;
	}
	if (line) {
		char *nl = strchr(line, '\n');

		n = parse_line(line, nl ? (size_t)(nl - line) : strlen(line), ids, cap);
	}
	free(buf);
	return n;
}

/* Tokenizes every case with name's GGUF and compares with name.out.
 * Returns the number of cases that differ. */
static int check_name(const char *mkmodel, const char *vocab, const char *data,
		      const char *tmpdir, const char *name, const struct tcase *cases,
		      int n_cases)
{
	char path[4096], gguf_path[256], err[512];
	struct exl_tokenizer *tok = NULL;
	struct gguf_file *f;
	size_t out_len;
	char *out, *line;
	int bad = 0, listed[MAX_LISTED];

	snprintf(path, sizeof(path), "%s/%s.out", data, name);
	out = test_read_file(path, &out_len);
	if (!out) {
		fprintf(stderr, "%s: cannot read %s\n", name, path);
		CHECK(0);
		return 1;
	}
	snprintf(gguf_path, sizeof(gguf_path), "%s/pre.gguf", tmpdir);
	if (run_mkmodel(mkmodel, vocab, name, gguf_path)) {
		fprintf(stderr, "%s: exld-mkmodel failed\n", name);
		CHECK(0);
		free(out);
		return 1;
	}
	f = exl_gguf_open(gguf_path, err, sizeof(err));
	if (f) {
		tok = exl_tokenizer_load(f, err, sizeof(err));
		exl_gguf_close(f);
	}
	unlink(gguf_path);
	if (!tok) {
		fprintf(stderr, "%s: %s\n", name, err);
		CHECK(0);
		free(out);
		return 1;
	}
	CHECK(exl_tokenizer_kind(tok) == EXL_TOK_BPE);

	line = out;
	for (int c = 0; c < n_cases; c++) {
		char *nl = line ? strchr(line, '\n') : NULL;
		int32_t want[4096], *got = NULL;
		int n_want, n_got;
		char *text;

		if (!line || !nl) {
			fprintf(stderr, "%s: %s has fewer lines than the %d cases\n", name, path,
				n_cases);
			CHECK(0);
			bad++;
			break;
		}
		n_want = parse_line(line, (size_t)(nl - line), want, 4096);
		line = nl + 1;
		n_got = exl_tok_encode(tok, cases[c].text, cases[c].len, false, false, &got, err,
				     sizeof(err));
		check_count++;
		if (n_want < 0 || n_got != n_want ||
		    memcmp(got, want, (size_t)n_got * sizeof(*got))) {
			if (bad < MAX_SHOWN) {
				fprintf(stderr, "%s: case %d ", name, c);
				print_escaped(cases[c].text, cases[c].len);
				fputc('\n', stderr);
				print_ids("llama.cpp", want, n_want < 0 ? 0 : n_want);
				if (n_got < 0)
					fprintf(stderr, "    exld: error %s\n", err);
				else
					print_ids("exld     ", got, n_got);
			}
			if (bad < MAX_LISTED)
				listed[bad] = c;
			bad++;
			check_failures++;
		}
		text = n_got >= 0 ? exl_tok_decode(tok, got, (size_t)n_got, false, false) : NULL;
		if (!text || strlen(text) != cases[c].len || memcmp(text, cases[c].text, cases[c].len)) {
			fprintf(stderr, "%s: case %d does not decode back to its text\n", name, c);
			CHECK(0);
		}
		free(text);
		free(got);
	}
	if (bad) {
		fprintf(stderr, "%s: %d of %d cases differ from llama.cpp:", name, bad, n_cases);
		for (int i = 0; i < bad && i < MAX_LISTED; i++)
			fprintf(stderr, " %d", listed[i]);
		fprintf(stderr, "%s\n", bad > MAX_LISTED ? " ..." : "");
	}
	exl_tokenizer_free(tok);
	free(out);
	return bad;
}

/* The stored vectors really are of the pre-tokenizer named: llama3 groups
 * digits by three and qwen2 splits every digit, where GPT-2 keeps a run
 * whole, so a run of 7 digits must be tokenized differently. */
static void check_digit_runs_differ(const char *data, const struct tcase *cases, int n_cases)
{
	static const char *const names[] = { "llama-bpe", "qwen2" };
	int32_t base[64], other[64];
	int c;

	for (c = 0; c < n_cases; c++)
		if (cases[c].len == 7 && !memcmp(cases[c].text, "1234567", 7))
			break;
	CHECK(c < n_cases);
	if (c == n_cases)
		return;
	int nb = stored_ids(data, "gpt-2", c, base, 64);

	CHECK(nb > 0);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		int no = stored_ids(data, names[i], c, other, 64);

		CHECK(no > 0);
		if (no == nb && !memcmp(base, other, (size_t)no * sizeof(*base))) {
			fprintf(stderr, "%s.out tokenizes 1234567 as gpt-2.out does\n", names[i]);
			CHECK(0);
		}
	}
}

int main(int argc, char **argv)
{
	const char *models = getenv("EXLD_MODELS");
	char vocab[4096], path[4096], tmpdir[] = "/tmp/exld-test-pretok-XXXXXX";
	struct tcase *cases;
	size_t len, names_len;
	char *buf, *names;
	int n_cases, n_names = 0, n_bad_names = 0;

	if (argc != 3) {
		fprintf(stderr, "usage: %s MKMODEL DATA_DIR\n", argv[0]);
		return 2;
	}
	if (!models || !*models) {
		printf("EXLD_MODELS is not set; skipping\n");
		return 77;
	}
	snprintf(vocab, sizeof(vocab), "%s/vocab/ggml-vocab-gpt-2.gguf", models);
	if (access(vocab, R_OK)) {
		printf("%s is absent; skipping\n", vocab);
		return 77;
	}
	snprintf(path, sizeof(path), "%s/cases.txt", argv[2]);
	buf = test_read_file(path, &len);
	snprintf(path, sizeof(path), "%s/names.txt", argv[2]);
	names = test_read_file(path, &names_len);
	cases = calloc(MAX_CASES, sizeof(*cases));
	if (!buf || !names || !cases || !mkdtemp(tmpdir)) {
		fprintf(stderr, "cannot read %s/cases.txt and names.txt, or no memory\n", argv[2]);
		return 1;
	}
	n_cases = split_cases(buf, len, cases);
	if (n_cases < 0) {
		fprintf(stderr, "%s/cases.txt has more than %d cases\n", argv[2], MAX_CASES);
		return 1;
	}
	printf("%d cases\n", n_cases);
	check_digit_runs_differ(argv[2], cases, n_cases);

	/* gpt-2 first: its vocabulary file's own pre-tokenizer */
	const char *name = "gpt-2";
	char *save = NULL, *next = strtok_r(names, "\n", &save);

	while (name) {
		int bad = check_name(argv[1], vocab, argv[2], tmpdir, name, cases, n_cases);

		printf("%-16s %s\n", name, bad ? "DIFFERS" : "ok");
		n_names++;
		n_bad_names += bad != 0;
		name = next;
		next = name ? strtok_r(NULL, "\n", &save) : NULL;
	}
	rmdir(tmpdir);
	printf("%d pre-tokenizers, %d differ from llama.cpp; %d checks, %d failed\n", n_names,
	       n_bad_names, check_count, check_failures);
	free(buf);
	free(names);
	free(cases);
	return check_failures ? 1 : 0;
}
