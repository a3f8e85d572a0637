/* JSON parsing, JSON schema -> grammar and regex -> grammar: what the
 * generated grammars accept and refuse, numeric bounds checked value by
 * value, dates day by day, and the errors (naming the keyword and the
 * schema path, the regex offset, the JSON line and column).
 *
 * A deterministic mutation fuzz of both front ends: mutated schemas and
 * regexes must compile or be refused with a message, and what compiles
 * must match texts the same fed whole or byte by byte, with masks that
 * agree with feeding.
 *
 *   test_json_schema [json|schema|schema_errors|numbers|dates|regex|regex_errors|fuzz]
 *                    [fuzz iterations per language]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/grammar/grammar.h"
#include "daemon/core/grammar/grammar_filter.h"
#include "daemon/core/grammar/grammar_internal.h"
#include "common/json_parse.h"
#include "daemon/core/grammar/json_schema.h"
#include "daemon/core/grammar/regex_grammar.h"
#include "daemon/core/grammar/vocab_trie.h"
#include "tests/common/check.h"

/* Under UBSan (the sanitizer build) undefined behaviour fails the test
 * rather than printing a line nobody reads. */
const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void)
{
	return "halt_on_error=1:print_stacktrace=1";
}

#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

static struct exl_grammar *compile(enum exl_constraint k, const char *text)
{
	char err[512];
	struct exl_grammar *g = exl_constraint_compile(k, text, strlen(text), err, sizeof(err));

	if (!g)
		DIE("%s does not compile: %s\n%s", exl_constraint_name(k), err, text);
	return g;
}

static int matches(const struct exl_grammar *g, const char *s)
{
	char err[256];
	struct exl_gmatch *m = exl_gmatch_create(g, err, sizeof(err));
	int r;

	if (!m)
		DIE("matcher: %s", err);
	r = exl_gmatch_feed(m, (const uint8_t *)s, strlen(s), err, sizeof(err));
	if (r == 1)
		r = exl_gmatch_complete(m);
	exl_gmatch_free(m);
	return r;
}

/* ---- JSON ---- */

static void put_buf(void *u, const char *s, size_t n)
{
	char *b = u;
	size_t have = strlen(b);

	if (have + n < 1024) {
		memcpy(b + have, s, n);
		b[have + n] = 0;
	}
}

static void case_json(void)
{
	static const struct {
		const char *text;
		const char *error;
	} bad[] = {
		{ "{\"a\":1,}", "line 1, column 8: expected a string key" },
		{ "[1,2", "line 1, column 1: unterminated array" },
		{ "{\"a\" 1}", "line 1, column 6: expected ':' after a key" },
		{ "\"abc", "line 1, column 1: unterminated string" },
		{ "01", "line 1, column 1: number with a leading zero" },
		{ "1.", "line 1, column 1: number with no digit after '.'" },
		{ "1e+", "line 1, column 1: number with no digit in its exponent" },
		{ "tru", "line 1, column 1: unexpected 't'" },
		{ "\"\\x\"", "line 1, column 2: unknown escape in a string" },
		{ "\"\\ud800\"", "line 1, column 2: high surrogate \\uD800 without its low half" },
		{ "\"\\udc00\"", "line 1, column 2: lone low surrogate \\uDC00" },
		{ "{\"a\":1,\"a\":2}", "line 1, column 8: duplicate key \"a\"" },
		{ "{}\n  x", "line 2, column 3: text after the JSON value" },
		{ "\"a\tb\"", "line 1, column 3: control character in a string (escape it)" },
		{ "\xff", "line 1, column 1: unexpected byte 0xFF" },
		{ "\"\xc3\"", "line 1, column 2: invalid UTF-8 in a string" },
		{ "", "line 1, column 1: expected a value, found the end of the text" },
		{ "[1 2]", "line 1, column 4: expected ',' or ']'" },
	};
	char err[256];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct exl_json_doc *d = exl_json_parse(bad[i].text, strlen(bad[i].text), err, sizeof(err));

		CHECK(!d && strstr(err, bad[i].error), "bad JSON %zu: got '%s', want '%s'", i,
		      d ? "(parsed)" : err, bad[i].error);
		exl_json_free(d);
	}
	/* Nesting is bounded. */
	char deep[300];

	memset(deep, '[', sizeof(deep) - 1);
	deep[sizeof(deep) - 1] = 0;
	struct exl_json_doc *d = exl_json_parse(deep, strlen(deep), err, sizeof(err));

	CHECK(!d && strstr(err, "nesting deeper than 128"), "deep: %s", err);
	exl_json_free(d);

	/* Values, decoding, order, and writing back. */
	const char *text = " {\"s\": \"a\\\"b\\\\c\\/\\n\\u00e9\\ud83d\\ude00\", \"n\": -12.5e2, "
			   "\"i\": 42, \"t\": true, \"f\": false, \"z\": null, \"a\": [1, [], {}]} ";

	d = exl_json_parse(text, strlen(text), err, sizeof(err));
	CHECK(d, "parse: %s", err);
	if (!d)
		return;
	const struct exl_json *r = exl_json_root(d);
	const struct exl_json *s = exl_json_get(r, "s"), *n = exl_json_get(r, "n");

	CHECK(r->type == EXL_JSON_OBJECT && r->n == 7 && !strcmp(r->keys[6], "a"), "object");
	CHECK(s && s->len == 13 && !memcmp(s->str, "a\"b\\c/\n\xc3\xa9\xf0\x9f\x98\x80", 13),
	      "string decoding");
	CHECK(n && n->num == -1250.0 && !n->is_int && !strcmp(n->str, "-12.5e2"), "number");
	CHECK(exl_json_get(r, "i")->is_int && exl_json_get(r, "i")->num == 42, "integer");
	CHECK(exl_json_get(r, "t")->b && !exl_json_get(r, "f")->b &&
	      exl_json_get(r, "z")->type == EXL_JSON_NULL, "literals");
	char out[1024] = "";

	exl_json_write(r, put_buf, out);
	CHECK(!strcmp(out, "{\"s\":\"a\\\"b\\\\c/\\n\xc3\xa9\xf0\x9f\x98\x80\",\"n\":-12.5e2,\"i\":42,"
		      "\"t\":true,\"f\":false,\"z\":null,\"a\":[1,[],{}]}"), "written: %s", out);
	struct exl_json_doc *d2 = exl_json_parse(out, strlen(out), err, sizeof(err));

	CHECK(d2 && exl_json_equal(exl_json_root(d2), r), "round trip");
	exl_json_free(d2);
	exl_json_free(d);
}

/* ---- schemas ---- */

static const char node_schema[] =
	"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
	"\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}]}},"
	"\"required\":[\"v\",\"next\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}";

static const char obj_schema[] =
	"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"},"
	"\"c\":{\"type\":\"boolean\"}},\"required\":[\"b\"],\"additionalProperties\":false}";

/* Values sharing prefixes, also inside a UTF-8 character (é è). */
#define ENUM_TREE \
	"{\"enum\":[\"ab\",\"abc\",\"abd\",\"a\\\"\",\"\xc3\xa9\",\"\xc3\xa9" "a\",1,10,null," \
	"[1,2],\"b\",\"ab\"]}"

/* allOf with the object closed where every property is declared. */
#define ALLOF_SCHEMA \
	"{\"properties\":{\"a\":true,\"b\":{}},\"additionalProperties\":false,\"allOf\":[" \
	"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}," \
	"{\"properties\":{\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}]}"

/* oneOf branches that provably exclude each other. */
#define ONEOF_TYPES \
	"{\"oneOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"integer\"}," \
	"{\"type\":\"null\"}]}"
#define ONEOF_RANGES \
	"{\"oneOf\":[{\"type\":\"number\",\"exclusiveMaximum\":0},{\"type\":\"integer\"," \
	"\"minimum\":0,\"maximum\":9},{\"type\":\"number\",\"minimum\":10}," \
	"{\"type\":\"string\",\"maxLength\":3},{\"type\":\"string\",\"minLength\":4}]}"
#define ONEOF_VALUES \
	"{\"oneOf\":[{\"enum\":[\"a\",\"b\",1]},{\"enum\":[\"c\",1.5,null]}," \
	"{\"type\":\"integer\",\"minimum\":2},{\"const\":\"x\"}]}"
