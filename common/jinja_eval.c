/* The interpreter: statements write into the block's buffer, expressions
 * make values.  Scoping is the reference's: a for loop has one scope for
 * all its iterations, a macro's scope is a child of its caller's (not of
 * where it was defined), a call block's body sees where it was written.
 * break and continue discard what their iteration wrote, as the
 * reference's exceptions do. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/jinja.h"

/* Statuses besides 0 and -1. */
#define ST_BREAK 1
#define ST_CONTINUE 2

static int eval(struct jctx *c, const struct jnode *n, struct jenv *e, struct jv *out);
static int member_of(struct jctx *c, unsigned line, struct jv obj, struct jv prop,
		     struct jv *out);
static int exec_block(struct jctx *c, const struct jlist *l, struct jenv *e, struct jbuf *b);

struct jenv *exl_jenv_new(struct jctx *c, struct jenv *parent)
{
	struct jenv *e = exl_jalloc(c, sizeof(*e));

	if (e)
		e->parent = parent;
	return e;
}

static bool is_name(const char *s, size_t n, const char *name)
{
	return strlen(name) == n && !memcmp(s, name, n);
}

int exl_jenv_set(struct jctx *c, struct jenv *e, const char *name, size_t n, struct jv v)
{
	if (is_name(name, n, "namespace"))
		e->has_namespace = true;
	return exl_jobj_set(c, &e->vars, name, n, v);
}

/* namespace(): one function value for every scope (it is never written). */
static struct jfn namespace_global = { .kind = JF_GLOBAL, .id = JG_NAMESPACE };

static struct jv lookup(struct jenv *e, const char *name, size_t n)
{
	/* every scope holds its own builtin namespace, so the innermost decides */
	if (is_name(name, n, "namespace")) {
		struct jv *v = e->has_namespace ? exl_jobj_get(&e->vars, name, n) : NULL;

		return v ? *v : jv_fn(&namespace_global);
	}
	for (; e; e = e->parent) {
		struct jv *v = exl_jobj_get(&e->vars, name, n);

		if (v)
			return *v;
	}
	return jv_undef();
}

static int enter(struct jctx *c, const struct jnode *n)
{
	if (++c->depth > JINJA_MAX_DEPTH)
		return exl_jfail(c, n->line, "nested over %d deep (a recursive macro?)",
				 JINJA_MAX_DEPTH);
	return exl_jstep(c, 1);
}

/* ---- calls ---- */

static int eval_args(struct jctx *c, const struct jlist *l, struct jenv *e, struct jargs *a)
{
	struct jarr *pos = exl_jarr_new(c, l->n);

	if (!pos)
		return -1;
	a->kw = NULL;
	/* positional (and * unpacking) first, then keywords, as the reference */
	for (size_t i = 0; i < l->n; i++) {
		const struct jnode *n = l->v[i];
		struct jv v;
		int rc;

		if (n->k == JN_KWARG || n->k == JN_KWSPREAD)
			continue;
		if ((rc = eval(c, n->k == JN_SPREAD ? n->a : n, e, &v)))
			return rc;
		if (n->k != JN_SPREAD) {
			if (exl_jarr_push(c, pos, v))
				return -1;
			continue;
		}
		if (!jv_is_arr(v))
			return exl_jfail(c, n->line, "cannot unpack non-iterable type: %s",
					 exl_jv_type_name(v));
		for (size_t j = 0; j < v.u.a->n; j++)
			if (exl_jarr_push(c, pos, v.u.a->v[j]))
				return -1;
	}
	for (size_t i = 0; i < l->n; i++) {
		const struct jnode *n = l->v[i];
		struct jv v;
		int rc;

		if (n->k != JN_KWARG && n->k != JN_KWSPREAD)
			continue;
		if ((rc = eval(c, n->a, e, &v)))
			return rc;
		if (!a->kw && !(a->kw = exl_jobj_new(c, 4)))
			return -1;
		if (n->k == JN_KWARG) {
			if (exl_jobj_get(a->kw, n->s, n->sn))
				return exl_jfail(c, n->line,
						 "got multiple values for keyword argument '%.*s'",
						 (int)n->sn, n->s);
			if (exl_jobj_set(c, a->kw, n->s, n->sn, v))
				return -1;
			continue;
		}
		if (!jv_is_dict(v))
			return exl_jfail(c, n->line, "argument after ** must be a mapping, not %s",
					 exl_jv_type_name(v));
		for (size_t j = 0; j < v.u.o->n; j++) {
			const struct jkey *k = &v.u.o->keys[j];

			if (exl_jobj_get(a->kw, k->p, k->n))
				return exl_jfail(c, n->line,
						 "got multiple values for keyword argument '%.*s'",
						 (int)k->n, k->p);
			if (exl_jobj_set(c, a->kw, k->p, k->n, v.u.o->vals[j]))
				return -1;
		}
	}
	a->n = pos->n;
	a->v = pos->v;
	return 0;
}

/* A macro's or call block's parameters bound in scope: positional, then by
 * keyword, defaults last (they may use the others). */
