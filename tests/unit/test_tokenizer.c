/* Tokenizers on small hand-made vocabularies (no model files).
 *
 *   test_tokenizer spm      SentencePiece merges by score, byte fallback,
 *                           the dummy prefix, special and user-defined tokens
 *   test_tokenizer bpe      byte-level BPE merges by rank (with a merge
 *                           intermediate that is not a token), pre-tokenizer
 *                           families, special tokens
 *   test_tokenizer detok    the streaming decoder: characters split over
 *                           byte tokens, invalid bytes as U+FFFD, the
 *                           leading space, hidden special tokens
 *   test_tokenizer errors   metadata the loader must refuse, and bad calls
 *   test_tokenizer empty    empty-string tokens (padding in real vocabularies,
 *                           and a vocabulary of nothing else): they load,
 *                           never match text and decode to nothing
 *   test_tokenizer wpm      BERT's WordPiece: lowercasing, accents, punctuation
 *                           and CJK split off, whitespace and control
 *                           characters, greedy longest match with
 *                           continuation pieces, [UNK] words, [CLS] ... [SEP],
 *                           the normalizer keys, decoding
 *
 * The vocabularies are written with gguf_write and read back from memory,
 * so the tokenizer sees exactly what it would see in a file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/gguf/gguf.h"
#include "daemon/core/gguf/gguf_write.h"
#include "daemon/core/tokenizer/tokenizer.h"
#include "tests/common/check.h"

#define SP "\xe2\x96\x81" /* U+2581, SentencePiece's space */

enum { T_NORMAL = 1, T_UNKNOWN = 2, T_CONTROL = 3, T_USER = 4, T_UNUSED = 5, T_BYTE = 6 };

/* A vocabulary under construction. */
struct vocab {
	char *text[1024];
	float score[1024];
	int32_t type[1024];
	int n;
};

static int32_t add(struct vocab *v, const char *text, int32_t type, float score)
{
	v->text[v->n] = strdup(text);
	v->type[v->n] = type;
	v->score[v->n] = score;
	return v->n++;
}

static void vocab_free(struct vocab *v)
{
	for (int i = 0; i < v->n; i++)
		free(v->text[i]);
	v->n = 0;
}

/* Extra metadata for a test vocabulary. */
struct meta {
	const char *model;       /* tokenizer.ggml.model */
	const char *pre;         /* NULL: absent */
	const char *const *merges;
	int n_merges;
	int bos, eos;            /* -1: absent */
	int add_space_prefix;    /* -1: absent, else 0/1 */
	bool no_scores, no_types;
	int short_scores;        /* drop this many scores */
	void (*extra)(struct gguf_writer *w); /* more keys, or NULL */
};

/* Writes v + m as GGUF into *buf and opens it.  The caller frees both. */
static struct gguf_file *build(const struct vocab *v, const struct meta *m, void **buf)
{
	struct gguf_writer *w = exl_gguf_writer_new();
	struct gguf_file *f = NULL;
	char err[256];
	size_t size;

	*buf = NULL;
	exl_gguf_writer_set_str(w, "general.architecture", "llama");
	if (m->model)
		exl_gguf_writer_set_str(w, "tokenizer.ggml.model", m->model);
	if (m->pre)
		exl_gguf_writer_set_str(w, "tokenizer.ggml.pre", m->pre);
	exl_gguf_writer_set_str_arr(w, "tokenizer.ggml.tokens", (const char *const *)v->text, (uint64_t)v->n);
	if (!m->no_scores)
		exl_gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, v->score,
					(uint64_t)(v->n - m->short_scores));
	if (!m->no_types)
		exl_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VT_INT32, v->type, (uint64_t)v->n);
	if (m->merges)
		exl_gguf_writer_set_str_arr(w, "tokenizer.ggml.merges", m->merges, (uint64_t)m->n_merges);
	if (m->bos >= 0)
		exl_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)m->bos);
	if (m->eos >= 0)
		exl_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)m->eos);
	if (m->add_space_prefix >= 0)
		exl_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", m->add_space_prefix);
	if (m->extra)
		m->extra(w);
	if (exl_gguf_writer_write_mem(w, buf, &size, err, sizeof(err))) {
		fprintf(stderr, "cannot write the test vocabulary: %s\n", err);
		goto out;
	}
	f = exl_gguf_open_buffer(*buf, size, err, sizeof(err));
	if (!f)
		fprintf(stderr, "cannot read the test vocabulary back: %s\n", err);
out:
	exl_gguf_writer_free(w);
	return f;
}

/* Loads v + m; NULL (after a message) when it fails. */
static struct exl_tokenizer *load(const struct vocab *v, const struct meta *m, char *err,
				  size_t errlen)
{
	void *buf;
	struct gguf_file *f = build(v, m, &buf);
	struct exl_tokenizer *t = NULL;

	if (f)
		t = exl_tokenizer_load(f, err, errlen);
	exl_gguf_close(f);
	free(buf);
	return t;
}

static int32_t id_of(const struct exl_tokenizer *t, const char *text)
{
	for (int32_t id = 0; id < exl_tokenizer_n_vocab(t); id++) {
		size_t len;
		const char *s = exl_token_text(t, id, &len);

		if (len == strlen(text) && !memcmp(s, text, len))
			return id;
	}
	fprintf(stderr, "test bug: no token '%s'\n", text);
	return -1;
}

