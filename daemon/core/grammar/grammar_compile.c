/* Rules over code-point classes -> rules over bytes, and the checks that
 * keep the matcher finite: every rule defined (the parser), no rule that
 * reaches itself without consuming input (left recursion would expand
 * forever), and every reachable rule able to finish.
 *
 * A class becomes its UTF-8 byte patterns: one character inline as bytes,
 * single-byte patterns only as one byte set, otherwise a rule whose
 * alternatives are the patterns (shared by every use of the same class).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/grammar/grammar.h"
#include "daemon/core/grammar/grammar_internal.h"

struct compiler {
	const struct ir *ir;
	const char *text;
	size_t len;
	struct exl_grammar *g;
	size_t cap_el, cap_sets, cap_alt;
	/* rule id -> first element; class rules appended after the ir's */
	uint32_t *rule_first;
	size_t n_rules, cap_rules;
	uint32_t *class_of_rule;   /* rule - ir rules -> ir class */
	uint32_t *class_hash;      /* class rules by their ranges: rule - ir rules + 1 */
	size_t class_hash_cap;
	uint32_t *set_hash;        /* byte set -> index + 1 */
	size_t set_hash_cap;
	struct utf8_seq *seqs;
	size_t n_seqs, cap_seqs;
	char *err;
	size_t errlen;
};

static int grow(void **ptr, size_t *cap, size_t need, size_t size)
{
	size_t c = *cap ? *cap : 16;
	void *q;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	q = realloc(*ptr, c * size);
	if (!q)
		return -1;
	*ptr = q;
	*cap = c;
	return 0;
}

static int oom(struct compiler *c)
{
	snprintf(c->err, c->errlen, "out of memory compiling the grammar");
	return -1;
}

static int emit(struct compiler *c, uint32_t type, uint32_t arg)
{
	struct exl_grammar *g = c->g;

	if (g->n_el >= 2 * EXL_GRAMMAR_MAX_ELEMS) {
		snprintf(c->err, c->errlen, "grammar too large: more than %u byte-level elements",
			 2 * EXL_GRAMMAR_MAX_ELEMS);
		return -1;
	}
	if (grow((void **)&g->el, &c->cap_el, (size_t)g->n_el + 1, sizeof(*g->el)))
		return oom(c);
	g->el[g->n_el].type = type;
	g->el[g->n_el].arg = arg;
	g->n_el++;
	return 0;
}

static uint64_t hash_bytes(const void *p, size_t n)
{
	const uint8_t *s = p;
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ s[i]) * 1099511628211ull;
	return h;
}

static int set_index(struct compiler *c, const uint32_t set[8], uint32_t *out)
{
	struct exl_grammar *g = c->g;

	if ((size_t)(g->n_sets + 1) * 2 > c->set_hash_cap) {
		size_t cap = c->set_hash_cap ? c->set_hash_cap * 2 : 64;
		uint32_t *h = calloc(cap, sizeof(*h));

		if (!h)
			return oom(c);
		for (uint32_t i = 0; i < g->n_sets; i++) {
			size_t j = hash_bytes(g->sets[i], 32) & (cap - 1);

			while (h[j])
				j = (j + 1) & (cap - 1);
			h[j] = i + 1;
		}
		free(c->set_hash);
		c->set_hash = h;
		c->set_hash_cap = cap;
	}
	size_t mask = c->set_hash_cap - 1;
	size_t j = hash_bytes(set, 32) & mask;

	for (; c->set_hash[j]; j = (j + 1) & mask) {
		if (!memcmp(g->sets[c->set_hash[j] - 1], set, 32)) {
			*out = c->set_hash[j] - 1;
			return 0;
		}
	}
	if (grow((void **)&g->sets, &c->cap_sets, (size_t)g->n_sets + 1, sizeof(*g->sets)))
		return oom(c);
	memcpy(g->sets[g->n_sets], set, 32);
	c->set_hash[j] = g->n_sets + 1;
	*out = g->n_sets++;
	return 0;
}

static int emit_range(struct compiler *c, uint8_t lo, uint8_t hi)
{
	uint32_t set[8] = { 0 }, id;

	if (lo == hi)
		return emit(c, GEL_BYTE, lo);
	for (unsigned b = lo; b <= hi; b++)
		set[b >> 5] |= 1u << (b & 31);
	return set_index(c, set, &id) ? -1 : emit(c, GEL_SET, id);
}

