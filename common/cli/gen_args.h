/* The generation options of one command line, taken and kept: the same
 * code for exl (client/exl/exl_opts.c, into struct gen_opts around the
 * client's struct exl_gen_params) and for exld run
 * (daemon/commands/cmd_run_opts.c, into struct run_opts around the
 * generator's struct exl_gen_settings).
 *
 * A plain option (one value: a flag, a number, a string, the seed) is
 * written straight into the program's struct, at the member GEN_FIELDS
 * names for it.  The repeatable ones (--stop, --ban, --stop-token, --bias)
 * and --dry-breakers are kept here, in the order given: the two programs
 * hold them in different shapes, and each points its struct at them (or
 * converts them) once the command line is read.
 */
#ifndef EXL_GEN_ARGS_H
#define EXL_GEN_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "common/cli/gen_options.h"

/* Where a program keeps a plain option: a member of its options struct. */
struct gen_field {
	size_t off;
	size_t size;              /* 0: the program has no member for it */
};

#define GEN_FIELD(type, member) { offsetof(type, member), sizeof(((type *)0)->member) }

/* Every plain option and its member in exl's struct gen_opts
 * (client/exl/exl_cli.h) and in exld run's struct run_opts
 * (daemon/commands/cmd_run.h).  Both columns are here so that what an
 * option sets is said once: each program expands the list with a macro
 * that keeps its own column (GEN_FIELD), and a member renamed on either
 * side fails to compile there.  A flag's member may be a bool or an int;
 * it is set to true / 1, but --no-bos's add_bos to 0. */
#define GEN_FIELDS(X) \
	X(GENOPT_MAX_NEW,          p.max_new_tokens,     s.max_new_tokens) \
	X(GENOPT_MIN_NEW,          p.min_new_tokens,     s.min_new_tokens) \
	X(GENOPT_TEMPERATURE,      p.temperature,        s.sampling.temperature) \
	X(GENOPT_TEMPERATURE_LAST, p.temperature_last,   s.sampling.temperature_last) \
	X(GENOPT_TOP_K,            p.top_k,              s.sampling.top_k) \
	X(GENOPT_TOP_P,            p.top_p,              s.sampling.top_p) \
	X(GENOPT_MIN_P,            p.min_p,              s.sampling.min_p) \
	X(GENOPT_TYPICAL,          p.typical,            s.sampling.typical) \
	X(GENOPT_TFS,              p.tfs,                s.sampling.tfs) \
	X(GENOPT_TOP_A,            p.top_a,              s.sampling.top_a) \
	X(GENOPT_REP_PEN,          p.repetition_penalty, s.sampling.rep_pen) \
	X(GENOPT_REP_RANGE,        p.penalty_range,      s.sampling.rep_range) \
	X(GENOPT_REP_DECAY,        p.penalty_decay,      s.sampling.rep_decay) \
	X(GENOPT_FREQ_PEN,         p.frequency_penalty,  s.sampling.freq_pen) \
	X(GENOPT_PRES_PEN,         p.presence_penalty,   s.sampling.pres_pen) \
	X(GENOPT_NO_REPEAT_NGRAM,  p.no_repeat_ngram,    s.sampling.no_repeat_ngram) \
	X(GENOPT_DRY_MULT,         p.dry_multiplier,     s.sampling.dry_mult) \
	X(GENOPT_DRY_BASE,         p.dry_base,           s.sampling.dry_base) \
	X(GENOPT_DRY_ALLOWED_LEN,  p.dry_allowed_length, s.sampling.dry_allowed_len) \
	X(GENOPT_DRY_RANGE,        p.dry_range,          s.sampling.dry_range) \
	X(GENOPT_XTC_PROB,         p.xtc_probability,    s.sampling.xtc_prob) \
	X(GENOPT_XTC_THRESH,       p.xtc_threshold,      s.sampling.xtc_thresh) \
	X(GENOPT_MIROSTAT,         p.mirostat,           s.sampling.mirostat) \
	X(GENOPT_MIROSTAT_TAU,     p.mirostat_tau,       s.sampling.mirostat_tau) \
	X(GENOPT_MIROSTAT_ETA,     p.mirostat_eta,       s.sampling.mirostat_eta) \
	X(GENOPT_SEED,             p.seed,               s.seed) \
	X(GENOPT_TOKEN_HEALING,    p.token_healing,      s.token_healing) \
	X(GENOPT_CFG_SCALE,        p.cfg_scale,          s.cfg_scale) \
	X(GENOPT_NEGATIVE,         p.negative_prompt,    negative) \
	X(GENOPT_GRAMMAR,          p.grammar,            s.grammar) \
	X(GENOPT_JSON_SCHEMA,      p.json_schema,        s.json_schema) \
	X(GENOPT_REGEX,            p.regex,              s.regex) \
	X(GENOPT_PREFER_EOS,       p.filter_prefer_eos,  s.filter_prefer_eos) \
	X(GENOPT_IGNORE_EOS,       p.ignore_eos,         s.ignore_eos) \
	X(GENOPT_COMPLETION_ONLY,  p.completion_only,    s.completion_only) \
	X(GENOPT_SPECIAL,          p.encode_special,     s.encode_special_tokens) \
	X(GENOPT_DECODE_SPECIAL,   p.decode_special,     s.decode_special_tokens) \
	X(GENOPT_NO_BOS,           p.add_bos,            s.add_bos) \
	X(GENOPT_TOP_PROBS,        top_probs,            top_probs) \
	X(GENOPT_DRAFT_MODEL,      p.draft_model,        draft_model) \
	X(GENOPT_DRAFT_TOKENS,     p.draft_tokens,       s.draft_tokens) \
	X(GENOPT_NGRAM_DRAFT,      p.ngram_draft,        s.ngram_draft) \
	X(GENOPT_BEAMS,            p.num_beams,          s.num_beams) \
	X(GENOPT_LENGTH_PENALTY,   p.length_penalty,     s.length_penalty) \
	X(GENOPT_TRUNCATE,         p.truncate,           s.truncate) \
	X(GENOPT_SUFFIX,           p.suffix,             suffix)