/* Tokenizes text and compares with the tokens named in want (NULL-ended). */
static bool encodes_as(const struct exl_tokenizer *t, const char *text, bool add_bos,
		       bool parse_special, const char *const *want)
{
	int32_t *ids;
	char err[256];
	int n = exl_tok_encode(t, text, strlen(text), add_bos, parse_special, &ids, err, sizeof(err));
	int n_want = 0;
	bool ok;

	if (n < 0) {
		fprintf(stderr, "tokenize '%s': %s\n", text, err);
		return false;
	}
	while (want[n_want])
		n_want++;
	ok = n == n_want;
	for (int i = 0; ok && i < n; i++)
		ok = ids[i] == id_of(t, want[i]);
	if (!ok) {
		fprintf(stderr, "tokenize '%s': got", text);
		for (int i = 0; i < n; i++) {
			size_t len;
			const char *s = exl_token_text(t, ids[i], &len);

			fprintf(stderr, " [%.*s]", (int)len, s);
		}
		fprintf(stderr, ", want");
		for (int i = 0; i < n_want; i++)
			fprintf(stderr, " [%s]", want[i]);
		fprintf(stderr, "\n");
	}
	free(ids);
	return ok;
}

#define ENC(t, text, bos, special, ...) \
	encodes_as(t, text, bos, special, (const char *const[]){ __VA_ARGS__, NULL })

/* ---- SentencePiece ---- */

static void spm_vocab(struct vocab *v)
{
	static const char *normal[] = { SP, "h", "e", "l", "o", "w", "r", "d", "ll", "he", "hell",
					"hello", SP "hello", "or", SP "w", SP "wor", SP "world", "ld", "ab" };
	static const float score[] = { -1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11,
				       -12, -13, -14, -15, -16, -17, -20, -30 };
	char hex[8];

	add(v, "<unk>", T_UNKNOWN, 0);
	add(v, "<s>", T_CONTROL, 0);
	add(v, "</s>", T_CONTROL, 0);
	for (int b = 0; b < 256; b++) {
		snprintf(hex, sizeof(hex), "<0x%02X>", b);
		add(v, hex, T_BYTE, 0);
	}
	for (size_t i = 0; i < sizeof(normal) / sizeof(normal[0]); i++)
		add(v, normal[i], T_NORMAL, score[i]);
	add(v, "<tag>", T_USER, 0);
	add(v, "<|ctl|>", T_CONTROL, 0);
	add(v, "xy", T_USER, 0);
	add(v, "yzw", T_USER, 0);
	add(v, "<|unused0|>", T_UNUSED, 0);
}

static int test_spm(void)
{
	struct vocab v = { 0 };
	struct meta m = { .model = "llama", .bos = -1, .eos = -1, .add_space_prefix = -1 };
	char err[256];
	struct exl_tokenizer *t;

	spm_vocab(&v);
	t = load(&v, &m, err, sizeof(err));
	CHECK(t);
	if (!t) {
		fprintf(stderr, "load: %s\n", err);
		vocab_free(&v);
		return 1;
	}
	CHECK(exl_tokenizer_kind(t) == EXL_TOK_SPM);
	CHECK(!strcmp(exl_tokenizer_kind_name(t), "llama"));
	/* SentencePiece defaults: BOS 1, EOS 2, add BOS */
	CHECK(exl_tokenizer_bos(t) == 1 && exl_tokenizer_eos(t) == 2);
	CHECK(exl_tokenizer_add_bos(t));
	CHECK(exl_tokenizer_is_special(t, 1) && exl_tokenizer_is_special(t, 0));
	CHECK(!exl_tokenizer_is_special(t, id_of(t, "hello")));
	CHECK(!exl_tokenizer_is_special(t, -1) && !exl_tokenizer_is_special(t, 100000));

	/* Merges go by score, whatever their position: ll first, ld last. */
	CHECK(ENC(t, "hello world", false, false, SP "hello", SP "world"));
	CHECK(ENC(t, "hello world", true, false, "<s>", SP "hello", SP "world"));
	CHECK(ENC(t, "", true, false, "<s>"));
	CHECK(ENC(t, " hello", false, false, SP, SP "hello"));
	/* é is no token: its two bytes; x neither */
	CHECK(ENC(t, "h\xc3\xa9x", false, false, SP, "h", "<0xC3>", "<0xA9>", "<0x78>"));
	/* a lone broken byte goes through as itself */
	CHECK(ENC(t, "\xff", false, false, SP, "<0xFF>"));
	CHECK(ENC(t, "\n", false, false, SP, "<0x0A>"));

	/* User-defined tokens are always split out, control ones only when
	 * asked; the text after a special token gets the dummy space again. */
	CHECK(ENC(t, "hello<tag>hello", false, false, SP "hello", "<tag>", SP "hello"));
	CHECK(ENC(t, "<|ctl|>", false, true, "<|ctl|>"));
	CHECK(ENC(t, "<s>hello", false, true, "<s>", SP "hello"));
	CHECK(ENC(t, "<s>", false, false, SP, "<0x3C>", "<0x73>", "<0x3E>"));
	/* Longest token first, wherever it is: yzw beats the earlier xy. */
	CHECK(ENC(t, "xyzw", false, false, SP, "<0x78>", "yzw"));
	CHECK(ENC(t, "xyxy", false, false, "xy", "xy"));

	/* decode */
	{
		int32_t ids[] = { 1, id_of(t, SP "hello"), id_of(t, SP "world"), 2 };
		char *s = exl_tok_decode(t, ids, 4, false, true);

		CHECK(s && !strcmp(s, "hello world"));
		free(s);
		s = exl_tok_decode(t, ids, 4, false, false);
		CHECK(s && !strcmp(s, " hello world"));
		free(s);
		s = exl_tok_decode(t, ids, 4, true, true);
		CHECK(s && !strcmp(s, "<s> hello world</s>"));
		free(s);
	}
	{
		char buf[16];
		size_t n;

		n = exl_token_bytes(t, id_of(t, SP "world"), false, buf, sizeof(buf));
		CHECK(n == 6 && !memcmp(buf, " world", 6));
		n = exl_token_bytes(t, id_of(t, "<0x41>"), false, buf, sizeof(buf));
		CHECK(n == 1 && buf[0] == 'A');
		n = exl_token_bytes(t, 1, false, buf, sizeof(buf));
		CHECK(n == 0);
		n = exl_token_bytes(t, 1, true, buf, sizeof(buf));
		CHECK(n == 3 && !memcmp(buf, "<s>", 3));
		/* user-defined tokens show as they are */
		n = exl_token_bytes(t, id_of(t, "<tag>"), false, buf, sizeof(buf));
		CHECK(n == 5 && !memcmp(buf, "<tag>", 5));
		n = exl_token_bytes(t, id_of(t, "<|unused0|>"), true, buf, sizeof(buf));
		CHECK(n == 0);
		/* a short buffer gets a truncated copy and the full length */
		n = exl_token_bytes(t, id_of(t, SP "world"), false, buf, 3);
		CHECK(n == 6 && !memcmp(buf, " wo", 3));
		CHECK(exl_token_bytes(t, -5, true, buf, sizeof(buf)) == 0);
		CHECK(exl_token_bytes(t, 99999, true, buf, sizeof(buf)) == 0);
	}
	exl_tokenizer_free(t);

	/* Without the dummy prefix. */
	m.add_space_prefix = 0;
	t = load(&v, &m, err, sizeof(err));
	CHECK(t);
	if (t) {
		CHECK(ENC(t, "hello world", false, false, "hello", SP "world"));
		int32_t id = id_of(t, SP "world");
		char *s = exl_tok_decode(t, &id, 1, false, true);

		CHECK(s && !strcmp(s, " world"));
		free(s);
		exl_tokenizer_free(t);
	}
	vocab_free(&v);
	return 0;
}

