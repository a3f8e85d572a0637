/* JSON text -> a tree in one arena. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "common/json_parse.h"

struct block {
	struct block *next;
	size_t used, cap;
	max_align_t data[];
};

struct exl_json_doc {
	struct block *blocks;
	struct exl_json *root;
};

struct jp {
	struct exl_json_doc *d;
	const char *s;
	size_t len, pos;
	int depth;
	char *err;
	size_t errlen;
};

static void *arena_alloc(struct exl_json_doc *d, size_t n)
{
	struct block *b = d->blocks;

	n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
	if (!b || b->cap - b->used < n) {
		size_t cap = n > 65536 ? n : 65536;

		b = malloc(sizeof(*b) + cap);
		if (!b)
			return NULL;
		b->used = 0;
		b->cap = cap;
		b->next = d->blocks;
		d->blocks = b;
	}
	void *p = (char *)b->data + b->used;

	b->used += n;
	return p;
}

static void where(const struct jp *p, size_t off, unsigned *line, unsigned *col)
{
	unsigned l = 1, c = 1;

	for (size_t i = 0; i < off && i < p->len; i++) {
		if (p->s[i] == '\n') {
			l++;
			c = 1;
		} else if (((unsigned char)p->s[i] & 0xC0) != 0x80) {
			c++;
		}
	}
	*line = l;
	*col = c;
}

__attribute__((format(printf, 3, 4)))
static int fail(struct jp *p, size_t off, const char *fmt, ...)
{
	char msg[200];
	unsigned l, c;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	where(p, off, &l, &c);
	snprintf(p->err, p->errlen, "line %u, column %u: %s", l, c, msg);
	return -1;
}

static int oom(struct jp *p)
{
	snprintf(p->err, p->errlen, "out of memory parsing JSON");
	return -1;
}

static void skip_ws(struct jp *p)
{
	while (p->pos < p->len) {
		char c = p->s[p->pos];

		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			break;
		p->pos++;
	}
}

static int hex4(struct jp *p, uint32_t *v)
{
	*v = 0;
	if (p->len - p->pos < 4)
		return fail(p, p->pos, "\\u wants 4 hex digits");
	for (int i = 0; i < 4; i++) {
		char c = p->s[p->pos++];
		int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
			c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;

		if (d < 0)
			return fail(p, p->pos - 1, "\\u wants 4 hex digits");
		*v = *v << 4 | (uint32_t)d;
	}
	return 0;
}


/* A string at p->pos (the opening quote); decoded into the arena. */
static int parse_string(struct jp *p, const char **out, size_t *out_len)
{
	size_t at = p->pos, n = 0;
	char *o;

	p->pos++;
	/* The decoded text is never longer than the source up to the
	 * closing quote. */
	size_t end = p->pos;

	while (end < p->len && p->s[end] != '"')
		end += p->s[end] == '\\' ? 2 : 1;
	if (end > p->len)
		end = p->len;
	o = arena_alloc(p->d, end - p->pos + 1);
	if (!o)
		return oom(p);
	for (;;) {
		if (p->pos >= p->len)
			return fail(p, at, "unterminated string");
		unsigned char c = (unsigned char)p->s[p->pos];

		if (c == '"') {
			p->pos++;
			break;
		}
		if (c < 0x20)
			return fail(p, p->pos, "control character in a string (escape it)");
		if (c != '\\') {
			size_t k = (size_t)exl_utf8_len((const uint8_t *)p->s + p->pos, p->len - p->pos);

			if (!k)
				return fail(p, p->pos, "invalid UTF-8 in a string");
			memcpy(o + n, p->s + p->pos, k);
			n += k;
			p->pos += k;
			continue;
		}
		size_t esc = p->pos;

		p->pos++;
		if (p->pos >= p->len)
			return fail(p, at, "unterminated string");
		c = (unsigned char)p->s[p->pos++];
		switch (c) {
		case '"': o[n++] = '"'; break;
		case '\\': o[n++] = '\\'; break;
		case '/': o[n++] = '/'; break;
		case 'b': o[n++] = '\b'; break;
		case 'f': o[n++] = '\f'; break;
		case 'n': o[n++] = '\n'; break;
		case 'r': o[n++] = '\r'; break;
		case 't': o[n++] = '\t'; break;
		case 'u': {
			uint32_t v, lo;

			if (hex4(p, &v))
				return -1;
			if (v >= 0xDC00 && v <= 0xDFFF)
				return fail(p, esc, "lone low surrogate \\u%04X", v);
			if (v >= 0xD800 && v <= 0xDBFF) {
				if (p->len - p->pos < 6 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
					return fail(p, esc, "high surrogate \\u%04X without its low half", v);
				p->pos += 2;
				if (hex4(p, &lo))
					return -1;
				if (lo < 0xDC00 || lo > 0xDFFF)
					return fail(p, esc, "high surrogate \\u%04X without its low half", v);
				v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
			}
			n += (size_t)exl_utf8_encode(v, (uint8_t *)o + n);
			break;
		}
		default:
			return fail(p, esc, "unknown escape in a string");
		}
	}
	o[n] = 0;
	*out = o;
	*out_len = n;
	return 0;
}

static int parse_number(struct jp *p, struct exl_json *v)
{
	size_t at = p->pos;
	bool is_int = true;

	if (p->pos < p->len && p->s[p->pos] == '-')
		p->pos++;
	if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
		return fail(p, at, "invalid number");
	if (p->s[p->pos] == '0') {
		p->pos++;
		if (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
			return fail(p, at, "number with a leading zero");
	} else {
		while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
			p->pos++;
	}
	if (p->pos < p->len && p->s[p->pos] == '.') {
		is_int = false;
		p->pos++;
		if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
			return fail(p, at, "number with no digit after '.'");
		while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
			p->pos++;
	}
	if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
		is_int = false;
		p->pos++;
		if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
			p->pos++;
		if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
			return fail(p, at, "number with no digit in its exponent");
		while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
			p->pos++;
	}
	size_t n = p->pos - at;
	char *t = arena_alloc(p->d, n + 1);

	if (!t)
		return oom(p);
	memcpy(t, p->s + at, n);
	t[n] = 0;
	v->type = EXL_JSON_NUMBER;
	v->str = t;
	v->len = n;
	v->num = strtod(t, NULL);
	v->is_int = is_int;
	return 0;
}

static int parse_value(struct jp *p, struct exl_json **out);

/* Items or members, collected in a growing malloc'ed list, then copied
 * into the arena. */
struct list {
	struct exl_json **v;
	const char **k;
	size_t *kl;
	size_t n, cap;
};

static int list_add(struct list *l, struct exl_json *v, const char *k, size_t kl)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 8;
		struct exl_json **nv = realloc(l->v, cap * sizeof(*nv));

		if (!nv)
			return -1;
		l->v = nv;
		const char **nk = realloc(l->k, cap * sizeof(*nk));

		if (!nk)
			return -1;
		l->k = nk;
		size_t *nkl = realloc(l->kl, cap * sizeof(*nkl));

		if (!nkl)
			return -1;
		l->kl = nkl;
		l->cap = cap;
	}
	l->v[l->n] = v;
	l->k[l->n] = k;
	l->kl[l->n] = kl;
	l->n++;
	return 0;
}