#define ONEOF_TAGGED \
	"{\"oneOf\":[{\"properties\":{\"kind\":{\"const\":\"circle\"},\"r\":{\"type\":\"number\"}}," \
	"\"required\":[\"kind\",\"r\"],\"additionalProperties\":false}," \
	"{\"properties\":{\"kind\":{\"const\":\"square\"},\"side\":{\"type\":\"number\"}}," \
	"\"required\":[\"kind\",\"side\"],\"additionalProperties\":false}]}"
/* Open objects through $ref, the tag an enum in one branch. */
#define ONEOF_REFS \
	"{\"$defs\":{\"cat\":{\"type\":\"object\",\"properties\":{\"pet\":{\"const\":\"cat\"}," \
	"\"meow\":{\"type\":\"boolean\"}},\"required\":[\"pet\"]},\"dog\":{\"type\":\"object\"," \
	"\"properties\":{\"pet\":{\"enum\":[\"dog\",\"puppy\"]}},\"required\":[\"pet\"]}}," \
	"\"oneOf\":[{\"$ref\":\"#/$defs/cat\"},{\"$ref\":\"#/$defs/dog\"}]}"
/* A property one branch requires and the other does not allow. */
#define ONEOF_KEYS \
	"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}," \
	"\"required\":[\"a\"],\"additionalProperties\":false},{\"type\":\"object\"," \
	"\"properties\":{\"b\":{\"type\":\"integer\"}},\"required\":[\"b\"]," \
	"\"additionalProperties\":false}]}"
/* The tag required on one side only: objects of the other side that
 * leave it out are invalid under the side requiring it. */
#define ONEOF_ONE_TAG \
	"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"t\":{\"const\":\"a\"}}," \
	"\"required\":[\"t\"],\"additionalProperties\":false},{\"type\":\"object\"," \
	"\"properties\":{\"t\":{\"const\":\"b\"},\"u\":{\"type\":\"integer\"}}," \
	"\"additionalProperties\":false}]}"

