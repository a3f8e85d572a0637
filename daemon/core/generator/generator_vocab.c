/* Scans of the vocabulary's bytes a job needs once: the token healing
 * candidates and the DRY sequence breakers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/generator/generator_internal.h"

/* Longest token text looked at; longer tokens are compared on this prefix
 * plus their length. */
#define TOKEN_BUF 512

int exl_gen_heal_candidates(const struct exl_tokenizer *tok, int n_vocab, const char *rest,
			    size_t n, int32_t **out, char *err, size_t errlen)
{
	int32_t nt = exl_tokenizer_n_vocab(tok);
	int32_t *c = NULL;
	int nc = 0, cap = 0;
	char buf[TOKEN_BUF];

	*out = NULL;
	if (nt > n_vocab)
		nt = n_vocab;
	for (int32_t id = 0; id < nt; id++) {
		if (exl_tokenizer_is_special(tok, id))
			continue;
		size_t len = exl_token_bytes(tok, id, false, buf, sizeof(buf));
		size_t cmp = len < n ? len : n;

		if (len == 0 || cmp > sizeof(buf) || memcmp(buf, rest, cmp))
			continue;
		if (nc == cap) {
			int ncap = cap ? cap * 2 : 64;
			int32_t *g = realloc(c, (size_t)ncap * sizeof(*g));

			if (!g) {
				free(c);
				snprintf(err, errlen, "out of memory for token healing");
				return -1;
			}
			c = g;
			cap = ncap;
		}
		c[nc++] = id;
	}
	*out = c;
	return nc;
}

int exl_gen_vocab_has_prefix(const struct exl_tokenizer *tok, int n_vocab, const char *text,
			     size_t n)
{
	int32_t nt = exl_tokenizer_n_vocab(tok);
	char buf[TOKEN_BUF];

	if (nt > n_vocab)
		nt = n_vocab;
	if (n > sizeof(buf))
		return 0;
	for (int32_t id = 0; id < nt; id++) {
		if (exl_tokenizer_is_special(tok, id))
			continue;
		size_t len = exl_token_bytes(tok, id, false, buf, sizeof(buf));

		if (len >= n && !memcmp(buf, text, n))
			return 1;
	}
	return 0;
}

static bool contains(const char *hay, size_t n, const char *needle, size_t m)
{
	return m <= n && memmem(hay, n, needle, m) != NULL;
}

int exl_dry_breaker_mask(const struct exl_tokenizer *tok, int n_vocab,
			 const struct exl_sampler_params *p, uint32_t **out,
			 char *err, size_t errlen)
{
	int32_t nt = exl_tokenizer_n_vocab(tok);
	char buf[TOKEN_BUF];
	uint32_t *m;

	*out = NULL;
	if (p->dry_mult <= 0.0f || p->n_dry_breakers <= 0)
		return 0;
	m = calloc(((size_t)n_vocab + 31) / 32, sizeof(*m));
	if (!m) {
		snprintf(err, errlen, "out of memory for DRY sequence breakers");
		return -1;
	}
	if (nt > n_vocab)
		nt = n_vocab;
	for (int32_t id = 0; id < nt; id++) {
		size_t len = exl_token_bytes(tok, id, false, buf, sizeof(buf));

		if (len > sizeof(buf))
			len = sizeof(buf);
		for (int b = 0; b < p->n_dry_breakers; b++) {
			const char *br = p->dry_breakers[b];

			if (contains(buf, len, br, strlen(br))) {
				m[id >> 5] |= 1u << (id & 31);
				break;
			}
		}
	}
	*out = m;
	return 0;
}