/* ---- byte-level BPE ---- */

/* GPT-2's byte-to-character table, written out independently of the
 * tokenizer's own. */
static void byte_char(int b, char *out)
{
	int cp = b;

	if (!((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff))) {
		int n = 0;

		for (int c = 0; c < b; c++)
			if (!((c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || (c >= 0xae && c <= 0xff)))
				n++;
		cp = 256 + n;
	}
	if (cp < 0x80) {
		out[0] = (char)cp;
		out[1] = 0;
	} else {
		out[0] = (char)(0xc0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3f));
		out[2] = 0;
	}
}

static const char *const bpe_merges[] = {
	"h e", "l l", "he ll", "hell o", "\xc4\xa0 w", "o r", "\xc4\xa0w or", "\xc4\xa0wor l",
	"\xc4\xa0worl d", "1 2", "12 3", "4 5", "123 45",
	"x y", "xy z", /* xy itself is no token */
	"\xc4\xa0 \xc4\xa0",
};

static void bpe_vocab(struct vocab *v)
{
	static const char *merged[] = { "he", "ll", "hell", "hello", "\xc4\xa0w", "or", "\xc4\xa0wor",
					"\xc4\xa0worl", "\xc4\xa0world", "12", "123", "45", "12345", "xyz",
					"\xc4\xa0\xc4\xa0" };
	char ch[4];

	for (int b = 0; b < 256; b++) {
		byte_char(b, ch);
		add(v, ch, T_NORMAL, 0);
	}
	for (size_t i = 0; i < sizeof(merged) / sizeof(merged[0]); i++)
		add(v, merged[i], T_NORMAL, 0);
	add(v, "<|endoftext|>", T_CONTROL, 0);
	add(v, "<|user|>", T_USER, 0);
}