struct gen_args {
	struct genopt_parser ps;  /* the shared table, its counts, and messages on stderr */
	void *base;               /* the program's options struct */
	const struct gen_field *field; /* [GENOPT_N]: where each plain option goes in it */
	/* The repeatable options, each array sized by argc. */
	const char **stops;
	size_t n_stops;
	const char **bans;
	size_t n_bans;
	int32_t *stop_tokens;
	size_t n_stop_tokens;
	int32_t *bias_ids;
	float *bias_values;       /* -INFINITY for -inf */
	size_t n_bias;
	/* The last --dry-breakers (ps.count says whether there was one). */
	int n_breakers;
	char breakers[GENOPT_MAX_BREAKERS][GENOPT_MAX_BREAKER_LEN + 1];
	const char *breaker_ptrs[GENOPT_MAX_BREAKERS];
	char *constraint_text;    /* the --grammar / --json-schema file's contents */
	/* --lora NAME[:SCALE]: the names (malloc'ed) and their scales. */
	char **lora_names;
	float *lora_scales;
	size_t n_loras;
};

/* Sizes the lists for argc arguments, and starts the parser with prog
 * (messages start with it; a program may then change the table's help
 * texts and narrow its ranges in a->ps.opts).  field[GENOPT_N] must
 * outlive a.  -1 with a message in err. */
int gen_args_init(struct gen_args *a, const char *prog, int argc, void *base,
		  const struct gen_field *field, char *err, size_t errlen);
void gen_args_free(struct gen_args *a);

/* Takes the option p at argv[*i] and its value into *v (genopt_take),
 * and keeps it when it is a shared one; a program's own (id from
 * GENOPT_OWN) is the program's to store.  -1 after printing why. */
int gen_args_take(struct gen_args *a, const struct genopt *p, int argc, char **argv, int *i,
		  struct genopt_value *v);

#endif