static const struct {
	const char *schema;
	const char *doc;
	int want;
} schema_table[] = {
	{ "{\"type\":\"string\"}", "\"abc\"", 1 },
	{ "{\"type\":\"string\"}", "\"a\\nb\\u00e9\"", 1 },
	{ "{\"type\":\"string\"}", "\"a\nb\"", 0 },
	{ "{\"type\":\"string\"}", "\"\\ud800\"", 0 },
	{ "{\"type\":\"string\"}", "abc", 0 },
	{ "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"ab\"", 1 },
	{ "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"a\"", 0 },
	{ "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"abcd\"", 0 },
	{ "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"\xc3\xa9\xe2\x98\x83\"", 1 },
	{ "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"\\n\\t\\\"\"", 1 },
	{ "{\"type\":\"integer\"}", "0", 1 },
	{ "{\"type\":\"integer\"}", "-12", 1 },
	{ "{\"type\":\"integer\"}", "012", 0 },
	{ "{\"type\":\"integer\"}", "1.5", 0 },
	{ "{\"type\":\"integer\"}", "12345678901234567", 0 },
	{ "{\"type\":\"number\"}", "1.5e-3", 1 },
	{ "{\"type\":\"number\"}", "-0.0", 1 },
	{ "{\"type\":\"number\"}", "1.", 0 },
	{ "{\"type\":\"number\"}", ".5", 0 },
	{ "{\"type\":\"number\"}", "1e999", 0 },
	{ "{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "1.0", 1 },
	{ "{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "1e0", 0 },
	{ "{\"type\":\"boolean\"}", "false", 1 },
	{ "{\"type\":\"boolean\"}", "True", 0 },
	{ "{\"type\":\"null\"}", "null", 1 },
	{ "{\"type\":[\"string\",\"null\"]}", "null", 1 },
	{ "{\"type\":[\"string\",\"null\"]}", "\"x\"", 1 },
	{ "{\"type\":[\"string\",\"null\"]}", "1", 0 },
	{ "{\"type\":\"integer\",\"nullable\":true}", "null", 1 },
	{ "{\"enum\":[\"a\",1,null,{\"k\":[true]}]}", "\"a\"", 1 },
	{ "{\"enum\":[\"a\",1,null,{\"k\":[true]}]}", "null", 1 },
	{ "{\"enum\":[\"a\",1,null,{\"k\":[true]}]}", "{\"k\":[true]}", 1 },
	{ "{\"enum\":[\"a\",1,null,{\"k\":[true]}]}", "\"b\"", 0 },
	{ "{\"const\":\"x\\\"y\"}", "\"x\\\"y\"", 1 },
	{ ENUM_TREE, "\"ab\"", 1 },
	{ ENUM_TREE, "\"abc\"", 1 },
	{ ENUM_TREE, "\"abd\"", 1 },
	{ ENUM_TREE, "\"abe\"", 0 },
	{ ENUM_TREE, "\"a\"", 0 },
	{ ENUM_TREE, "\"a\\\"\"", 1 },
	{ ENUM_TREE, "\"\xc3\xa9\"", 1 },
	{ ENUM_TREE, "\"\xc3\xa9" "a\"", 1 },
	{ ENUM_TREE, "\"\xc3\xa8\"", 0 },
	{ ENUM_TREE, "10", 1 },
	{ ENUM_TREE, "1", 1 },
	{ ENUM_TREE, "100", 0 },
	{ ENUM_TREE, "null", 1 },
	{ ENUM_TREE, "[1,2]", 1 },
	{ ENUM_TREE, "[1]", 0 },
	{ "{\"type\":\"string\",\"enum\":[\"a\",1]}", "1", 0 },
	{ "{\"type\":\"string\",\"enum\":[\"a\",1]}", "\"a\"", 1 },
	{ obj_schema, "{\"b\":\"x\"}", 1 },
	{ obj_schema, "{\"a\":1,\"b\":\"x\"}", 1 },
	{ obj_schema, "{\"a\":1,\"b\":\"x\",\"c\":true}", 1 },
	{ obj_schema, "{\"b\":\"x\",\"c\":true}", 1 },
	{ obj_schema, "{\"a\":1}", 0 },
	{ obj_schema, "{}", 0 },
	{ obj_schema, "{\"b\":\"x\",\"a\":1}", 0 },
	{ obj_schema, "{\"b\":\"x\",\"d\":1}", 0 },
	{ obj_schema, "{ \"b\" : \"x\" }", 1 },
	{ obj_schema, "{\n  \"b\": \"x\",\n  \"c\": false\n}", 1 },
	{ obj_schema, "{\"b\":\"x\"  }", 0 },
	{ obj_schema, " {\"b\":\"x\"}", 1 },
	{ "{\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":false}", "{}", 1 },
	{ "{\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":false}", "{ }", 1 },
	{ "{\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":false}",
	  "{,\"a\":1}", 0 },
	{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}",
	  "{\"a\":1,\"zz\":[1,{}]}", 1 },
	{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}", "{\"zz\":\"q\"}", 1 },
	{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}", "{\"a\":1,\"a\":2}", 0 },
	{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}", "{\"ab\":2,\"\":3}", 1 },
	{ "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", "{\"x\":1,\"y\":2}", 1 },
	{ "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", "{\"x\":\"s\"}", 0 },
	{ "{\"type\":\"object\",\"required\":[\"id\"]}", "{\"id\":5}", 1 },
	{ "{\"type\":\"object\",\"required\":[\"id\"]}", "{}", 0 },
	{ "{\"type\":\"object\",\"properties\":{\"ab\":{\"type\":\"integer\"}},"
	  "\"additionalProperties\":{\"type\":\"string\"}}", "{\"ab\":1,\"a\":\"x\",\"abc\":\"y\"}", 1 },
	{ "{\"type\":\"object\",\"properties\":{\"ab\":{\"type\":\"integer\"}},"
	  "\"additionalProperties\":{\"type\":\"string\"}}", "{\"ab\":\"x\"}", 0 },
	{ "{\"type\":\"object\",\"properties\":{\"a\\\"b\":{\"const\":1}},\"required\":[\"a\\\"b\"],"
	  "\"additionalProperties\":false}", "{\"a\\\"b\":1}", 1 },
	{ "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}", "[1]", 1 },
	{ "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}", "[]", 0 },
	{ "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}",
	  "[1,2,3]", 1 },
	{ "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}",
	  "[1,2,3,4]", 0 },
	{ "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}",
	  "[ 1 , 2 ]", 1 },
	{ "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],"
	  "\"items\":false}", "[\"a\",1]", 1 },
	{ "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],"
	  "\"items\":false}", "[\"a\"]", 1 },
	{ "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],"
	  "\"items\":false}", "[]", 1 },
	{ "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],"
	  "\"items\":false}", "[\"a\",1,2]", 0 },
	{ "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],"
	  "\"items\":false}", "[1]", 0 },
	{ "{\"prefixItems\":[{\"const\":\"x\"}],\"items\":{\"type\":\"boolean\"},\"minItems\":2,"
	  "\"maxItems\":3}", "[\"x\",true]", 1 },
	{ "{\"prefixItems\":[{\"const\":\"x\"}],\"items\":{\"type\":\"boolean\"},\"minItems\":2,"
	  "\"maxItems\":3}", "[\"x\"]", 0 },
	{ "{\"prefixItems\":[{\"const\":\"x\"}],\"items\":{\"type\":\"boolean\"},\"minItems\":2,"
	  "\"maxItems\":3}", "[\"x\",true,false,true]", 0 },
	{ "{\"items\":[{\"type\":\"integer\"}],\"additionalItems\":false}", "[1]", 1 },
	{ "{\"items\":[{\"type\":\"integer\"}],\"additionalItems\":false}", "[1,2]", 0 },
	{ "{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}", "5", 1 },
	{ "{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}", "\"a\"", 1 },
	{ "{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}", "\"ab\"", 0 },
	{ "{\"oneOf\":[{\"type\":\"boolean\"},{\"type\":\"null\"}]}", "null", 1 },
	/* oneOf whose branches exclude each other: by type ... */
	{ ONEOF_TYPES, "\"ab\"", 1 },
	{ ONEOF_TYPES, "-3", 1 },
	{ ONEOF_TYPES, "null", 1 },
	{ ONEOF_TYPES, "\"abc\"", 0 },
	{ ONEOF_TYPES, "1.5", 0 },
	/* ... by range ... */
	{ ONEOF_RANGES, "-1.5", 1 },
	{ ONEOF_RANGES, "0", 1 },
	{ ONEOF_RANGES, "7", 1 },
	{ ONEOF_RANGES, "\"abcd\"", 1 },
	{ ONEOF_RANGES, "\"abc\"", 1 },
	/* ... by value ... */
	{ ONEOF_VALUES, "\"c\"", 1 },
	{ ONEOF_VALUES, "1", 1 },
	{ ONEOF_VALUES, "2", 1 },
	{ ONEOF_VALUES, "\"d\"", 0 },
	/* ... and objects told apart by a required property (no "type" needed:
	 * a branch that only implies objects never writes anything else) */
	{ ONEOF_TAGGED, "{\"kind\":\"circle\",\"r\":1}", 1 },
	{ ONEOF_TAGGED, "{\"kind\":\"square\",\"side\":2}", 1 },
	{ ONEOF_TAGGED, "{\"kind\":\"square\",\"r\":1}", 0 },
	{ ONEOF_REFS, "{\"pet\":\"cat\",\"meow\":true}", 1 },
	{ ONEOF_REFS, "{\"pet\":\"puppy\"}", 1 },
	{ ONEOF_REFS, "{\"pet\":\"cow\"}", 0 },
	{ ONEOF_KEYS, "{\"a\":1}", 1 },
	{ ONEOF_KEYS, "{\"b\":1}", 1 },
	{ ONEOF_KEYS, "{\"a\":1,\"b\":1}", 0 },
	{ ONEOF_ONE_TAG, "{\"t\":\"a\"}", 1 },
	{ ONEOF_ONE_TAG, "{}", 1 },
	{ ONEOF_ONE_TAG, "{\"t\":\"b\",\"u\":1}", 1 },
	{ ALLOF_SCHEMA, "{\"a\":1,\"b\":\"x\"}", 1 },
	{ ALLOF_SCHEMA, "{\"a\":1}", 0 },
	{ ALLOF_SCHEMA, "{\"a\":1,\"b\":\"x\",\"c\":2}", 0 },
	{ ALLOF_SCHEMA, "{\"a\":\"1\",\"b\":\"x\"}", 0 },
	/* A branch's closed object only lets its own properties through. */
	{ "{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":true},"
	  "\"additionalProperties\":false},{\"properties\":{\"b\":{\"type\":\"string\"},"
	  "\"c\":{\"type\":\"string\"}}}]}", "{\"a\":1,\"b\":\"x\"}", 1 },
	{ "{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":true},"
	  "\"additionalProperties\":false},{\"properties\":{\"b\":{\"type\":\"string\"},"
	  "\"c\":{\"type\":\"string\"}}}]}", "{\"a\":1,\"c\":\"x\"}", 0 },
	{ "{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":true},"
	  "\"additionalProperties\":false},{\"properties\":{\"b\":{\"type\":\"string\"},"
	  "\"c\":{\"type\":\"string\"}}}]}", "{\"b\":2}", 0 },
	{ "{\"allOf\":[{\"type\":\"number\"},{\"type\":\"integer\"}]}", "1.5", 0 },
	{ "{\"allOf\":[{\"type\":\"number\"},{\"type\":\"integer\"}]}", "7", 1 },
	{ node_schema, "{\"v\":1,\"next\":{\"v\":2,\"next\":null}}", 1 },
	{ node_schema, "{\"v\":1,\"next\":{\"v\":2}}", 0 },
	{ "{\"type\":\"array\",\"items\":{\"$ref\":\"#\"},\"maxItems\":2}", "[[],[[]]]", 1 },
	{ "{\"type\":\"array\",\"items\":{\"$ref\":\"#\"},\"maxItems\":2}", "[[],[],[]]", 0 },
	{ "{\"definitions\":{\"s\":{\"type\":\"string\"}},\"properties\":{\"x\":{\"$ref\":"
	  "\"#/definitions/s\",\"description\":\"d\"}},\"required\":[\"x\"],\"additionalProperties\":false}",
	  "{\"x\":\"y\"}", 1 },
	{ "{\"type\":\"string\",\"format\":\"date\"}", "\"2024-02-29\"", 1 },
	{ "{\"type\":\"string\",\"format\":\"date\"}", "\"2023-02-29\"", 0 },
	{ "{\"type\":\"string\",\"format\":\"time\"}", "\"23:59:59Z\"", 1 },
	{ "{\"type\":\"string\",\"format\":\"time\"}", "\"24:00:00Z\"", 0 },
	{ "{\"type\":\"string\",\"format\":\"time\"}", "\"12:00:00.123+05:30\"", 1 },
	{ "{\"type\":\"string\",\"format\":\"time\"}", "\"12:00:00\"", 0 },
	{ "{\"type\":\"string\",\"format\":\"date-time\"}", "\"2024-01-01T00:00:00Z\"", 1 },
	{ "{\"type\":\"string\",\"format\":\"date-time\"}", "\"2024-01-01 00:00:00Z\"", 0 },
	{ "{\"type\":\"string\",\"format\":\"uuid\"}", "\"123e4567-e89b-12d3-a456-426614174000\"", 1 },
	{ "{\"type\":\"string\",\"format\":\"uuid\"}", "\"123e4567e89b12d3a456426614174000\"", 0 },
	{ "{\"type\":\"string\",\"pattern\":\"^[a-z]+$\"}", "\"abc\"", 1 },
	{ "{\"type\":\"string\",\"pattern\":\"^[a-z]+$\"}", "\"ab1\"", 0 },
	{ "{\"type\":\"string\",\"pattern\":\"ab\"}", "\"xxabyy\"", 1 },
	{ "{\"type\":\"string\",\"pattern\":\"ab\"}", "\"xy\"", 0 },
	{ "{\"type\":\"string\",\"pattern\":\"^a\\\"b\\\\\\\\$\"}", "\"a\\\"b\\\\\"", 1 },
	{ "{\"type\":\"string\",\"pattern\":\"^a\\\\sb$\"}", "\"a\\nb\"", 1 },
	{ "{\"type\":\"string\",\"pattern\":\"^\\\\d{3}$\"}", "\"123\"", 1 },
	{ "{\"properties\":{\"a\":{\"const\":1}},\"required\":[\"a\"]}", "{\"a\":1}", 1 },
	{ "{\"properties\":{\"a\":{\"const\":1}},\"required\":[\"a\"]}", "1", 0 },
	{ "{}", "[1,{\"a\":null}]", 1 },
	{ "true", "\"anything\"", 1 },
	{ "{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":3}", "0", 0 },
	{ "{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":3}", "2", 1 },
	{ "{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":3}", "3", 0 },
	{ "{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":true}", "0", 0 },
	{ "{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":true}", "1", 1 },
	{ "{\"type\":\"array\",\"uniqueItems\":false,\"maxItems\":0}", "[]", 1 },
	{ "{\"type\":\"string\",\"maxLength\":1e300}", "\"abc\"", 1 },
	{ "{\"type\":\"integer\",\"maximum\":1e300,\"minimum\":-1e300}", "-42", 1 },
	{ "{\"title\":\"t\",\"description\":\"d\",\"x-vendor\":1,\"$schema\":\"s\",\"type\":\"null\"}",
	  "null", 1 },
};

