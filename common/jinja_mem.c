/* The render's arena, growing strings, messages and the work count. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jinja.h"

struct jblock {
	struct jblock *next;
	size_t used, cap;
	max_align_t data[];
};

#define BLOCK_MIN (64u << 10)

int exl_jfail(struct jctx *c, unsigned line, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (c->errlen) {
		if (line)
			snprintf(c->err, c->errlen, "template: line %u: %s", line, msg);
		else
			snprintf(c->err, c->errlen, "template: %s", msg);
	}
	return -1;
}

int exl_jfail_raw(struct jctx *c, const char *msg, size_t n)
{
	if (c->errlen) {
		size_t k = n < c->errlen - 1 ? n : c->errlen - 1;

		memcpy(c->err, msg, k);
		c->err[exl_jt_fix_surrogates(c->err, k)] = 0;
	}
	return -1;
}

unsigned exl_jline(const struct jctx *c, size_t off)
{
	unsigned line = 1;
	size_t i;

	if (off > c->src_len)
		off = c->src_len;
	for (i = 0; i < off; i++)
		line += c->src[i] == '\n';
	/* the newlines trim_blocks took out were lines of the template */
	for (i = 0; i < c->n_nl_cut && c->nl_cut[i] <= off; i++)
		line++;
	return line;
}

void *exl_jalloc(struct jctx *c, size_t n)
{
	struct jblock *b = c->blocks;

	if (n > JINJA_MAX_MEMORY) {
		exl_jfail(c, 0, "over %u MiB of memory", JINJA_MAX_MEMORY >> 20);
		return NULL;
	}
	n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
	if (!n)
		n = sizeof(max_align_t);
	if (!b || b->cap - b->used < n) {
		size_t cap = n > BLOCK_MIN ? n : BLOCK_MIN;

		if (c->mem + cap > JINJA_MAX_MEMORY) {
			exl_jfail(c, 0, "over %u MiB of memory", JINJA_MAX_MEMORY >> 20);
			return NULL;
		}
		b = malloc(sizeof(*b) + cap);
		if (!b) {
			exl_jfail(c, 0, "out of memory");
			return NULL;
		}
		c->mem += cap;
		b->used = 0;
		b->cap = cap;
		b->next = c->blocks;
		c->blocks = b;
	}
	void *p = (char *)b->data + b->used;

	b->used += n;
	memset(p, 0, n);
	return p;
}

void *exl_jalloc_array(struct jctx *c, size_t n, size_t size)
{
	if (size && n > JINJA_MAX_MEMORY / size) {
		exl_jfail(c, 0, "over %u MiB of memory", JINJA_MAX_MEMORY >> 20);
		return NULL;
	}
	return exl_jalloc(c, n * size);
}

void exl_jarena_free(struct jctx *c)
{
	while (c->blocks) {
		struct jblock *next = c->blocks->next;

		free(c->blocks);
		c->blocks = next;
	}
	c->mem = 0;
}

int exl_jstep(struct jctx *c, uint64_t n)
{
	c->steps += n;
	if (c->steps > JINJA_MAX_STEPS)
		return exl_jfail(c, 0, "over %llu evaluation steps",
				 (unsigned long long)JINJA_MAX_STEPS);
	return 0;
}

char *exl_jstrdup(struct jctx *c, const char *s, size_t n)
{
	char *p = exl_jalloc(c, n + 1);

	if (p && n)
		memcpy(p, s, n);
	return p;
}

int exl_jbuf_put(struct jctx *c, struct jbuf *b, const char *s, size_t n)
{
	if (!n)
		return 0;
	if (n > JINJA_MAX_OUTPUT || b->n > JINJA_MAX_OUTPUT - n) {
		if (b->output)
			return exl_jfail(c, 0, "output over %u MiB", JINJA_MAX_OUTPUT >> 20);
		return exl_jfail(c, 0, "a string over %u MiB", JINJA_MAX_OUTPUT >> 20);
	}
	if (b->cap - b->n < n) {
		size_t cap = b->cap ? b->cap : 64;
		char *p;

		while (cap - b->n < n)
			cap *= 2;
		p = exl_jalloc(c, cap);
		if (!p)
			return -1;
		if (b->n)
			memcpy(p, b->p, b->n);
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	return 0;
}

int exl_jbuf_putc(struct jctx *c, struct jbuf *b, char ch)
{
	return exl_jbuf_put(c, b, &ch, 1);
}

int exl_jbuf_puts(struct jctx *c, struct jbuf *b, const char *s)
{
	return exl_jbuf_put(c, b, s, strlen(s));
}

int exl_jbuf_put_cp(struct jctx *c, struct jbuf *b, uint32_t cp)
{
	char u[4];
	size_t n;

	/* surrogates too: the generalized form keeps a lone half */
	if (cp < 0x80) {
		u[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (char)(0xC0 | cp >> 6);
		u[1] = (char)(0x80 | (cp & 0x3F));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (char)(0xE0 | cp >> 12);
		u[1] = (char)(0x80 | (cp >> 6 & 0x3F));
		u[2] = (char)(0x80 | (cp & 0x3F));
		n = 3;
	} else {
		u[0] = (char)(0xF0 | cp >> 18);
		u[1] = (char)(0x80 | (cp >> 12 & 0x3F));
		u[2] = (char)(0x80 | (cp >> 6 & 0x3F));
		u[3] = (char)(0x80 | (cp & 0x3F));
		n = 4;
	}
	return exl_jbuf_put(c, b, u, n);
}