static int list_finish(struct jp *p, struct list *l, struct exl_json *v, bool keys)
{
	v->n = l->n;
	v->v = arena_alloc(p->d, (l->n + 1) * sizeof(*v->v));
	if (!v->v)
		return oom(p);
	if (l->n)
		memcpy(v->v, l->v, l->n * sizeof(*v->v));
	if (keys) {
		v->keys = arena_alloc(p->d, (l->n + 1) * sizeof(*v->keys));
		v->key_lens = arena_alloc(p->d, (l->n + 1) * sizeof(*v->key_lens));
		if (!v->keys || !v->key_lens)
			return oom(p);
		if (l->n) {
			memcpy(v->keys, l->k, l->n * sizeof(*v->keys));
			memcpy(v->key_lens, l->kl, l->n * sizeof(*v->key_lens));
		}
	}
	return 0;
}

static int parse_container(struct jp *p, struct exl_json *v, bool object)
{
	struct list l = { 0 };
	size_t at = p->pos;
	char close = object ? '}' : ']';
	int rc = -1;

	if (++p->depth > EXL_JSON_MAX_DEPTH) {
		fail(p, at, "nesting deeper than %d", EXL_JSON_MAX_DEPTH);
		goto out;
	}
	v->type = object ? EXL_JSON_OBJECT : EXL_JSON_ARRAY;
	p->pos++;
	skip_ws(p);
	if (p->pos < p->len && p->s[p->pos] == close) {
		p->pos++;
		rc = list_finish(p, &l, v, object);
		goto out;
	}
	for (;;) {
		const char *k = NULL;
		size_t kl = 0;
		struct exl_json *item;

		skip_ws(p);
		if (object) {
			size_t kat = p->pos;

			if (p->pos >= p->len || p->s[p->pos] != '"') {
				fail(p, p->pos, "expected a string key");
				goto out;
			}
			if (parse_string(p, &k, &kl))
				goto out;
			for (size_t i = 0; i < l.n; i++) {
				if (l.kl[i] == kl && !memcmp(l.k[i], k, kl)) {
					fail(p, kat, "duplicate key \"%.*s\"", (int)(kl > 60 ? 60 : kl), k);
					goto out;
				}
			}
			skip_ws(p);
			if (p->pos >= p->len || p->s[p->pos] != ':') {
				fail(p, p->pos, "expected ':' after a key");
				goto out;
			}
			p->pos++;
		}
		if (parse_value(p, &item))
			goto out;
		if (list_add(&l, item, k, kl)) {
			oom(p);
			goto out;
		}
		skip_ws(p);
		if (p->pos >= p->len) {
			fail(p, at, "unterminated %s", object ? "object" : "array");
			goto out;
		}
		if (p->s[p->pos] == ',') {
			p->pos++;
			continue;
		}
		if (p->s[p->pos] == close) {
			p->pos++;
			break;
		}
		fail(p, p->pos, "expected ',' or '%c'", close);
		goto out;
	}
	rc = list_finish(p, &l, v, object);
out:
	p->depth--;
	free(l.v);
	free(l.k);
	free(l.kl);
	return rc;
}