static int test_bpe(void)
{
	struct vocab v = { 0 };
	struct meta m = { .model = "gpt2", .pre = "gpt-2", .merges = bpe_merges,
			  .n_merges = (int)(sizeof(bpe_merges) / sizeof(bpe_merges[0])),
			  .bos = -1, .eos = -1, .add_space_prefix = -1, .no_scores = true };
	char err[256];
	struct exl_tokenizer *t;
	int32_t eot;

	bpe_vocab(&v);
	eot = v.n - 2;
	m.eos = eot;
	t = load(&v, &m, err, sizeof(err));
	CHECK(t);
	if (!t) {
		fprintf(stderr, "load: %s\n", err);
		vocab_free(&v);
		return 1;
	}
	CHECK(exl_tokenizer_kind(t) == EXL_TOK_BPE);
	CHECK(!strcmp(exl_tokenizer_kind_name(t), "gpt2"));
	CHECK(!strcmp(exl_tokenizer_pre_name(t), "gpt-2"));
	CHECK(exl_tokenizer_bos(t) == -1 && !exl_tokenizer_add_bos(t));
	CHECK(exl_tokenizer_eos(t) == eot);
	{
		const int32_t *ids;
		int n = exl_tokenizer_eog_ids(t, &ids);

		CHECK(n == 1 && ids[0] == eot);
	}

	CHECK(ENC(t, "hello world", false, false, "hello", "\xc4\xa0world"));
	CHECK(ENC(t, "hello", false, false, "hello"));
	/* gpt-2 keeps a run of digits as one word */
	CHECK(ENC(t, "12345", false, false, "12345"));
	/* xy is a merge step but no token: xyz merges through it, xy alone
	 * comes out as its characters */
	CHECK(ENC(t, "xyz", false, false, "xyz"));
	CHECK(ENC(t, "xy", false, false, "x", "y"));
	/* spaces: the last one of a run goes with the next word (and there
	 * is no merge for it) */
	CHECK(ENC(t, "a   b", false, false, "a", "\xc4\xa0\xc4\xa0", "\xc4\xa0", "b"));
	/* invalid UTF-8 becomes U+FFFD (ef bf bd) before the regexes run */
	{
		char c1[4], c2[4], c3[4];

		byte_char(0xef, c1);
		byte_char(0xbf, c2);
		byte_char(0xbd, c3);
		CHECK(ENC(t, "a\xff", false, false, "a", c1, c2, c3));
	}
	CHECK(ENC(t, "<|endoftext|>", false, true, "<|endoftext|>"));
	CHECK(ENC(t, "<|endoftext|>", false, false, "<", "|", "e", "n", "d", "o", "f", "t", "e", "x",
		  "t", "|", ">"));
	CHECK(ENC(t, "hello<|user|>", false, false, "hello", "<|user|>"));
	{
		int32_t *ids;
		int n = exl_tok_encode(t, "x", 1, true, false, &ids, err, sizeof(err));

		CHECK(n == -1 && strstr(err, "BOS"));
	}
	/* decode undoes the byte mapping */
	{
		int32_t ids[] = { id_of(t, "hello"), id_of(t, "\xc4\xa0world"), eot };
		char *s = exl_tok_decode(t, ids, 3, false, true);

		CHECK(s && !strcmp(s, "hello world"));
		free(s);
		s = exl_tok_decode(t, ids, 3, true, true);
		CHECK(s && !strcmp(s, "hello world<|endoftext|>"));
		free(s);
	}
	exl_tokenizer_free(t);

	/* llama3's pre-tokenizer splits digits in threes. */
	m.pre = "llama-bpe";
	t = load(&v, &m, err, sizeof(err));
	CHECK(t);
	if (t) {
		CHECK(!strcmp(exl_tokenizer_pre_name(t), "llama-bpe"));
		CHECK(ENC(t, "12345", false, false, "123", "45"));
		CHECK(ENC(t, "hello world", false, false, "hello", "\xc4\xa0world"));
		exl_tokenizer_free(t);
	}
	/* starcoder's: every digit alone */
	m.pre = "starcoder";
	t = load(&v, &m, err, sizeof(err));
	CHECK(t);
	if (t) {
		CHECK(ENC(t, "12345", false, false, "1", "2", "3", "4", "5"));
		exl_tokenizer_free(t);
	}
	/* no pre key: the default family */
	m.pre = NULL;
	t = load(&v, &m, err, sizeof(err));
	CHECK(t);
	if (t) {
		CHECK(!strcmp(exl_tokenizer_pre_name(t), "default"));
		CHECK(ENC(t, "hello world", false, false, "hello", "\xc4\xa0world"));
		exl_tokenizer_free(t);
	}
	vocab_free(&v);
	return 0;
}

/* gpt-oss's o200k_harmony: with <|return|> and <|call|> in the
 * vocabulary, <|end|> closes a message, not the reply, and the markers
 * between messages are text a reply shows (as llama.cpp has them); a
 * vocabulary without <|call|> keeps <|end|> as an end of generation. */
static int test_harmony(void)
{
	static const char *const marks[] = { "<|start|>", "<|message|>", "<|channel|>", "<|end|>",
					     "<|return|>", "<|call|>", "<|constrain|>" };
	struct vocab v = { 0 };
	struct meta m = { .model = "gpt2", .pre = "gpt-4o", .merges = bpe_merges,
			  .n_merges = (int)(sizeof(bpe_merges) / sizeof(bpe_merges[0])),
			  .bos = -1, .eos = -1, .add_space_prefix = -1, .no_scores = true };
	char err[256];

	bpe_vocab(&v);
	for (size_t i = 0; i < sizeof(marks) / sizeof(marks[0]); i++)
		add(&v, marks[i], T_CONTROL, 0);
	m.eos = v.n - 3; /* <|return|> */
	for (int with_call = 1; with_call >= 0; with_call--) {
		struct exl_tokenizer *t;
		const int32_t *ids;
		bool end_eog = false, ret_eog = false;

		if (!with_call)
			free(v.text[v.n - 2]), v.text[v.n - 2] = strdup("<|caller|>");
		t = load(&v, &m, err, sizeof(err));
		CHECK(t);
		if (!t) {
			fprintf(stderr, "load: %s\n", err);
			break;
		}
		int n = exl_tokenizer_eog_ids(t, &ids);
		for (int i = 0; i < n; i++) {
			end_eog |= ids[i] == id_of(t, "<|end|>");
			ret_eog |= ids[i] == id_of(t, "<|return|>");
		}
		CHECK(ret_eog && end_eog == !with_call);
		if (with_call) {
			int32_t r[] = { id_of(t, "<|channel|>"), id_of(t, "hello"),
					id_of(t, "<|message|>"), id_of(t, "\xc4\xa0world"),
					id_of(t, "<|end|>"), id_of(t, "<|start|>") };
			char *s = exl_tok_decode(t, r, 6, false, true);

			/* the markers are shown without special tokens decoded, and
			 * parsed out of text without special tokens parsed */
			CHECK(s && !strcmp(s, "<|channel|>hello<|message|> world<|end|><|start|>"));
			free(s);
			CHECK(ENC(t, "<|channel|>hello", false, false, "<|channel|>", "hello"));
		}
		exl_tokenizer_free(t);
	}
	vocab_free(&v);
	return 0;
}

/* ---- WordPiece ---- */

/* A small BERT vocabulary: [PAD] [UNK] [CLS] [SEP] [MASK] are control
 * tokens, as in the real ones; word-initial pieces carry U+2581 and
 * continuation pieces (BERT's "##...") none. */
