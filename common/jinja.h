/* The chat template engine's parts, shared by common/jinja_*.c only
 * (common/chat_template.h is the interface).
 *
 * The reference is @huggingface/jinja (the renderer of transformers.js and
 * the Hugging Face hub): where it renders a template, we render the same
 * bytes, its quirks included (docs/chat-templates.md lists them).  Where it
 * fails on something Python's Jinja2 does (a filter or test it lacks,
 * iterating an undefined value, ...), we do what Jinja2 does.
 *
 * Memory: one arena per render holds the tokens, the tree and every value;
 * strings are (pointer, length) slices that may point into the template, the
 * context's JSON or the arena.  Strings are UTF-8, except that a lone UTF-16
 * surrogate (from a "\ud800" escape or an index into a string, as in
 * JavaScript) is kept as its 3-byte generalized UTF-8 form until the output
 * is handed back, where it becomes U+FFFD as Node's encoder writes it. */
#ifndef EXL_JINJA_H
#define EXL_JINJA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Sandbox limits (docs/chat-templates.md). */
#define JINJA_MAX_OUTPUT (16u << 20)      /* the rendered text, and any one string */
#define JINJA_MAX_MEMORY (256u << 20)     /* the render's arena */
#define JINJA_MAX_ITERATIONS 10000000     /* loop iterations, all loops together */
#define JINJA_MAX_DEPTH 400               /* nested evaluation: macro calls, blocks, expressions */
#define JINJA_MAX_STEPS 200000000ull      /* evaluation steps, scanned bytes / 16 included */
#define JINJA_MAX_VALUE_DEPTH 256         /* nesting of a value printed or compared */

struct jblock;

/* One render. */
struct jctx {
	struct jblock *blocks;
	size_t mem;                 /* bytes the arena holds */
	char *err;
	size_t errlen;
	size_t iterations;
	unsigned depth;
	uint64_t steps;
	const size_t *nl_cut;       /* offsets (in the lexed text) of newlines trim_blocks removed */
	size_t n_nl_cut;
	const char *src;            /* the lexed text, for line numbers */
	size_t src_len;
	struct tm now;              /* strftime_now's local time, when have_now */
	bool have_now;              /* else the clock */
	/* The render has used what only Jinja2 has (the reference would have
	 * failed there): from then on, what the reference lets pass and Jinja2
	 * does not (a string + a list, an attribute of an undefined value)
	 * fails, as there is no reference output left to match. */
	bool jinja2;
};

static inline void jbeyond(struct jctx *c)
{
	c->jinja2 = true;
}

/* Writes "template: line N: ..." (or "template: ..." when line is 0) to
 * c->err; returns -1. */
__attribute__((format(printf, 3, 4)))
int exl_jfail(struct jctx *c, unsigned line, const char *fmt, ...);
/* raise_exception: the message verbatim. */
int exl_jfail_raw(struct jctx *c, const char *msg, size_t n);
/* The template's line at an offset of the lexed text. */
unsigned exl_jline(const struct jctx *c, size_t off);

/* The arena: NULL (with the message written) when over JINJA_MAX_MEMORY
 * or out of memory.  Zeroed. */
void *exl_jalloc(struct jctx *c, size_t n);
void *exl_jalloc_array(struct jctx *c, size_t n, size_t size);
void exl_jarena_free(struct jctx *c);
/* Counts work; -1 with a message past JINJA_MAX_STEPS. */
int exl_jstep(struct jctx *c, uint64_t n);

/* A growing string in the arena. */
struct jbuf {
	char *p;
	size_t n, cap;
	bool output;                /* the rendered text (for the message at the limit) */
};
int exl_jbuf_put(struct jctx *c, struct jbuf *b, const char *s, size_t n);
int exl_jbuf_putc(struct jctx *c, struct jbuf *b, char ch);
int exl_jbuf_puts(struct jctx *c, struct jbuf *b, const char *s);
int exl_jbuf_put_cp(struct jctx *c, struct jbuf *b, uint32_t cp);

/* ---- values ---- */

enum jv_type {
	JV_UNDEF,
	JV_NULL,
	JV_BOOL,
	JV_INT,                     /* a number that is an integer (JavaScript doubles both) */
	JV_FLOAT,
	JV_STR,
	JV_ARRAY,
	JV_TUPLE,
	JV_OBJECT,
	JV_KWARGS,                  /* keyword arguments, as the reference passes them */
	JV_NS,                      /* namespace() */
	JV_FUNC,
};