static bool word(struct jp *p, const char *w)
{
	size_t n = strlen(w);

	if (p->len - p->pos < n || memcmp(p->s + p->pos, w, n))
		return false;
	p->pos += n;
	return true;
}

static int parse_value(struct jp *p, struct exl_json **out)
{
	struct exl_json *v;

	skip_ws(p);
	if (p->pos >= p->len)
		return fail(p, p->pos, "expected a value, found the end of the text");
	v = arena_alloc(p->d, sizeof(*v));
	if (!v)
		return oom(p);
	memset(v, 0, sizeof(*v));
	v->off = p->pos;
	*out = v;
	char ch = p->s[p->pos];

	if (ch == '{' || ch == '[')
		return parse_container(p, v, ch == '{');
	if (ch == '"') {
		v->type = EXL_JSON_STRING;
		return parse_string(p, &v->str, &v->len);
	}
	if (ch == '-' || (ch >= '0' && ch <= '9'))
		return parse_number(p, v);
	if (word(p, "true")) {
		v->type = EXL_JSON_BOOL;
		v->b = true;
		return 0;
	}
	if (word(p, "false")) {
		v->type = EXL_JSON_BOOL;
		return 0;
	}
	if (word(p, "null")) {
		v->type = EXL_JSON_NULL;
		return 0;
	}
	if ((unsigned char)ch >= ' ' && (unsigned char)ch < 0x7F)
		return fail(p, p->pos, "unexpected '%c'", ch);
	return fail(p, p->pos, "unexpected byte 0x%02X", (unsigned char)ch);
}

struct exl_json_doc *exl_json_parse(const char *text, size_t len, char *err, size_t errlen)
{
	struct exl_json_doc *d = calloc(1, sizeof(*d));
	struct jp p = { .d = d, .s = text, .len = len, .err = err, .errlen = errlen };

	if (!d) {
		snprintf(err, errlen, "out of memory parsing JSON");
		return NULL;
	}
	if (len > EXL_JSON_MAX_TEXT) {
		snprintf(err, errlen, "JSON text of %zu bytes is over the limit of %u", len,
			 EXL_JSON_MAX_TEXT);
		goto fail;
	}
	if (!text && len) {
		snprintf(err, errlen, "no JSON text");
		goto fail;
	}
	if (!text)
		p.s = "";
	if (parse_value(&p, &d->root))
		goto fail;
	skip_ws(&p);
	if (p.pos != p.len) {
		fail(&p, p.pos, "text after the JSON value");
		goto fail;
	}
	return d;
fail:
	exl_json_free(d);
	return NULL;
}

void exl_json_free(struct exl_json_doc *d)
{
	if (!d)
		return;
	for (struct block *b = d->blocks, *n; b; b = n) {
		n = b->next;
		free(b);
	}
	free(d);
}

const struct exl_json *exl_json_root(const struct exl_json_doc *d)
{
	return d->root;
}