static void wpm_vocab(struct vocab *v)
{
	static const char *const normal[] = {
		SP "hello", SP "world", SP "un", SP "unw", "ant", "anted", "ed", "w", SP "a",
		SP "b", SP "+", SP ",", SP "!", SP ".", SP "[", SP "]", SP "cls", SP "\xe4\xb8\x96",
		SP "\xe7\x95\x8c", SP "h\xc3\xa9llo", SP "HELLO", SP "x", "\xe2\x84\xa2",
	};

	add(v, "[PAD]", T_CONTROL, 0);
	add(v, "[UNK]", T_CONTROL, 0);
	add(v, "[CLS]", T_CONTROL, 0);
	add(v, "[SEP]", T_CONTROL, 0);
	add(v, "[MASK]", T_CONTROL, 0);
	for (size_t i = 0; i < sizeof(normal) / sizeof(normal[0]); i++)
		add(v, normal[i], T_NORMAL, 0);
}

/* BERT conversions name [CLS], [SEP] and [UNK] by these keys. */
static void wpm_ids(struct gguf_writer *w)
{
	exl_gguf_writer_set_u32(w, "tokenizer.ggml.cls_token_id", 2);
	exl_gguf_writer_set_u32(w, "tokenizer.ggml.seperator_token_id", 3);
	exl_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 1);
}

static void wpm_cased(struct gguf_writer *w)
{
	wpm_ids(w);
	exl_gguf_writer_set_bool(w, "tokenizer.ggml.normalizer.lowercase", false);
}

static void wpm_keep_accents(struct gguf_writer *w)
{
	wpm_ids(w);
	exl_gguf_writer_set_bool(w, "tokenizer.ggml.normalizer.strip_accents", false);
}

/* Encodes len bytes (NULs included) and compares with want. */
static bool wpm_bytes_as(const struct exl_tokenizer *t, const char *text, size_t len,
			 const char *const *want)
{
	int32_t *ids;
	char err[256];
	int n = exl_tok_encode(t, text, len, false, false, &ids, err, sizeof(err)), n_want = 0;
	bool ok = n >= 0;

	while (want[n_want])
		n_want++;
	ok = ok && n == n_want;
	for (int i = 0; ok && i < n; i++)
		ok = ids[i] == id_of(t, want[i]);
	if (!ok)
		fprintf(stderr, "%zu bytes: %d tokens, want %d\n", len, n, n_want);
	free(ids);
	return ok;
}

#define WPM_BYTES(t, lit, ...) \
	wpm_bytes_as(t, lit, sizeof(lit) - 1, (const char *const[]){ __VA_ARGS__, NULL })