struct jarr;
struct jobj;
struct jfn;

struct jv {
	enum jv_type t;
	size_t len;                 /* JV_STR */
	union {
		bool b;
		double n;
		const char *s;
		struct jarr *a;         /* JV_ARRAY, JV_TUPLE */
		struct jobj *o;         /* JV_OBJECT, JV_KWARGS, JV_NS */
		struct jfn *f;
	} u;
};

struct jarr {
	size_t n, cap;
	struct jv *v;
};

/* A dict key: a string, or (Jinja2's, an extension) a number, kept as its
 * text so that 1 and 1.0 are one key, as in Python. */
struct jkey {
	const char *p;
	size_t n;
	enum jv_type num;           /* JV_STR, or JV_INT / JV_FLOAT for a number key */
	double d;
};

/* An ordered map with string keys (insertion order, as a JavaScript Map). */
struct jobj {
	size_t n, cap;
	struct jkey *keys;
	struct jv *vals;
	uint32_t *idx;              /* hash -> index + 1, once there are more than 16 keys */
	size_t idx_cap;
	bool is_loop;               /* a for loop's `loop` (for loop.cycle) */
	size_t loop_i;
};

enum jfn_kind {
	JF_MACRO,
	JF_CALLER,                  /* a call block's body */
	JF_GLOBAL,                  /* id: enum jglobal */
	JF_METHOD,                  /* id: enum jmethod, bound to self */
	JF_CYCLE,                   /* loop.cycle, bound to loop_i */
};

struct jnode;
struct jenv;

struct jfn {
	enum jfn_kind kind;
	int id;
	struct jv self;
	const struct jnode *node;
	struct jenv *env;
	size_t loop_i;
};

static inline struct jv jv_undef(void)
{
	struct jv v = { .t = JV_UNDEF };
	return v;
}

static inline struct jv jv_null(void)
{
	struct jv v = { .t = JV_NULL };
	return v;
}

static inline struct jv jv_bool(bool b)
{
	struct jv v = { .t = JV_BOOL, .u.b = b };
	return v;
}

static inline struct jv jv_int(double n)
{
	struct jv v = { .t = JV_INT, .u.n = n };
	return v;
}

static inline struct jv jv_float(double n)
{
	struct jv v = { .t = JV_FLOAT, .u.n = n };
	return v;
}

static inline struct jv jv_str(const char *s, size_t n)
{
	struct jv v = { .t = JV_STR, .len = n, .u.s = s };
	return v;
}

static inline struct jv jv_arr(enum jv_type t, struct jarr *a)
{
	struct jv v = { .t = t, .u.a = a };
	return v;
}

static inline struct jv jv_obj(enum jv_type t, struct jobj *o)
{
	struct jv v = { .t = t, .u.o = o };
	return v;
}

static inline struct jv jv_fn(struct jfn *f)
{
	struct jv v = { .t = JV_FUNC, .u.f = f };
	return v;
}

static inline bool jv_is_num(struct jv v)
{
	return v.t == JV_INT || v.t == JV_FLOAT;
}

static inline bool jv_is_arr(struct jv v)
{
	return v.t == JV_ARRAY || v.t == JV_TUPLE;
}

/* An object in the reference's sense (a Map): dict, kwargs. */
static inline bool jv_is_dict(struct jv v)
{
	return v.t == JV_OBJECT || v.t == JV_KWARGS;
}

/* Has attributes: dict, kwargs, namespace. */
static inline bool jv_is_attrs(struct jv v)
{
	return v.t == JV_OBJECT || v.t == JV_KWARGS || v.t == JV_NS;
}

