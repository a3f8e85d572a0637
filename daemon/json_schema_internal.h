/* Insides of the JSON schema converter: json_schema.c walks the schema,
 * json_schema_prim.c writes the fixed rules (whitespace, strings, numbers,
 * formats, any value) and the digit grammars of numeric bounds. */
#ifndef EXL_JSON_SCHEMA_INTERNAL_H
#define EXL_JSON_SCHEMA_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/grammar_emit.h"

/* The fixed rules every schema grammar has:
 *   js-ws js-char js-pchar js-string js-integer js-number js-boolean
 *   js-null js-value js-object js-array js-date js-time js-date-time
 *   js-uuid */
void js_emit_fixed_rules(struct exl_gbnf_out *o);

/* The rule name of a supported string format, or NULL. */
const char *js_format_rule(const char *format);

/* A bound: absent (infinite on its side) or a value, maybe exclusive. */
struct js_bound {
	bool set;
	double v;
	bool excl;
};

/* Appends a grammar expression for the integers (integer) or numbers
 * within lo..hi.  0, or -1 with a message in err when no value fits or a
 * bound is beyond 15 digits on the wrong side. */
int js_emit_range(struct exl_gbnf_out *o, bool integer, struct js_bound lo, struct js_bound hi,
		  char *err, size_t errlen);

#endif