static int bind_params(struct jctx *c, unsigned line, const char *who, const struct jlist *params,
		       int special, const struct jargs *a, struct jenv *scope)
{
	size_t nkw = a->kw ? a->kw->n : 0;
	bool *used = NULL;
	int rc;

	if (nkw && !(used = exl_jalloc_array(c, nkw, sizeof(*used))))
		return -1;
	for (size_t i = 0; i < params->n; i++) {
		const struct jnode *p = params->v[i];
		struct jv v = jv_undef();
		bool have = false;

		if (i < a->n) {
			v = a->v[i];
			have = true;
		}
		for (size_t k = 0; !have && k < nkw; k++) {
			const struct jkey *key = &a->kw->keys[k];

			if (!used[k] && key->n == p->sn && !memcmp(key->p, p->s, p->sn)) {
				v = a->kw->vals[k];
				used[k] = true;
				have = true;
			}
		}
		if (exl_jenv_set(c, scope, p->s, p->sn, v))
			return -1;
	}
	if (special & JM_USES_KWARGS) {
		struct jobj *rest = exl_jobj_new(c, nkw);

		if (!rest)
			return -1;
		for (size_t k = 0; k < nkw; k++)
			if (!used[k] && exl_jobj_set(c, rest, a->kw->keys[k].p, a->kw->keys[k].n,
						     a->kw->vals[k]))
				return -1;
		if (exl_jenv_set(c, scope, "kwargs", 6, jv_obj(JV_OBJECT, rest)))
			return -1;
	} else {
		for (size_t k = 0; k < nkw; k++)
			if (!used[k])
				return exl_jfail(c, line,
						 "macro %s takes no keyword argument '%.*s'", who,
						 (int)a->kw->keys[k].n, a->kw->keys[k].p);
	}
	if (special & JM_USES_VARARGS) {
		struct jarr *rest = exl_jarr_new(c, 0);

		if (!rest)
			return -1;
		for (size_t i = params->n; i < a->n; i++)
			if (exl_jarr_push(c, rest, a->v[i]))
				return -1;
		if (exl_jenv_set(c, scope, "varargs", 7, jv_arr(JV_ARRAY, rest)))
			return -1;
	} else if (a->n > params->n) {
		return exl_jfail(c, line, "macro %s takes not more than %zu argument(s)", who,
				 params->n);
	}
	/* defaults of parameters that got nothing */
	for (size_t i = 0; i < params->n; i++) {
		const struct jnode *p = params->v[i];
		bool given = i < a->n;
		struct jv v;

		if (p->k != JN_KWARG)
			continue;
		for (size_t k = 0; !given && k < nkw; k++)
			given = a->kw->keys[k].n == p->sn &&
				!memcmp(a->kw->keys[k].p, p->s, p->sn);
		if (given)
			continue;
		if ((rc = eval(c, p->a, scope, &v)))
			return rc;
		if (exl_jenv_set(c, scope, p->s, p->sn, v))
			return -1;
	}
	return 0;
}

/* Calls f with a; `env` is the caller's scope (a macro's parent). */
static int call_fn(struct jctx *c, unsigned line, const struct jfn *f, const struct jargs *a,
		   struct jenv *env, struct jv *out)
{
	struct jbuf b = { 0 };
	struct jenv *scope;
	char who[80];
	int rc;

	switch (f->kind) {
	case JF_MACRO:
		scope = exl_jenv_new(c, env);
		if (!scope)
			return -1;
		snprintf(who, sizeof(who), "'%.*s'", (int)(f->node->sn > 60 ? 60 : f->node->sn),
			 f->node->s);
		if ((rc = bind_params(c, line, who, &f->node->l1, f->node->op, a, scope)) ||
		    (rc = exec_block(c, &f->node->l2, scope, &b)))
			return rc;
		*out = exl_jv_from_buf(&b);
		return 0;
	case JF_CALLER:
		scope = exl_jenv_new(c, f->env);
		if (!scope)
			return -1;
		if ((rc = bind_params(c, line, "None", &f->node->l1, f->node->op, a, scope)) ||
		    (rc = exec_block(c, &f->node->l2, scope, &b)))
			return rc;
		*out = exl_jv_from_buf(&b);
		return 0;
	default:
		return exl_jinja_call_builtin(c, line, f, a, out);
	}
}

static int eval_call(struct jctx *c, const struct jnode *n, struct jenv *e, struct jv *out)
{
	struct jargs a;
	struct jv fn;
	int rc;

	if ((rc = eval_args(c, &n->l1, e, &a)))
		return rc;
	if (n->a->k == JN_MEMBER && !n->a->flag && n->a->b->k == JN_IDENT) {
		/* obj.name(...): a dict's key "items" does not hide items() when
		 * called, as in Jinja2 (the reference raises) */
		struct jv obj, name = jv_str(n->a->b->s, n->a->b->sn);
		int err = 0;

		if ((rc = eval(c, n->a->a, e, &obj)) ||
		    (rc = member_of(c, n->line, obj, name, &fn)))
			return rc;
		if (fn.t != JV_FUNC && jv_is_dict(obj)) {
			if (!exl_jinja_builtin_attr(c, obj, name.u.s, name.len, &fn, &err) && err)
				return -1;
			jbeyond(c);
		}
	} else if ((rc = eval(c, n->a, e, &fn))) {
		return rc;
	}
	if (fn.t != JV_FUNC)
		return exl_jfail(c, n->line, "cannot call something that is not a function: got %s",
				 exl_jv_type_name(fn));
	return call_fn(c, n->line, fn.u.f, &a, e, out);
}