struct jarr *exl_jarr_new(struct jctx *c, size_t cap);
int exl_jarr_push(struct jctx *c, struct jarr *a, struct jv v);
struct jobj *exl_jobj_new(struct jctx *c, size_t cap);
/* Adds or replaces (a replaced key keeps its place). */
int exl_jobj_set(struct jctx *c, struct jobj *o, const char *k, size_t kn, struct jv v);
/* The value's slot, or NULL. */
struct jv *exl_jobj_get(const struct jobj *o, const char *k, size_t kn);
/* The same with a key value: a string or a number (else NULL, -1). */
struct jv *exl_jobj_get_v(const struct jobj *o, struct jv key);
int exl_jobj_set_v(struct jctx *c, struct jobj *o, struct jv key, struct jv v);
/* A key as a value. */
struct jv exl_jkey_value(const struct jkey *k);
/* Makes a string value from a buffer's bytes (copied when the buffer will be reused). */
struct jv exl_jv_from_buf(const struct jbuf *b);
/* A copy of s in the arena; NULL after the message. */
char *exl_jstrdup(struct jctx *c, const char *s, size_t n);

/* The reference's type name, for messages ("UndefinedValue", ...). */
const char *exl_jv_type_name(struct jv v);
/* Python truthiness as the reference computes it. */
bool exl_jv_truthy(struct jv v);

/* JavaScript's Number#toString; returns the length (out has room for 32). */
size_t exl_jnum_fmt(double d, char *out);

/* What printing a value writes ({{ v }}: the reference's toString()):
 * numbers as JavaScript prints them, floats with ".0" when whole, true /
 * false, lists and dicts as JSON. */
int exl_jv_print(struct jctx *c, unsigned line, struct jbuf *b, struct jv v);
/* JavaScript's String(v.value): what `~` and `+` concatenate. */
int exl_jv_js_str(struct jctx *c, unsigned line, struct jbuf *b, struct jv v);
/* Python's str(v), for the Jinja2 filters the reference lacks (`|string`
 * of a dict, `|trim` of a list): None, True, {'a': 1}. */
int exl_jv_py_str(struct jctx *c, unsigned line, struct jbuf *b, struct jv v);

struct jjson_opts {
	int indent;                 /* 0: none */
	bool ensure_ascii;
	bool sort_keys;
	const char *item_sep, *key_sep;  /* NULL: the defaults */
	size_t item_sep_len, key_sep_len;
	bool undefined_as_null;     /* tojson: null; printing: undefined */
};
int exl_jv_tojson(struct jctx *c, unsigned line, struct jbuf *b, struct jv v,
		  const struct jjson_opts *o);

/* JavaScript's == on the values (the reference compares with it). */
int exl_jv_loose_eq(struct jctx *c, unsigned line, struct jv a, struct jv b, bool *eq);
/* Python's == (Jinja2's, past the reference): lists and dicts by value. */
bool exl_jv_py_eq(struct jv a, struct jv b, int depth);
/* JavaScript's === (in, tests), and SameValueZero (unique). */
bool exl_jv_strict_eq(struct jv a, struct jv b);
bool exl_jv_same_value_zero(struct jv a, struct jv b);
/* The reference's compareRuntimeValues (sort, dictsort): -1, 0, 1 in *r. */
int exl_jv_compare(struct jctx *c, unsigned line, struct jv a, struct jv b, bool case_sensitive,
		   int *r);
/* A stable sort (as Array#sort) of v[0..n) by exl_jv_compare of key(arg,
 * item) (key NULL: the items), tmp n entries of scratch.  A failed compare
 * sets err (its message is in c) and leaves v in some order. */
struct exl_jv_sort {
	struct jctx *c;
	unsigned line;
	bool case_sensitive, reverse;
	struct jv (*key)(const void *arg, struct jv v);
	const void *arg;
	int err;
};
void exl_jv_sort(struct exl_jv_sort *s, struct jv *v, struct jv *tmp, size_t n);

struct exl_json;
/* The context's JSON as values (strings borrowed from the document; object
 * keys in JavaScript's Object.entries order). */
int exl_jv_from_json(struct jctx *c, const struct exl_json *j, struct jv *out, int depth);

/* ---- text ---- */

/* Decodes one character of an internal string (never fails: a stray byte
 * is returned as itself, length 1). */
size_t exl_jt_decode(const char *s, size_t n, uint32_t *cp);
/* JavaScript's \s. */
bool exl_jt_is_space(uint32_t cp);
/* The index of the first non-space (exl_jt_is_space) code point at or
 * after i. */