static int collect_seq(const struct utf8_seq *s, void *u)
{
	struct compiler *c = u;

	if (grow((void **)&c->seqs, &c->cap_seqs, c->n_seqs + 1, sizeof(*c->seqs)))
		return oom(c);
	c->seqs[c->n_seqs++] = *s;
	return 0;
}

static int class_seqs(struct compiler *c, uint32_t cls)
{
	const struct ir_class *k = &c->ir->classes[cls];

	c->n_seqs = 0;
	for (uint32_t i = 0; i < k->n; i++) {
		const uint32_t *r = &c->ir->ranges[k->first + 2 * i];

		if (exl_grammar_utf8_split_range(r[0], r[1], collect_seq, c))
			return -1;
	}
	return 0;
}

static int new_rule(struct compiler *c, uint32_t *id)
{
	if (grow((void **)&c->rule_first, &c->cap_rules, c->n_rules + 1, sizeof(*c->rule_first)))
		return oom(c);
	c->rule_first[c->n_rules] = UINT32_MAX;
	*id = (uint32_t)c->n_rules++;
	return 0;
}

/* Emits the class's rule body (after every ir rule's). */
static int emit_class_rule(struct compiler *c, uint32_t cls)
{
	uint32_t single[8] = { 0 };
	bool any_single = false, first = true;

	if (class_seqs(c, cls))
		return -1;
	for (size_t i = 0; i < c->n_seqs; i++) {
		const struct utf8_seq *s = &c->seqs[i];

		if (s->n != 1)
			continue;
		for (unsigned b = s->lo[0]; b <= s->hi[0]; b++)
			single[b >> 5] |= 1u << (b & 31);
		any_single = true;
	}
	if (any_single) {
		uint32_t id;

		if (set_index(c, single, &id) || emit(c, GEL_SET, id))
			return -1;
		first = false;
	}
	for (size_t i = 0; i < c->n_seqs; i++) {
		const struct utf8_seq *s = &c->seqs[i];

		if (s->n == 1)
			continue;
		if (!first && emit(c, GEL_ALT, 0))
			return -1;
		first = false;
		for (int j = 0; j < s->n; j++)
			if (emit_range(c, s->lo[j], s->hi[j]))
				return -1;
	}
	return emit(c, GEL_END, 0);
}

static int lower_class(struct compiler *c, uint32_t cls)
{
	const struct ir_class *k = &c->ir->classes[cls];
	const uint32_t *r = &c->ir->ranges[k->first];

	if (k->n == 1 && r[0] == r[1]) {
		uint8_t b[4];
		int n = exl_utf8_encode(r[0], b);

		for (int i = 0; i < n; i++)
			if (emit(c, GEL_BYTE, b[i]))
				return -1;
		return 0;
	}
	if (r[2 * k->n - 1] < 0x80) {
		uint32_t set[8] = { 0 }, id;

		for (uint32_t i = 0; i < k->n; i++)
			for (uint32_t b = r[2 * i]; b <= r[2 * i + 1]; b++)
				set[b >> 5] |= 1u << (b & 31);
		return set_index(c, set, &id) ? -1 : emit(c, GEL_SET, id);
	}
	/* Same ranges, same rule. */
	size_t n_class_rules = c->n_rules - c->ir->n_rules;

	if ((n_class_rules + 1) * 2 > c->class_hash_cap) {
		size_t cap = c->class_hash_cap ? c->class_hash_cap * 2 : 64;
		uint32_t *h = calloc(cap, sizeof(*h));

		if (!h)
			return oom(c);
		for (size_t i = 0; i < n_class_rules; i++) {
			const struct ir_class *o = &c->ir->classes[c->class_of_rule[i]];
			size_t j = hash_bytes(&c->ir->ranges[o->first], 2 * o->n * sizeof(*r)) & (cap - 1);

			while (h[j])
				j = (j + 1) & (cap - 1);
			h[j] = (uint32_t)i + 1;
		}
		free(c->class_hash);
		c->class_hash = h;
		c->class_hash_cap = cap;
	}
	size_t mask = c->class_hash_cap - 1;
	size_t j = hash_bytes(r, 2 * k->n * sizeof(*r)) & mask;

	for (; c->class_hash[j]; j = (j + 1) & mask) {
		uint32_t i = c->class_hash[j] - 1;
		const struct ir_class *o = &c->ir->classes[c->class_of_rule[i]];

		if (o->n == k->n && !memcmp(&c->ir->ranges[o->first], r, 2 * k->n * sizeof(*r)))
			return emit(c, GEL_REF, (uint32_t)(c->ir->n_rules + i));
	}
	uint32_t id;

	if (new_rule(c, &id))
		return -1;
	c->class_of_rule[id - c->ir->n_rules] = cls;
	c->class_hash[j] = (uint32_t)n_class_rules + 1;
	return emit(c, GEL_REF, id);
}

