/* A JSON string literal, for the --json output of exl and exld run. */
#ifndef EXL_JSON_STRING_H
#define EXL_JSON_STRING_H

#include <stddef.h>
#include <stdio.h>

/* Writes the n bytes at s as a JSON string literal; invalid UTF-8 becomes
 * U+FFFD, control bytes \uXXXX. */
void json_string(FILE *out, const char *s, size_t n);

#endif
