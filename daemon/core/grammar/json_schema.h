/* JSON schema -> GBNF.
 *
 * Supported: type (also a list of types), properties, required,
 * additionalProperties (false / true / a schema), items, prefixItems,
 * minItems / maxItems, enum, const, anyOf / oneOf, allOf (merged when the
 * branches are object schemas that do not overlap), $ref to $defs /
 * definitions / any local JSON pointer (recursion allowed), string
 * minLength / maxLength / pattern / format (date, time, date-time, uuid),
 * integer minimum / maximum / exclusive bounds (exact), number bounds with
 * integral values (exact, without an exponent), nullable types.  Anything
 * else is an error naming the keyword and where it is ("at
 * /properties/age: keyword 'multipleOf' is not supported"), never
 * silently ignored.  docs/grammar.md says what is exact.
 *
 * The generated JSON has bounded whitespace (a space, or a newline and at
 * most 20 blanks of indentation, where JSON allows whitespace), so a model
 * cannot loop on it.  Objects keep the schema's property order.
 */
#ifndef EXL_JSON_SCHEMA_H
#define EXL_JSON_SCHEMA_H

#include <stddef.h>

/* Bounds on what the generated grammar spells out. */
#define EXL_SCHEMA_MAX_DIGITS 16     /* integer digits of an unbounded number */
#define EXL_SCHEMA_MAX_FRACTION 16   /* digits after the point */
#define EXL_SCHEMA_MAX_COUNT 10000   /* minLength / maxLength / minItems / maxItems */

/* The GBNF grammar (rule root) of the schema in len bytes of JSON text;
 * malloc'ed, NUL-terminated.  NULL with a message. */
char *exl_json_schema_to_gbnf(const char *text, size_t len, char *err, size_t errlen);

#endif
