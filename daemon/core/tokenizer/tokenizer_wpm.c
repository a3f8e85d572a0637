/* WordPiece (tokenizer.ggml.model = "bert"): BERT-family embedding models.
 *
 * As llama.cpp's llm_tokenizer_wpm_session does it.  The text is read as
 * code points; with strip_accents each becomes the first code point of its
 * canonical decomposition (so "é" is "e").  Then, one code point at a time:
 * whitespace ends the current word; NUL, U+FFFD and control characters
 * (Cc Cf Co Cs) are dropped, and so are marks (Mn Mc Me) with
 * strip_accents; the rest is lowercased (with lowercase) and either made a
 * word of its own (punctuation, ASCII symbols, CJK ideographs) or appended
 * to the current word.  Each word, with U+2581 in front, is covered from the
 * left by the longest tokens that fit; a word with any part no token covers
 * becomes the one unknown token.
 *
 * Unicode properties come from utf8proc; whitespace is the White_Space list
 * llama.cpp uses.  Bytes that are not UTF-8 are read as llama.cpp reads them:
 * any lead byte with the right count of continuation bytes is a code point
 * (overlong forms and surrogates included), and anything else is U+FFFD,
 * one byte at a time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "daemon/core/tokenizer/tokenizer_internal.h"

/* Every word starts with U+2581, 3 bytes of UTF-8. */
#define PREFIX_CP 0x2581
#define PREFIX_LEN 3u

int exl_tok_wpm_prepare(struct exl_tokenizer *t, char *err, size_t errlen)
{
	return exl_tok_vocab_trie_build(t, &t->vocab, err, errlen);
}

/* One code point of s[0..len) as llama.cpp's unicode_cpt_from_utf8 reads
 * it; *n gets the bytes taken (at least 1). */
static uint32_t decode(const uint8_t *s, uint32_t len, uint32_t *n)
{
	uint8_t b = s[0];
	uint32_t need, cp;

	*n = 1;
	if (b < 0x80)
		return b;
	if (!(b & 0x40))
		return 0xFFFD;
	if (!(b & 0x20)) {
		need = 1;
		cp = b & 0x1fu;
	} else if (!(b & 0x10)) {
		need = 2;
		cp = b & 0x0fu;
	} else if (!(b & 0x08)) {
		need = 3;
		cp = b & 0x07u;
	} else {
		return 0xFFFD;
	}
	if (need >= len)
		return 0xFFFD;
	for (uint32_t i = 1; i <= need; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0xFFFD;
		cp = cp << 6 | (s[i] & 0x3fu);
	}
	*n = need + 1;
	return cp;
}

