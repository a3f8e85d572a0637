/* Insides of the grammar engine: the parser's rule form (code points), the
 * compiled byte-level form, and the UTF-8 range splitter between them. */
#ifndef EXL_GRAMMAR_INTERNAL_H
#define EXL_GRAMMAR_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/utf8.h"
#include "daemon/core/grammar/grammar.h"

/* ---- the parser's output: rules over code-point classes ---- */

enum ir_type { IR_END, IR_ALT, IR_REF, IR_CLASS };

struct ir_elem {
	uint32_t type;
	uint32_t arg;          /* IR_REF: rule; IR_CLASS: class */
};

struct ir_rule {
	uint32_t name;         /* offset into ir.names; synthesized rules: their parent's */
	uint32_t parent;       /* the user rule a synthesized rule came from (itself if user) */
	bool synthesized;
	bool defined;
	uint32_t chain_level;  /* x{m,n}'s optional tail: level k of n-m (rules k and k-1 adjacent), else 0 */
	size_t def_at;         /* byte offset of the definition */
	size_t use_at;         /* byte offset of the first reference */
	struct ir_elem *e;     /* alternatives separated by IR_ALT, then IR_END */
	size_t n, cap;
};

struct ir_class {
	uint32_t first;        /* index into ir.ranges: pairs lo, hi (sorted, disjoint) */
	uint32_t n;            /* number of ranges */
};

struct ir {
	struct ir_rule *rules;
	size_t n_rules, cap_rules;
	struct ir_class *classes;
	size_t n_classes, cap_classes;
	uint32_t *ranges;
	size_t n_ranges, cap_ranges;
	char *names;           /* NUL-terminated names back to back */
	size_t n_names, cap_names;
	uint32_t *hash;        /* name -> rule id + 1, open addressing */
	size_t hash_cap;
	size_t n_elems;        /* over all rules, bounded by EXL_GRAMMAR_MAX_ELEMS */
	uint32_t root;
};

void exl_ir_free(struct ir *ir);
const char *exl_ir_rule_name(const struct ir *ir, uint32_t rule);
/* Parses GBNF into ir (zeroed by the caller). */
int exl_ir_parse(struct ir *ir, const char *text, size_t len, char *err, size_t errlen);
/* "line L, column C" of byte offset off. */
void exl_ir_where(const char *text, size_t len, size_t off, char *buf, size_t buflen);

/* ---- the compiled form: rules over bytes ---- */

enum gel_type {
	GEL_END,    /* end of the rule's last alternative */
	GEL_ALT,    /* end of an alternative, another follows */
	GEL_REF,    /* arg: rule */
	GEL_BYTE,   /* arg: the byte */
	GEL_SET,    /* arg: index of a 256-bit byte set */
};

struct gel {
	uint32_t type;
	uint32_t arg;
};

struct exl_grammar {
	struct gel *el;
	uint32_t n_el;
	uint32_t (*sets)[8];
	uint32_t n_sets;
	uint32_t *alt_start;      /* first element of each alternative */
	uint32_t *rule_alt;       /* rule -> index of its first alternative in alt_start */
	uint32_t *rule_n_alt;
	uint32_t n_rules;
	uint32_t root;
	/* For the mask cache: which rule each element is in, and each rule's
	 * level in a bounded repetition's chain (0: none).  Chain rules of
	 * levels >= 2 have the same layout; levels k and k+1 are rules r and
	 * r + 1. */
	uint32_t *el_rule;
	uint32_t *chain_level;
	bool has_chains;
};

static inline bool gel_is_end(const struct gel *e)
{
	return e->type == GEL_END || e->type == GEL_ALT;
}

static inline bool gel_matches(const struct exl_grammar *g, const struct gel *e, uint8_t b)
{
	if (e->type == GEL_BYTE)
		return e->arg == b;
	return e->type == GEL_SET && (g->sets[e->arg][b >> 5] >> (b & 31) & 1u);
}

/* ---- UTF-8 ---- */

