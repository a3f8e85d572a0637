/* GPT-2 style byte-level BPE (tokenizer.ggml.model = "gpt2").
 *
 * The text is split into words by the pre-tokenizer; each byte of a word
 * stands for one printable character (GPT-2's byte-to-unicode table), and
 * adjacent symbols are merged by the rank of their pair in
 * tokenizer.ggml.merges, lowest rank first, leftmost on ties.
 *
 * Merges work on symbol ids, not strings: every merge operand and result
 * gets an id at load (a token id, or one past the vocabulary for the rare
 * intermediate that is not a token), so a merge step is one hash lookup.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/gguf/gguf.h"
#include "daemon/core/tokenizer/tokenizer_internal.h"
#include "daemon/core/util/u64_heap.h"

/* Bytes that stand for themselves; the other 68 (0x00-0x20, 0x7f-0xa0 and
 * 0xad) map to U+0100 upwards in byte order. */
static bool byte_is_printable(unsigned b)
{
	return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

static uint32_t byte_codepoint(uint8_t b)
{
	if (byte_is_printable(b))
		return b;
	if (b <= 0x20)
		return 256 + b;
	if (b <= 0xa0)
		return 256 + 33 + (b - 0x7f);
	return 256 + 67; /* 0xad */
}

int exl_tok_bpe_byte_char(uint8_t b, char out[2])
{
	return exl_utf8_encode(byte_codepoint(b), (uint8_t *)out);
}

int exl_tok_bpe_char_byte(uint32_t cp)
{
	if (cp < 256)
		return byte_is_printable(cp) ? (int)cp : -1;
	if (cp < 256 + 33)
		return (int)(cp - 256);
	if (cp < 256 + 67)
		return (int)(cp - 256 - 33 + 0x7f);
	return cp == 256 + 67 ? 0xad : -1;
}

/* The id of s among tokens and merge symbols, adding it as a symbol when
 * new.  -1 on allocation failure. */
static int64_t intern(struct exl_tokenizer *t, const char *s, size_t len)
{
	int64_t id = exl_tok_strmap_get(&t->text_map, &t->texts, s, len);

	if (id >= 0)
		return id;
	if (t->texts.n >= INT32_MAX || exl_tok_strmap_reserve(&t->text_map, &t->texts, 1) ||
	    exl_tok_strtab_add(&t->texts, s, len))
		return -1;
	exl_tok_strmap_put(&t->text_map, &t->texts, t->texts.n - 1);
	return t->texts.n - 1;
}

int exl_tok_bpe_load(struct exl_tokenizer *t, const struct gguf_file *f, char *err, size_t errlen)
{
	const struct gguf_array *m = exl_gguf_get_arr(f, "tokenizer.ggml.merges");
	char *buf = NULL;
	size_t buf_cap = 0;

	if (!m || m->elem_type != GGUF_VT_STRING) {
		snprintf(err, errlen, "tokenizer.ggml.merges is missing or not a string array");
		return -1;
	}
	if (m->count > INT32_MAX / 4) {
		snprintf(err, errlen, "tokenizer.ggml.merges: too many merges (%llu)",
			 (unsigned long long)m->count);
		return -1;
	}
	if (exl_tok_pairmap_init(&t->merges, (uint32_t)m->count))
		goto oom;
	for (uint64_t i = 0; i < m->count; i++) {
		const char *s = m->strs[i].ptr;
		size_t len = m->strs[i].len, sp;
		int64_t a, b, r;

		/* "left right"; the split is the first space after the first
		 * byte, so a left side that is a space itself still works. */
		for (sp = 1; sp < len && s[sp] != ' '; sp++)
			;
		if (sp >= len)
			continue;
		if (len > buf_cap) {
			char *nb = realloc(buf, len);

			if (!nb)
				goto oom;
			buf = nb;
			buf_cap = len;
		}
		memcpy(buf, s, sp);
		memcpy(buf + sp, s + sp + 1, len - sp - 1);
		a = intern(t, s, sp);
		b = intern(t, s + sp + 1, len - sp - 1);
		r = intern(t, buf, len - 1);
		if (a < 0 || b < 0 || r < 0)
			goto oom;
		exl_tok_pairmap_put(&t->merges, (uint32_t)a, (uint32_t)b,
				    (struct tok_pair_val){ .rank = (int32_t)i,
							   .result = (int32_t)r });
	}
	free(buf);

	for (int c = 0; c < 256; c++) {
		char ch[2];
		int l = exl_tok_bpe_byte_char((uint8_t)c, ch);
		int64_t id = exl_tok_strmap_get(&t->text_map, &t->texts, ch, (size_t)l);

		t->byte_sym[c] = (int32_t)id;
		t->byte_token[c] = id < t->n_vocab ? (int32_t)id : -1;
	}
	return 0;
oom:
	free(buf);
	snprintf(err, errlen, "out of memory loading BPE merges");
	return -1;
}

/* ---- encoding ---- */

#define SYM_DEAD INT32_MIN

struct bsym {
	int32_t sym; /* symbol id, -1 for a byte with none, SYM_DEAD once merged away */
	int32_t prev, next;
	uint8_t byte; /* the first byte, for a symbol that is only a byte */
};

struct bpe_scratch {
	struct bsym *syms;
	uint32_t cap;
	struct u64_heap heap;
	char *enc; /* a word in byte-level characters */
	size_t enc_cap;
};

static const struct tok_pair_val *pair_of(const struct exl_tokenizer *t, const struct bsym *syms,
				       int32_t left, int32_t right)
{
	if (left < 0 || right < 0 || syms[left].sym < 0 || syms[right].sym < 0)
		return NULL;
	return exl_tok_pairmap_get(&t->merges, (uint32_t)syms[left].sym, (uint32_t)syms[right].sym);
}

static int try_pair(const struct exl_tokenizer *t, const struct bsym *syms, int32_t left,
		    int32_t right, struct u64_heap *h)
{
	const struct tok_pair_val *v = pair_of(t, syms, left, right);

	return v ? exl_u64_heap_push(h, (uint64_t)(uint32_t)v->rank << 32 | (uint32_t)left) : 0;
}

/* Emits a symbol that is not a token the way the reference does: each byte
 * of its byte-level text looked up as a one-byte token (so ASCII survives
 * and anything else is dropped, which a complete vocabulary never needs). */
static int emit_untokened(const struct exl_tokenizer *t, const struct bsym *s, struct tok_out *out)
{
	char ch[2];
	const char *text;
	size_t len;

	if (s->sym < 0) {
		len = (size_t)exl_tok_bpe_byte_char(s->byte, ch);
		text = ch;
	} else {
		text = tok_strtab_get(&t->texts, (uint32_t)s->sym, &len);
	}
	for (size_t i = 0; i < len; i++) {
		int32_t id = exl_tok_lookup(t, text + i, 1);

		if (id >= 0 && exl_tok_out_push(out, id))
			return -1;
	}
	return 0;
}

static int encode_word(const struct exl_tokenizer *t, const uint8_t *w, uint32_t len,
		       struct bpe_scratch *sc, struct tok_out *out)
{
	struct bsym *syms;

	if (t->ignore_merges) {
		/* A whole word that is a token is taken as is. */
		size_t need = (size_t)len * 2;
		size_t o = 0;
		int32_t id;

		if (need > sc->enc_cap) {
			char *e = realloc(sc->enc, need);

			if (!e)
				return -1;
			sc->enc = e;
			sc->enc_cap = need;
		}
		for (uint32_t i = 0; i < len; i++)
			o += (size_t)exl_tok_bpe_byte_char(w[i], sc->enc + o);
		id = exl_tok_lookup(t, sc->enc, o);
		if (id >= 0)
			return exl_tok_out_push(out, id);
	}
	if (len > sc->cap) {
		struct bsym *s = realloc(sc->syms, (size_t)len * sizeof(*s));

		if (!s)
			return -1;
		sc->syms = s;
		sc->cap = len;
	}
	syms = sc->syms;
	for (uint32_t i = 0; i < len; i++) {
		syms[i].sym = t->byte_sym[w[i]];
		syms[i].byte = w[i];
		syms[i].prev = (int32_t)i - 1;
		syms[i].next = i + 1 < len ? (int32_t)i + 1 : -1;
	}
	sc->heap.n = 0;
	for (uint32_t i = 1; i < len; i++)
		if (try_pair(t, syms, (int32_t)i - 1, (int32_t)i, &sc->heap))
			return -1;
	while (sc->heap.n) {
		uint64_t p = exl_u64_heap_pop(&sc->heap);
		int32_t left = (int32_t)(uint32_t)p, right;
		struct bsym *l = &syms[left], *r;
		const struct tok_pair_val *v;

		/* Stale when the pair there now is another one: merge ranks are
		 * unique, so the same rank means the same pair. */
		if (l->sym < 0 || l->next < 0)
			continue;
		right = l->next;
		r = &syms[right];
		v = pair_of(t, syms, left, right);
		if (!v || (uint32_t)v->rank != (uint32_t)(p >> 32))
			continue;
		l->sym = v->result;
		r->sym = SYM_DEAD;
		l->next = r->next;
		if (r->next >= 0)
			syms[r->next].prev = left;
		if (try_pair(t, syms, l->prev, left, &sc->heap) ||
		    try_pair(t, syms, left, l->next, &sc->heap))
			return -1;
	}
	for (int32_t i = 0; i != -1; i = syms[i].next) {
		if (syms[i].sym >= 0 && syms[i].sym < t->n_vocab) {
			if (exl_tok_out_push(out, syms[i].sym))
				return -1;
		} else if (emit_untokened(t, &syms[i], out)) {
			return -1;
		}
	}
	return 0;
}

int exl_tok_bpe_encode(const struct exl_tokenizer *t, const char *text, uint32_t len,
		       struct tok_out *out, char *err, size_t errlen)
{
	struct bpe_scratch sc = { 0 };
	struct tok_span *words = NULL;
	char *clean = NULL;
	uint32_t clean_len;
	int n_words, ret = -1;

	/* The regexes need valid UTF-8: broken bytes become U+FFFD first. */
	if (exl_tok_utf8_sanitize(text, len, &clean, &clean_len))
		goto oom;
	n_words = exl_tok_pre_split(t->pre, clean, clean_len, &words, err, errlen);
	if (n_words < 0)
		goto out;
	for (int i = 0; i < n_words; i++)
		if (encode_word(t, (const uint8_t *)clean + words[i].start, words[i].len, &sc, out))
			goto oom;
	ret = 0;
	goto out;
oom:
	snprintf(err, errlen, "out of memory");
out:
	free(clean);
	free(words);
	free(sc.syms);
	u64_heap_free(&sc.heap);
	free(sc.enc);
	return ret;
}