static void case_schema(void)
{
	for (size_t i = 0; i < sizeof(schema_table) / sizeof(schema_table[0]); i++) {
		struct exl_grammar *g = compile(EXL_CONSTRAINT_JSON_SCHEMA, schema_table[i].schema);
		int r = matches(g, schema_table[i].doc);

		CHECK(r == schema_table[i].want, "schema %zu: '%s' gives %d, want %d", i,
		      schema_table[i].doc, r, schema_table[i].want);
		exl_grammar_free(g);
	}
}

static const struct {
	const char *schema;
	const char *error;
} schema_errors[] = {
	{ "{\"type\":\"string\",\"format\":\"email\"}",
	  "at #/format: format 'email' is not supported (date, time, date-time and uuid are)" },
	{ "{\"type\":\"integer\",\"multipleOf\":2}", "at #/multipleOf: keyword 'multipleOf' is not supported" },
	{ "{\"properties\":{\"a\":{\"not\":{}}}}", "at #/properties/a/not: keyword 'not' is not supported" },
	{ "{\"$ref\":\"http://x/y\"}",
	  "at #/$ref: $ref 'http://x/y': only references within this schema (starting with '#') "
	  "are supported" },
	{ "{\"$defs\":{},\"$ref\":\"#/$defs/missing\"}",
	  "at #/$ref: $ref '#/$defs/missing' does not resolve ('missing' is not there)" },
	{ "{\"$ref\":\"#node\"}", "only JSON pointers (#/...) are supported, not anchors" },
	{ "{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},"
	  "\"$ref\":\"#/$defs/a\"}", "$ref chain longer than 64" },
	{ "{\"type\":\"foo\"}", "at #/type: unknown type 'foo'" },
	{ "{\"type\":\"object\",\"required\":[\"x\"],\"additionalProperties\":false}",
	  "at #/required: required property 'x' is not in properties and additionalProperties is false" },
	{ "{\"type\":\"array\",\"uniqueItems\":true}", "at #/uniqueItems: uniqueItems: true is not supported" },
	{ "{\"type\":\"string\",\"pattern\":\"(a\"}",
	  "at #/pattern: at offset 0: '(' without a matching ')'" },
	{ "{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":3}",
	  "at #/pattern: 'pattern' together with minLength/maxLength is not supported" },
	{ "{\"enum\":[1,2],\"minimum\":1}", "at #/minimum: 'enum' together with 'minimum' is not supported" },
	{ "{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}",
	  "at #: no integer lies within the minimum and maximum" },
	{ "{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}",
	  "at #/allOf: allOf: the branches allow no common type" },
	{ "{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"string\"}}},{\"properties\":{\"a\":"
	  "{\"type\":\"integer\"}}}]}",
	  "at #/allOf: allOf: property 'a' has different schemas in two branches" },
	{ "{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}],"
	  "\"additionalProperties\":false}", "at #/allOf: allOf: property 'a' is required, but a branch "
	  "with additionalProperties: false does not declare it" },
	{ "{\"allOf\":[{\"not\":{}}]}", "at #/allOf/0/not: keyword 'not' is not supported" },
	{ "false", "at #: the schema false allows no value" },
	{ "[1]", "at #: a schema must be an object or a boolean, not an array" },
	{ "{", "the schema is not valid JSON: line 1, column 2: expected a string key" },
	{ "{\"anyOf\":[]}", "at #/anyOf: 'anyOf' must be a non-empty list of schemas" },
	{ "{\"type\":\"string\",\"minLength\":20000}", "at #/minLength: minLength above 10000 is not supported" },
	{ "{\"items\":{\"type\":\"string\",\"format\":\"ipv4\"}}",
	  "at #/items/format: format 'ipv4' is not supported" },
	{ "{\"properties\":{\"a/b~c\":{\"type\":\"x\"}}}", "at #/properties/a~1b~0c/type: unknown type 'x'" },
	{ "{\"type\":\"integer\",\"minimum\":1e20}", "at #: a minimum beyond 15 digits is not supported" },
	{ "{\"$defs\":{\"n\":{\"type\":\"integer\",\"multipleOf\":3}},\"properties\":{\"x\":"
	  "{\"$ref\":\"#/$defs/n\"}}}", "at #/$defs/n/multipleOf: keyword 'multipleOf' is not supported" },
	{ "{\"type\":\"object\",\"patternProperties\":{}}",
	  "at #/patternProperties: keyword 'patternProperties' is not supported" },
	{ "{\"if\":{},\"then\":{}}", "at #/if: keyword 'if' is not supported" },
	{ "{\"anyOf\":[{\"type\":\"string\"}],\"minLength\":1}",
	  "at #/minLength: 'anyOf' together with 'minLength' is not supported" },
	{ "{\"$ref\":\"#/$defs/a\",\"minimum\":1,\"$defs\":{\"a\":{}}}",
	  "at #/minimum: '$ref' together with 'minimum' is not supported" },
	{ "{\"type\":\"string\",\"minLength\":-1}", "at #/minLength: 'minLength' must be a non-negative integer" },
	{ "{\"type\":\"string\",\"minLength\":1e300}", "at #/minLength: minLength above 10000 is not supported" },
	{ "{\"type\":\"array\",\"maxItems\":1.5}", "at #/maxItems: 'maxItems' must be a non-negative integer" },
	{ "{\"prefixItems\":[{\"type\":\"integer\"}],\"items\":false,\"minItems\":2}",
	  "at #/maxItems: the array cannot hold minItems items" },
	{ "{\"type\":\"number\",\"minimum\":0.2,\"maximum\":0.8}",
	  "at #: no number lies within the minimum and maximum" },
	/* oneOf branches that may overlap: a value matching two is invalid. */
	{ "{\"oneOf\":[{\"type\":\"integer\",\"minimum\":0,\"maximum\":50},{\"type\":\"number\","
	  "\"minimum\":0,\"maximum\":50}]}",
	  "at #/oneOf: branches 0 and 1 may both match one value (both allow integers)" },
	{ "{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"string\",\"maxLength\":3}]}",
	  "at #/oneOf: branches 0 and 1 may both match one value (both allow strings)" },
	{ "{\"oneOf\":[{\"type\":\"integer\",\"maximum\":0},{\"type\":\"integer\",\"minimum\":0}]}",
	  "at #/oneOf: branches 0 and 1 may both match one value (both allow integers)" },
	{ "{\"oneOf\":[{\"enum\":[\"a\",\"b\"]},{\"type\":\"null\"},{\"enum\":[\"b\",\"c\"]}]}",
	  "at #/oneOf: branches 0 and 2 may both match one value (both allow \"b\")" },
	/* A branch without "type" allows every string (properties constrain
	 * only objects), so a string of the other branch matches both. */
	{ "{\"oneOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}}},{\"type\":\"string\"}]}",
	  "at #/oneOf: branches 0 and 1 may both match one value (both allow strings)" },
	{ "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"integer\"}},"
	  "\"required\":[\"k\"]},{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"number\"}},"
	  "\"required\":[\"k\"]}]}",
	  "at #/oneOf: branches 0 and 1 may both match one value (both allow objects, and no "
	  "property tells them apart)" },
	{ "{\"properties\":{\"x\":{\"oneOf\":[{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]},"
	  "{\"type\":\"null\"}]}}}",
	  "at #/properties/x/oneOf: branches 0 and 1 may both match one value (both allow null)" },
	{ "{\"oneOf\":[true,{\"type\":\"null\"}]}",
	  "at #/oneOf: branches 0 and 1 may both match one value (both allow null)" },
};

