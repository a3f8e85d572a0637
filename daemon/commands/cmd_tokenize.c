/* exld tokenize / exld detokenize: a model's tokenizer on stdin and stdout.
 *
 *   exld tokenize --model FILE [--no-bos] [--special]
 *	reads all of stdin as UTF-8 text (exactly, a final newline included)
 *	and prints the token ids on one line, separated by single spaces.
 *   exld detokenize --model FILE [--special]
 *	reads whitespace-separated token ids and prints their text.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/read_all.h"
#include "daemon/commands/commands.h"
#include "daemon/core/gguf/gguf.h"
#include "daemon/core/tokenizer/tokenizer.h"

/* Bigger than anything the tokenizer accepts, so its own limit speaks. */
#define STDIN_MAX ((size_t)1 << 29)

struct tok_opts {
	const char *model;
	bool no_bos;
	bool special;
};

static void usage(FILE *out, const char *cmd)
{
	if (!strcmp(cmd, "tokenize"))
		fprintf(out,
			"usage: exld tokenize --model FILE [--no-bos] [--special]\n"
			"  reads UTF-8 text on stdin, prints its token ids on one line\n"
			"  --no-bos   do not add the BOS token the model asks for\n"
			"  --special  parse special tokens written in the text (<s>, <|im_end|>...)\n");
	else
		fprintf(out,
			"usage: exld detokenize --model FILE [--special]\n"
			"  reads token ids (separated by whitespace) on stdin, prints their text\n"
			"  --special  show special tokens as their text instead of hiding them\n");
}

/* 0 to run, 1 when help was printed, -1 on a usage error (printed). */
static int parse_args(int argc, char **argv, struct tok_opts *o)
{
	const char *cmd = argv[0];

	memset(o, 0, sizeof(*o));
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout, cmd);
			return 1;
		} else if (!strcmp(a, "--special")) {
			o->special = true;
		} else if (!strcmp(a, "--no-bos") && !strcmp(cmd, "tokenize")) {
			o->no_bos = true;
		} else if (!strcmp(a, "--model") || !strcmp(a, "-m")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "exld %s: %s needs a file\n", cmd, a);
				return -1;
			}
			o->model = argv[++i];
		} else {
			fprintf(stderr, "exld %s: unknown argument '%s'\n", cmd, a);
			usage(stderr, cmd);
			return -1;
		}
	}
	if (!o->model) {
		fprintf(stderr, "exld %s: --model FILE is required\n", cmd);
		usage(stderr, cmd);
		return -1;
	}
	return 0;
}

static struct exl_tokenizer *open_tokenizer(const char *path, char *err, size_t errlen)
{
	struct gguf_file *f = exl_gguf_open(path, err, errlen);
	struct exl_tokenizer *t;
	char msg[384];

	if (!f)
		return NULL;
	t = exl_tokenizer_load(f, msg, sizeof(msg));
	if (!t)
		snprintf(err, errlen, "%s: %s", path, msg);
	exl_gguf_close(f);
	return t;
}

int exl_cmd_tokenize(int argc, char **argv)
{
	struct tok_opts o;
	struct exl_tokenizer *t = NULL;
	char err[512], *text = NULL;
	int32_t *ids = NULL;
	size_t len;
	int n, status = 1, pr = parse_args(argc, argv, &o);

	if (pr)
		return pr > 0 ? 0 : 2;
	t = open_tokenizer(o.model, err, sizeof(err));
	if (!t)
		goto fail;
	text = exl_read_all(stdin, "input", STDIN_MAX - 1, &len, err, sizeof(err));
	if (!text)
		goto fail;
	n = exl_tok_encode(t, text, len, !o.no_bos && exl_tokenizer_add_bos(t), o.special, &ids, err,
			 sizeof(err));
	if (n < 0)
		goto fail;
	for (int i = 0; i < n; i++)
		printf(i ? " %d" : "%d", ids[i]);
	putchar('\n');
	if (fflush(stdout) || ferror(stdout)) {
		snprintf(err, sizeof(err), "cannot write stdout");
		goto fail;
	}
	status = 0;
	goto out;
fail:
	fprintf(stderr, "exld tokenize: %s\n", err);
out:
	free(ids);
	free(text);
	exl_tokenizer_free(t);
	return status;
}

/* Parses the ids in text: whitespace-separated decimal integers, each a
 * valid token.  Returns the count, or -1 with a message. */
static long parse_ids(const struct exl_tokenizer *t, char *text, int32_t **out, char *err,
		      size_t errlen)
{
	int32_t n_vocab = exl_tokenizer_n_vocab(t), *ids = NULL;
	size_t n = 0, cap = 0;
	char *p = text;

	for (;;) {
		char *end, *word;
		long v;

		while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\v' || *p == '\f')
			p++;
		if (!*p)
			break;
		word = p;
		while (*p && !(*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\v' ||
			       *p == '\f'))
			p++;
		errno = 0;
		v = strtol(word, &end, 10);
		if (end != p || word[0] == '+' || (word[0] == '-' && end == word + 1) || errno) {
			snprintf(err, errlen, "'%.*s' is not a token id", (int)(p - word > 40 ? 40 : p - word),
				 word);
			goto fail;
		}
		if (v < 0 || v >= n_vocab) {
			snprintf(err, errlen, "token id %.*s is out of range (the vocabulary has %d tokens)",
				 (int)(p - word > 40 ? 40 : p - word), word, n_vocab);
			goto fail;
		}
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 256;
			int32_t *ni = realloc(ids, nc * sizeof(*ni));

			if (!ni) {
				snprintf(err, errlen, "out of memory");
				goto fail;
			}
			ids = ni;
			cap = nc;
		}
		ids[n++] = (int32_t)v;
	}
	*out = ids;
	return (long)n;
fail:
	free(ids);
	return -1;
}

int exl_cmd_detokenize(int argc, char **argv)
{
	struct tok_opts o;
	struct exl_tokenizer *t = NULL;
	struct exl_detok d;
	char err[512], *text = NULL, *buf = NULL;
	size_t len, buf_len = 0, buf_cap = 0;
	int32_t *ids = NULL;
	long n;
	int status = 1, pr = parse_args(argc, argv, &o);

	if (pr)
		return pr > 0 ? 0 : 2;
	t = open_tokenizer(o.model, err, sizeof(err));
	if (!t)
		goto fail;
	text = exl_read_all(stdin, "input", STDIN_MAX - 1, &len, err, sizeof(err));
	if (!text)
		goto fail;
	if (strlen(text) != len) {
		snprintf(err, sizeof(err), "the input holds a NUL byte");
		goto fail;
	}
	n = parse_ids(t, text, &ids, err, sizeof(err));
	if (n < 0)
		goto fail;
	/* As SentencePiece decodes: the dummy space the encoder put before
	 * the text goes again. */
	exl_detok_init(&d, t, o.special, true);
	for (long i = 0; i < n; i++)
		if (exl_detok_push(&d, ids[i], &buf, &buf_len, &buf_cap))
			goto oom;
	if (exl_detok_flush(&d, &buf, &buf_len, &buf_cap))
		goto oom;
	if ((buf_len && fwrite(buf, 1, buf_len, stdout) != buf_len) || fflush(stdout)) {
		snprintf(err, sizeof(err), "cannot write stdout");
		goto fail;
	}
	status = 0;
	goto out;
oom:
	snprintf(err, sizeof(err), "out of memory");
fail:
	fprintf(stderr, "exld detokenize: %s\n", err);
out:
	free(buf);
	free(ids);
	free(text);
	exl_tokenizer_free(t);
	return status;
}
