/* Regular expression -> GBNF, for the common subset: literals and escapes
 * (\n \t \r \f \v \0 \xHH \uHHHH, any punctuation), classes with ranges
 * and negation, \d \w \s \D \W \S (ASCII), `.` (any character but \n),
 * alternation, groups ( ), (?: ), (?P<name> ), (?<name> ), the
 * quantifiers * + ? {m} {m,} {m,n} (and their lazy forms, which match
 * the same strings), and ^ / $ at the ends.  The whole output must match
 * (as Python's re.fullmatch).  Backreferences, lookaround, word
 * boundaries, flags and Unicode properties are errors.
 */
#ifndef EXL_REGEX_GRAMMAR_H
#define EXL_REGEX_GRAMMAR_H

#include <stddef.h>

struct exl_gbnf_out;

/* GBNF text with rule root matching the whole regex; malloc'ed,
 * NUL-terminated.  NULL with a message naming the offset. */
char *exl_regex_to_gbnf(const char *re, size_t len, char *err, size_t errlen);

/* For the JSON schema converter: appends rules to out whose rule `name`
 * matches the JSON string body (without the quotes) of text the regex
 * matches, escaping what JSON must escape.  Unanchored ends (JSON schema
 * patterns search) allow any string character there, through the schema
 * grammar's rule js-char.  0, or -1 with a message. */
int exl_regex_emit_json_body(struct exl_gbnf_out *out, const char *name, const char *re,
			     size_t len, char *err, size_t errlen);

#endif