static int exec_callblock(struct jctx *c, const struct jnode *n, struct jenv *e, struct jv *out)
{
	const struct jnode *call = n->a;
	struct jfn *caller = exl_jalloc(c, sizeof(*caller));
	struct jenv *inner;
	struct jargs a;
	struct jv fn;
	int rc;

	if (!caller)
		return -1;
	caller->kind = JF_CALLER;
	caller->node = n;
	caller->env = e;
	if ((rc = eval_args(c, &call->l1, e, &a)) || (rc = eval(c, call->a, e, &fn)))
		return rc;
	if (fn.t != JV_FUNC)
		return exl_jfail(c, n->line, "cannot call something that is not a function: got %s",
				 exl_jv_type_name(fn));
	inner = exl_jenv_new(c, e);
	if (!inner || exl_jenv_set(c, inner, "caller", 6, jv_fn(caller)))
		return -1;
	return call_fn(c, n->line, fn.u.f, &a, inner, out);
}

/* ---- members ---- */

static int slice_bound(struct jctx *c, const struct jnode *n, struct jenv *e, const char *what,
		       bool *set, double *v)
{
	struct jv x;
	int rc;

	*set = false;
	if (!n)
		return 0;
	if ((rc = eval(c, n, e, &x)))
		return rc;
	if (x.t == JV_UNDEF)
		return 0;
	if (x.t != JV_INT)
		return exl_jfail(c, n->line, "slice %s must be an integer or undefined", what);
	*set = true;
	*v = x.u.n;
	return 0;
}

/* Python's slicing as the reference's slice() does it (step 0: nothing). */
static void slice_range(double len, bool has_start, double start, bool has_stop, double stop,
			double step, double *from, double *to)
{
	if (step >= 0) {
		start = has_start ? start : 0;
		stop = has_stop ? stop : len;
		start = start < 0 ? fmax(len + start, 0) : fmin(start, len);
		stop = stop < 0 ? fmax(len + stop, 0) : fmin(stop, len);
	} else {
		start = has_start ? start : len - 1;
		stop = has_stop ? stop : -1;
		start = start < 0 ? fmax(len + start, -1) : fmin(start, len - 1);
		stop = stop < -1 ? fmax(len + stop, -1) : fmin(stop, len - 1);
	}
	*from = start;
	*to = stop;
}

static int eval_slice(struct jctx *c, const struct jnode *sl, struct jv obj, struct jenv *e,
		      struct jv *out)
{
	bool hs, ht, hp;
	double start = 0, stop = 0, step = 1, from, to, dir;
	int rc;

	if (!jv_is_arr(obj) && obj.t != JV_STR)
		return exl_jfail(c, sl->line, "slice object must be a list or a string");
	if ((rc = slice_bound(c, sl->a, e, "start", &hs, &start)) ||
	    (rc = slice_bound(c, sl->b, e, "stop", &ht, &stop)) ||
	    (rc = slice_bound(c, sl->c, e, "step", &hp, &step)))
		return rc;
	if (!hp)
		step = 1;
	dir = step > 0 ? 1 : step < 0 ? -1 : 0;
	if (jv_is_arr(obj)) {
		struct jarr *r = exl_jarr_new(c, 0);

		if (!r)
			return -1;
		slice_range((double)obj.u.a->n, hs, start, ht, stop, step, &from, &to);
		for (double i = from; dir * i < dir * to; i += step) {
			if (exl_jstep(c, 1) || exl_jarr_push(c, r, obj.u.a->v[(size_t)i]))
				return -1;
		}
		/* a tuple's slice: a list to the reference, a tuple in Jinja2 */
		*out = jv_arr(obj.t == JV_TUPLE && c->jinja2 ? JV_TUPLE : JV_ARRAY, r);
		return 0;
	}
	{
		/* a string slices by code points (Array.from) */
		size_t n = 0, i = 0, *at;
		struct jbuf b = { 0 };
		uint32_t cp;

		while (i < obj.len)
			i += exl_jt_decode(obj.u.s + i, obj.len - i, &cp), n++;
		at = exl_jalloc_array(c, n + 1, sizeof(*at));
		if (!at)
			return -1;
		for (i = 0, n = 0; i < obj.len; n++) {
			at[n] = i;
			i += exl_jt_decode(obj.u.s + i, obj.len - i, &cp);
		}
		at[n] = obj.len;
		slice_range((double)n, hs, start, ht, stop, step, &from, &to);
		if (step == 1 && from < to) {
			*out = jv_str(obj.u.s + at[(size_t)from], at[(size_t)to] - at[(size_t)from]);
			return 0;
		}
		for (double k = from; dir * k < dir * to; k += step) {
			size_t x = (size_t)k;

			if (exl_jstep(c, 1) ||
			    exl_jbuf_put(c, &b, obj.u.s + at[x], at[x + 1] - at[x]))
				return -1;
		}
		*out = exl_jv_from_buf(&b);
		return 0;
	}
}

/* obj.prop / obj[prop] once both are known. */
static int member_of(struct jctx *c, unsigned line, struct jv obj, struct jv prop,
		     struct jv *out)
{
	int err = 0;

