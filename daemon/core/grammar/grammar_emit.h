/* Writing GBNF text: what the JSON schema and regex converters build
 * their grammars with.  Allocation failure is sticky: check ->oom once at
 * the end. */
#ifndef EXL_GRAMMAR_EMIT_H
#define EXL_GRAMMAR_EMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct exl_gbnf_out {
	char *s;
	size_t len, cap;
	unsigned next_id;      /* for fresh rule names */
	bool oom;
};

void exl_gbnf_init(struct exl_gbnf_out *o);
void exl_gbnf_free(struct exl_gbnf_out *o);
/* Hands the text over (NULL when out of memory); o is emptied. */
char *exl_gbnf_take(struct exl_gbnf_out *o);

void exl_gbnf_put(struct exl_gbnf_out *o, const char *s, size_t n);
void exl_gbnf_puts(struct exl_gbnf_out *o, const char *s);
__attribute__((format(printf, 2, 3)))
void exl_gbnf_printf(struct exl_gbnf_out *o, const char *fmt, ...);

/* A "literal" for n bytes of UTF-8 (other bytes become \xHH, which means
 * the code point, so pass valid UTF-8). */
void exl_gbnf_literal(struct exl_gbnf_out *o, const char *s, size_t n);
/* One character as a literal. */
void exl_gbnf_char(struct exl_gbnf_out *o, uint32_t c);
/* A [class] of n code point ranges lo, hi (pairs), negated when asked. */
void exl_gbnf_class(struct exl_gbnf_out *o, const uint32_t *ranges, size_t n, bool negate);

/* A fresh rule name "base-N" into buf. */
void exl_gbnf_name(struct exl_gbnf_out *o, const char *base, char *buf, size_t buflen);

#endif