size_t exl_jt_skip_space(const char *s, size_t n, size_t i);
/* ASCII \w. */
static inline bool jt_is_word(int ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       ch == '_';
}
/* trim / trimStart / trimEnd: a slice of s. */
void exl_jt_trim(const char *s, size_t n, bool start, bool end, const char **os, size_t *on);
/* The UTF-16 length (JavaScript's .length). */
size_t exl_jt_utf16_len(const char *s, size_t n);
/* The code unit at UTF-16 index i (< the UTF-16 length) as a one-unit
 * string, as JavaScript's .at(): half of a pair is a lone surrogate.  -1
 * when out of memory. */
int exl_jt_unit_at(struct jctx *c, const char *s, size_t n, size_t i, struct jv *out);
/* toUpperCase / toLowerCase. */
int exl_jt_upper(struct jctx *c, struct jbuf *b, const char *s, size_t n);
int exl_jt_lower(struct jctx *c, struct jbuf *b, const char *s, size_t n);
/* JavaScript's < on strings (UTF-16 code unit order): <0, 0, >0. */
int exl_jt_cmp(const char *a, size_t an, const char *b, size_t bn);
/* String#localeCompare in the en-US locale (tojson's sort_keys), close
 * enough for keys: ICU's order for ASCII, code points beyond. */
int exl_jt_locale_cmp(const char *a, size_t an, const char *b, size_t bn);
/* Number(s), parseInt(s, 10), parseFloat(s): NaN when not a number. */
double exl_jt_to_number(const char *s, size_t n);
double exl_jt_parse_int(const char *s, size_t n);
double exl_jt_parse_float(const char *s, size_t n);
/* Template source -> well-formed UTF-8 (each bad sequence U+FFFD, as the
 * WHATWG decoder Node reads files with). */
int exl_jt_sanitize(struct jctx *c, const char *s, size_t n, char **out, size_t *on);
/* Generalized UTF-8 -> UTF-8 in place, as Node encodes a string: a high and
 * a low surrogate that meet become their character, a lone one U+FFFD.
 * Returns the new length. */
size_t exl_jt_fix_surrogates(char *s, size_t n);

/* ---- lexer and parser ---- */

enum jtok {
	T_EOF,
	T_TEXT,
	T_NUM,
	T_STR,
	T_IDENT,
	T_EQUALS,
	T_LPAREN,
	T_RPAREN,
	T_OPEN_STMT,
	T_CLOSE_STMT,
	T_OPEN_EXPR,
	T_CLOSE_EXPR,
	T_LBRACKET,
	T_RBRACKET,
	T_LBRACE,
	T_RBRACE,
	T_COMMA,
	T_DOT,
	T_COLON,
	T_PIPE,
	T_ADD,                      /* + - ~ */
	T_MUL,                      /* * / // % */
	T_POW,
	T_CMP,                      /* < > <= >= == != */
	T_UNARY,                    /* - + before an operand */
	T_COMMENT,
};

struct jtoken {
	enum jtok t;
	const char *p;
	size_t n;
	size_t off;                 /* in the lexed text */
};

/* Preprocesses (the reference's trim_blocks, lstrip_blocks, trailing
 * newline and {% generation %} handling) and tokenizes; c->src and the
 * line table are set for messages. */
int exl_jinja_lex(struct jctx *c, const char *src, size_t n, struct jtoken **toks, size_t *ntoks);

enum jnode_kind {
	JN_TEXT,
	JN_COMMENT,
	JN_INT,
	JN_FLOAT,
	JN_STR,
	JN_ARRAY,
	JN_TUPLE,
	JN_OBJECT,
	JN_IDENT,
	JN_MEMBER,
	JN_SLICE,
	JN_CALL,
	JN_KWARG,
	JN_SPREAD,
	JN_KWSPREAD,
	JN_BINARY,
	JN_UNARY,
	JN_FILTER,
	JN_TEST,
	JN_SELECT,
	JN_TERNARY,
	JN_IF,
	JN_FOR,
	JN_SET,
	JN_MACRO,
	JN_CALLBLOCK,
	JN_FILTERBLOCK,
	JN_BREAK,
	JN_CONTINUE,
};

enum jop {
	OP_NONE,
	OP_OR,
	OP_AND,
	OP_NOT,
	OP_EQ,
	OP_NE,
	OP_LT,
	OP_GT,
	OP_LE,
	OP_GE,
	OP_IN,
	OP_NOTIN,
	OP_ADD,
	OP_SUB,
	OP_CONCAT,
	OP_MUL,
	OP_DIV,
	OP_FLOORDIV,
	OP_MOD,
	OP_POW,
};