/* ---- checks ---- */

static const char *rule_name(const struct compiler *c, uint32_t r)
{
	if (r >= c->ir->n_rules)
		return "(character class)";
	return exl_ir_rule_name(c->ir, c->ir->rules[r].parent);
}

/* Iterates the alternatives' elements of rule r: calls f for each. */
static bool nullable_alt(const struct exl_grammar *g, uint32_t pos, const bool *nullable)
{
	for (const struct gel *e = &g->el[pos]; !gel_is_end(e); e++)
		if (e->type != GEL_REF || !nullable[e->arg])
			return false;
	return true;
}

static bool productive_alt(const struct exl_grammar *g, uint32_t pos, const bool *prod)
{
	for (const struct gel *e = &g->el[pos]; !gel_is_end(e); e++)
		if (e->type == GEL_REF && !prod[e->arg])
			return false;
	return true;
}

static void fixpoint(const struct exl_grammar *g, bool *flag,
		     bool (*alt_ok)(const struct exl_grammar *, uint32_t, const bool *))
{
	bool changed = true;

	while (changed) {
		changed = false;
		for (uint32_t r = 0; r < g->n_rules; r++) {
			if (flag[r])
				continue;
			for (uint32_t a = 0; a < g->rule_n_alt[r] && !flag[r]; a++)
				flag[r] = alt_ok(g, g->alt_start[g->rule_alt[r] + a], flag);
			changed |= flag[r];
		}
	}
}

/* Rules reachable from root, by an explicit stack. */
static int reachable(struct compiler *c, bool *seen)
{
	const struct exl_grammar *g = c->g;
	uint32_t *stack = malloc((size_t)g->n_rules * sizeof(*stack));
	size_t n = 0;

	if (!stack)
		return oom(c);
	seen[g->root] = true;
	stack[n++] = g->root;
	while (n) {
		uint32_t r = stack[--n];

		for (uint32_t a = 0; a < g->rule_n_alt[r]; a++)
			for (const struct gel *e = &g->el[g->alt_start[g->rule_alt[r] + a]];
			     !gel_is_end(e); e++)
				if (e->type == GEL_REF && !seen[e->arg]) {
					seen[e->arg] = true;
					stack[n++] = e->arg;
				}
	}
	free(stack);
	return 0;
}

/* Edges r -> s where s can come first in r (after nullable elements).  A
 * cycle is a rule reaching itself without input. */
static int left_recursion(struct compiler *c, const bool *nullable, const bool *seen)
{
	const struct exl_grammar *g = c->g;
	uint32_t n = g->n_rules;
	uint32_t *first = calloc((size_t)n + 1, sizeof(*first));
	uint32_t *edges = NULL, *stack = NULL, *next = NULL;
	uint8_t *state = NULL;
	size_t n_edges = 0, cap_edges = 0;
	int rc = -1;

	if (!first)
		return oom(c);
	for (uint32_t r = 0; r < n; r++) {
		first[r] = (uint32_t)n_edges;
		for (uint32_t a = 0; a < g->rule_n_alt[r]; a++) {
			for (const struct gel *e = &g->el[g->alt_start[g->rule_alt[r] + a]];
			     !gel_is_end(e); e++) {
				if (e->type != GEL_REF)
					break;
				if (grow((void **)&edges, &cap_edges, n_edges + 1, sizeof(*edges)))
					goto oom;
				edges[n_edges++] = e->arg;
				if (!nullable[e->arg])
					break;
			}
		}
	}
	first[n] = (uint32_t)n_edges;
	stack = malloc((size_t)n * sizeof(*stack));
	next = malloc((size_t)n * sizeof(*next));
	state = calloc(n, 1);
	if (!stack || !next || !state)
		goto oom;
	for (uint32_t s = 0; s < n; s++) {
		size_t sp = 0;

		if (state[s] || !seen[s])
			continue;
		stack[sp++] = s;
		next[s] = first[s];
		state[s] = 1;
		while (sp) {
			uint32_t r = stack[sp - 1];

			if (next[r] == first[r + 1]) {
				state[r] = 2;
				sp--;
				continue;
			}
			uint32_t t = edges[next[r]++];

			if (state[t] == 2)
				continue;
			if (state[t] == 0) {
				state[t] = 1;
				next[t] = first[t];
				stack[sp++] = t;
				continue;
			}
			/* t is on the stack: the cycle is stack[i..sp) -> t. */
			char path[512];
			size_t at = 0, i = 0;
			const char *prev = NULL;

			while (stack[i] != t)
				i++;
			for (; i <= sp && at < sizeof(path) - 8; i++) {
				const char *nm = rule_name(c, i < sp ? stack[i] : t);

				if (prev && !strcmp(prev, nm) && i < sp)
					continue;
				at += (size_t)snprintf(path + at, sizeof(path) - at, "%s%s",
						       prev ? " -> " : "", nm);
				prev = nm;
			}
			snprintf(c->err, c->errlen, "rule '%s' can reach itself without consuming "
				 "input (left recursion, or a repetition of something that can be "
				 "empty): %s", rule_name(c, t), path);
			goto out;
		}
	}
	rc = 0;
	goto out;
oom:
	oom(c);
out:
	free(first);
	free(edges);
	free(stack);
	free(next);
	free(state);
	return rc;
}