static int test_wpm(void)
{
	struct vocab v = { 0 };
	struct meta m = { .model = "bert", .pre = "bert-bge", .bos = -1, .eos = -1,
			  .add_space_prefix = -1, .no_scores = true, .extra = wpm_ids };
	char err[256];
	struct exl_tokenizer *t;

	wpm_vocab(&v);
	t = load(&v, &m, err, sizeof(err));
	CHECK(t);
	if (!t) {
		fprintf(stderr, "load: %s\n", err);
		vocab_free(&v);
		return 1;
	}
	CHECK(exl_tokenizer_kind(t) == EXL_TOK_WPM);
	CHECK(!strcmp(exl_tokenizer_kind_name(t), "bert"));
	CHECK(!strcmp(exl_tokenizer_pre_name(t), "bert-bge"));
	CHECK(exl_tokenizer_bos(t) == 2 && exl_tokenizer_eos(t) == -1);
	CHECK(exl_tokenizer_add_bos(t));
	CHECK(exl_tokenizer_is_special(t, 1) && exl_tokenizer_is_special(t, 4));

	/* words split at whitespace; punctuation and ASCII symbols are words
	 * of their own; the text is lowercased */
	CHECK(ENC(t, "hello world", false, false, SP "hello", SP "world"));
	CHECK(ENC(t, "  HELLO,World!  ", false, false, SP "hello", SP ",", SP "world", SP "!"));
	CHECK(ENC(t, "a+b.", false, false, SP "a", SP "+", SP "b", SP "."));
	CHECK(ENC(t, "  \t", false, false, NULL));
	/* accents: é and e + U+0301 both lose theirs; so do other marks */
	CHECK(ENC(t, "h\xc3\xa9llo H\xc3\x89LLO", false, false, SP "hello", SP "hello"));
	CHECK(ENC(t, "he\xcc\x81llo\xcc\xa3", false, false, SP "hello"));
	/* CJK ideographs are words of their own; one without a token is [UNK] */
	CHECK(ENC(t, "\xe4\xb8\x96\xe7\x95\x8c\xe4\xbd\xa0x", false, false, SP "\xe4\xb8\x96",
		  SP "\xe7\x95\x8c", "[UNK]", SP "x"));
	/* whitespace of every kind ends a word (tab, newline, U+0085, U+00A0,
	 * U+3000); control and format characters (U+200B, U+00AD), NUL and
	 * U+FFFD vanish without ending it */
	CHECK(WPM_BYTES(t, "\thel\xe2\x80\x8blo\n\xc2\x85world\xc2\xa0" "a\xe3\x80\x80" "b",
			SP "hello", SP "world", SP "a", SP "b"));
	CHECK(WPM_BYTES(t, "he\0ll\xc2\xado\x01 wor\xef\xbf\xbdld\x7f", SP "hello", SP "world"));
	/* bytes that are no UTF-8 are dropped like U+FFFD */
	CHECK(WPM_BYTES(t, "hel\xfflo \x80world\xc3", SP "hello", SP "world"));
	/* greedy longest match from the left, continuing with pieces: "unw" +
	 * "anted", though "un" + "w" + "anted" would also do */
	CHECK(ENC(t, "unwanted unwant unwed", false, false, SP "unw", "anted", SP "unw", "ant",
		  SP "unw", "ed"));
	/* a word with a part no piece covers is one [UNK], wherever the gap */
	CHECK(ENC(t, "unwx hello zzz unw", false, false, "[UNK]", SP "hello", "[UNK]", SP "unw"));
	/* a non-ASCII symbol stays in its word */
	CHECK(ENC(t, "x\xe2\x84\xa2 \xe2\x84\xa2", false, false, SP "x", "\xe2\x84\xa2", "[UNK]"));
	/* [CLS] first and [SEP] last with add_bos; special tokens are text
	 * unless parsed */
	CHECK(ENC(t, "hello", true, false, "[CLS]", SP "hello", "[SEP]"));
	CHECK(ENC(t, "", true, false, "[CLS]", "[SEP]"));
	CHECK(ENC(t, "[CLS]hello", false, false, SP "[", SP "cls", SP "]", SP "hello"));
	CHECK(ENC(t, "[CLS]hello[MASK]", true, true, "[CLS]", "[CLS]", SP "hello", "[MASK]",
		  "[SEP]"));

	/* decoding: U+2581 is a space, pieces join their word, special tokens
	 * only on request */
	{
		int32_t ids[] = { 2, id_of(t, SP "hello"), id_of(t, SP ","), id_of(t, SP "unw"),
				  id_of(t, "anted"), 1, 3 };
		char *s = exl_tok_decode(t, ids, 7, false, true);

		CHECK(s && !strcmp(s, " hello , unwanted"));
		free(s);
		s = exl_tok_decode(t, ids, 7, true, true);
		CHECK(s && !strcmp(s, "[CLS] hello , unwanted[UNK][SEP]"));
		free(s);
	}
	exl_tokenizer_free(t);

	/* lowercase off: strip_accents follows it */
	m.extra = wpm_cased;
	t = load(&v, &m, err, sizeof(err));
	CHECK(t);
	if (t) {
		CHECK(ENC(t, "HELLO hello Hello", false, false, SP "HELLO", SP "hello", "[UNK]"));
		CHECK(ENC(t, "h\xc3\xa9llo", false, false, SP "h\xc3\xa9llo"));
		exl_tokenizer_free(t);
	}
	/* accents kept, lowercase on */
	m.extra = wpm_keep_accents;
	t = load(&v, &m, err, sizeof(err));
	CHECK(t);
	if (t) {
		CHECK(ENC(t, "H\xc3\x89LLO", false, false, SP "h\xc3\xa9llo"));
		CHECK(ENC(t, "he\xcc\x81llo", false, false, "[UNK]"));
		exl_tokenizer_free(t);
	}
	/* no keys: BERT's ids 101, 102, 100 are beyond this vocabulary, so
	 * there is no [CLS] to add and no [UNK] for unknown words */
	m.extra = NULL;
	t = load(&v, &m, err, sizeof(err));
	CHECK(t);
	if (t) {
		int32_t *ids;

		CHECK(exl_tokenizer_bos(t) == -1 && !exl_tokenizer_add_bos(t));
		CHECK(ENC(t, "hello", false, false, SP "hello"));
		CHECK(exl_tok_encode(t, "hello zzz", 9, false, false, &ids, err, sizeof(err)) == -1);
		CHECK(strstr(err, "no unknown token") != NULL);
		CHECK(exl_tok_encode(t, "hello", 5, true, false, &ids, err, sizeof(err)) == -1);
		exl_tokenizer_free(t);
	}
	vocab_free(&v);
	return 0;
}

/* ---- streaming decoder ---- */

/* Pushes the byte tokens of bytes[] one by one; checks what each push
 * emits (want[i], "" for nothing) and what the flush emits. */
static bool stream(const struct exl_tokenizer *t, const uint8_t *bytes, int n,
		   const char *const *want, const char *want_flush)
{
	struct exl_detok d;
	char *out = NULL;
	size_t len = 0, cap = 0;
	bool ok = true;

	exl_detok_init(&d, t, false, false);
	for (int i = 0; i < n; i++) {
		char name[8];

		snprintf(name, sizeof(name), "<0x%02X>", bytes[i]);
		len = 0;
		if (exl_detok_push(&d, id_of(t, name), &out, &len, &cap) ||
		    len != strlen(want[i]) || (len && memcmp(out, want[i], len))) {
			fprintf(stderr, "push %d (0x%02x): got %zu bytes, want '%s'\n", i, bytes[i], len,
				want[i]);
			ok = false;
		}
	}
	len = 0;
	if (exl_detok_flush(&d, &out, &len, &cap) || len != strlen(want_flush) ||
	    (len && memcmp(out, want_flush, len))) {
		fprintf(stderr, "flush: got %zu bytes, want '%s'\n", len, want_flush);
		ok = false;
	}
	free(out);
	return ok;
}

#define FFFD "\xef\xbf\xbd"
#define STREAM(t, bytes, flush, ...)                                                    \
	stream(t, (const uint8_t[])bytes, (int)sizeof((const uint8_t[])bytes),          \
	       (const char *const[]){ __VA_ARGS__ }, flush)
#define B(...) { __VA_ARGS__ }