static void case_schema_errors(void)
{
	for (size_t i = 0; i < sizeof(schema_errors) / sizeof(schema_errors[0]); i++) {
		char err[512] = "";
		const char *s = schema_errors[i].schema;
		char *g = exl_json_schema_to_gbnf(s, strlen(s), err, sizeof(err));

		CHECK(!g && strstr(err, schema_errors[i].error), "schema error %zu: got '%s', want '%s'",
		      i, g ? "(converted)" : err, schema_errors[i].error);
		free(g);
	}
	/* Through the filter's entry point the message names the constraint. */
	char err[512];
	const char *s = "{\"type\":\"integer\",\"multipleOf\":2}";
	struct exl_grammar *g = exl_constraint_compile(EXL_CONSTRAINT_JSON_SCHEMA, s, strlen(s), err,
						       sizeof(err));

	CHECK(!g && strstr(err, "multipleOf"), "constraint: %s", err);
	exl_grammar_free(g);
	/* $refs that make rules the GBNF compiler refuses, said in the
	 * schema's terms (found by json_schema_fuzz). */
	static const struct {
		const char *schema;
		const char *error;
	} loops[] = {
		{ "{\"type\":\"array\",\"items\":{\"$ref\":\"#\"},\"minItems\":2}",
		  "the schema allows no finite value (its $refs recurse with no way out); the "
		  "generated grammar does not compile: rule 'v-" },
		{ "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"next\":{\"$ref\":"
		  "\"#/$defs/n\"}},\"required\":[\"next\"]}},\"$ref\":\"#/$defs/n\"}",
		  "the schema allows no finite value" },
		{ "{\"anyOf\":[{\"type\":\"null\"},{\"$ref\":\"#\"}]}",
		  "a $ref comes back to itself before anything is written, which is not supported; "
		  "the generated grammar does not compile: rule 'v-" },
	};

	for (size_t i = 0; i < sizeof(loops) / sizeof(loops[0]); i++) {
		err[0] = 0;
		g = exl_constraint_compile(EXL_CONSTRAINT_JSON_SCHEMA, loops[i].schema,
					   strlen(loops[i].schema), err, sizeof(err));
		CHECK(!g && strstr(err, loops[i].error), "loop %zu: got '%s', want '%s'", i,
		      g ? "(compiled)" : err, loops[i].error);
		exl_grammar_free(g);
	}
}

/* ---- numbers, value by value ---- */

static void case_numbers(void)
{
	static const struct {
		const char *bounds;
		double lo, hi;
		bool lo_excl, hi_excl;
	} ints[] = {
		{ "\"minimum\":-5,\"maximum\":17", -5, 17, false, false },
		{ "\"minimum\":0,\"maximum\":1000", 0, 1000, false, false },
		{ "\"minimum\":17,\"maximum\":234", 17, 234, false, false },
		{ "\"minimum\":-1000,\"maximum\":-99", -1000, -99, false, false },
		{ "\"minimum\":100", 100, 1e300, false, false },
		{ "\"maximum\":-3", -1e300, -3, false, false },
		{ "\"exclusiveMinimum\":-10,\"exclusiveMaximum\":10", -10, 10, true, true },
		{ "\"minimum\":1.5,\"maximum\":9.5", 1.5, 9.5, false, false },
		{ "\"minimum\":999,\"maximum\":1001", 999, 1001, false, false },
	};

	for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
		char schema[256], num[32];

		snprintf(schema, sizeof(schema), "{\"type\":\"integer\",%s}", ints[i].bounds);
		struct exl_grammar *g = compile(EXL_CONSTRAINT_JSON_SCHEMA, schema);

		for (int v = -1200; v <= 1200; v++) {
			bool in = (ints[i].lo_excl ? v > ints[i].lo : v >= ints[i].lo) &&
				  (ints[i].hi_excl ? v < ints[i].hi : v <= ints[i].hi);

			snprintf(num, sizeof(num), "%d", v);
			if (matches(g, num) != in) {
				CHECK(0, "%s: %d gives %d", schema, v, !in);
				break;
			}
		}
		CHECK(!matches(g, "-0") || ints[i].lo <= -1, "%s: -0", schema);
		exl_grammar_free(g);
	}
	static const struct {
		const char *bounds;
		double lo, hi;
		bool lo_excl, hi_excl;
	} nums[] = {
		{ "\"minimum\":0,\"maximum\":1", 0, 1, false, false },
		{ "\"minimum\":-3,\"maximum\":12", -3, 12, false, false },
		{ "\"exclusiveMinimum\":0,\"exclusiveMaximum\":10", 0, 10, true, true },
		{ "\"exclusiveMinimum\":-4,\"maximum\":-1", -4, -1, true, false },
		{ "\"minimum\":-2,\"exclusiveMaximum\":0", -2, 0, false, true },
		{ "\"minimum\":5", 5, 1e300, false, false },
		{ "\"exclusiveMaximum\":-5", -1e300, -5, false, true },
		{ "\"minimum\":0.5,\"maximum\":7.25", 1, 7, false, false },
	};

	for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
		char schema[256], num[32];

		snprintf(schema, sizeof(schema), "{\"type\":\"number\",%s}", nums[i].bounds);
		struct exl_grammar *g = compile(EXL_CONSTRAINT_JSON_SCHEMA, schema);

		/* quarters from -16 to 16, written as I, I.F and I.F0 */
		for (int q = -64; q <= 64; q++) {
			double v = q / 4.0;
			bool in = (nums[i].lo_excl ? v > nums[i].lo : v >= nums[i].lo) &&
				  (nums[i].hi_excl ? v < nums[i].hi : v <= nums[i].hi);
			const char *forms[] = { "%.0f", "%.2f", "%.3f", "%.1f" };

			for (int f = 0; f < 4; f++) {
				if (f == 0 && q % 4)
					continue;
				snprintf(num, sizeof(num), forms[f], v);
				if (!strcmp(num, "-0") || !strcmp(num, "-0.00") || !strcmp(num, "-0.000") ||
				    !strcmp(num, "-0.0"))
					continue;
				if (f == 3 && q % 2)
					continue;
				if (matches(g, num) != in)
					CHECK(0, "%s: %s gives %d", schema, num, !in);
			}
		}
		exl_grammar_free(g);
	}
}

/* ---- dates, day by day ---- */

static bool leap(int y)
{
	return (y % 4 == 0 && y % 100) || y % 400 == 0;
}