	*out = jv_undef();
	if (obj.t == JV_UNDEF && c->jinja2)
		return exl_jfail(c, line, "an undefined value has no attributes or items");
	if (jv_is_attrs(obj)) {
		struct jv *v;

		if (prop.t != JV_STR) {
			/* a number key, or nothing: Jinja2's (the reference raises) */
			jbeyond(c);
			v = exl_jobj_get_v(obj.u.o, prop);
			if (v)
				*out = *v;
			return 0;
		}
		v = exl_jobj_get(obj.u.o, prop.u.s, prop.len);
		if (v)
			*out = *v;
		else if (obj.t != JV_NS)
			exl_jinja_builtin_attr(c, obj, prop.u.s, prop.len, out, &err);
		return err;
	}
	if (jv_is_arr(obj) || obj.t == JV_STR) {
		if (prop.t == JV_INT) {
			double i = trunc(prop.u.n);
			double len = obj.t == JV_STR ? (double)exl_jt_utf16_len(obj.u.s, obj.len) :
						       (double)obj.u.a->n;

			if (i < 0)
				i += len;
			if (!(i >= 0 && i < len))
				return 0;
			if (obj.t != JV_STR) {
				*out = obj.u.a->v[(size_t)i];
				return 0;
			}
			return exl_jt_unit_at(c, obj.u.s, obj.len, (size_t)i, out);
		}
		if (prop.t == JV_STR) {
			exl_jinja_builtin_attr(c, obj, prop.u.s, prop.len, out, &err);
			return err;
		}
		return exl_jfail(c, line,
				 "cannot access a property with a non-string or non-number: got %s",
				 exl_jv_type_name(prop));
	}
	if (prop.t != JV_STR)
		return exl_jfail(c, line, "cannot access a property with a non-string: got %s",
				 exl_jv_type_name(prop));
	exl_jinja_builtin_attr(c, obj, prop.u.s, prop.len, out, &err);
	return err;
}

static int eval_member(struct jctx *c, const struct jnode *n, struct jenv *e, struct jv *out)
{
	struct jv obj, prop;
	int rc;

	if ((rc = eval(c, n->a, e, &obj)))
		return rc;
	if (n->flag) {
		if (n->b->k == JN_SLICE)
			return eval_slice(c, n->b, obj, e, out);
		if ((rc = eval(c, n->b, e, &prop)))
			return rc;
	} else if (n->b->k == JN_INT) {
		prop = jv_int(n->b->num);
	} else {
		prop = jv_str(n->b->s, n->b->sn);
	}
	return member_of(c, n->line, obj, prop, out);
}

/* ---- operators ---- */

static bool numeric_like(struct jv v)
{
	return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
}

static double numeric(struct jv v)
{
	return v.t == JV_BOOL ? (double)v.u.b : v.u.n;
}

static const char *op_name(int op)
{
	static const char *const names[] = {
		[OP_NONE] = "?", [OP_OR] = "or", [OP_AND] = "and", [OP_NOT] = "not",
		[OP_EQ] = "==", [OP_NE] = "!=", [OP_LT] = "<", [OP_GT] = ">", [OP_LE] = "<=",
		[OP_GE] = ">=", [OP_IN] = "in", [OP_NOTIN] = "not in", [OP_ADD] = "+",
		[OP_SUB] = "-", [OP_CONCAT] = "~", [OP_MUL] = "*", [OP_DIV] = "/",
		[OP_FLOORDIV] = "//", [OP_MOD] = "%", [OP_POW] = "**",
	};

	return op >= 0 && op <= OP_POW ? names[op] : "?";
}

static int concat(struct jctx *c, unsigned line, struct jv a, struct jv b, struct jv *out)
{
	struct jbuf buf = { 0 };

	if (exl_jv_js_str(c, line, &buf, a) || exl_jv_js_str(c, line, &buf, b))
		return -1;
	*out = exl_jv_from_buf(&buf);
	return 0;
}

/* JavaScript's ** (1 ** NaN and (-1) ** Infinity are NaN there). */
static double js_pow(double a, double b)
{
	if (isnan(b) || (fabs(a) == 1 && isinf(b)))
		return NAN;
	return pow(a, b);
}

/* Python's 'ab' * 3 (the reference raises). */
static int repeat(struct jctx *c, struct jv s, double times, struct jv *out)
{
	struct jbuf b = { 0 };

	jbeyond(c);
	for (double i = 0; i < times; i++)
		if (exl_jbuf_put(c, &b, s.u.s, s.len))
			return -1;
	*out = exl_jv_from_buf(&b);
	return 0;
}

static bool str_contains(const char *h, size_t hn, const char *nd, size_t nn)
{
	return !nn || memmem(h, hn, nd, nn) != NULL;
}

static int binary_op(struct jctx *c, const struct jnode *n, struct jv l, struct jv r,
		     struct jv *out)
{
	int op = n->op;