struct jlist {
	size_t n;
	struct jnode **v;
};

/* One node.  Which fields a kind uses:
 *   TEXT, STR: s        INT, FLOAT: num        IDENT: s
 *   ARRAY, TUPLE: l1    OBJECT: l1 keys, l2 values
 *   MEMBER: a object, b property, flag computed     SLICE: a, b, c (any NULL)
 *   CALL: a callee, l1 args      KWARG: s name, a value      SPREAD, KWSPREAD: a
 *   BINARY: op, a, b   UNARY: op (OP_NOT, OP_SUB, OP_ADD), a
 *   FILTER: a operand, b filter (IDENT or CALL)
 *   TEST: a operand, s name, flag negated, l1 arguments (Jinja2's, an extension)
 *   SELECT: a value, b condition (`a if b` without else)
 *   TERNARY: a condition, b then, c else
 *   IF: a test, l1 body, l2 else         FOR: a target, b iterable, l1 body, l2 else
 *   SET: a target, b value (NULL: l1 is the block)
 *   MACRO: s name, l1 parameters (IDENT or KWARG), l2 body, op: JM_USES_* bits
 *   CALLBLOCK: a the CALL, l1 caller's parameters, l2 body, op: JM_USES_* bits
 *   FILTERBLOCK: a filter (IDENT or CALL), l1 body */
struct jnode {
	enum jnode_kind k;
	int op;
	unsigned line;
	bool flag;
	const char *s;
	size_t sn;
	double num;
	struct jnode *a, *b, *c;
	struct jlist l1, l2;
};

#define JM_USES_KWARGS 1
#define JM_USES_VARARGS 2

int exl_jinja_parse(struct jctx *c, const struct jtoken *toks, size_t ntoks, struct jlist *prog);

/* ---- evaluation ---- */

struct jenv {
	struct jenv *parent;
	struct jobj vars;
	bool has_namespace;         /* `namespace` set here (every scope has its own builtin) */
};

struct jenv *exl_jenv_new(struct jctx *c, struct jenv *parent);
int exl_jenv_set(struct jctx *c, struct jenv *e, const char *name, size_t n, struct jv v);

/* Runs the program into out. */
int exl_jinja_run(struct jctx *c, const struct jlist *prog, struct jenv *globals, struct jbuf *out);

/* Evaluated call arguments: positional, then keyword (kw NULL when none). */
struct jargs {
	size_t n;
	struct jv *v;
	struct jobj *kw;
};

/* A keyword argument, or NULL. */
struct jv *exl_jargs_kw(const struct jargs *a, const char *name);
/* Argument i when given positionally, else keyword kw when given (kw may
 * be NULL), else dflt. */
struct jv exl_jargs_get(const struct jargs *a, size_t i, const char *kw, struct jv dflt);

/* Filters: name applied to v; `called` when written with parentheses. */
int exl_jinja_filter(struct jctx *c, unsigned line, const char *name, size_t nlen, bool called,
		     struct jv v, const struct jargs *args, struct jv *out);

/* Tests: `v is name(args)`. */
int exl_jinja_test(struct jctx *c, unsigned line, const char *name, size_t nlen, struct jv v,
		   const struct jargs *args, bool *res);

/* Attribute lookup on a value that is not a dict's own key: string and list
 * `length`, bound methods.  False when there is none. */
bool exl_jinja_builtin_attr(struct jctx *c, struct jv self, const char *name, size_t n,
			    struct jv *out, int *err);
/* Calls self's method `name` (for the filters that are methods as well). */
int exl_jinja_method(struct jctx *c, unsigned line, struct jv self, const char *name,
		     const struct jargs *a, struct jv *out);
/* Calls a JF_GLOBAL, JF_METHOD or JF_CYCLE function. */
int exl_jinja_call_builtin(struct jctx *c, unsigned line, const struct jfn *f,
			   const struct jargs *args, struct jv *out);

/* The global functions: raise_exception, range, strftime_now (namespace is
 * in every scope). */
enum jglobal {
	JG_RAISE,
	JG_RANGE,
	JG_STRFTIME,
	JG_NAMESPACE,
	JG_COUNT,
};
const char *exl_jinja_global_name(int id);

#endif