/* r cannot finish: follow unfinishable references from it until one
 * repeats, and name that cycle (seen is reused as scratch). */
static void unproductive(struct compiler *c, uint32_t r, const bool *prod, bool *seen)
{
	const struct exl_grammar *g = c->g;
	uint32_t *path = malloc(((size_t)g->n_rules + 1) * sizeof(*path));
	size_t n = 0;

	if (!path) {
		oom(c);
		return;
	}
	memset(seen, 0, g->n_rules * sizeof(*seen));
	while (!seen[r]) {
		seen[r] = true;
		path[n++] = r;
		/* Every alternative has an unfinishable reference; take the
		 * first alternative's. */
		for (const struct gel *e = &g->el[g->alt_start[g->rule_alt[r]]]; !gel_is_end(e); e++) {
			if (e->type == GEL_REF && !prod[e->arg]) {
				r = e->arg;
				break;
			}
		}
	}
	char text[512], where[64];
	size_t at = 0, i = 0;
	const char *prev = NULL;

	while (path[i] != r)
		i++;
	for (; i <= n && at < sizeof(text) - 8; i++) {
		const char *nm = rule_name(c, i < n ? path[i] : r);

		if (prev && !strcmp(prev, nm) && i < n)
			continue;
		at += (size_t)snprintf(text + at, sizeof(text) - at, "%s%s", prev ? " -> " : "", nm);
		prev = nm;
	}
	exl_ir_where(c->text, c->len, c->ir->rules[c->ir->rules[r].parent].def_at, where, sizeof(where));
	snprintf(c->err, c->errlen, "rule '%s' (defined at %s) can never finish: every way "
		 "through it leads back into it (%s)", rule_name(c, r), where, text);
	free(path);
}

static int check(struct compiler *c)
{
	const struct exl_grammar *g = c->g;
	bool *nullable = calloc(g->n_rules, sizeof(bool));
	bool *prod = calloc(g->n_rules, sizeof(bool));
	bool *seen = calloc(g->n_rules, sizeof(bool));
	int rc = -1;

	if (!nullable || !prod || !seen) {
		oom(c);
		goto out;
	}
	fixpoint(g, nullable, nullable_alt);
	fixpoint(g, prod, productive_alt);
	if (reachable(c, seen))
		goto out;
	for (uint32_t r = 0; r < g->n_rules; r++) {
		if (seen[r] && !prod[r]) {
			unproductive(c, r, prod, seen);
			goto out;
		}
	}
	rc = left_recursion(c, nullable, seen);
out:
	free(nullable);
	free(prod);
	free(seen);
	return rc;
}

/* ---- assembly ---- */

