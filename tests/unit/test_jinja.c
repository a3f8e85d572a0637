/* The chat template renderer (common/chat_template.h) as a library:
 *   - the language, case by case, against outputs taken from
 *     @huggingface/jinja (where it renders) and from Jinja2 (where it lacks
 *     the feature); tests/integration/test_jinja_ref.js compares whole
 *     templates with both live;
 *   - raise_exception's message, verbatim;
 *   - errors: where they are, what they say;
 *   - the sandbox's limits and their messages;
 *   - the interface: lengths, NULs, encodings, the ChatML fallback, the
 *     fixed clock for tests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/chat_template.h"

struct render_case {
	const char *name;
	const char *tmpl;
	const char *ctx;
	const char *want;
};

static const struct render_case reference_cases[] = {
	{ "arith",
	  "{{ 1 + 2 }}|{{ 7 / 2 }}|{{ 6 / 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}"
	  "|{{ 2 ** -1 }}",
	  "{}",
	  "3|3.5|3.0|-4|-1|1024|0.5" },
	{ "float_print",
	  "{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 100000000000000000000.0 }} {{ 10000000000000000"
	  "00000.0 }} {{ 0.0000001 }} {{ -0.0 }} {{ 1 / 3 }}",
	  "{}",
	  "1.0 0.30000000000000004 100000000000000000000.0 1e+21 1e-7 -0.0 0.3333333333"
	  "333333" },
	{ "int_print",
	  "{{ big }} {{ 2 ** 70 }} {{ n }}",
	  "{\"big\": 12345678901234567890, \"n\": 0}",
	  "12345678901234567000 1.1805916207174113e+21 0" },
	{ "concat",
	  "{{ 'a' ~ 2.0 ~ true ~ [1, 'x'] }}|{{ 'a' + 1.5 }}",
	  "{}",
	  "a2true1,x|a1.5" },
	{ "compare",
	  "{{ 1 == 1.0 }}{{ '1' == 1 }}{{ true == 1 }}{{ none == undef }}{{ [1] == [1] "
	  "}}{{ l == l }}",
	  "{\"l\": [1]}",
	  "truetruetruetruefalsetrue" },
	{ "logic",
	  "{{ 0 or 'x' }}|{{ '' or [] }}|{{ [] and 1 }}|{{ not {} }}|{{ none and 1 }}",
	  "{}",
	  "x|[]|[]|true|" },
	{ "in",
	  "{{ 'a' in 'abc' }}{{ 1 in [1.0] }}{{ 'k' in d }}{{ 'x' not in undef }}",
	  "{\"d\": {\"k\": 1}}",
	  "truetruetruetrue" },
	{ "print_values",
	  "{{ l }}|{{ d }}|{{ true }}|{{ none }}|{{ undef }}",
	  "{\"l\": [1, \"a\", null, true, 2.5], \"d\": {\"b\": 1, \"a\": [], \"1\": "
	  "\"x\"}}",
	  "[1, \"a\", null, true, 2.5]|{\"1\": \"x\", \"b\": 1, \"a\": []}|true||" },
	{ "ternary_select",
	  "{{ 'y' if b else 'n' }}|{{ 'x' if false }}|{{ 'a' if 0 else 'b' if 1 else 'c"
	  "' }}",
	  "{\"b\": true}",
	  "y||b" },
	{ "member",
	  "{{ m.role }}{{ m['content'] }}{{ l[-1] }}{{ l[9] }}{{ m.nope }}{{ undef.x }}"
	  "{{ none.x }}",
	  "{\"m\": {\"role\": \"user\", \"content\": \"hi\"}, \"l\": [1, 2]}",
	  "userhi2" },
	{ "slices",
	  "{{ l[1:] }}{{ l[:-1] }}{{ l[::-1] }}{{ l[::2] }}{{ 'h\303\251llo'[1:3] }}{{ "
	  "'abc'[::-1] }}",
	  "{\"l\": [1, 2, 3, 4]}",
	  "[2, 3, 4][1, 2, 3][4, 3, 2, 1][1, 3]\303\251lcba" },
	{ "utf16_index",
	  "{{ s|length }}|{{ s[0] }}|{{ s[1] }}|{{ s[2] }}",
	  "{\"s\": \"\303\251\360\237\214\215\"}",
	  "3|\303\251|\357\277\275|\357\277\275" },
	{ "if_elif",
	  "{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %}",
	  "{\"x\": 2}",
	  "two" },
	{ "for_loop_vars",
	  "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop."
	  "revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem"
	  " }}{{ loop.nextitem }};{% endfor %}",
	  "{\"l\": [\"a\", \"b\"]}",
	  "1021truefalse2b;2110falsetrue2a;" },
	{ "for_filter_else",
	  "{% for x in l if x > 1 %}{{ x }}/{{ loop.length }} {% else %}none{% endfor %"
	  "}|{% for x in [] %}x{% else %}empty{% endfor %}",
	  "{\"l\": [1, 2, 3]}",
	  "2/2 3/2 |empty" },
	{ "for_dict",
	  "{% for k in d %}{{ k }}{% endfor %}|{% for k, v in d.items() %}{{ k }}={{ v "
	  "}};{% endfor %}",
	  "{\"d\": {\"b\": 1, \"a\": 2, \"10\": 3, \"2\": 4}}",
	  "210ba|2=4;10=3;b=1;a=2;" },
	{ "break_continue",
	  "{% for i in range(6) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 "
	  "%}{% break %}{% endif %}{{ i }}{% endfor %}",
	  "{}",
	  "023" },
	{ "continue_drops_iteration",
	  "{% for i in range(3) %}<{{ i }}{% if i == 1 %}{% continue %}{% endif %}>{% e"
	  "ndfor %}",
	  "{}",
	  "<0><2>" },
	{ "for_scope",
	  "{% set x = 5 %}{% for i in range(2) %}{% set x = i %}{{ x }}{% endfor %}{{ x"
	  " }}",
	  "{}",
	  "015" },
	{ "set_forms",
	  "{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t %}block {{ a }}{% endset %}{{ t"
	  " }}",
	  "{}",
	  "12|block 1" },
	{ "namespace",
	  "{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %"
	  "}{% endfor %}{{ ns.n }}|{{ ns }}",
	  "{}",
	  "3|{\"n\": 3}" },
	{ "macro",
	  "{% macro g(name, greeting='Hi', p='!') %}{{ greeting }} {{ name }}{{ p }}{% "
	  "endmacro %}{{ g('A') }}|{{ g('B', 'Yo') }}|{{ g('C', p='?') }}",
	  "{}",
	  "Hi A!|Yo B!|Hi C?" },
	{ "macro_special",
	  "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, "
	  "k=4) }}",
	  "{}",
	  "1[2, 3]{\"k\": 4}" },
	{ "macro_dynamic_scope",
	  "{% macro show() %}{{ x }}{% endmacro %}{% for x in ['loop'] %}{{ show() }}{%"
	  " endfor %}|{{ show() }}",
	  "{\"x\": \"ctx\"}",
	  "loop|ctx" },
	{ "call_block",
	  "{% macro w(t) %}<{{ t }}:{{ caller() }}>{% endmacro %}{% call w('b') %}in{% "
	  "endcall %}|{% macro each(l) %}{% for i in l %}{{ caller(i) }}{% endfor %}{% "
	  "endmacro %}{% call(x) each([1, 2]) %}[{{ x }}]{% endcall %}",
	  "{}",
	  "<b:in>|[1][2]" },
	{ "filter_block",
	  "{% filter upper %}abc {{ 'd' }}{% endfilter %}",
	  "{}",
	  "ABC D" },
	{ "whitespace_control",
	  "a {%- if true -%} b {%- endif -%} c\n{{- 'x' -}}\n   d {#- c -#}   e",
	  "{}",
	  "abcxde" },
	{ "trim_lstrip_blocks",
	  "  {% if true %}\n  text\n  {% endif %}\n    {{ 'v' }}\n{# c #}\nend\n",
	  "{}",
	  "  text\n    v\nend" },
	{ "comment",
	  "a{# {{ no }} #}b",
	  "{}",
	  "ab" },
	{ "generation_tag",
	  "x  {% generation %}gen{% endgeneration %}  y",
	  "{}",
	  "x  gen  y" },
	{ "string_escapes",
	  "{{ 'it\\'s' }}{{ \"a\\\\b\" }}{{ 'tab\\t|' }}{{ '\\x41\\u00e9' }}{{ 'con' "
	  "\"cat\" }}",
	  "{}",
	  "it'sa\\btab\t|A\303\251concat" },
	{ "filters_str",
	  "{{ s|trim }}|{{ s|upper }}|{{ s|lower }}|{{ s|title }}|{{ 'hELLO'|capitalize"
	  " }}|{{ s|length }}|{{ '\303\251lan'|title }}",
	  "{\"s\": \" Hello World \"}",
	  "Hello World| HELLO WORLD | hello world | Hello World |HELLO|13|\303\251Lan" },
	{ "filters_case_unicode",
	  "{{ '\303\237 stra\303\237e'|upper }}|{{ '\316\243\316\221\316\243 \316\237"
	  "\316\224\316\237\316\243'|lower }}|{{ '\304\260'|lower|length }}",
	  "{}",
	  "SS STRASSE|\317\203\316\261\317\202 \316\277\316\264\316\277\317\202|2" },
	{ "filters_list",
	  "{{ l|join(',') }}|{{ l|join }}|{{ l|sort }}|{{ l|sort(reverse=true) }}|{{ l|"
	  "first }}{{ l|last }}{{ l|length }}|{{ l|reverse }}|{{ [1, 2, 1, '1']|unique "
	  "}}",
	  "{\"l\": [3, 1, 2]}",
	  "3,1,2|312|[1, 2, 3]|[3, 2, 1]|323|[2, 1, 3]|[1, 2, \"1\"]" },
	{ "join_raw",
	  "{{ [1, none, 'x', true, 2.0, undef]|join('-') }}",
	  "{}",
	  "1--x-true-2-" },
	{ "sort_strings",
	  "{{ s|sort }}|{{ s|sort(case_sensitive=true) }}",
	  "{\"s\": [\"b\", \"A\", \"a\", \"C\"]}",
	  "[\"A\", \"a\", \"b\", \"C\"]|[\"A\", \"C\", \"a\", \"b\"]" },
	{ "selectattr_map",
	  "{{ o|selectattr('t')|map(attribute='n')|join }}|{{ o|rejectattr('t')|map(att"
	  "ribute='n')|join }}|{{ o|selectattr('t', 'equalto', 'a')|list|length }}|{{ o"
	  "|map(attribute='t', default='-')|join }}|{{ o|sort(attribute='v')|map(attrib"
	  "ute='n')|join }}",
	  "{\"o\": [{\"n\": \"x\", \"v\": 2, \"t\": \"a\"}, {\"n\": \"y\", \"v\": 1}, {"
	  "\"n\": \"z\", \"v\": 3, \"t\": \"b\"}]}",
	  "xz|y|1|a-b|yxz" },
	{ "tojson",
	  "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ d|tojson(sort_keys=true) }}|{{ d|"
	  "tojson(separators=(',', ':')) }}|{{ '\303\251\360\237\214\215\\u0001\"'|tojs"
	  "on }}|{{ '\303\251\360\237\214\215'|tojson(ensure_ascii=true) }}|{{ []|tojso"
	  "n(indent=2) }}|{{ undef|tojson }}",
	  "{\"d\": {\"b\": [1, 2.5, null], \"a\": {\"_c\": true, \"B\": \"x\"}}}",
	  "{\"b\": [1, 2.5, null], \"a\": {\"_c\": true, \"B\": \"x\"}}|{\n  \"b\": ["
	  "\n    1,\n    2.5,\n    null\n  ],\n  \"a\": {\n    \"_c\": true,\n    \"B"
	  "\": \"x\"\n  }\n}|{\"a\": {\"_c\": true, \"B\": \"x\"}, \"b\": [1, 2.5, null"
	  "]}|{\"b\":[1,2.5,null],\"a\":{\"_c\":true,\"B\":\"x\"}}|\"\303\251\360\237"
	  "\214\215\\u0001\\\"\"|\"\\u00e9\\ud83c\\udf0d\"|[]|null" },
	{ "conversions",
	  "{{ n|string }}{{ f|string }}{{ '42'|int }}{{ '4.5x'|float }}{{ 'x'|int }}{{ "
	  "'x'|int(7) }}{{ f|int }}{{ -f|int }}{{ -3|abs }}{{ n|float }}{{ true|int }}",
	  "{\"n\": 3, \"f\": 2.5}",
	  "32.5424.5072-333.01" },
	{ "default_indent",
	  "{{ u|default('d') }}|{{ e|default('d') }}|{{ e|default('d', true) }}|{{ 'a"
	  "\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent"
	  "(first=true, blank=true) }}",
	  "{\"e\": \"\"}",
	  "d||d|a\n  b\n\n  c|  a\n  b|    a\n    \n    b" },
	{ "tests",
	  "{{ 3 is odd }}{{ 3 is even }}{{ 2.5 is number }}{{ 2.5 is integer }}{{ 's' i"
	  "s string }}{{ [] is iterable }}{{ {} is mapping }}{{ none is none }}{{ u is "
	  "defined }}{{ u is undefined }}{{ true is boolean }}{{ 'ab' is lower }}{{ (1,"
	  " 2) is iterable }}{{ {} is sequence }}",
	  "{}",
	  "truefalsetruefalsetruetruetruetruefalsetruetruetruefalsetrue" },
	{ "dict_methods",
	  "{{ d.get('a') }}{{ d.get('q') }}{{ d.get('q', 'x') }}{{ d.keys() }}{{ d.valu"
	  "es() }}{{ d.items() }}{{ d|dictsort(by='value', reverse=true) }}",
	  "{\"d\": {\"b\": 1, \"a\": 2}}",
	  "2x[\"b\", \"a\"][1, 2][[\"b\", 1], [\"a\", 2]][[\"a\", 2], [\"b\", 1]]" },
	{ "str_methods",
	  "{{ s.strip() }}|{{ s.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a,b,c'.split('"
	  ",', 1) }}|{{ s.startswith(' H') }}{{ s.endswith(('x', 'd ')) }}|{{ s.replace"
	  "('l', 'L', 2) }}|{{ 'ab'.replace('', '-') }}|{{ s.strip('H ') }}",
	  "{\"s\": \" Hello World \"}",
	  "Hello World|[\"Hello\", \"World\"]|[\"a\", \"b\", \"\", \"c\"]|[\"a\", \"b,c"
	  "\"]|truetrue| HeLLo World |-a-b-|Hello World" },
	{ "range_strftime",
	  "{{ range(3) }}{{ range(1, 7, 2) }}{{ range(5, 0, -2) }}|{{ strftime_now('%Y-"
	  "%m-%d %H:%M %b %B %% %A') }}",
	  "{}",
	  "[0, 1, 2][1, 3, 5][5, 3, 1]|2024-07-26 09:15 Jul July % %A" },
};

static const struct render_case jinja2_cases[] = {
	{ "j2_undefined_loop",
	  "{% for t in tools %}x{% endfor %}end",
	  "{}",
	  "end" },
	{ "j2_string_loop",
	  "{% for c in 'ab' %}[{{ c }}]{% endfor %}",
	  "{}",
	  "[a][b]" },
	{ "j2_tuple_unpack",
	  "{% for a, b in [(1, 2), (3, 4)] %}{{ a }}{{ b }}{% endfor %}",
	  "{}",
	  "1234" },
	{ "j2_tuple_print",
	  "{{ (1, 'a') }}{{ (1,) }}",
	  "{}",
	  "(1, 'a')(1,)" },
	{ "j2_filters",
	  "{{ u|d('x') }}{{ u|default }}|{{ l|count }}{{ u|length }}|{{ '<a&b>'|e }}|{{"
	  " l|min }}{{ l|max }}{{ l|sum }}|{{ l|select('odd')|list }}{{ l|reject('odd')"
	  "|list }}|{{ ['a', 'b']|map('upper')|join }}|{{ 2.567|round(2) }}{{ 2.5|round"
	  " }}",
	  "{\"l\": [3, 1, 2]}",
	  "x|30|&lt;a&amp;b&gt;|136|[3, 1][2]|AB|2.572.0" },
	{ "j2_tests",
	  "{{ 6 is divisibleby(3) }}{{ 7 is divisibleby 3 }}{{ 'a' is in ['a'] }}{{ 1.5"
	  " is float }}{{ x is sameas none }}",
	  "{\"x\": null}",
	  "TrueFalseTrueTrueTrue" },
	{ "j2_str_methods",
	  "{{ '{}-{x}'.format(1, x=2) }}|{{ 'hello'.find('l') }}|{{ ','.join(['a', 'b']"
	  ") }}|{{ 'ab' * 2 }}",
	  "{}",
	  "1-2|2|a,b|abab" },
	{ "j2_list_methods",
	  "{% set l = [1] %}{% set _ = l.append(2) %}{{ l }}{{ l.pop(0) }}{{ l }}",
	  "{}",
	  "[1, 2]1[2]" },
	{ "j2_loop_cycle",
	  "{% for i in range(3) %}{{ loop.cycle('a', 'b') }}{% endfor %}",
	  "{}",
	  "aba" },
	{ "j2_number_keys",
	  "{% set d = {1: 'a', 2: 'b'} %}{{ d[1] }}{% for k, v in d|dictsort %}{{ k + 1"
	  " }}{{ v }}{% endfor %}",
	  "{}",
	  "a2a3b" },
	{ "j2_method_over_key",
	  "{% for k, v in d.items() %}{{ k }}{% endfor %}",
	  "{\"d\": {\"items\": [1], \"x\": 2}}",
	  "itemsx" },
	{ "j2_str_of",
	  "{{ d|string }}|{{ none|string }}|{{ l|trim }}",
	  "{\"d\": {\"a\": true, \"b\": null, \"c\": \"it's\"}, \"l\": [1]}",
	  "{'a': True, 'b': None, 'c': \"it's\"}|None|[1]" },
	{ "j2_none_select",
	  "{{ none|selectattr('x')|list }}{{ u|map(attribute='x')|list }}",
	  "{}",
	  "[][]" },
};

static int render(const char *tmpl, const char *ctx, char **out, size_t *len, char *err,
		  size_t errlen)
{
	return exl_chat_template_render(tmpl, strlen(tmpl), ctx, strlen(ctx), out, len, err, errlen);
}

static void run_cases(const struct render_case *cases, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char err[512], *out;
		size_t len;
		int rc = render(cases[i].tmpl, cases[i].ctx, &out, &len, err, sizeof(err));

		if (rc) {
			print_error("%s: %s\n", cases[i].name, err);
			fail();
		}
		if (len != strlen(cases[i].want) || memcmp(out, cases[i].want, len)) {
			print_error("%s:\n  want %s\n  got  %.*s\n", cases[i].name, cases[i].want,
				    (int)len, out);
			fail();
		}
		assert_int_equal(out[len], 0);
		free(out);
	}
}

static void test_reference(void **state)
{
	(void)state;
	setenv("EXLD_TEMPLATE_NOW", "2024-07-26T09:15", 1);
	run_cases(reference_cases, sizeof(reference_cases) / sizeof(reference_cases[0]));
}

static void test_jinja2(void **state)
{
	(void)state;
	run_cases(jinja2_cases, sizeof(jinja2_cases) / sizeof(jinja2_cases[0]));
}

/* The template's own message, nothing added, is what the caller shows. */
static void test_raise(void **state)
{
	static const struct {
		const char *tmpl, *msg;
	} cases[] = {
		{ "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}",
		  "Conversation roles must alternate user/assistant/user/assistant/..." },
		{ "a{% if messages|length > 1 %}{{ raise_exception('Too many: ' ~ 3) }}{% endif %}",
		  "Too many: 3" },
		{ "{{ raise_exception() }}", "" },
		{ "{{ raise_exception(42) }}", "42" },
		{ "{% macro check(m) %}{% if m.role not in ['user', 'assistant'] %}"
		  "{{ raise_exception('Unknown role: ' + m.role) }}{% endif %}{% endmacro %}"
		  "{% for m in messages %}{{ check(m) }}{% endfor %}",
		  "Unknown role: tool" },
	};
	const char *ctx = "{\"messages\": [{\"role\": \"user\"}, {\"role\": \"tool\"}]}";

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char err[256], *out = (char *)1;
		size_t len = 1;

		assert_int_equal(render(cases[i].tmpl, ctx, &out, &len, err, sizeof(err)), -1);
		assert_null(out);
		assert_int_equal(len, 0);
		assert_string_equal(err, cases[i].msg);
	}
}