	if (op == OP_EQ || op == OP_NE) {
		bool eq;

		if (exl_jv_loose_eq(c, n->line, l, r, &eq))
			return -1;
		*out = jv_bool(op == OP_EQ ? eq : !eq);
		return 0;
	}
	if (op == OP_CONCAT && (l.t == JV_UNDEF || r.t == JV_UNDEF || l.t == JV_NULL ||
				r.t == JV_NULL)) {
		/* Jinja2's ~ takes anything: str(None) is "None", undefined "" */
		jbeyond(c);
		return concat(c, n->line, l, r, out);
	}
	if (l.t == JV_UNDEF || r.t == JV_UNDEF) {
		if (r.t == JV_UNDEF && (op == OP_IN || op == OP_NOTIN)) {
			*out = jv_bool(op == OP_NOTIN);
			return 0;
		}
		return exl_jfail(c, n->line, "cannot perform operation %s on undefined values",
				 op_name(op));
	}
	if (l.t == JV_NULL || r.t == JV_NULL)
		return exl_jfail(c, n->line, "cannot perform operation %s on null values",
				 op_name(op));
	if (op == OP_CONCAT)
		return concat(c, n->line, l, r, out);
	if (op == OP_POW && numeric_like(l) && numeric_like(r)) {
		double a = numeric(l), b = numeric(r), x;

		if (a == 0 && b < 0)
			return exl_jfail(c, n->line, "0.0 cannot be raised to a negative power");
		x = js_pow(a, b);
		if (!isfinite(x))
			return exl_jfail(c, n->line,
					 "exponentiation result is not a finite real number");
		*out = (l.t == JV_FLOAT || r.t == JV_FLOAT || b < 0) ? jv_float(x) : jv_int(x);
		return 0;
	}
	if (jv_is_num(l) && jv_is_num(r)) {
		double a = l.u.n, b = r.u.n;
		bool fl = l.t == JV_FLOAT || r.t == JV_FLOAT;

		switch (op) {
		case OP_ADD:
			*out = fl ? jv_float(a + b) : jv_int(a + b);
			return 0;
		case OP_SUB:
			*out = fl ? jv_float(a - b) : jv_int(a - b);
			return 0;
		case OP_MUL:
			*out = fl ? jv_float(a * b) : jv_int(a * b);
			return 0;
		case OP_DIV:
			*out = jv_float(a / b);
			return 0;
		case OP_FLOORDIV:
			*out = fl ? jv_float(floor(a / b)) : jv_int(floor(a / b));
			return 0;
		case OP_MOD:
			*out = fl ? jv_float(fmod(a, b)) : jv_int(fmod(a, b));
			return 0;
		case OP_LT:
			*out = jv_bool(a < b);
			return 0;
		case OP_GT:
			*out = jv_bool(a > b);
			return 0;
		case OP_GE:
			*out = jv_bool(a >= b);
			return 0;
		case OP_LE:
			*out = jv_bool(a <= b);
			return 0;
		}
	} else if (jv_is_arr(l) && jv_is_arr(r)) {
		if (op == OP_ADD) {
			struct jarr *a = exl_jarr_new(c, l.u.a->n + r.u.a->n);

			if (!a || exl_jstep(c, a->cap / 16))
				return -1;
			if (l.u.a->n)
				memcpy(a->v, l.u.a->v, l.u.a->n * sizeof(*a->v));
			if (r.u.a->n)
				memcpy(a->v + l.u.a->n, r.u.a->v, r.u.a->n * sizeof(*a->v));
			a->n = l.u.a->n + r.u.a->n;
			*out = jv_arr(JV_ARRAY, a);
			return 0;
		}
	} else if (jv_is_arr(r)) {
		if (op == OP_IN || op == OP_NOTIN) {
			bool found = false;

			if (exl_jstep(c, r.u.a->n / 16))
				return -1;
			for (size_t i = 0; !found && i < r.u.a->n; i++)
				found = c->jinja2 ? exl_jv_py_eq(r.u.a->v[i], l, 0) :
						    exl_jv_strict_eq(r.u.a->v[i], l);
			*out = jv_bool(op == OP_IN ? found : !found);
			return 0;
		}
	}
	if ((l.t == JV_STR || r.t == JV_STR) && op == OP_ADD) {
		if (c->jinja2 && (l.t != JV_STR || r.t != JV_STR))
			return exl_jfail(c, n->line,
					 "can only concatenate a string to a string, not %s",
					 exl_jv_type_name(l.t == JV_STR ? r : l));
		return concat(c, n->line, l, r, out);
	}
	if (l.t == JV_STR && r.t == JV_STR && (op == OP_IN || op == OP_NOTIN)) {
		bool found;

		if (exl_jstep(c, r.len / 16))
			return -1;
		found = str_contains(r.u.s, r.len, l.u.s, l.len);
		*out = jv_bool(op == OP_IN ? found : !found);
		return 0;
	}
	if (l.t == JV_STR && r.t == JV_STR &&
	    (op == OP_LT || op == OP_GT || op == OP_LE || op == OP_GE)) {
		/* Jinja2 orders strings (by code point) */
		size_t k = l.len < r.len ? l.len : r.len;
		int cmp = memcmp(l.u.s, r.u.s, k);

		if (!cmp)
			cmp = l.len < r.len ? -1 : l.len > r.len;
		jbeyond(c);
		*out = jv_bool(op == OP_LT ? cmp < 0 : op == OP_GT ? cmp > 0 :
			       op == OP_LE ? cmp <= 0 : cmp >= 0);
		return 0;
	}
	if (jv_is_dict(r) && (op == OP_IN || op == OP_NOTIN)) {
		/* a number key too: Jinja2's */
		bool found = exl_jobj_get_v(r.u.o, l) != NULL;

		if (l.t != JV_STR)
			jbeyond(c);
		*out = jv_bool(op == OP_IN ? found : !found);
		return 0;
	}
	if (op == OP_MUL && ((l.t == JV_STR && r.t == JV_INT) || (l.t == JV_INT && r.t == JV_STR)))
		return repeat(c, l.t == JV_STR ? l : r, l.t == JV_STR ? r.u.n : l.u.n, out);
	return exl_jfail(c, n->line, "unknown operator \"%s\" between %s and %s", op_name(op),
			 exl_jv_type_name(l), exl_jv_type_name(r));
}

static int eval_binary(struct jctx *c, const struct jnode *n, struct jenv *e, struct jv *out)
{
	struct jv l, r;
	int rc;

	if ((rc = eval(c, n->a, e, &l)))
		return rc;
	if (n->op == OP_AND || n->op == OP_OR) {
		if (exl_jv_truthy(l) == (n->op == OP_OR)) {
			*out = l;
			return 0;
		}
		return eval(c, n->b, e, out);
	}
	if ((rc = eval(c, n->b, e, &r)))
		return rc;
	return binary_op(c, n, l, r, out);
}