static bool is_whitespace(uint32_t cp)
{
	return (cp >= 0x09 && cp <= 0x0d) || cp == 0x20 || cp == 0x85 || cp == 0xa0 ||
	       cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
	       cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

/* llama.cpp's is_chinese_char, with its 0x2B920 (Hugging Face's bound). */
static bool is_cjk(uint32_t cp)
{
	return (cp >= 0x4e00 && cp <= 0x9fff) || (cp >= 0x3400 && cp <= 0x4dbf) ||
	       (cp >= 0x20000 && cp <= 0x2a6df) || (cp >= 0x2a700 && cp <= 0x2b73f) ||
	       (cp >= 0x2b740 && cp <= 0x2b81f) || (cp >= 0x2b920 && cp <= 0x2ceaf) ||
	       (cp >= 0xf900 && cp <= 0xfaff) || (cp >= 0x2f800 && cp <= 0x2fa1f);
}

/* The first code point of cp's canonical decomposition. */
static uint32_t nfd_first(uint32_t cp)
{
	utf8proc_int32_t buf[32];
	int boundclass = 0;
	utf8proc_ssize_t n;

	if (cp < 0xc0 || (cp >= 0xd800 && cp < 0xe000))
		return cp;
	n = utf8proc_decompose_char((utf8proc_int32_t)cp, buf, 32, UTF8PROC_DECOMPOSE, &boundclass);
	return n > 0 ? (uint32_t)buf[0] : cp;
}

enum cls { C_DROP, C_SPACE, C_MARK, C_ALONE, C_WORD };

static enum cls classify(uint32_t cp)
{
	if (cp < 0x80) {
		if (is_whitespace(cp))
			return C_SPACE;
		if (cp < 0x20 || cp == 0x7f)
			return C_DROP;
		if ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z'))
			return C_WORD;
		return C_ALONE; /* every other printable ASCII is P or S */
	}
	if (is_whitespace(cp))
		return C_SPACE;
	if (cp == 0xfffd)
		return C_DROP;
	switch (utf8proc_category((utf8proc_int32_t)cp)) {
	case UTF8PROC_CATEGORY_CC:
	case UTF8PROC_CATEGORY_CF:
	case UTF8PROC_CATEGORY_CO:
	case UTF8PROC_CATEGORY_CS:
		return C_DROP;
	case UTF8PROC_CATEGORY_MN:
	case UTF8PROC_CATEGORY_MC:
	case UTF8PROC_CATEGORY_ME:
		return C_MARK;
	case UTF8PROC_CATEGORY_PC:
	case UTF8PROC_CATEGORY_PD:
	case UTF8PROC_CATEGORY_PS:
	case UTF8PROC_CATEGORY_PE:
	case UTF8PROC_CATEGORY_PI:
	case UTF8PROC_CATEGORY_PF:
	case UTF8PROC_CATEGORY_PO:
		return C_ALONE;
	default:
		return is_cjk(cp) ? C_ALONE : C_WORD;
	}
}

static uint32_t to_lower(uint32_t cp)
{
	if (cp < 0x80)
		return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
	return (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
}

/* The word being built: U+2581 and the word's bytes. */
struct word {
	uint8_t *b;
	uint32_t n, cap;
};

static int word_put(struct word *w, uint32_t cp)
{
	if (w->cap - w->n < 4) {
		uint32_t cap = w->cap ? w->cap * 2 : 64;
		uint8_t *b = realloc(w->b, cap);

		if (!b || cap < w->cap)
			return -1;
		w->b = b;
		w->cap = cap;
	}
	w->n += (uint32_t)exl_utf8_encode(cp, w->b + w->n);
	return 0;
}

/* Covers the word with the longest tokens from the left; a word with a part
 * no token covers is the unknown token.  Empties w (a bare U+2581 is no
 * word). */
static int flush(const struct exl_tokenizer *t, struct word *w, struct tok_out *out, char *err,
		 size_t errlen)
{
	size_t mark = out->n;
	uint32_t i = 0;

	if (w->n <= PREFIX_LEN)
		return 0;
	while (i < w->n) {
		int32_t id = -1;
		uint32_t l = exl_tok_trie_longest(&t->vocab, w->b + i, w->n - i, &id);

		if (!l) {
			out->n = mark;
			break;
		}
		if (exl_tok_out_push(out, id))
			goto oom;
		i += l;
	}
	if (out->n == mark) {
		if (t->unk < 0) {
			uint32_t shown = w->n - PREFIX_LEN > 64 ? 64 : w->n - PREFIX_LEN;

			snprintf(err, errlen, "the word '%.*s' has no tokens and the vocabulary has "
				 "no unknown token", (int)shown, (const char *)w->b + PREFIX_LEN);
			return -1;
		}
		if (exl_tok_out_push(out, t->unk))
			goto oom;
	}
	w->n = PREFIX_LEN;
	return 0;
oom:
	snprintf(err, errlen, "out of memory");
	return -1;
}

int exl_tok_wpm_encode(const struct exl_tokenizer *t, const char *text, uint32_t len,
		       struct tok_out *out, char *err, size_t errlen)
{
	const uint8_t *s = (const uint8_t *)text;
	struct word w = { 0 };
	int ret = -1;

	if (word_put(&w, PREFIX_CP))
		goto oom;
	for (uint32_t pos = 0; pos < len;) {
		uint32_t n, cp = decode(s + pos, len - pos, &n);
		enum cls c;

		pos += n;
		/* llama.cpp fails on these (it cannot write them back) */
		if (cp > 0x10ffff)
			continue;
		if (t->strip_accents)
			cp = nfd_first(cp);
		c = cp ? classify(cp) : C_DROP;
		if (c == C_SPACE) {
			if (flush(t, &w, out, err, errlen))
				goto out;
			continue;
		}
		if (c == C_DROP || (c == C_MARK && t->strip_accents))
			continue;
		if (t->lowercase)
			cp = to_lower(cp);
		if (c == C_ALONE && flush(t, &w, out, err, errlen))
			goto out;
		if (word_put(&w, cp))
			goto oom;
		if (c == C_ALONE && flush(t, &w, out, err, errlen))
			goto out;
	}
	if (flush(t, &w, out, err, errlen))
		goto out;
	ret = 0;
	goto out;
oom:
	snprintf(err, errlen, "out of memory");
out:
	free(w.b);
	return ret;
}
