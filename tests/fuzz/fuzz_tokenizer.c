/* libFuzzer target for the tokenizers.  The first input byte picks a real
 * vocabulary (from $EXLD_MODELS, default ../shared/models; BERT's WordPiece
 * from the source tree's tests/data/vocab, under $EXLD_SRCDIR, default .)
 * and the options;
 * the rest is the text.  It checks that
 *   - tokenizing never fails on any bytes, and every id is in range;
 *   - decoding any ids (the result, and the input read as ids) gives valid
 *     UTF-8, with or without special tokens shown;
 *   - valid UTF-8 text decodes back to itself where the vocabulary can hold
 *     it: GPT-2 (every byte has a token) without special parsing, and
 *     stories260K (byte fallback) when the text has no U+2581.
 * See docs/fuzzing.md. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/gguf/gguf.h"
#include "daemon/core/tokenizer/tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const files[] = {
	"stories260K.gguf",
	"vocab/ggml-vocab-gpt-2.gguf",
	"vocab/ggml-vocab-phi-3.gguf",
	"vocab/ggml-vocab-mpt.gguf",
	"vocab/ggml-vocab-deepseek-llm.gguf",
	"vocab/ggml-vocab-falcon.gguf",
	"vocab/ggml-vocab-starcoder.gguf",
	"tests/data/vocab/ggml-vocab-bert-bge.gguf", /* in the source tree */
};
#define N_TOK (sizeof(files) / sizeof(files[0]))

static struct exl_tokenizer *toks[N_TOK];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *dir = getenv("EXLD_MODELS"), *src = getenv("EXLD_SRCDIR");

	(void)argc;
	(void)argv;
	if (!dir || !*dir)
		dir = "../shared/models";
	if (!src || !*src)
		src = ".";
	for (size_t i = 0; i < N_TOK; i++) {
		char path[4096], err[512];
		struct gguf_file *f;

		snprintf(path, sizeof(path), "%s/%s", strncmp(files[i], "tests/", 6) ? dir : src,
			 files[i]);
		f = exl_gguf_open(path, err, sizeof(err));
		if (f)
			toks[i] = exl_tokenizer_load(f, err, sizeof(err));
		exl_gguf_close(f);
		if (!toks[i]) {
			fprintf(stderr, "fuzz_tokenizer: %s: %s (set EXLD_MODELS)\n", path, err);
			abort();
		}
	}
	return 0;
}

static bool valid_utf8(const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint8_t c = s[i];
		size_t len;
		uint32_t cp;

		if (c < 0x80) {
			i++;
			continue;
		}
		if ((c & 0xe0) == 0xc0)
			len = 2, cp = c & 0x1f;
		else if ((c & 0xf0) == 0xe0)
			len = 3, cp = c & 0x0f;
		else if ((c & 0xf8) == 0xf0)
			len = 4, cp = c & 0x07;
		else
			return false;
		if (n - i < len)
			return false;
		for (size_t k = 1; k < len; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (s[i + k] & 0x3f);
		}
		if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
		    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += len;
	}
	return true;
}

/* Streams ids through the decoder; the text is malloc'ed into *out. */
static size_t decode(const struct exl_tokenizer *t, const int32_t *ids, size_t n, bool special,
		     char **out)
{
	struct exl_detok d;
	size_t len = 0, cap = 0;

	*out = NULL;
	exl_detok_init(&d, t, special, true);
	for (size_t i = 0; i < n; i++)
		if (exl_detok_push(&d, ids[i], out, &len, &cap))
			abort();
	if (exl_detok_flush(&d, out, &len, &cap))
		abort();
	return len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct exl_tokenizer *t;
	bool parse_special, add_bos, special_out;
	int32_t *ids, n_vocab;
	char err[512], *text, *dec;
	size_t len, dec_len;
	int n;

	if (size < 1)
		return 0;
	t = toks[data[0] % N_TOK];
	parse_special = data[0] & 0x10;
	add_bos = (data[0] & 0x20) && exl_tokenizer_bos(t) >= 0;
	special_out = data[0] & 0x40;
	n_vocab = exl_tokenizer_n_vocab(t);
	len = size - 1;
	/* An exact-size copy, so reading past the text is caught. */
	text = malloc(len ? len : 1);
	if (!text)
		return 0;
	memcpy(text, data + 1, len);

	n = exl_tok_encode(t, text, len, add_bos, parse_special, &ids, err, sizeof(err));
	if (n < 0) {
		fprintf(stderr, "tokenize failed: %s\n", err);
		abort();
	}
	for (int i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= n_vocab)
			abort();

	dec_len = decode(t, ids, (size_t)n, special_out, &dec);
	if (!valid_utf8((const uint8_t *)dec, dec_len))
		abort();
	if (!parse_special && !special_out && valid_utf8(data + 1, len)) {
		bool gpt2 = data[0] % N_TOK == 1;
		bool stories = data[0] % N_TOK == 0 && !memmem(text, len, "\xe2\x96\x81", 3);

		/* dec is NULL when nothing was decoded */
		if ((gpt2 || stories) && (dec_len != len || (len && memcmp(dec, text, len))))
			abort();
	}
	free(dec);
	free(ids);

	/* The input as token ids: any ids decode to valid UTF-8. */
	{
		size_t n_in = len / 2;
		int32_t *in = malloc((n_in ? n_in : 1) * sizeof(*in));

		if (in) {
			for (size_t i = 0; i < n_in; i++)
				in[i] = (int32_t)((data[1 + 2 * i] | data[2 + 2 * i] << 8) % n_vocab);
			dec_len = decode(t, in, n_in, special_out, &dec);
			if (!valid_utf8((const uint8_t *)dec, dec_len))
				abort();
			free(dec);
			free(in);
		}
	}
	free(text);
	return 0;
}