static int eval_unary(struct jctx *c, const struct jnode *n, struct jenv *e, struct jv *out)
{
	struct jv v;
	int rc;

	if ((rc = eval(c, n->a, e, &v)))
		return rc;
	if (n->op == OP_NOT) {
		*out = jv_bool(!exl_jv_truthy(v));
		return 0;
	}
	if (v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL) {
		double x = n->op == OP_SUB ? -numeric(v) : numeric(v);

		*out = v.t == JV_FLOAT ? jv_float(x) : jv_int(x);
		return 0;
	}
	return exl_jfail(c, n->line, "unknown operator \"%s\" for %s", op_name(n->op),
			 exl_jv_type_name(v));
}

/* ---- filters and tests ---- */

static int apply_filter(struct jctx *c, const struct jnode *f, struct jv v, struct jenv *e,
			struct jv *out)
{
	struct jargs a = { 0 };
	int rc;

	if (f->k == JN_IDENT)
		return exl_jinja_filter(c, f->line, f->s, f->sn, false, v, &a, out);
	if (f->k != JN_CALL || f->a->k != JN_IDENT)
		return exl_jfail(c, f->line, "a filter must be a name");
	if ((rc = eval_args(c, &f->l1, e, &a)))
		return rc;
	return exl_jinja_filter(c, f->line, f->a->s, f->a->sn, true, v, &a, out);
}

static int eval_test(struct jctx *c, const struct jnode *n, struct jenv *e, struct jv *out)
{
	struct jargs a = { 0 };
	struct jv v;
	bool r;
	int rc;

	if ((rc = eval(c, n->a, e, &v)))
		return rc;
	if (n->l1.n) {
		/* a test with arguments: Jinja2's */
		jbeyond(c);
		if ((rc = eval_args(c, &n->l1, e, &a)))
			return rc;
	}
	if (exl_jinja_test(c, n->line, n->s, n->sn, v, &a, &r))
		return -1;
	*out = jv_bool(n->flag ? !r : r);
	return 0;
}

/* ---- expressions ---- */

static int eval_inner(struct jctx *c, const struct jnode *n, struct jenv *e, struct jv *out)
{
	int rc;

	switch (n->k) {
	case JN_INT:
		*out = jv_int(n->num);
		return 0;
	case JN_FLOAT:
		*out = jv_float(n->num);
		return 0;
	case JN_STR:
	case JN_TEXT:
		*out = jv_str(n->s, n->sn);
		return 0;
	case JN_ARRAY:
	case JN_TUPLE: {
		struct jarr *a = exl_jarr_new(c, n->l1.n);

		if (!a)
			return -1;
		for (size_t i = 0; i < n->l1.n; i++)
			if ((rc = eval(c, n->l1.v[i], e, &a->v[i])))
				return rc;
		a->n = n->l1.n;
		*out = jv_arr(n->k == JN_ARRAY ? JV_ARRAY : JV_TUPLE, a);
		return 0;
	}
	case JN_OBJECT: {
		struct jobj *o = exl_jobj_new(c, n->l1.n);

		if (!o)
			return -1;
		for (size_t i = 0; i < n->l1.n; i++) {
			struct jv k, v;

			if ((rc = eval(c, n->l1.v[i], e, &k)))
				return rc;
			/* number keys: Jinja2's (the reference takes strings only) */
			if (k.t != JV_STR && k.t != JV_INT && k.t != JV_FLOAT && k.t != JV_BOOL)
				return exl_jfail(c, n->l1.v[i]->line,
						 "dict keys must be strings or numbers: got %s",
						 exl_jv_type_name(k));
			if (k.t != JV_STR)
				jbeyond(c);
			if ((rc = eval(c, n->l2.v[i], e, &v)))
				return rc;
			if (exl_jobj_set_v(c, o, k, v))
				return -1;
		}
		*out = jv_obj(JV_OBJECT, o);
		return 0;
	}
	case JN_IDENT:
		*out = lookup(e, n->s, n->sn);
		return 0;
	case JN_CALL:
		return eval_call(c, n, e, out);
	case JN_MEMBER:
		return eval_member(c, n, e, out);
	case JN_UNARY:
		return eval_unary(c, n, e, out);
	case JN_BINARY:
		return eval_binary(c, n, e, out);
	case JN_FILTER: {
		struct jv v;

		if ((rc = eval(c, n->a, e, &v)))
			return rc;
		return apply_filter(c, n->b, v, e, out);
	}
	case JN_TEST:
		return eval_test(c, n, e, out);
	case JN_SELECT: {
		struct jv t;

		if ((rc = eval(c, n->b, e, &t)))
			return rc;
		if (!exl_jv_truthy(t)) {
			*out = jv_undef();
			return 0;
		}
		return eval(c, n->a, e, out);
	}
	case JN_TERNARY: {
		struct jv t;

		if ((rc = eval(c, n->a, e, &t)))
			return rc;
		return eval(c, exl_jv_truthy(t) ? n->b : n->c, e, out);
	}
	default:
		return exl_jfail(c, n->line, "this cannot be evaluated here");
	}
}

static int eval(struct jctx *c, const struct jnode *n, struct jenv *e, struct jv *out)
{
	int rc;

	if (enter(c, n))
		return -1;
	rc = eval_inner(c, n, e, out);
	c->depth--;
	return rc;
}

/* ---- statements ---- */