const struct exl_json *exl_json_get(const struct exl_json *obj, const char *key)
{
	size_t n = strlen(key);

	if (!obj || obj->type != EXL_JSON_OBJECT)
		return NULL;
	for (size_t i = 0; i < obj->n; i++)
		if (obj->key_lens[i] == n && !memcmp(obj->keys[i], key, n))
			return obj->v[i];
	return NULL;
}

const char *exl_json_type_name(enum exl_json_type t)
{
	static const char *const names[] = { "null", "boolean", "number", "string", "array",
					     "object" };

	return (unsigned)t < sizeof(names) / sizeof(names[0]) ? names[t] : "unknown";
}

bool exl_json_equal(const struct exl_json *a, const struct exl_json *b)
{
	if (a->type != b->type)
		return false;
	switch (a->type) {
	case EXL_JSON_NULL:
		return true;
	case EXL_JSON_BOOL:
		return a->b == b->b;
	case EXL_JSON_NUMBER:
		return a->num == b->num;
	case EXL_JSON_STRING:
		return a->len == b->len && !memcmp(a->str, b->str, a->len);
	case EXL_JSON_ARRAY:
		if (a->n != b->n)
			return false;
		for (size_t i = 0; i < a->n; i++)
			if (!exl_json_equal(a->v[i], b->v[i]))
				return false;
		return true;
	case EXL_JSON_OBJECT:
		if (a->n != b->n)
			return false;
		for (size_t i = 0; i < a->n; i++) {
			const struct exl_json *o = NULL;

			for (size_t j = 0; j < b->n && !o; j++)
				if (b->key_lens[j] == a->key_lens[i] &&
				    !memcmp(b->keys[j], a->keys[i], a->key_lens[i]))
					o = b->v[j];
			if (!o || !exl_json_equal(a->v[i], o))
				return false;
		}
		return true;
	}
	return false;
}

static void write_string(const char *s, size_t n, void (*put)(void *, const char *, size_t),
			 void *u)
{
	size_t run = 0;

	put(u, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[8];

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		put(u, s + run, i - run);
		run = i + 1;
		if (c == '"' || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			put(u, esc, 2);
		} else if (c == '\n') {
			put(u, "\\n", 2);
		} else if (c == '\t') {
			put(u, "\\t", 2);
		} else if (c == '\r') {
			put(u, "\\r", 2);
		} else {
			snprintf(esc, sizeof(esc), "\\u%04x", c);
			put(u, esc, 6);
		}
	}
	put(u, s + run, n - run);
	put(u, "\"", 1);
}

void exl_json_write(const struct exl_json *v, void (*put)(void *u, const char *s, size_t n),
		    void *u)
{
	switch (v->type) {
	case EXL_JSON_NULL:
		put(u, "null", 4);
		return;
	case EXL_JSON_BOOL:
		put(u, v->b ? "true" : "false", v->b ? 4 : 5);
		return;
	case EXL_JSON_NUMBER:
		put(u, v->str, v->len);
		return;
	case EXL_JSON_STRING:
		write_string(v->str, v->len, put, u);
		return;
	case EXL_JSON_ARRAY:
		put(u, "[", 1);
		for (size_t i = 0; i < v->n; i++) {
			if (i)
				put(u, ",", 1);
			exl_json_write(v->v[i], put, u);
		}
		put(u, "]", 1);
		return;
	case EXL_JSON_OBJECT:
		put(u, "{", 1);
		for (size_t i = 0; i < v->n; i++) {
			if (i)
				put(u, ",", 1);
			write_string(v->keys[i], v->key_lens[i], put, u);
			put(u, ":", 1);
			exl_json_write(v->v[i], put, u);
		}
		put(u, "}", 1);
		return;
	}
}

struct exl_json *exl_json_new(struct exl_json_doc *d, enum exl_json_type type, size_t n)
{
	struct exl_json *v = arena_alloc(d, sizeof(*v));

	if (!v)
		return NULL;
	memset(v, 0, sizeof(*v));
	v->type = type;
	if (type != EXL_JSON_ARRAY && type != EXL_JSON_OBJECT)
		return v;
	v->n = n;
	v->v = arena_alloc(d, (n + 1) * sizeof(*v->v));
	if (!v->v)
		return NULL;
	if (type == EXL_JSON_ARRAY)
		return v;
	v->keys = arena_alloc(d, (n + 1) * sizeof(*v->keys));
	v->key_lens = arena_alloc(d, (n + 1) * sizeof(*v->key_lens));
	if (!v->keys || !v->key_lens)
		return NULL;
	return v;
}