/* One UTF-8 byte sequence pattern: n byte ranges [lo[i], hi[i]]. */
struct utf8_seq {
	int n;
	uint8_t lo[4], hi[4];
};

/* Splits the code points [lo, hi] (no surrogates inside, hi <= 0x10FFFF)
 * into byte sequence patterns that match exactly their encodings.  Calls
 * emit for each; a non-zero return stops and is returned. */
int exl_grammar_utf8_split_range(uint32_t lo, uint32_t hi,
				 int (*emit)(const struct utf8_seq *s, void *u), void *u);

/* ---- the matcher ---- */

/* A parse stack is a chain of nodes, top first: the top's pos is the
 * terminal to match next, the others' the element to continue with when
 * the rule above returns.  Nodes are interned, so equal stacks are equal
 * ids; node 0 is the empty stack (root finished). */
struct gnode {
	uint32_t pos;
	uint32_t parent;
	uint32_t depth;
};

/* A state: a sorted set of stack ids, interned.  Transitions between
 * states are memoised, so the matcher is a lazily built DFA. */
struct gset {
	uint32_t first;        /* into pool */
	uint32_t n;
	uint64_t hash;
	int32_t *tr;           /* 256 transitions, for states walked often */
	uint32_t *mask[2];     /* cached masks: every token / short tokens only */
	int32_t canon[2];      /* the states those are cached under (see grammar_mask.c) */
	uint32_t canon_level[2]; /* ... for this chain level cut; 0: not yet known */
	bool complete;
};

struct gtr {
	uint64_t key;          /* set << 8 | byte, + 1 (0: empty slot) */
	int32_t val;
};

struct gwork {
	uint32_t pos;
	uint32_t parent;
};

struct gwalk {
	uint32_t node;
	int32_t set;
};

#define GSET_DEAD (-1)
#define GSET_ERROR (-2)
#define GSET_UNKNOWN (-3)

struct exl_gmatch {
	const struct exl_grammar *g;
	struct gnode *nodes;
	size_t n_nodes, cap_nodes;
	uint32_t *node_hash;   /* node ids, 0 = empty slot */
	size_t node_hash_cap;
	struct gset *sets;
	size_t n_sets, cap_sets;
	uint32_t *set_hash;    /* set id + 1 */
	size_t set_hash_cap;
	uint32_t *pool;
	size_t n_pool, cap_pool;
	struct gtr *tr;
	size_t n_tr, cap_tr;
	size_t n_tr_arrays;
	int32_t cur;
	int32_t start;
	/* scratch */
	uint32_t *out;
	size_t n_out, cap_out;
	struct gwork *work;
	size_t cap_work;
	struct gwalk *walk;
	size_t cap_walk;
	uint32_t *scratch_mask;
	size_t cap_scratch_mask;
	/* masks cached per state, for one trie */
	const struct exl_vocab_trie *mask_trie;
	size_t mask_words;
	int32_t *mask_ring;    /* set * 2 + which mask */
	size_t mask_ring_cap, mask_ring_n, mask_ring_head;
	struct exl_gmatch_stats st;
	size_t reclaim_states;  /* tables are rebuilt past this many states (tests lower it) */
};

/* The state after byte b from state s: a state, GSET_DEAD, or GSET_ERROR
 * (message in err). */
int32_t exl_gmatch_step(struct exl_gmatch *m, int32_t s, uint8_t b, char *err, size_t errlen);
/* Rebuilds the tables around the current state when they grew too big. */
int exl_gmatch_maybe_reclaim(struct exl_gmatch *m, char *err, size_t errlen);
/* The stack pos on top of parent (interned); 0 on error. */
uint32_t exl_gmatch_node(struct exl_gmatch *m, uint32_t pos, uint32_t parent, char *err,
			 size_t errlen);
/* The state of ids[0..n) (sorted here, deduplicated, interned). */
int32_t exl_gmatch_set(struct exl_gmatch *m, uint32_t *ids, size_t n, char *err, size_t errlen);

#endif