static int index_alternatives(struct compiler *c)
{
	struct exl_grammar *g = c->g;

	g->n_rules = (uint32_t)c->n_rules;
	g->rule_alt = malloc(c->n_rules * sizeof(*g->rule_alt));
	g->rule_n_alt = malloc(c->n_rules * sizeof(*g->rule_n_alt));
	if (!g->rule_alt || !g->rule_n_alt)
		return oom(c);
	size_t n_alt = 0;

	for (size_t r = 0; r < c->n_rules; r++) {
		uint32_t pos = c->rule_first[r];

		g->rule_alt[r] = (uint32_t)n_alt;
		for (;;) {
			if (grow((void **)&g->alt_start, &c->cap_alt, n_alt + 1, sizeof(*g->alt_start)))
				return oom(c);
			g->alt_start[n_alt++] = pos;
			while (!gel_is_end(&g->el[pos]))
				pos++;
			if (g->el[pos].type == GEL_END)
				break;
			pos++;
		}
		g->rule_n_alt[r] = (uint32_t)(n_alt - g->rule_alt[r]);
	}
	return 0;
}

static int index_chains(struct compiler *c)
{
	struct exl_grammar *g = c->g;

	g->el_rule = malloc(((size_t)g->n_el + 1) * sizeof(*g->el_rule));
	g->chain_level = calloc((size_t)g->n_rules + 1, sizeof(*g->chain_level));
	if (!g->el_rule || !g->chain_level)
		return oom(c);
	for (uint32_t r = 0; r < g->n_rules; r++) {
		for (uint32_t pos = c->rule_first[r]; ; pos++) {
			g->el_rule[pos] = r;
			if (g->el[pos].type == GEL_END)
				break;
		}
		if (r < c->ir->n_rules && c->ir->rules[r].chain_level) {
			g->chain_level[r] = c->ir->rules[r].chain_level;
			g->has_chains = true;
		}
	}
	return 0;
}

struct exl_grammar *exl_grammar_compile(const char *text, size_t len, char *err, size_t errlen)
{
	struct ir ir = { 0 };
	struct compiler c = { .ir = &ir, .text = text, .len = len, .err = err, .errlen = errlen };
	struct exl_grammar *g = calloc(1, sizeof(*g));

	if (!g) {
		snprintf(err, errlen, "out of memory compiling the grammar");
		return NULL;
	}
	c.g = g;
	if (!text && len) {
		snprintf(err, errlen, "no grammar text");
		goto fail;
	}
	if (exl_ir_parse(&ir, text ? text : "", len, err, errlen))
		goto fail;
	c.class_of_rule = malloc((ir.n_classes + 1) * sizeof(*c.class_of_rule));
	if (!c.class_of_rule) {
		oom(&c);
		goto fail;
	}
	for (size_t r = 0; r < ir.n_rules; r++) {
		uint32_t id;

		if (new_rule(&c, &id))
			goto fail;
	}
	for (size_t r = 0; r < ir.n_rules; r++) {
		const struct ir_rule *ru = &ir.rules[r];

		c.rule_first[r] = g->n_el;
		for (size_t i = 0; i < ru->n; i++) {
			const struct ir_elem *e = &ru->e[i];
			int rc = 0;

			switch (e->type) {
			case IR_END: rc = emit(&c, GEL_END, 0); break;
			case IR_ALT: rc = emit(&c, GEL_ALT, 0); break;
			case IR_REF: rc = emit(&c, GEL_REF, e->arg); break;
			default: rc = lower_class(&c, e->arg); break;
			}
			if (rc)
				goto fail;
		}
	}
	for (size_t r = ir.n_rules; r < c.n_rules; r++) {
		c.rule_first[r] = g->n_el;
		if (emit_class_rule(&c, c.class_of_rule[r - ir.n_rules]))
			goto fail;
	}
	g->root = ir.root;
	if (index_alternatives(&c) || index_chains(&c) || check(&c))
		goto fail;
	exl_ir_free(&ir);
	free(c.rule_first);
	free(c.class_hash);
	free(c.class_of_rule);
	free(c.set_hash);
	free(c.seqs);
	return g;
fail:
	exl_ir_free(&ir);
	free(c.rule_first);
	free(c.class_hash);
	free(c.class_of_rule);
	free(c.set_hash);
	free(c.seqs);
	exl_grammar_free(g);
	return NULL;
}

void exl_grammar_free(struct exl_grammar *g)
{
	if (!g)
		return;
	free(g->el);
	free(g->sets);
	free(g->alt_start);
	free(g->rule_alt);
	free(g->rule_n_alt);
	free(g->el_rule);
	free(g->chain_level);
	free(g);
}

size_t exl_grammar_n_rules(const struct exl_grammar *g)
{
	return g->n_rules;
}

size_t exl_grammar_n_elems(const struct exl_grammar *g)
{
	return g->n_el;
}
