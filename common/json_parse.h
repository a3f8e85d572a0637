/* A small JSON parser (RFC 8259), for JSON schemas and HTTP bodies: a tree of values with
 * object keys in document order, bounded nesting, errors naming the line
 * and column.  Strings are decoded to UTF-8 (with NULs kept: use the
 * lengths); numbers keep their text as well as their value. */
#ifndef EXL_JSON_PARSE_H
#define EXL_JSON_PARSE_H

#include <stdbool.h>
#include <stddef.h>

#define EXL_JSON_MAX_DEPTH 128
#define EXL_JSON_MAX_TEXT (16u << 20)

enum exl_json_type {
	EXL_JSON_NULL,
	EXL_JSON_BOOL,
	EXL_JSON_NUMBER,
	EXL_JSON_STRING,
	EXL_JSON_ARRAY,
	EXL_JSON_OBJECT,
};

struct exl_json {
	enum exl_json_type type;
	bool b;
	double num;
	bool is_int;             /* a number written without fraction or exponent */
	const char *str;         /* string: decoded; number: its text (both NUL-terminated) */
	size_t len;
	size_t n;                /* array items / object members */
	struct exl_json **v;     /* their values */
	const char **keys;       /* object keys (decoded, NUL-terminated) */
	size_t *key_lens;
	size_t off;              /* byte offset of the value in the text */
};

struct exl_json_doc;

/* NULL with "line L, column C: ..." on malformed input. */
struct exl_json_doc *exl_json_parse(const char *text, size_t len, char *err, size_t errlen);
void exl_json_free(struct exl_json_doc *d);
const struct exl_json *exl_json_root(const struct exl_json_doc *d);

/* An object's member (the first with that key), or NULL. */
const struct exl_json *exl_json_get(const struct exl_json *obj, const char *key);

/* "null", "boolean", "number", "string", "array", "object". */
const char *exl_json_type_name(enum exl_json_type t);

/* Structural equality (numbers by value, objects by members). */
bool exl_json_equal(const struct exl_json *a, const struct exl_json *b);

/* Compact JSON text of v through put (numbers as written). */
void exl_json_write(const struct exl_json *v, void (*put)(void *u, const char *s, size_t n),
		    void *u);

/* A value built in d's memory (for merging schemas), zeroed but for its
 * type; arrays and objects get room for n members (v, and for objects
 * keys and key_lens; n is set).  Contents may be borrowed from elsewhere
 * in d or be static.  NULL when out of memory. */
struct exl_json *exl_json_new(struct exl_json_doc *d, enum exl_json_type type, size_t n);

#endif