static int test_detok(void)
{
	struct vocab v = { 0 };
	struct meta m = { .model = "llama", .bos = -1, .eos = -1, .add_space_prefix = -1 };
	char err[256];
	struct exl_tokenizer *t;

	spm_vocab(&v);
	t = load(&v, &m, err, sizeof(err));
	CHECK(t);
	if (!t) {
		vocab_free(&v);
		return 1;
	}
	/* € (e2 82 ac) and 😀 (f0 9f 98 80) split over byte tokens: nothing
	 * until the character is whole */
	CHECK(STREAM(t, B(0xe2, 0x82, 0xac), "", "", "", "\xe2\x82\xac"));
	CHECK(STREAM(t, B(0xf0, 0x9f, 0x98, 0x80, 0x41), "", "", "", "", "\xf0\x9f\x98\x80", "A"));
	CHECK(STREAM(t, B(0xc3, 0xa9, 0xc3, 0xa9), "", "", "\xc3\xa9", "", "\xc3\xa9"));
	/* bytes that can never start a character */
	CHECK(STREAM(t, B(0xff, 0x80, 0xfe), "", FFFD, FFFD, FFFD));
	CHECK(STREAM(t, B(0xc0, 0x80), "", FFFD, FFFD));    /* overlong */
	CHECK(STREAM(t, B(0xf5, 0x41), "", FFFD, "A"));
	/* a character cut short: one U+FFFD for the held bytes, then the
	 * byte that broke it counts on its own */
	CHECK(STREAM(t, B(0xc3, 0x41), "", "", FFFD "A"));
	CHECK(STREAM(t, B(0xe2, 0x82, 0xe2, 0x82, 0xac), "", "", "", FFFD, "", "\xe2\x82\xac"));
	CHECK(STREAM(t, B(0xed, 0xa0, 0x80), "", "", FFFD FFFD, FFFD)); /* surrogate */
	CHECK(STREAM(t, B(0xf4, 0x90, 0x80, 0x80), "", "", FFFD FFFD, FFFD, FFFD)); /* > U+10FFFF */
	/* the stream ends inside a character */
	CHECK(STREAM(t, B(0xf0, 0x9f, 0x98), FFFD, "", "", ""));
	CHECK(STREAM(t, B(0x41, 0xe2), FFFD, "A", ""));

	/* text tokens around held bytes */
	{
		struct exl_detok d;
		char *out = NULL;
		size_t len = 0, cap = 0;
		int32_t ids[] = { 1, id_of(t, SP "hello"), id_of(t, "<0xE2>"), id_of(t, "<0x82>"),
				  id_of(t, "<0xAC>"), id_of(t, SP "world"), id_of(t, "<0xC3>"),
				  id_of(t, SP "world"), 2 };

		exl_detok_init(&d, t, false, true);
		for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
			CHECK(!exl_detok_push(&d, ids[i], &out, &len, &cap));
		CHECK(!exl_detok_flush(&d, &out, &len, &cap));
		/* the hidden BOS does not use up the leading-space strip */
		CHECK(len == strlen("hello\xe2\x82\xac world" FFFD " world") &&
		      !memcmp(out, "hello\xe2\x82\xac world" FFFD " world", len));
		free(out);
	}
	/* whole-sequence decode flushes */
	{
		int32_t ids[] = { id_of(t, "<0x41>"), id_of(t, "<0xE2>") };
		char *s = exl_tok_decode(t, ids, 2, false, false);

		CHECK(s && !strcmp(s, "A" FFFD));
		free(s);
		s = exl_tok_decode(t, NULL, 0, false, false);
		CHECK(s && !strcmp(s, ""));
		free(s);
	}
	exl_tokenizer_free(t);
	vocab_free(&v);
	return 0;
}

/* ---- refusals ---- */

static bool load_fails(const struct vocab *v, const struct meta *m, const char *want)
{
	char err[256] = "";
	struct exl_tokenizer *t = load(v, m, err, sizeof(err));

	if (t) {
		fprintf(stderr, "loaded, but should fail with '%s'\n", want);
		exl_tokenizer_free(t);
		return false;
	}
	if (!strstr(err, want)) {
		fprintf(stderr, "error '%s' does not mention '%s'\n", err, want);
		return false;
	}
	return true;
}

static int test_errors(void)
{
	struct vocab v = { 0 }, b = { 0 };
	struct meta m = { .model = "llama", .bos = -1, .eos = -1, .add_space_prefix = -1 };
	struct meta mb = { .model = "gpt2", .pre = "gpt-2", .merges = bpe_merges,
			   .n_merges = (int)(sizeof(bpe_merges) / sizeof(bpe_merges[0])),
			   .bos = -1, .eos = -1, .add_space_prefix = -1, .no_scores = true };
	char err[256];
	struct exl_tokenizer *t;

	spm_vocab(&v);
	bpe_vocab(&b);

	m.model = NULL;
	CHECK(load_fails(&v, &m, "tokenizer.ggml.model"));
	m.model = "t5";
	CHECK(load_fails(&v, &m, "unsupported tokenizer model 't5'"));
	m.model = "llama";
	m.short_scores = 3;
	CHECK(load_fails(&v, &m, "tokenizer.ggml.scores"));
	m.short_scores = 0;

	mb.merges = NULL;
	CHECK(load_fails(&b, &mb, "tokenizer.ggml.merges"));
	mb.merges = bpe_merges;
	mb.pre = "no-such-family";
	CHECK(load_fails(&b, &mb, "unknown pre-tokenizer 'no-such-family'"));
	mb.pre = "gpt-2";

	/* Out-of-range special ids in metadata are ignored, not trusted. */
	m.bos = 100000;
	m.eos = v.n;
	t = load(&v, &m, err, sizeof(err));
	CHECK(t);
	if (t) {
		CHECK(exl_tokenizer_bos(t) == 1 && exl_tokenizer_eos(t) == 2);
		CHECK(exl_token_text(t, -1, &(size_t){ 0 }) == NULL);
		CHECK(exl_token_text(t, v.n, &(size_t){ 0 }) == NULL);
		int32_t *ids;

		CHECK(exl_tok_encode(t, NULL, 5, false, false, &ids, err, sizeof(err)) == -1);
		CHECK(exl_tok_encode(t, NULL, 0, false, false, &ids, err, sizeof(err)) == 0);
		free(ids);
		exl_tokenizer_free(t);
	}
	/* No token types: everything is a normal token. */
	m.bos = m.eos = -1;
	m.no_types = true;
	t = load(&v, &m, err, sizeof(err));
	CHECK(t);
	if (t) {
		CHECK(!exl_tokenizer_is_special(t, 1));
		exl_tokenizer_free(t);
	}
	vocab_free(&v);
	vocab_free(&b);
	return 0;
}

