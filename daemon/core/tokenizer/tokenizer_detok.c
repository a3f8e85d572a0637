/* Turning tokens back into text: each token's bytes (built once at load),
 * and the streaming decoder that only ever emits whole, valid UTF-8. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/tokenizer/tokenizer_internal.h"

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* The byte of a "<0xNN>" token, or -1. */
static int byte_token_value(const char *s, size_t len)
{
	int hi, lo;

	if (len != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
		return -1;
	hi = hex_digit(s[3]);
	lo = hex_digit(s[4]);
	return hi < 0 || lo < 0 ? -1 : hi << 4 | lo;
}

/* SentencePiece and WordPiece: U+2581 is a space. */
static size_t spm_piece(const char *s, size_t len, char *out)
{
	size_t o = 0;

	for (size_t i = 0; i < len;) {
		if (len - i >= 3 && !memcmp(s + i, "\xe2\x96\x81", 3)) {
			out[o++] = ' ';
			i += 3;
		} else {
			out[o++] = s[i++];
		}
	}
	return o;
}

/* Byte-level BPE: each character stands for one byte.  A character outside
 * the table (a hand-made token) is kept as its own UTF-8. */
static size_t bpe_piece(const char *s, size_t len, char *out)
{
	const uint8_t *u = (const uint8_t *)s;
	size_t o = 0;

	for (size_t i = 0; i < len;) {
		uint32_t cp = 0;
		int l = exl_utf8_decode(u + i, len - i, &cp);
		int b = l ? exl_tok_bpe_char_byte(cp) : -1;

		if (!l)
			l = 1;
		if (b >= 0) {
			out[o++] = (char)b;
		} else {
			memcpy(out + o, s + i, (size_t)l);
			o += (size_t)l;
		}
		i += (size_t)l;
	}
	return o;
}

int exl_tok_pieces_build(struct exl_tokenizer *t, char *err, size_t errlen)
{
	char *buf = NULL;
	size_t cap = 0;

	for (int32_t id = 0; id < t->n_vocab; id++) {
		size_t len, n = 0;
		const char *s = tok_strtab_get(&t->texts, (uint32_t)id, &len);
		uint16_t a = t->attr[id];
		int byte;

		if (len > cap) {
			char *nb = realloc(buf, len);

			if (!nb)
				goto oom;
			buf = nb;
			cap = len;
		}
		if (!len) {
			/* an empty token (padding) decodes to nothing */
		} else if (a & (TOK_ATTR_SPECIAL | TOK_ATTR_USER_DEFINED)) {
			memcpy(buf, s, len);
			n = len;
		} else if ((a & TOK_ATTR_BYTE) && (byte = byte_token_value(s, len)) >= 0) {
			buf[0] = (char)byte;
			n = 1;
		} else if (a & (TOK_ATTR_NORMAL | TOK_ATTR_BYTE)) {
			n = t->kind == EXL_TOK_BPE ? bpe_piece(s, len, buf) : spm_piece(s, len, buf);
		}
		/* unused and undefined tokens decode to nothing */
		if (exl_tok_strtab_add(&t->pieces, buf, n))
			goto oom;
	}
	free(buf);
	return 0;
oom:
	free(buf);
	snprintf(err, errlen, "out of memory building token pieces");
	return -1;
}

static const char *piece_of(const struct exl_tokenizer *t, int32_t id, bool decode_special,
			    size_t *len)
{
	*len = 0;
	if (id < 0 || id >= t->n_vocab)
		return "";
	if ((t->attr[id] & TOK_ATTR_SPECIAL) && !decode_special)
		return "";
	return tok_strtab_get(&t->pieces, (uint32_t)id, len);
}

size_t exl_token_bytes(const struct exl_tokenizer *t, int32_t id, bool decode_special,
		       char *buf, size_t buflen)
{
	size_t len;
	const char *p = piece_of(t, id, decode_special, &len);

	if (buflen)
		memcpy(buf, p, len < buflen ? len : buflen);
	return len;
}

/* ---- streaming ---- */

void exl_detok_init(struct exl_detok *d, const struct exl_tokenizer *t, bool decode_special,
		    bool strip_leading_space)
{
	memset(d, 0, sizeof(*d));
	d->tok = t;
	d->decode_special = decode_special;
	/* The dummy prefix exists only where the tokenizer adds one. */
	d->strip_leading_space = strip_leading_space && t->add_space_prefix;
}

struct sink {
	char **out;
	size_t *len, *cap;
};

static int put(struct sink *s, const void *p, size_t n)
{
	if (!n)
		return 0;
	if (n > *s->cap - *s->len) {
		size_t cap = *s->cap ? *s->cap : 64;
		char *b;

		while (n > cap - *s->len) {
			if (cap > SIZE_MAX / 2)
				return -1;
			cap *= 2;
		}
		b = realloc(*s->out, cap);
		if (!b)
			return -1;
		*s->out = b;
		*s->cap = cap;
	}
	memcpy(*s->out + *s->len, p, n);
	*s->len += n;
	return 0;
}

static int put_replacement(struct sink *s)
{
	return put(s, "\xef\xbf\xbd", 3);
}

/* Sequence length announced by a lead byte; 0 when it cannot start one. */
static int lead_len(uint8_t c)
{
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		return 2;
	if (c >= 0xe0 && c <= 0xef)
		return 3;
	if (c >= 0xf0 && c <= 0xf4)
		return 4;
	return 0;
}

/* Whether c may follow the npend bytes of an incomplete sequence. */
static bool continues(const uint8_t *pend, int npend, uint8_t c)
{
	uint8_t lo = 0x80, hi = 0xbf;

	if (npend == 1) {
		if (pend[0] == 0xe0)
			lo = 0xa0;
		else if (pend[0] == 0xed)
			hi = 0x9f;
		else if (pend[0] == 0xf0)
			lo = 0x90;
		else if (pend[0] == 0xf4)
			hi = 0x8f;
	}
	return c >= lo && c <= hi;
}

static int feed(struct exl_detok *d, struct sink *s, const uint8_t *p, size_t n)
{
	size_t run = 0; /* start of a run of complete ASCII/whole sequences */

	for (size_t i = 0; i < n; i++) {
		uint8_t c = p[i];

		if (d->npend) {
			if (continues(d->pend, d->npend, c)) {
				d->pend[d->npend++] = c;
				if (d->npend == lead_len(d->pend[0])) {
					if (put(s, d->pend, (size_t)d->npend))
						return -1;
					d->npend = 0;
				}
				run = i + 1;
				continue;
			}
			/* The held bytes will never complete: one U+FFFD for
			 * them, then c starts afresh. */
			d->npend = 0;
			if (put_replacement(s))
				return -1;
			run = i;
		}
		if (c < 0x80)
			continue;
		if (put(s, p + run, i - run))
			return -1;
		run = i + 1;
		if (lead_len(c)) {
			d->pend[0] = c;
			d->npend = 1;
		} else if (put_replacement(s)) {
			return -1;
		}
	}
	if (!d->npend && put(s, p + run, n - run))
		return -1;
	return 0;
}

int exl_detok_push(struct exl_detok *d, int32_t id, char **out, size_t *out_len, size_t *out_cap)
{
	struct sink s = { out, out_len, out_cap };
	size_t len;
	const char *p = piece_of(d->tok, id, d->decode_special, &len);

	if (!len)
		return 0;
	if (!d->started) {
		d->started = true;
		if (d->strip_leading_space && p[0] == ' ') {
			p++;
			len--;
		}
	}
	return feed(d, &s, (const uint8_t *)p, len);
}

int exl_detok_flush(struct exl_detok *d, char **out, size_t *out_len, size_t *out_cap)
{
	struct sink s = { out, out_len, out_cap };

	if (!d->npend)
		return 0;
	d->npend = 0;
	return put_replacement(&s);
}

char *exl_tok_decode(const struct exl_tokenizer *t, const int32_t *ids, size_t n,
		     bool decode_special, bool strip_leading_space)
{
	struct exl_detok d;
	char *out = NULL;
	size_t len = 0, cap = 0;

	exl_detok_init(&d, t, decode_special, strip_leading_space);
	for (size_t i = 0; i < n; i++)
		if (exl_detok_push(&d, ids[i], &out, &len, &cap))
			goto fail;
	if (exl_detok_flush(&d, &out, &len, &cap) || put(&(struct sink){ &out, &len, &cap }, "", 1))
		goto fail;
	return out;
fail:
	free(out);
	return NULL;
}