/* The loop variable(s) of one item, set in scope. */
static int bind_target(struct jctx *c, const struct jnode *target, struct jv item,
		       struct jenv *scope)
{
	const struct jlist *names;

	if (target->k == JN_IDENT)
		return exl_jenv_set(c, scope, target->s, target->sn, item);
	names = &target->l1;
	/* a tuple item too: an extension (the reference unpacks only lists) */
	if (!jv_is_arr(item))
		return exl_jfail(c, target->line, "cannot unpack non-iterable type: %s",
				 exl_jv_type_name(item));
	if (item.t == JV_TUPLE)
		jbeyond(c);
	if (names->n != item.u.a->n)
		return exl_jfail(c, target->line, "too %s items to unpack",
				 names->n > item.u.a->n ? "few" : "many");
	for (size_t j = 0; j < names->n; j++) {
		if (names->v[j]->k != JN_IDENT)
			return exl_jfail(c, target->line, "cannot unpack to a non-name");
		if (exl_jenv_set(c, scope, names->v[j]->s, names->v[j]->sn, item.u.a->v[j]))
			return -1;
	}
	return 0;
}

static int count_iteration(struct jctx *c, unsigned line)
{
	if (++c->iterations > JINJA_MAX_ITERATIONS)
		return exl_jfail(c, line, "over 10,000,000 loop iterations");
	return 0;
}

/* `loop`: one object per loop, its values updated at each iteration, as
 * Jinja2's LoopContext (the reference makes a new one each time, which
 * differs only for a `loop` kept past its iteration); a million iterations
 * then cost no memory. */
static struct jobj *loop_object(struct jctx *c)
{
	static const char *const keys[] = { "index", "index0", "revindex", "revindex0", "first",
					    "last", "length", "previtem", "nextitem" };
	struct jobj *o = exl_jobj_new(c, 9);

	if (!o)
		return NULL;
	for (size_t k = 0; k < 9; k++)
		if (exl_jobj_set(c, o, keys[k], strlen(keys[k]), jv_undef()))
			return NULL;
	o->is_loop = true;
	return o;
}

static void loop_update(struct jobj *o, const struct jv *items, size_t n, size_t i)
{
	o->vals[0] = jv_int((double)i + 1);
	o->vals[1] = jv_int((double)i);
	o->vals[2] = jv_int((double)(n - i));
	o->vals[3] = jv_int((double)(n - i - 1));
	o->vals[4] = jv_bool(i == 0);
	o->vals[5] = jv_bool(i == n - 1);
	o->vals[6] = jv_int((double)n);
	o->vals[7] = i > 0 ? items[i - 1] : jv_undef();
	o->vals[8] = i + 1 < n ? items[i + 1] : jv_undef();
	o->loop_i = i;
}

static int exec_for(struct jctx *c, const struct jnode *n, struct jenv *e, struct jbuf *b)
{
	struct jenv *scope = exl_jenv_new(c, e);
	const struct jnode *cond = NULL;
	struct jarr *src, *items;
	struct jv it;
	bool any = false;
	int rc;

	if (!scope)
		return -1;
	if (n->b->k == JN_SELECT) {
		rc = eval(c, n->b->a, scope, &it);
		cond = n->b->b;
	} else {
		rc = eval(c, n->b, scope, &it);
	}
	if (rc)
		return rc;
	if (jv_is_dict(it)) {
		src = exl_jarr_new(c, it.u.o->n);
		if (!src)
			return -1;
		for (size_t i = 0; i < it.u.o->n; i++)
			src->v[i] = exl_jkey_value(&it.u.o->keys[i]);
		src->n = it.u.o->n;
	} else if (jv_is_arr(it)) {
		src = it.u.a;
	} else if (it.t == JV_UNDEF) {
		/* Jinja2's Undefined iterates as empty (the reference raises) */
		jbeyond(c);
		src = exl_jarr_new(c, 0);
		if (!src)
			return -1;
	} else if (it.t == JV_STR) {
		/* Jinja2 iterates a string's characters (the reference raises) */
		jbeyond(c);
		src = exl_jarr_new(c, 0);
		if (!src)
			return -1;
		for (size_t i = 0; i < it.len;) {
			uint32_t cp;
			size_t k = exl_jt_decode(it.u.s + i, it.len - i, &cp);

			if (exl_jarr_push(c, src, jv_str(it.u.s + i, k)))
				return -1;
			i += k;
		}
	} else {
		return exl_jfail(c, n->line, "expected an iterable in a for loop: got %s",
				 exl_jv_type_name(it));
	}
	/* the items first (the condition filters them, loop.length counts them) */
	items = src;
	if (cond) {
		/* one scope for the condition: it cannot set anything in it */
		struct jenv *ls = exl_jenv_new(c, scope);

		items = exl_jarr_new(c, 0);
		if (!items || !ls)
			return -1;
		for (size_t i = 0; i < src->n; i++) {
			struct jv t;

			if (count_iteration(c, n->line))
				return -1;
			if (bind_target(c, n->a, src->v[i], ls))
				return -1;
			if ((rc = eval(c, cond, ls, &t)))
				return rc;
			if (exl_jv_truthy(t) && exl_jarr_push(c, items, src->v[i]))
				return -1;
		}
	} else {
		for (size_t i = 0; i < src->n; i++)
			if (!jv_is_arr(src->v[i]) && n->a->k == JN_TUPLE)
				return exl_jfail(c, n->line, "cannot unpack non-iterable type: %s",
						 exl_jv_type_name(src->v[i]));
	}
	/* the items the loop started with: appending in the body (list.append)
	 * does not extend it, popping ends it early */
	{
		size_t count = items->n;
		struct jobj *loop = count ? loop_object(c) : NULL;

		if (count && !loop)
			return -1;
		for (size_t i = 0; i < count && i < items->n; i++) {
			size_t mark = b->n;

			loop_update(loop, items->v, count < items->n ? count : items->n, i);
			if (count_iteration(c, n->line) ||
			    exl_jenv_set(c, scope, "loop", 4, jv_obj(JV_OBJECT, loop)) ||
			    bind_target(c, n->a, items->v[i], scope))
				return -1;
			rc = exec_block(c, &n->l1, scope, b);
			if (rc == ST_CONTINUE) {
				b->n = mark;
				continue;
			}
			if (rc == ST_BREAK) {
				b->n = mark;
				break;
			}
			if (rc)
				return rc;
			any = true;
		}
	}
	if (!any)
		return exec_block(c, &n->l2, scope, b);
	return 0;
}