/* ---- empty-string tokens ---- */

/* Whether ids[0..n) holds none of the tokens [lo, hi). */
static bool none_in(const int32_t *ids, int n, int32_t lo, int32_t hi)
{
	for (int i = 0; i < n; i++)
		if (ids[i] >= lo && ids[i] < hi)
			return false;
	return true;
}

static int test_empty(void)
{
	static const int32_t types[] = { T_NORMAL, T_CONTROL, T_USER, T_UNUSED, T_BYTE, T_UNKNOWN };
	struct vocab v = { 0 }, b = { 0 };
	struct meta m = { .model = "llama", .bos = -1, .eos = -1, .add_space_prefix = -1 };
	struct meta mb = { .model = "gpt2", .pre = "gpt-2", .merges = bpe_merges,
			   .n_merges = (int)(sizeof(bpe_merges) / sizeof(bpe_merges[0])),
			   .bos = -1, .eos = -1, .add_space_prefix = -1, .no_scores = true };
	char err[256] = "";
	struct exl_tokenizer *t;
	int32_t *ids, first;
	char *s;
	int n;

	/* A vocabulary of nothing but empty strings (as a converter that lost
	 * the texts would write): it loads; text comes out as unknown tokens,
	 * never as one of the empty ones matched by text. */
	for (int i = 0; i < 6; i++)
		add(&v, "", types[i], 0);
	t = load(&v, &m, err, sizeof(err));
	CHECK(t);
	if (!t)
		fprintf(stderr, "all-empty vocabulary: %s\n", err);
	if (t) {
		CHECK(exl_tokenizer_n_vocab(t) == 6);
		n = exl_tok_encode(t, "ab", 2, false, false, &ids, err, sizeof(err));
		CHECK(n >= 0);
		for (int i = 0; i < n; i++)
			CHECK(ids[i] == 0); /* <unk>, by id */
		if (n >= 0)
			free(ids);
		n = exl_tok_encode(t, "", 0, false, true, &ids, err, sizeof(err));
		CHECK(n == 0);
		if (n >= 0)
			free(ids);
		s = exl_tok_decode(t, (const int32_t[]){ 0, 1, 2, 3, 4, 5 }, 6, true, false);
		CHECK(s && !strcmp(s, ""));
		free(s);
		exl_tokenizer_free(t);
	}
	vocab_free(&v);

	/* Empty padding tokens of every type after a real SentencePiece
	 * vocabulary: the same tokens as without them, and none of them. */
	spm_vocab(&v);
	first = v.n;
	for (int i = 0; i < 6; i++)
		add(&v, "", types[i], 0);
	t = load(&v, &m, err, sizeof(err));
	CHECK(t);
	if (t) {
		CHECK(ENC(t, "hello world", false, false, SP "hello", SP "world"));
		CHECK(ENC(t, "hello<tag>", false, true, SP "hello", "<tag>"));
		n = exl_tok_encode(t, "a<|ctl|>\xff", 9, true, true, &ids, err, sizeof(err));
		CHECK(n > 0 && none_in(ids, n, first, v.n));
		if (n >= 0)
			free(ids);
		s = exl_tok_decode(t, (const int32_t[]){ first, id_of(t, SP "hello"), first + 3 }, 3,
				   true, true);
		CHECK(s && !strcmp(s, "hello"));
		free(s);
		exl_tokenizer_free(t);
	}
	vocab_free(&v);

	/* The same for byte-level BPE, with an empty merge and a merge whose
	 * right side is empty. */
	bpe_vocab(&b);
	first = b.n;
	for (int i = 0; i < 6; i++)
		add(&b, "", types[i], 0);
	{
		const char *merges[sizeof(bpe_merges) / sizeof(bpe_merges[0]) + 2];

		memcpy(merges, bpe_merges, sizeof(bpe_merges));
		merges[mb.n_merges] = "";
		merges[mb.n_merges + 1] = "h ";
		mb.merges = merges;
		mb.n_merges += 2;
		t = load(&b, &mb, err, sizeof(err));
		CHECK(t);
		if (t) {
			CHECK(ENC(t, "hello world", false, false, "hello", "\xc4\xa0world"));
			n = exl_tok_encode(t, "h<|endoftext|>", 14, false, true, &ids, err, sizeof(err));
			CHECK(n == 2 && none_in(ids, n, first, b.n));
			if (n >= 0)
				free(ids);
			exl_tokenizer_free(t);
		}
	}
	vocab_free(&b);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(void);
	} tests[] = {
		{ "spm", test_spm }, { "bpe", test_bpe }, { "detok", test_detok }, { "errors", test_errors },
		{ "empty", test_empty }, { "harmony", test_harmony }, { "wpm", test_wpm },
	};

	for (size_t i = 0; argc == 2 && i < sizeof(tests) / sizeof(tests[0]); i++) {
		if (strcmp(argv[1], tests[i].name))
			continue;
		if (tests[i].fn())
			check_failures++;
		printf("%d checks, %d failed\n", check_count, check_failures);
		return check_failures ? 1 : 0;
	}
	fprintf(stderr, "usage: test_tokenizer spm|bpe|detok|errors|empty|harmony|wpm\n");
	return 2;
}