/* Errors say where (the template's own line numbers, through trim_blocks'
 * removed newlines) and what. */
static void test_errors(void **state)
{
	static const struct {
		const char *tmpl, *ctx, *msg;
	} cases[] = {
		{ "{% if x %}\nyes\n", "{}", "template: line 2: missing {% endif %}" },
		{ "{% for m in messages %}\n{{ m }\n{% endfor %}", "{}",
		  "template: line 2: expected '}}', got '}'" },
		{ "{% if a %}\n{% endif %}\n\n{{ x|nope }}", "{}",
		  "template: line 4: no filter 'nope' for UndefinedValue" },
		{ "\n\n{{ 1 is frob }}", "{}", "template: line 3: unknown test 'frob'" },
		{ "{% endfor %}", "{}", "template: line 1: unknown or unexpected statement 'endfor'" },
		{ "{{ 1 + none }}", "{}", "template: line 1: cannot perform operation + on null values" },
		{ "{{ x() }}", "{}",
		  "template: line 1: cannot call something that is not a function: got UndefinedValue" },
		{ "{% break %}", "{}", "template: break or continue outside a loop" },
		{ "{{ 'abc }}", "{}", "template: line 1: unterminated string" },
		{ "{{ '\\q' }}", "{}", "template: line 1: unexpected escaped character: q" },
		{ "{{ a $ b }}", "{}", "template: line 1: unexpected character: $" },
		{ "{# open", "{}", "template: line 1: missing end of comment tag" },
		{ "{% macro m(a, a) %}{% endmacro %}", "{}", "template: line 1: duplicate parameter 'a'" },
		{ "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "{}",
		  "template: line 1: macro 'm' takes not more than 1 argument(s)" },
		{ "{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", "{}",
		  "template: line 1: macro 'm' takes no keyword argument 'b'" },
		{ "{{ [1, 'a']|sort }}", "{}",
		  "template: line 1: cannot compare different types: StringValue and IntegerValue" },
		{ "{% set x.y = 1 %}", "{}",
		  "template: line 1: cannot assign an attribute of a non-namespace object" },
		{ "{{ x }}", "[1]", "template: context: expected a JSON object, got array" },
		{ "{{ x }}", "{\"x\": }", "template: context: line 1, column 7: " },
		{ "{{ range }}", "{\"range\": 1}", "template: context: variable already declared: range" },
		{ "{{ namespace }}", "{\"namespace\": 1}",
		  "template: context: variable already declared: namespace" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char err[256], *out;
		size_t len;

		if (render(cases[i].tmpl, cases[i].ctx, &out, &len, err, sizeof(err)) != -1) {
			print_error("%s: rendered\n", cases[i].tmpl);
			fail();
		}
		if (strncmp(err, cases[i].msg, strlen(cases[i].msg))) {
			print_error("%s:\n  want %s\n  got  %s\n", cases[i].tmpl, cases[i].msg, err);
			fail();
		}
	}
}

/* A 16-byte error buffer gets a cut, terminated message; a zero-length
 * one is left alone. */
static void test_small_err(void **state)
{
	char err[16], *out;
	size_t len;

	(void)state;
	assert_int_equal(render("{{ raise_exception('a long message, longer than 16') }}", "{}",
				&out, &len, err, sizeof(err)), -1);
	assert_string_equal(err, "a long message,");
	assert_int_equal(render("{% if %}", "{}", &out, &len, err, sizeof(err)), -1);
	assert_int_equal(strlen(err), sizeof(err) - 1);
	assert_int_equal(exl_chat_template_render("{% if %}", 8, "{}", 2, &out, &len, NULL, 0), -1);
}

static void expect_limit(const char *tmpl, const char *ctx, const char *msg)
{
	char err[256], *out;
	size_t len;

	if (render(tmpl, ctx, &out, &len, err, sizeof(err)) != -1) {
		print_error("%s: rendered %zu bytes\n", tmpl, len);
		free(out);
		fail();
	}
	if (!strstr(err, msg)) {
		print_error("%s:\n  want ...%s...\n  got  %s\n", tmpl, msg, err);
		fail();
	}
}

/* The sandbox: each limit stops a template that would run away, with a
 * message that names it. */
static void test_limits(void **state)
{
	(void)state;
	/* 20 MB of output */
	expect_limit("{% set ns = namespace(s='0123456789') %}{% for i in range(10) %}"
		     "{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
		     "{% for i in range(2000) %}{{ ns.s }}{% endfor %}",
		     "{}", "template: output over 16 MiB");
	/* a 32 MiB string */
	expect_limit("{% set ns = namespace(s='x') %}{% for i in range(30) %}"
		     "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
		     "{}", "template: a string over 16 MiB");
	expect_limit("{% set l = range(4000) %}{% for i in l %}{% for j in l %}{% endfor %}{% endfor %}",
		     "{}", "template: line 1: over 10,000,000 loop iterations");
	expect_limit("{{ range(100000000) }}", "{}", "range() of over 10,000,000 items");
	expect_limit("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}", "{}",
		     "nested over 400 deep (a recursive macro?)");
	expect_limit("{% set ns = namespace(l=[]) %}{% for i in range(9000000) %}"
		     "{% set _ = ns.l.append(i) %}{% endfor %}",
		     "{}", "template: over 256 MiB of memory");
	/* a 4 MiB string searched over and over */
	expect_limit("{% set ns = namespace(s='x') %}{% for i in range(22) %}"
		     "{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
		     "{% for i in range(100000) %}{% if 'y' in ns.s %}{% endif %}{% endfor %}",
		     "{}", "template: over 200000000 evaluation steps");
	/* parser nesting */
	{
		char t[2048];
		size_t n = 0;

		n += (size_t)sprintf(t + n, "{{ ");
		for (int i = 0; i < 300; i++)
			t[n++] = '(';
		t[n++] = '1';
		for (int i = 0; i < 300; i++)
			t[n++] = ')';
		sprintf(t + n, " }}");
		expect_limit(t, "{}", "nested over 256 deep");
	}
	/* a list that holds itself cannot be printed */
	expect_limit("{% set l = [] %}{% set _ = l.append(l) %}{{ l }}", "{}",
		     "a value nested over 256 deep");
}

/* No file, no environment, no Python: what a template could reach for is
 * not there. */
static void test_sandbox(void **state)
{
	static const char *const tmpls[] = {
		"{{ ''.__class__ }}", "{{ messages.__class__.__mro__ }}", "{{ self }}",
		"{{ config }}", "{{ cycler }}", "{{ lipsum() if lipsum else '' }}",
		"{% include 'x' %}", "{% import 'x' as y %}", "{% extends 'x' %}",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(tmpls) / sizeof(tmpls[0]); i++) {
		char err[256], *out;
		size_t len;

		if (render(tmpls[i], "{\"messages\": []}", &out, &len, err, sizeof(err)) == 0) {
			/* rendered: then as nothing (an undefined value) */
			assert_int_equal(len, 0);
			free(out);
		}
	}
}

static void test_interface(void **state)
{
	char err[256], *out;
	size_t len;

	(void)state;
	/* an empty template: an empty, terminated string */
	assert_int_equal(render("", "{}", &out, &len, err, sizeof(err)), 0);
	assert_int_equal(len, 0);
	assert_int_equal(out[0], 0);
	free(out);
	/* NULs in the context come through, counted */
	assert_int_equal(render("<{{ s }}>", "{\"s\": \"a\\u0000b\"}", &out, &len, err,
				sizeof(err)), 0);
	assert_int_equal(len, 5);
	assert_memory_equal(out, "<a\0b>", 6);
	free(out);
	/* bad UTF-8 in a template reads as U+FFFD, as Node reads the file */
	assert_int_equal(render("a\xff\xe2\x82|{{ 'b\xc3' }}", "{}", &out, &len, err, sizeof(err)), 0);
	assert_string_equal(out, "a\xef\xbf\xbd\xef\xbf\xbd|b\xef\xbf\xbd");
	free(out);
	/* escaped surrogates: a pair is its character, a lone one U+FFFD */
	assert_int_equal(render("{{ '\\ud83d\\ude00' }}|{{ '\\ud800' }}|{{ s[0] ~ s[1] }}",
				"{\"s\": \"\\ud83d\\ude00\"}", &out, &len, err, sizeof(err)), 0);
	assert_string_equal(out, "\xf0\x9f\x98\x80|\xef\xbf\xbd|\xf0\x9f\x98\x80");
	free(out);
	/* the fixed clock */
	setenv("EXLD_TEMPLATE_NOW", "2023-01-05", 1);
	assert_int_equal(render("{{ strftime_now('%d %b %Y %H:%M') }}", "{}", &out, &len, err,
				sizeof(err)), 0);
	assert_string_equal(out, "05 Jan 2023 00:00");
	free(out);
	setenv("EXLD_TEMPLATE_NOW", "yesterday", 1);
	assert_int_equal(render("x", "{}", &out, &len, err, sizeof(err)), -1);
	assert_string_equal(err, "template: EXLD_TEMPLATE_NOW: expected YYYY-MM-DD or YYYY-MM-DDTHH:MM");
	unsetenv("EXLD_TEMPLATE_NOW");
	/* the real clock: a year of four digits */
	assert_int_equal(render("{{ strftime_now('%Y') }}", "{}", &out, &len, err, sizeof(err)), 0);
	assert_int_equal(len, 4);
	free(out);
}

/* The fallback for a model without a template. */
static void test_chatml(void **state)
{
	const char *ctx = "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
			  "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hi\"},"
			  "{\"type\": \"image\"}, {\"type\": \"text\", \"text\": \" there\"}]},"
			  "{\"role\": \"assistant\", \"content\": null}],"
			  "\"add_generation_prompt\": true}";
	char err[256], *out;
	size_t len;

	(void)state;
	assert_int_equal(exl_chat_template_render(exl_chat_template_chatml,
						  strlen(exl_chat_template_chatml), ctx, strlen(ctx),
						  &out, &len, err, sizeof(err)), 0);
	assert_string_equal(out, "<|im_start|>system\nBe brief.<|im_end|>\n"
				 "<|im_start|>user\nHi there<|im_end|>\n"
				 "<|im_start|>assistant\n<|im_end|>\n"
				 "<|im_start|>assistant\n");
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reference),
		cmocka_unit_test(test_jinja2),
		cmocka_unit_test(test_raise),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_small_err),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_sandbox),
		cmocka_unit_test(test_interface),
		cmocka_unit_test(test_chatml),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