static void case_dates(void)
{
	static const int mdays[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	static const int years[] = { 0, 1, 4, 100, 400, 1900, 1999, 2000, 2023, 2024, 2100, 9996, 9999 };
	struct exl_grammar *g = compile(EXL_CONSTRAINT_JSON_SCHEMA,
					"{\"type\":\"string\",\"format\":\"date\"}");

	for (size_t i = 0; i < sizeof(years) / sizeof(years[0]); i++) {
		int y = years[i];

		for (int m = 0; m <= 13; m++) {
			for (int d = 0; d <= 32; d++) {
				char s[32];
				bool valid = y >= 1 && m >= 1 && m <= 12 && d >= 1 &&
					     d <= mdays[(m + 11) % 12] + (m == 2 && leap(y));

				snprintf(s, sizeof(s), "\"%04d-%02d-%02d\"", y, m, d);
				if (matches(g, s) != valid)
					CHECK(0, "date %s gives %d", s, !valid);
			}
		}
	}
	exl_grammar_free(g);
}

/* ---- regex ---- */

/* Expectations as Python's re.fullmatch gives them, except where noted. */
static const struct {
	const char *re;
	const char *text;
	int want;
} regex_table[] = {
	{ "abc", "abc", 1 },
	{ "abc", "abcd", 0 },
	{ "^a.c$", "a\nc", 0 },
	{ "^a.c$", "a\xe2\x98\x83" "c", 1 },
	{ "[^\\d]+", "ab", 1 },
	{ "[^\\d]+", "a1", 0 },
	/* Python matches this; ours is ASCII where a negated set holds \d. */
	{ "[^\\d]+", "\xc3\xa9", 0 },
	{ "[^0-9]+", "\xc3\xa9", 1 },
	{ "\\d{2,3}-\\w+", "123-ab_9", 1 },
	{ "\\d{2,3}-\\w+", "1-ab", 0 },
	{ "(ab|cd)*e", "abcdabe", 1 },
	{ "(ab|cd)*e", "abce", 0 },
	{ "colou?r", "color", 1 },
	{ "a{2}", "aa", 1 },
	{ "a{2}", "aaa", 0 },
	{ "a{2,}", "aaaa", 1 },
	{ "a{,2}", "", 1 },
	{ "a{,2}", "aaa", 0 },
	{ "x{", "x{", 1 },
	{ "x{a}", "x{a}", 1 },
	{ "a|b|", "", 1 },
	{ "(?:a|b)+(?P<n>c)", "abac", 1 },
	/* PCRE's spelling of a named group (Python wants (?P<n>...)). */
	{ "(?<n>a)b", "ab", 1 },
	{ "[\\]a-]+", "]-a", 1 },
	{ "[]a]", "]", 1 },
	{ "\\x41\\u00e9", "A\xc3\xa9", 1 },
	{ "[\\s]+", "\t\n ", 1 },
	{ "\\.\\*\\+", ".*+", 1 },
	{ "a.*?b", "axxb", 1 },
	{ "\\Aab\\Z", "ab", 1 },
	{ "[^a]", "\n", 1 },
	{ ".", "\n", 0 },
	{ "\\W", "_", 0 },
	{ "\\W", "-", 1 },
	/* Python matches this; our \S is ASCII. */
	{ "\\S+", "a\xc3\xa9", 0 },
	{ "[a-c\\d]{3}", "a1c", 1 },
	{ "^$", "", 1 },
	{ "(a|b)(c|d)?", "a", 1 },
	{ "[\\b]", "\b", 1 },
	{ "\\0", "", 0 },
	{ "}", "}", 1 },
};

static void case_regex(void)
{
	for (size_t i = 0; i < sizeof(regex_table) / sizeof(regex_table[0]); i++) {
		struct exl_grammar *g = compile(EXL_CONSTRAINT_REGEX, regex_table[i].re);
		int r = matches(g, regex_table[i].text);

		CHECK(r == regex_table[i].want, "regex %zu /%s/: '%s' gives %d, want %d", i,
		      regex_table[i].re, regex_table[i].text, r, regex_table[i].want);
		exl_grammar_free(g);
	}
}

static const struct {
	const char *re;
	const char *error;
} regex_errors[] = {
	{ "(a", "at offset 0: '(' without a matching ')'" },
	{ "a)", "at offset 1: ')' without a matching '('" },
	{ "(a)\\1", "at offset 3: backreferences (\\1) are not supported" },
	{ "(?=a)", "at offset 0: lookaround assertions are not supported" },
	{ "(?<!a)b", "at offset 0: lookaround assertions are not supported" },
	{ "(?P=n)", "at offset 0: backreferences ((?P=name)) are not supported" },
	{ "\\bfoo", "at offset 0: word boundaries (\\b) are not supported" },
	{ "a**", "at offset 2: multiple repeat" },
	{ "*a", "at offset 0: '*' has nothing before it to repeat" },
	{ "(?i)a", "at offset 0: group flags and extensions '(?i' are not supported" },
	{ "a{3,1}", "at offset 1: repetition {3,1} has its maximum below its minimum" },
	{ "[z-a]", "at offset 2: range out of order" },
	{ "[a", "at offset 0: unterminated character class" },
	{ "a^b", "at offset 1: '^' is supported only at the start of the pattern" },
	{ "a$b", "at offset 2: '$' is supported only at the end of the pattern" },
	{ "(a*)*", "at offset 4: repeating something that can match the empty string is not supported" },
	{ "\\p{L}", "at offset 0: escape '\\p' is not supported" },
	{ "a{1,99999}", "at offset 1: repetition count over the limit of 10000" },
	/* counts far beyond a long (found by fuzz_grammar: signed overflow) */
	{ "a{99999999999999999999999}", "at offset 1: repetition count over the limit of 10000" },
	{ "a{1,99999999999999999999999}", "at offset 1: repetition count over the limit of 10000" },
	{ "[[:alpha:]]", "at offset 1: POSIX classes ([:alpha:]) are not supported" },
	{ "a*+", "at offset 2: possessive quantifiers are not supported" },
	{ "\\", "at offset 0: '\\' at the end of the pattern" },
	{ "\\x4g", "at offset 0: '\\x' wants 2 hex digits" },
	{ "[\\d-z]", "at offset 3: a range cannot start or end with a class shorthand" },
	{ "[a-\\d]", "at offset 2: a range cannot start or end with a class shorthand" },
	{ "\xff", "at offset 0: invalid UTF-8 in the pattern" },
};

static void case_regex_errors(void)
{
	for (size_t i = 0; i < sizeof(regex_errors) / sizeof(regex_errors[0]); i++) {
		char err[512] = "";
		const char *re = regex_errors[i].re;
		char *g = exl_regex_to_gbnf(re, strlen(re), err, sizeof(err));

		CHECK(!g && strstr(err, regex_errors[i].error), "regex error %zu /%s/: got '%s', want '%s'",
		      i, re, g ? "(converted)" : err, regex_errors[i].error);
		free(g);
	}
}

/* ---- fuzz: mutated schemas and regexes ---- */

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static size_t below(size_t n)
{
	return n ? (size_t)(next_rand() % n) : 0;
}

/* Bytes that mean something to a schema's JSON or to a regex. */
static const char fuzz_chars[] = "{}[]\":,0123456789-.eE+tfnul\\/ab$#()|*+?^{}xdwsSDW\xc3\xa9";

/* The vocabulary the masks are computed over: ASCII, JSON punctuation,
 * whole and partial UTF-8 characters. */
static const char *const fuzz_tokens[] = {
	"a", "b", "z", "0", "1", "7", " ", "\n", "\"", "\\", "{", "}", "[", "]", ",", ":", "-",
	".", "e", "true", "false", "null", "ab", "\":", "\"a\"", "12", "\xc3\xa9", "\xc3", "\xa9",
	"\xe2\x98\x83", "\xf0\x9f\x98\x80", "\xff", "T", "@", "x1", "  ", "\\n", "\\u00",
};
#define N_FUZZ_TOK (sizeof(fuzz_tokens) / sizeof(fuzz_tokens[0]))

/* Up to 4 edits of src: byte flips (to a meaningful byte or any byte),
 * insertions (of a byte or a run of digits), deletions of a run, and
 * splices of a run of another input of the corpus. */
static char *mutate(const char *src, const char *const *corpus, size_t n_corpus, size_t *out_len)
{
	size_t n = strlen(src), cap = n * 2 + 256;
	char *s = malloc(cap);
	int edits = 1 + (int)below(4);

	if (!s)
		DIE("out of memory");
	memcpy(s, src, n);
	for (int e = 0; e < edits; e++) {
		size_t at = below(n + 1);

		switch (below(7)) {
		case 6: { /* insert a run of digits: counts, bounds, lengths */
			size_t k = 1 + below(24);

			if (n + k >= cap)
				break;
			memmove(s + at + k, s + at, n - at);
			for (size_t i = 0; i < k; i++)
				s[at + i] = (char)('0' + below(10));
			n += k;
			break;
		}
		case 0: /* flip to a meaningful byte */
			if (at < n)
				s[at] = fuzz_chars[below(sizeof(fuzz_chars) - 1)];
			break;
		case 1: /* flip to any byte */
			if (at < n)
				s[at] = (char)below(256);
			break;
		case 2: /* insert one */
			if (n + 1 < cap) {
				memmove(s + at + 1, s + at, n - at);
				s[at] = fuzz_chars[below(sizeof(fuzz_chars) - 1)];
				n++;
			}
			break;
		case 3: { /* delete a run */
			size_t k = below(10);

			if (k > n - at)
				k = n - at;
			memmove(s + at, s + at + k, n - at - k);
			n -= k;
			break;
		}
		default: { /* splice in a run of another input, maybe over one of ours */
			const char *o = corpus[below(n_corpus)];
			size_t on = strlen(o), from = below(on), k = below(on - from + 1), del = 0;

			if (below(2))
				del = below(n - at + 1);
			if (n - del + k >= cap)
				break;
			memmove(s + at + k, s + at + del, n - at - del);
			memcpy(s + at, o + from, k);
			n = n - del + k;
			break;
		}
		}
	}
	*out_len = n;
	return s;
}

/* ---- structural mutations of a schema: most byte edits of JSON text
 * only reach the JSON parser's errors ---- */

struct jbuf {
	char *s;
	size_t n, cap;
};

static void put_jbuf(void *u, const char *s, size_t n)
{
	struct jbuf *b = u;

	if (b->n + n + 1 > b->cap) {
		size_t cap = (b->n + n + 1) * 2;
		char *p = realloc(b->s, cap);

		if (!p)
			DIE("out of memory");
		b->s = p;
		b->cap = cap;
	}
	memcpy(b->s + b->n, s, n);
	b->n += n;
	b->s[b->n] = 0;
}

/* Every slot holding a value (the root's is the first), and every key. */
struct jslots {
	struct exl_json **v[512];
	struct exl_json *parent[512];
	size_t idx[512], n;
};

static void collect(struct jslots *sl, struct exl_json **where, struct exl_json *parent, size_t idx)
{
	struct exl_json *v = *where;

	if (sl->n == 512)
		return;
	sl->v[sl->n] = where;
	sl->parent[sl->n] = parent;
	sl->idx[sl->n++] = idx;
	if (v->type == EXL_JSON_ARRAY || v->type == EXL_JSON_OBJECT)
		for (size_t i = 0; i < v->n; i++)
			collect(sl, &v->v[i], v, i);
}

static const char *const fuzz_keywords[] = {
	"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "nullable", "properties",
	"required", "additionalProperties", "items", "prefixItems", "additionalItems", "minItems",
	"maxItems", "uniqueItems", "minLength", "maxLength", "pattern", "format", "minimum",
	"maximum", "exclusiveMinimum", "exclusiveMaximum", "$defs", "definitions", "title", "not",
	"a", "b", "kind",
};

static const char *const fuzz_scalars[] = {
	"0", "1", "2", "-1", "2.5", "1e300", "10001", "-0.5", "\"string\"", "\"integer\"",
	"\"number\"", "\"object\"", "\"array\"", "\"null\"", "\"boolean\"", "\"#\"",
	"\"#/$defs/node\"", "\"date\"", "\"uuid\"", "\"^a+$\"", "\"a\"", "true", "false", "null",
	"[]", "{}", "[\"a\"]", "{\"type\":\"string\"}",
};

/* The donors of subtrees: the corpus parsed, and a list of scalars. */
struct donors {
	struct exl_json_doc **docs;
	size_t n;
	struct exl_json_doc *scalars;
};

/* A deep copy of v into d (strings borrowed), so later edits of the copy
 * never touch the donor. */
static struct exl_json *copy_into(struct exl_json_doc *d, const struct exl_json *v)
{
	struct exl_json *c = exl_json_new(d, v->type, v->n);

	if (!c)
		DIE("out of memory");
	c->b = v->b;
	c->num = v->num;
	c->is_int = v->is_int;
	c->str = v->str;
	c->len = v->len;
	for (size_t i = 0; (v->type == EXL_JSON_ARRAY || v->type == EXL_JSON_OBJECT) && i < v->n; i++) {
		c->v[i] = copy_into(d, v->v[i]);
		if (v->type == EXL_JSON_OBJECT) {
			c->keys[i] = v->keys[i];
			c->key_lens[i] = v->key_lens[i];
		}
	}
	return c;
}

/* A copy of a random subtree of a corpus schema. */
static struct exl_json *donor_subtree(struct exl_json_doc *d, const struct donors *dn)
{
	struct exl_json *root = (struct exl_json *)exl_json_root(dn->docs[below(dn->n)]);
	struct jslots sl;

	sl.n = 0;
	collect(&sl, &root, NULL, 0);
	return copy_into(d, *sl.v[below(sl.n)]);
}

static struct exl_json *donor_scalar(struct exl_json_doc *d, const struct donors *dn)
{
	const struct exl_json *l = exl_json_root(dn->scalars);

	return copy_into(d, l->v[below(l->n)]);
}

/* One structural edit of the schema in doc d. */
static void mutate_tree(struct exl_json_doc *d, struct exl_json **root, const struct donors *dn)
{
	struct jslots sl;

	sl.n = 0;
	collect(&sl, root, NULL, 0);
	size_t at = below(sl.n);
	struct exl_json **where = sl.v[at], *parent = sl.parent[at];
	struct exl_json *w;

	switch (below(6)) {
	case 0: /* a subtree from elsewhere */
		*where = donor_subtree(d, dn);
		break;
	case 1: /* a scalar */
		*where = donor_scalar(d, dn);
		break;
	case 2: /* another key */
		if (parent && parent->type == EXL_JSON_OBJECT) {
			const char *k = fuzz_keywords[below(sizeof(fuzz_keywords) / sizeof(*fuzz_keywords))];

			parent->keys[sl.idx[at]] = k;
			parent->key_lens[sl.idx[at]] = strlen(k);
		}
		break;
	case 3: /* drop a member */
		if (parent) {
			size_t i = sl.idx[at];

			memmove(&parent->v[i], &parent->v[i + 1], (parent->n - i - 1) * sizeof(*parent->v));
			if (parent->type == EXL_JSON_OBJECT) {
				memmove(&parent->keys[i], &parent->keys[i + 1],
					(parent->n - i - 1) * sizeof(*parent->keys));
				memmove(&parent->key_lens[i], &parent->key_lens[i + 1],
					(parent->n - i - 1) * sizeof(*parent->key_lens));
			}
			parent->n--;
		}
		break;
	default: { /* wrap it: {"oneOf": [it, another]}, {"items": it}, ... */
		static const char *const wrappers[] = { "oneOf", "anyOf", "allOf", "items", "properties",
							"additionalProperties", "not" };
		const char *k = wrappers[below(sizeof(wrappers) / sizeof(*wrappers))];
		bool list = !strcmp(k, "oneOf") || !strcmp(k, "anyOf") || !strcmp(k, "allOf");

		w = exl_json_new(d, EXL_JSON_OBJECT, 1);
		if (!w)
			DIE("out of memory");
		w->keys[0] = k;
		w->key_lens[0] = strlen(k);
		if (list) {
			struct exl_json *l = exl_json_new(d, EXL_JSON_ARRAY, 2);

			if (!l)
				DIE("out of memory");
			l->v[0] = *where;
			l->v[1] = donor_subtree(d, dn);
			w->v[0] = l;
		} else if (!strcmp(k, "properties")) {
			struct exl_json *o = exl_json_new(d, EXL_JSON_OBJECT, 1);

			if (!o)
				DIE("out of memory");
			o->keys[0] = "p";
			o->key_lens[0] = 1;
			o->v[0] = *where;
			w->v[0] = o;
		} else {
			w->v[0] = *where;
		}
		*where = w;
		break;
	}
	}
}

/* A schema from the corpus, edited as a tree, then maybe as bytes. */
static char *mutate_schema(const char *src, const char *const *corpus, size_t n_corpus,
			   const struct donors *dn, size_t *out_len)
{
	char err[256];
	struct exl_json_doc *d = exl_json_parse(src, strlen(src), err, sizeof(err));
	struct jbuf b = { 0 };

	if (!d)
		DIE("corpus schema does not parse: %s: %s", err, src);
	struct exl_json *root = (struct exl_json *)exl_json_root(d);

	for (int e = 1 + (int)below(3); e > 0; e--)
		mutate_tree(d, &root, dn);
	exl_json_write(root, put_jbuf, &b);
	exl_json_free(d);
	if (!b.s)
		put_jbuf(&b, "", 0);
	if (below(4))
		return *out_len = b.n, b.s;
	char *s = mutate(b.s, corpus, n_corpus, out_len);

	free(b.s);
	return s;
}

/* The mask from the cache equals the one walked afresh, and the tokens it
 * allows are the ones a feed accepts. */
static void fuzz_mask(struct exl_gmatch *m, const struct exl_vocab_trie *t, const char *what)
{
	uint32_t a[(N_FUZZ_TOK + 31) / 32] = { 0 }, b[(N_FUZZ_TOK + 31) / 32] = { 0 };
	char err[256];

	if (exl_gmatch_mask(m, t, a, err, sizeof(err)) ||
	    exl_gmatch_mask_from(m, t, EXL_VOCAB_TRIE_ROOT, -1, b, err, sizeof(err)))
		return; /* a bound of the matcher: an error, fine */
	CHECK(!memcmp(a, b, sizeof(a)), "%s: the cached mask differs from a fresh walk", what);
	int32_t saved = m->cur;
	size_t reclaim = m->reclaim_states;

	m->reclaim_states = SIZE_MAX; /* keep the ids put while probing */
	for (size_t i = 0; i < N_FUZZ_TOK; i++) {
		int r = exl_gmatch_feed(m, (const uint8_t *)fuzz_tokens[i], strlen(fuzz_tokens[i]), err,
					sizeof(err));

		if (r >= 0)
			CHECK((r == 1) == (int)(a[i / 32] >> (i % 32) & 1),
			      "%s: token %zu '%s' is %s by the mask but %s when fed", what, i,
			      fuzz_tokens[i], r == 1 ? "refused" : "allowed",
			      r == 1 ? "accepted" : "refused");
		m->cur = saved;
	}
	m->reclaim_states = reclaim;
}

/* Feeds text whole and byte by byte (with masks along the way): the
 * verdicts must agree. */
static void fuzz_text(const struct exl_grammar *g, const struct exl_vocab_trie *t, const char *text,
		      size_t n, const char *what)
{
	char err[256];
	struct exl_gmatch *whole = exl_gmatch_create(g, err, sizeof(err));
	struct exl_gmatch *bytes = exl_gmatch_create(g, err, sizeof(err));
	int rw = -1, rb = 1;

	if (!whole || !bytes)
		goto out;
	bytes->reclaim_states = 16; /* exercise the rebuilt tables too */
	rw = exl_gmatch_feed(whole, (const uint8_t *)text, n, err, sizeof(err));
	if (rw == 1)
		rw = exl_gmatch_complete(whole);
	for (size_t i = 0; i < n && rb == 1; i++) {
		if (i % 5 == 0)
			fuzz_mask(bytes, t, what);
		rb = exl_gmatch_feed(bytes, (const uint8_t *)text + i, 1, err, sizeof(err));
	}
	if (rb == 1)
		rb = exl_gmatch_complete(bytes);
	/* -1 is a bound (ambiguity, depth) that one way may reach first */
	if (rw >= 0 && rb >= 0)
		CHECK(rw == rb, "%s: '%.*s' gives %d fed whole, %d byte by byte", what, (int)n, text,
		      rw, rb);
out:
	exl_gmatch_free(whole);
	exl_gmatch_free(bytes);
}

/* dn: for schemas, the donors of structural edits; NULL for regexes. */
static void fuzz_language(enum exl_constraint k, const char *const *corpus, size_t n_corpus,
			  const struct donors *dn, const char *const *texts, size_t n_texts,
			  int iterations, const struct exl_vocab_trie *t)
{
	int compiled = 0;

	for (int it = 0; it < iterations; it++) {
		size_t n, tn;
		const char *from = corpus[below(n_corpus)];
		char *src = dn && below(4) ? mutate_schema(from, corpus, n_corpus, dn, &n) :
			    mutate(from, corpus, n_corpus, &n);
		char err[512], what[64];

		snprintf(what, sizeof(what), "%s %d", exl_constraint_name(k), it);
		/* An exact-size copy without a NUL, so that reading past the
		 * length shows up under AddressSanitizer. */
		char *exact = malloc(n ? n : 1);

		if (!exact)
			DIE("out of memory");
		memcpy(exact, src, n);
		err[0] = 0;
		struct exl_grammar *g = exl_constraint_compile(k, exact, n, err, sizeof(err));

		free(exact);

		if (!g) {
			CHECK(err[0], "%s: refused without a message: '%.*s'", what, (int)n, src);
			/* The converters write grammars the GBNF compiler takes,
			 * but for a schema's own dead ends: too big, a $ref that
			 * comes back to itself without writing anything, a
			 * recursion no finite value ends (said as such). */
			CHECK(!strstr(err, "the generated grammar does not compile") ||
			      strstr(err, "too large") || strstr(err, "too many") ||
			      strstr(err, "the schema allows no finite value") ||
			      strstr(err, "a $ref comes back to itself"),
			      "%s: %s\n%.*s", what, err, (int)n, src);
			free(src);
			continue;
		}
		compiled++;
		for (int j = 0; j < 3; j++) {
			const char *text = texts[below(n_texts)];

			fuzz_text(g, t, text, strlen(text), what);
		}
		char *text = mutate(texts[below(n_texts)], texts, n_texts, &tn);

		fuzz_text(g, t, text, tn, what);
		free(text);
		exl_grammar_free(g);
		free(src);
	}
	printf("fuzz: %d mutated %ss, %d compiled\n", iterations, exl_constraint_name(k), compiled);
	CHECK(compiled > iterations / 20, "too few mutated %ss compiled (%d)", exl_constraint_name(k),
	      compiled);
	CHECK(compiled < iterations, "every mutated %s compiled: the mutations do nothing?",
	      exl_constraint_name(k));
}

static int fuzz_iterations = 10000;

static void case_fuzz(void)
{
	size_t ns = sizeof(schema_table) / sizeof(schema_table[0]);
	size_t nr = sizeof(regex_table) / sizeof(regex_table[0]);
	const char **schemas = calloc(ns, sizeof(*schemas)), **docs = calloc(ns, sizeof(*docs));
	const char **res = calloc(nr, sizeof(*res)), **texts = calloc(nr, sizeof(*texts));
	struct donors dn = { .docs = calloc(ns, sizeof(*dn.docs)), .n = ns };
	struct jbuf sc = { 0 };
	size_t lens[N_FUZZ_TOK];
	char err[256];

	if (!schemas || !docs || !res || !texts || !dn.docs)
		DIE("out of memory");
	for (size_t i = 0; i < N_FUZZ_TOK; i++)
		lens[i] = strlen(fuzz_tokens[i]);
	struct exl_vocab_trie *t = exl_vocab_trie_build((int32_t)N_FUZZ_TOK, fuzz_tokens, lens, err,
						       sizeof(err));

	if (!t)
		DIE("vocabulary tree: %s", err);
	for (size_t i = 0; i < ns; i++) {
		schemas[i] = schema_table[i].schema;
		docs[i] = schema_table[i].doc;
		dn.docs[i] = exl_json_parse(schemas[i], strlen(schemas[i]), err, sizeof(err));
		if (!dn.docs[i])
			DIE("schema %zu: %s", i, err);
	}
	put_jbuf(&sc, "[", 1);
	for (size_t i = 0; i < sizeof(fuzz_scalars) / sizeof(*fuzz_scalars); i++) {
		if (i)
			put_jbuf(&sc, ",", 1);
		put_jbuf(&sc, fuzz_scalars[i], strlen(fuzz_scalars[i]));
	}
	put_jbuf(&sc, "]", 1);
	dn.scalars = exl_json_parse(sc.s, sc.n, err, sizeof(err));
	if (!dn.scalars)
		DIE("scalars: %s", err);
	for (size_t i = 0; i < nr; i++) {
		res[i] = regex_table[i].re;
		texts[i] = regex_table[i].text;
	}
	fuzz_language(EXL_CONSTRAINT_JSON_SCHEMA, schemas, ns, &dn, docs, ns, fuzz_iterations, t);
	fuzz_language(EXL_CONSTRAINT_REGEX, res, nr, NULL, texts, nr, fuzz_iterations, t);
	exl_vocab_trie_put(t);
	for (size_t i = 0; i < ns; i++)
		exl_json_free(dn.docs[i]);
	exl_json_free(dn.scalars);
	free(dn.docs);
	free(sc.s);
	free(schemas);
	free(docs);
	free(res);
	free(texts);
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		void (*fn)(void);
	} cases[] = {
		{ "json", case_json }, { "schema", case_schema }, { "schema_errors", case_schema_errors },
		{ "numbers", case_numbers }, { "dates", case_dates }, { "regex", case_regex },
		{ "regex_errors", case_regex_errors }, { "fuzz", case_fuzz },
	};
	const char *which = argc > 1 ? argv[1] : "all";

	if (argc > 2)
		fuzz_iterations = atoi(argv[2]);
	bool found = false;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (strcmp(which, "all") && strcmp(which, cases[i].name))
			continue;
		found = true;
		int before = check_failures;

		cases[i].fn();
		printf("%-14s %s\n", cases[i].name, check_failures == before ? "ok" : "FAILED");
	}
	if (!found)
		DIE("unknown case '%s'", which);
	return check_failures ? 1 : 0;
}
