/* Insides of the JSON schema converter: json_schema.c walks the schema,
 * json_schema_object.c writes objects and arrays, json_schema_allof.c
 * merges allOf, json_schema_oneof.c proves oneOf branches exclusive,
 * json_schema_prim.c writes the fixed rules (whitespace,
 * strings, numbers, formats, any value) and the digit grammars of numeric
 * bounds. */
#ifndef EXL_JSON_SCHEMA_INTERNAL_H
#define EXL_JSON_SCHEMA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/core/grammar/grammar_emit.h"

struct exl_json;
struct exl_json_doc;

#define JS_NAME_LEN 48
#define JS_MAX_REF_CHAIN 64

/* Type bits; "number" is JS_T_NUM | JS_T_INT. */
enum {
	JS_T_NULL = 1, JS_T_BOOL = 2, JS_T_INT = 4, JS_T_NUM = 8, JS_T_STR = 16, JS_T_ARR = 32,
	JS_T_OBJ = 64, JS_T_ALL = 127,
};

/* A $ref target and its rule. */
struct js_ref {
	const struct exl_json *target;
	char name[JS_NAME_LEN];
};

/* One conversion. */
struct js_conv {
	struct exl_json_doc *doc;
	const struct exl_json *root;
	struct exl_gbnf_out o;          /* the rules written so far */
	struct js_ref *refs;
	size_t n_refs, cap_refs;
	char path[1024];                /* JSON pointer of the schema at hand */
	size_t plen;
	int depth;
	char *err;
	size_t errlen;
};

/* ---- json_schema.c ---- */

bool exl_js_is_annotation(const char *k);
bool exl_js_is_supported(const char *k);
/* Path segments (escaped ~0 ~1); push returns the length to pop back to. */
size_t exl_js_path_push(struct js_conv *c, const char *seg, size_t n);
size_t exl_js_path_push_str(struct js_conv *c, const char *seg);
size_t exl_js_path_push_index(struct js_conv *c, size_t i);
void exl_js_path_pop(struct js_conv *c, size_t old);
/* "at #PATH: message" into err; -1.  kfail names keyword kw's own path. */
__attribute__((format(printf, 2, 3)))
int exl_js_fail(struct js_conv *c, const char *fmt, ...);
__attribute__((format(printf, 3, 4)))
int exl_js_kfail(struct js_conv *c, const char *kw, const char *fmt, ...);
int exl_js_oom(struct js_conv *c);
/* v's compact JSON text as a literal; a key's JSON string as a literal. */
int exl_js_literal(struct js_conv *c, struct exl_gbnf_out *b, const struct exl_json *v);
int exl_js_key_literal(struct js_conv *c, struct exl_gbnf_out *b, const char *k, size_t n);
/* A non-negative integer keyword (kept when absent; capped at 1e9). */
int exl_js_get_count(struct js_conv *c, const struct exl_json *s, const char *kw, long *out);
int exl_js_type_bit(struct js_conv *c, const struct exl_json *v, unsigned *mask);
/* The types s allows: 'type' (a list too; plus null with nullable: true),
 * else the ones its keywords imply, else all. */
int exl_js_type_mask(struct js_conv *c, const struct exl_json *s, unsigned *mask);
/* A local JSON pointer ("#/...") into the schema. */
int exl_js_resolve(struct js_conv *c, const char *ref, const struct exl_json **out);
/* The index of a validation keyword of s not in allowed (NULL-ended), or -1. */
int exl_js_other_keyword(const struct exl_json *s, const char *const *allowed);
/* A fresh rule for s (named into name); at a path segment. */
int exl_js_gen(struct js_conv *c, const struct exl_json *s, char *name);
int exl_js_gen_at(struct js_conv *c, const struct exl_json *s, const char *seg, char *name);
/* The grammar expression for s into b (its parts' rules go to c->o). */
int exl_js_schema_body(struct js_conv *c, const struct exl_json *s, struct exl_gbnf_out *b);

/* ---- json_schema_object.c, json_schema_allof.c ---- */

int exl_js_array_body(struct js_conv *c, const struct exl_json *s, struct exl_gbnf_out *b);
int exl_js_object_body(struct js_conv *c, const struct exl_json *s, struct exl_gbnf_out *b);
int exl_js_all_of_body(struct js_conv *c, const struct exl_json *s, struct exl_gbnf_out *b);

/* ---- json_schema_oneof.c ---- */

/* 0 when the oneOf branches in list l provably exclude each other (no
 * value the grammar writes for one is valid under another), else -1
 * with a message at the oneOf saying which two may overlap and why. */
int exl_js_one_of_check(struct js_conv *c, const struct exl_json *l);

/* ---- json_schema_prim.c ---- */

/* The fixed rules every schema grammar has:
 *   js-ws js-char js-pchar js-string js-integer js-number js-boolean
 *   js-null js-value js-object js-array js-date js-time js-date-time
 *   js-uuid */
void exl_js_emit_fixed_rules(struct exl_gbnf_out *o);

/* The rule name of a supported string format, or NULL. */
const char *exl_js_format_rule(const char *format);

/* A bound: absent (infinite on its side) or a value, maybe exclusive. */
struct js_bound {
	bool set;
	double v;
	bool excl;
};

/* Appends a grammar expression for the integers (integer) or numbers
 * within lo..hi.  0, or -1 with a message in err when no value fits or a
 * bound is beyond 15 digits on the wrong side. */
int exl_js_emit_range(struct exl_gbnf_out *o, bool integer, struct js_bound lo, struct js_bound hi,
		      char *err, size_t errlen);

#endif