static int exec_set(struct jctx *c, const struct jnode *n, struct jenv *e)
{
	const struct jnode *t = n->a;
	struct jv v;
	int rc;

	if (n->b) {
		if ((rc = eval(c, n->b, e, &v)))
			return rc;
	} else {
		struct jbuf b = { 0 };

		if ((rc = exec_block(c, &n->l1, e, &b)))
			return rc;
		v = exl_jv_from_buf(&b);
	}
	if (t->k == JN_IDENT)
		return exl_jenv_set(c, e, t->s, t->sn, v);
	if (t->k == JN_TUPLE) {
		if (!jv_is_arr(v))
			return exl_jfail(c, n->line, "cannot unpack non-iterable type in set: %s",
					 exl_jv_type_name(v));
		if (v.u.a->n != t->l1.n)
			return exl_jfail(c, n->line, "too %s items to unpack in set",
					 t->l1.n > v.u.a->n ? "few" : "many");
		for (size_t i = 0; i < t->l1.n; i++) {
			const struct jnode *x = t->l1.v[i];

			if (x->k != JN_IDENT)
				return exl_jfail(c, n->line, "cannot unpack to a non-name in set");
			if (exl_jenv_set(c, e, x->s, x->sn, v.u.a->v[i]))
				return -1;
		}
		return 0;
	}
	if (t->k == JN_MEMBER) {
		struct jv obj;

		if ((rc = eval(c, t->a, e, &obj)))
			return rc;
		if (obj.t != JV_NS)
			return exl_jfail(c, n->line,
					 "cannot assign an attribute of a non-namespace object");
		if (t->b->k != JN_IDENT)
			return exl_jfail(c, n->line,
					 "cannot assign a member with a non-name property");
		return exl_jobj_set(c, obj.u.o, t->b->s, t->b->sn, v);
	}
	return exl_jfail(c, n->line, "cannot assign to this");
}

static int print_value(struct jctx *c, unsigned line, struct jbuf *b, struct jv v)
{
	/* none prints nothing in the reference, "None" in Jinja2 */
	if (v.t == JV_UNDEF || (v.t == JV_NULL && !c->jinja2))
		return 0;
	return exl_jv_print(c, line, b, v);
}

static int exec_stmt(struct jctx *c, const struct jnode *n, struct jenv *e, struct jbuf *b)
{
	struct jv v;
	int rc;

	switch (n->k) {
	case JN_TEXT:
		return exl_jbuf_put(c, b, n->s, n->sn);
	case JN_COMMENT:
		return 0;
	case JN_IF:
		if ((rc = eval(c, n->a, e, &v)))
			return rc;
		return exec_block(c, exl_jv_truthy(v) ? &n->l1 : &n->l2, e, b);
	case JN_FOR:
		return exec_for(c, n, e, b);
	case JN_SET:
		return exec_set(c, n, e);
	case JN_MACRO: {
		struct jfn *f = exl_jalloc(c, sizeof(*f));

		if (!f)
			return -1;
		f->kind = JF_MACRO;
		f->node = n;
		return exl_jenv_set(c, e, n->s, n->sn, jv_fn(f));
	}
	case JN_CALLBLOCK:
		if ((rc = exec_callblock(c, n, e, &v)))
			return rc;
		return print_value(c, n->line, b, v);
	case JN_FILTERBLOCK: {
		struct jbuf body = { 0 };

		if ((rc = exec_block(c, &n->l1, e, &body)) ||
		    (rc = apply_filter(c, n->a, exl_jv_from_buf(&body), e, &v)))
			return rc;
		return print_value(c, n->line, b, v);
	}
	case JN_BREAK:
		return ST_BREAK;
	case JN_CONTINUE:
		return ST_CONTINUE;
	default:
		if ((rc = eval(c, n, e, &v)))
			return rc;
		return print_value(c, n->line, b, v);
	}
}

static int exec_block(struct jctx *c, const struct jlist *l, struct jenv *e, struct jbuf *b)
{
	for (size_t i = 0; i < l->n; i++) {
		int rc;

		if (enter(c, l->v[i]))
			return -1;
		rc = exec_stmt(c, l->v[i], e, b);
		c->depth--;
		if (rc)
			return rc;
	}
	return 0;
}

int exl_jinja_run(struct jctx *c, const struct jlist *prog, struct jenv *globals, struct jbuf *out)
{
	int rc = exec_block(c, prog, globals, out);

	if (rc == ST_BREAK || rc == ST_CONTINUE)
		return exl_jfail(c, 0, "break or continue outside a loop");
	return rc;
}
