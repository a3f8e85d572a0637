/* The generation options of the command line, written once: `exl
 * generate / chat / bench` and `exld run` take the same flags with the same
 * kinds, ranges and help texts, and parse their values here; where a value
 * lands in each program's own struct is common/cli/gen_args.h.
 *
 * Messages about a bad option are printed to the parser's stream, as
 * "PROG: ..." lines: this is the top of a command line program, and a bad
 * value is shown whole, however long.
 */
#ifndef EXL_GEN_OPTIONS_H
#define EXL_GEN_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "exl_wire.h"
#include "common/gen_ranges.h"

/* In the order --help lists them. */
enum genopt_id {
	GENOPT_MAX_NEW,
	GENOPT_MIN_NEW,
	GENOPT_TEMPERATURE,
	GENOPT_TEMPERATURE_LAST,
	GENOPT_TOP_K,
	GENOPT_TOP_P,
	GENOPT_MIN_P,
	GENOPT_TYPICAL,
	GENOPT_TFS,
	GENOPT_TOP_A,
	GENOPT_REP_PEN,
	GENOPT_REP_RANGE,
	GENOPT_REP_DECAY,
	GENOPT_FREQ_PEN,
	GENOPT_PRES_PEN,
	GENOPT_NO_REPEAT_NGRAM,
	GENOPT_DRY_MULT,
	GENOPT_DRY_BASE,
	GENOPT_DRY_ALLOWED_LEN,
	GENOPT_DRY_RANGE,
	GENOPT_DRY_BREAKERS,
	GENOPT_XTC_PROB,
	GENOPT_XTC_THRESH,
	GENOPT_MIROSTAT,
	GENOPT_MIROSTAT_TAU,
	GENOPT_MIROSTAT_ETA,
	GENOPT_BIAS,
	GENOPT_SEED,
	GENOPT_STOP,
	GENOPT_STOP_TOKEN,
	GENOPT_BAN,
	GENOPT_TOKEN_HEALING,
	GENOPT_CFG_SCALE,
	GENOPT_NEGATIVE,
	GENOPT_GRAMMAR,
	GENOPT_JSON_SCHEMA,
	GENOPT_REGEX,
	GENOPT_PREFER_EOS,
	GENOPT_IGNORE_EOS,
	GENOPT_COMPLETION_ONLY,
	GENOPT_SPECIAL,
	GENOPT_DECODE_SPECIAL,
	GENOPT_NO_BOS,
	GENOPT_TOP_PROBS,
	GENOPT_DRAFT_MODEL,
	GENOPT_DRAFT_TOKENS,
	GENOPT_NGRAM_DRAFT,
	GENOPT_BEAMS,
	GENOPT_LENGTH_PENALTY,
	GENOPT_TRUNCATE,
	GENOPT_LORA,
	GENOPT_SUFFIX,
	GENOPT_N,
	/* a program's own options take ids from here on */
	GENOPT_OWN = 100,
};

enum genopt_kind {
	GENOPT_FLAG,       /* no value */
	GENOPT_INT,        /* an integer in [min, max] */
	GENOPT_INT_OPT,    /* the same, optional: alone it means max (--mirostat) */
	GENOPT_FLOAT,      /* a finite number in [min, max] */
	GENOPT_STR,        /* text as given */
	GENOPT_FILE,       /* a file's contents: at most 16 MiB, no NUL byte */
	GENOPT_U64,        /* an unsigned 64-bit integer */
	GENOPT_STR_LIST,   /* repeatable text, at most max_count */
	GENOPT_ID_LIST,    /* repeatable token id in [min, max], at most max_count */
	GENOPT_BIAS_LIST,  /* repeatable ID=V (V in token_bias's wire range, or -inf) */
	GENOPT_BREAKERS,   /* comma-separated strings with \n \t \, \\ escapes */
	GENOPT_LORA_LIST,  /* repeatable NAME[:SCALE], at most max_count */
};

#define GENOPT_MAX_BREAKERS 32
#define GENOPT_MAX_BREAKER_LEN 63    /* bytes of one DRY sequence breaker */

struct genopt {
	int id;                   /* enum genopt_id, or a program's own from GENOPT_OWN */
	const char *name;
	const char *alt;          /* another spelling, or NULL */
	enum genopt_kind kind;
	/* INT, INT_OPT, FLOAT, ID_LIST: the values taken.  For an option whose
	 * wire key has a range (common/gen_ranges.h), genopt_parser_init()
	 * sets them from it; a program may narrow them afterwards. */
	double min, max;
	int max_count;            /* repeatable kinds: how many times */
	const char *wire;         /* its key in a generate request (docs/protocol.md) */
	const char *arg;          /* the metavar in --help, NULL for a flag */
	const char *help;
};

/* One parsed option. */
struct genopt_value {
	int id;
	const char *flag;         /* as typed: "--temp" */
	int i;                    /* INT, INT_OPT, ID_LIST */
	float f;                  /* FLOAT; BIAS_LIST: the bias (-INFINITY for -inf) */
	uint64_t seed;            /* U64 */
	int32_t token;            /* BIAS_LIST: the token id */
	const char *str;          /* STR, STR_LIST, LORA_LIST: argv's string */
	size_t name_len;          /* LORA_LIST: bytes of str that are the name; f the
				   * scale (1 when none is given) */
	char *text;               /* FILE: malloc'ed contents, the caller's to free */
	int n_breakers;           /* BREAKERS */
	char breakers[GENOPT_MAX_BREAKERS][GENOPT_MAX_BREAKER_LEN + 1];
};

struct genopt_parser {
	char prog[48];            /* messages start with it: "exl generate", "exld run" */
	FILE *msg;                /* where they go (stderr) */
	/* The shared table; a program may change a help text or a range here
	 * after genopt_parser_init(). */
	struct genopt opts[GENOPT_N];
	int count[GENOPT_N];      /* how often each option was taken */
	double value[GENOPT_N];   /* INT, INT_OPT, FLOAT: the last value taken */
	const struct genrange *range[GENOPT_N]; /* each option's wire range, or NULL */
};

extern const struct genopt genopt_table[GENOPT_N];

void genopt_parser_init(struct genopt_parser *ps, const char *prog, FILE *msg);

/* The option named a in t[0..n) (name or alt), or NULL. */
const struct genopt *genopt_find_in(const struct genopt *t, size_t n, const char *a);
/* The shared option named a, or NULL. */
const struct genopt *genopt_find(const struct genopt_parser *ps, const char *a);

/* Takes the option opt at argv[*i] (a shared one, or a program's own of
 * any kind but the lists) and its value, advancing *i past the value, into
 * *v.  0 or -1 after printing why the value is bad. */
int genopt_take(struct genopt_parser *ps, const struct genopt *opt, int argc, char **argv,
		int *i, struct genopt_value *v);

/* After the last option: --cfg-scale goes with --negative, at most one of
 * --grammar, --json-schema and --regex, --min-new is not over -n when
 * both are given, at most one of --draft-model and --ngram-draft (and
 * --draft-tokens only with one of them), and --beams with neither nor
 * --negative.  -1 after printing why. */
int genopt_finish(const struct genopt_parser *ps);

/* One --help line, and every shared option's in order. */
void genopt_usage_line(FILE *out, const struct genopt *opt);
void genopt_usage(FILE *out, const struct genopt_parser *ps);

#endif
