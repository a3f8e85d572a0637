/* The tokenizer's string table and hash maps (text -> id, merge pair ->
 * rank), and the growing list of output ids. */
#include <stdlib.h>
#include <string.h>

#include "daemon/core/tokenizer/tokenizer_internal.h"

static uint64_t hash_bytes(const char *s, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < len; i++) {
		h ^= (uint8_t)s[i];
		h *= 0x100000001b3ull;
	}
	return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

/* Slots for n entries at most half full; 0 when too large. */
static uint32_t table_size(uint32_t n)
{
	uint64_t size = 16;

	while (size < 2 * (uint64_t)n + 2)
		size <<= 1;
	return size > (1u << 31) ? 0 : (uint32_t)size;
}

int exl_tok_strtab_add(struct tok_strtab *t, const char *s, size_t len)
{
	if (len > TOK_STR_MAX_LEN || t->n == UINT32_MAX - 1)
		return -1;
	if (t->n == t->cap) {
		uint32_t cap = t->cap ? t->cap * 2 : 1024;
		uint64_t *span;

		if (cap < t->cap)
			return -1;
		span = realloc(t->span, (size_t)cap * sizeof(*span));
		if (!span)
			return -1;
		t->span = span;
		t->cap = cap;
	}
	/* The arena exists once a string is added, even an empty one: a
	 * table of empty strings would otherwise hand out NULL pointers, which
	 * memcmp and memcpy must not get even for length 0. */
	if (!t->arena || len > t->arena_cap - t->arena_len) {
		size_t cap = t->arena_cap ? t->arena_cap : 4096;
		char *arena;

		while (len > cap - t->arena_len) {
			if (cap > ((size_t)1 << 39))
				return -1;
			cap *= 2;
		}
		arena = realloc(t->arena, cap);
		if (!arena)
			return -1;
		t->arena = arena;
		t->arena_cap = cap;
	}
	if (len)
		memcpy(t->arena + t->arena_len, s, len);
	t->span[t->n++] = (uint64_t)t->arena_len << 24 | len;
	t->arena_len += len;
	return 0;
}

void exl_tok_strtab_free(struct tok_strtab *t)
{
	free(t->arena);
	free(t->span);
	memset(t, 0, sizeof(*t));
}

int exl_tok_strmap_init(struct tok_strmap *m, uint32_t n)
{
	uint32_t size = table_size(n);

	memset(m, 0, sizeof(*m));
	if (!size)
		return -1;
	m->slot = calloc(size, sizeof(*m->slot));
	if (!m->slot)
		return -1;
	m->mask = size - 1;
	return 0;
}

void exl_tok_strmap_free(struct tok_strmap *m)
{
	free(m->slot);
	memset(m, 0, sizeof(*m));
}

static void strmap_insert(struct tok_strmap *m, const struct tok_strtab *t, uint32_t i)
{
	size_t len;
	const char *s = tok_strtab_get(t, i, &len);
	uint32_t pos = (uint32_t)hash_bytes(s, len) & m->mask;

	for (;; pos = (pos + 1) & m->mask) {
		uint32_t v = m->slot[pos];
		size_t olen;
		const char *o;

		if (!v) {
			m->slot[pos] = i + 1;
			m->used++;
			return;
		}
		o = tok_strtab_get(t, v - 1, &olen);
		if (olen == len && (!len || !memcmp(o, s, len))) {
			m->slot[pos] = i + 1;
			return;
		}
	}
}

int exl_tok_strmap_reserve(struct tok_strmap *m, const struct tok_strtab *t, uint32_t extra)
{
	uint64_t want = (uint64_t)m->used + extra;
	struct tok_strmap bigger;

	if (2 * want + 2 <= (uint64_t)m->mask + 1)
		return 0;
	if (want > UINT32_MAX / 2 || exl_tok_strmap_init(&bigger, (uint32_t)want * 2))
		return -1;
	for (uint32_t i = 0; i <= m->mask; i++)
		if (m->slot[i]) {
			size_t len;
			const char *s = tok_strtab_get(t, m->slot[i] - 1, &len);
			uint32_t pos = (uint32_t)hash_bytes(s, len) & bigger.mask;

			while (bigger.slot[pos])
				pos = (pos + 1) & bigger.mask;
			bigger.slot[pos] = m->slot[i];
			bigger.used++;
		}
	exl_tok_strmap_free(m);
	*m = bigger;
	return 0;
}

void exl_tok_strmap_put(struct tok_strmap *m, const struct tok_strtab *t, uint32_t i)
{
	strmap_insert(m, t, i);
}

int64_t exl_tok_strmap_get(const struct tok_strmap *m, const struct tok_strtab *t, const char *s,
			   size_t len)
{
	uint32_t pos = (uint32_t)hash_bytes(s, len) & m->mask;

	for (;; pos = (pos + 1) & m->mask) {
		uint32_t v = m->slot[pos];
		size_t olen;
		const char *o;

		if (!v)
			return -1;
		o = tok_strtab_get(t, v - 1, &olen);
		if (olen == len && (!len || !memcmp(o, s, len)))
			return (int64_t)v - 1;
	}
}

int exl_tok_pairmap_init(struct tok_pairmap *m, uint32_t n)
{
	uint32_t size = table_size(n);

	memset(m, 0, sizeof(*m));
	if (!size)
		return -1;
	m->key = malloc((size_t)size * sizeof(*m->key));
	m->val = malloc((size_t)size * sizeof(*m->val));
	if (!m->key || !m->val) {
		exl_tok_pairmap_free(m);
		return -1;
	}
	memset(m->key, 0xff, (size_t)size * sizeof(*m->key));
	m->mask = size - 1;
	return 0;
}

void exl_tok_pairmap_free(struct tok_pairmap *m)
{
	free(m->key);
	free(m->val);
	memset(m, 0, sizeof(*m));
}

void exl_tok_pairmap_put(struct tok_pairmap *m, uint32_t a, uint32_t b, struct tok_pair_val v)
{
	uint64_t key = (uint64_t)a << 32 | b;
	uint32_t pos = (uint32_t)hash_u64(key) & m->mask;

	for (;; pos = (pos + 1) & m->mask) {
		if (m->key[pos] == key)
			return;
		if (m->key[pos] == UINT64_MAX) {
			m->key[pos] = key;
			m->val[pos] = v;
			return;
		}
	}
}

const struct tok_pair_val *exl_tok_pairmap_get(const struct tok_pairmap *m, uint32_t a, uint32_t b)
{
	uint64_t key = (uint64_t)a << 32 | b;
	uint32_t pos;

	if (!m->key)
		return NULL;
	for (pos = (uint32_t)hash_u64(key) & m->mask;; pos = (pos + 1) & m->mask) {
		if (m->key[pos] == key)
			return &m->val[pos];
		if (m->key[pos] == UINT64_MAX)
			return NULL;
	}
}

int exl_tok_out_push(struct tok_out *o, int32_t id)
{
	if (o->n == o->cap) {
		size_t cap = o->cap ? o->cap * 2 : 64;
		int32_t *ids;

		if (cap > (size_t)INT32_MAX)
			return -1;
		ids = realloc(o->ids, cap * sizeof(*ids));
		if (!ids)
			return -1;
		o->ids = ids;
		o->cap = cap;
	}
	o->ids[o->n++] = id;
	return 0;
}
