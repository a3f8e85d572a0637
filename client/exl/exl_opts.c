/* exl's generation options: the shared table (common/cli/gen_options.h) mapped
 * onto struct exl_gen_params, plus --model and --json (docs/exl.md lists
 * them). */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "client/exl/exl_cli.h"

_Static_assert(GENOPT_MAX_BREAKER_LEN < sizeof(((struct gen_opts *)0)->breakers[0]),
	       "a breaker and its NUL fit");

enum { OPT_MODEL = GENOPT_OWN, OPT_JSON };

static const struct genopt own_head[] = {
	{ OPT_MODEL, "--model", "-m", GENOPT_STR, 0, 0, 0, "model", "NAME",
	  "the loaded model (default: the only one loaded)" },
};

static const struct genopt own_tail[] = {
	{ OPT_JSON, "--json", NULL, GENOPT_FLAG, 0, 0, 0, NULL, NULL,
	  "print each result as one line of JSON" },
};

/* Where the plain values land; the others are handled in store(). */
#define P(m) offsetof(struct exl_gen_params, m)
static const size_t field[GENOPT_N] = {
	[GENOPT_MAX_NEW] = P(max_new_tokens),
	[GENOPT_MIN_NEW] = P(min_new_tokens),
	[GENOPT_TEMPERATURE] = P(temperature),
	[GENOPT_TEMPERATURE_LAST] = P(temperature_last),
	[GENOPT_TOP_K] = P(top_k),
	[GENOPT_TOP_P] = P(top_p),
	[GENOPT_MIN_P] = P(min_p),
	[GENOPT_TYPICAL] = P(typical),
	[GENOPT_TFS] = P(tfs),
	[GENOPT_TOP_A] = P(top_a),
	[GENOPT_REP_PEN] = P(repetition_penalty),
	[GENOPT_REP_RANGE] = P(penalty_range),
	[GENOPT_REP_DECAY] = P(penalty_decay),
	[GENOPT_FREQ_PEN] = P(frequency_penalty),
	[GENOPT_PRES_PEN] = P(presence_penalty),
	[GENOPT_NO_REPEAT_NGRAM] = P(no_repeat_ngram),
	[GENOPT_DRY_MULT] = P(dry_multiplier),
	[GENOPT_DRY_BASE] = P(dry_base),
	[GENOPT_DRY_ALLOWED_LEN] = P(dry_allowed_length),
	[GENOPT_DRY_RANGE] = P(dry_range),
	[GENOPT_XTC_PROB] = P(xtc_probability),
	[GENOPT_XTC_THRESH] = P(xtc_threshold),
	[GENOPT_MIROSTAT] = P(mirostat),
	[GENOPT_MIROSTAT_TAU] = P(mirostat_tau),
	[GENOPT_MIROSTAT_ETA] = P(mirostat_eta),
	[GENOPT_TOKEN_HEALING] = P(token_healing),
	[GENOPT_CFG_SCALE] = P(cfg_scale),
	[GENOPT_NEGATIVE] = P(negative_prompt),
	[GENOPT_GRAMMAR] = P(grammar),
	[GENOPT_JSON_SCHEMA] = P(json_schema),
	[GENOPT_REGEX] = P(regex),
	[GENOPT_PREFER_EOS] = P(filter_prefer_eos),
	[GENOPT_IGNORE_EOS] = P(ignore_eos),
	[GENOPT_COMPLETION_ONLY] = P(completion_only),
	[GENOPT_SPECIAL] = P(encode_special),
	[GENOPT_DECODE_SPECIAL] = P(decode_special),
};

/* exl's wording and ranges where they differ from exld run's. */
static void parser_init(struct genopt_parser *ps, const char *cmd)
{
	char prog[48];

	snprintf(prog, sizeof(prog), "exl %s", cmd);
	genopt_parser_init(ps, prog, stderr);
	ps->opts[GENOPT_TOP_PROBS].min = 1;
}

void gen_opts_usage(FILE *out)
{
	struct genopt_parser ps;

	parser_init(&ps, "");
	genopt_usage_line(out, &own_head[0]);
	genopt_usage(out, &ps);
	genopt_usage_line(out, &own_tail[0]);
}

int gen_opts_init(struct gen_opts *o, int argc, char *err, size_t errlen)
{
	size_t n = argc > 0 ? (size_t)argc : 1;

	memset(o, 0, sizeof(*o));
	exl_gen_params_init(&o->p);
	parser_init(&o->ps, "");
	o->stops = calloc(n, sizeof(*o->stops));
	o->stop_tokens = calloc(n, sizeof(*o->stop_tokens));
	o->bans = calloc(n, sizeof(*o->bans));
	o->bias_ids = calloc(n, sizeof(*o->bias_ids));
	o->bias_values = calloc(n, sizeof(*o->bias_values));
	o->breakers = calloc(GENOPT_MAX_BREAKERS, sizeof(*o->breakers));
	o->breaker_ptrs = calloc(GENOPT_MAX_BREAKERS, sizeof(*o->breaker_ptrs));
	if (!o->stops || !o->stop_tokens || !o->bans || !o->bias_ids || !o->bias_values ||
	    !o->breakers || !o->breaker_ptrs) {
		gen_opts_free(o);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	return 0;
}

void gen_opts_free(struct gen_opts *o)
{
	free(o->stops);
	free(o->stop_tokens);
	free(o->bans);
	free(o->bias_ids);
	free(o->bias_values);
	free(o->breakers);
	free(o->breaker_ptrs);
	free(o->constraint_text);
	o->constraint_text = NULL;
	o->stops = o->bans = o->breaker_ptrs = NULL;
	o->stop_tokens = o->bias_ids = NULL;
	o->bias_values = NULL;
	o->breakers = NULL;
}


/* A stop or banned string goes on the wire, which takes 1 to
 * EXL_MAX_STRING_ITEM bytes; the job takes whole UTF-8 characters only
 * (one that is not could match inside a character and cut it). */
static int wire_string(const struct gen_opts *o, const char *flag, const char *s)
{
	size_t n = strlen(s);
	size_t bad = exl_utf8_bad_at((const char *)s, n);

	if (!n || n > EXL_MAX_STRING_ITEM) {
		fprintf(stderr, "%s: %s wants 1 to %d bytes\n", o->ps.prog, flag,
			EXL_MAX_STRING_ITEM);
		return -1;
	}
	if (bad < n) {
		fprintf(stderr, "%s: %s: not valid UTF-8 (bad byte at offset %zu)\n", o->ps.prog,
			flag, bad);
		return -1;
	}
	return 0;
}

static int store(struct gen_opts *o, struct genopt_value *v)
{
	struct exl_gen_params *q = &o->p;
	char *base = (char *)q;

	switch (v->id) {
	case OPT_MODEL:
		o->model = v->str;
		return 0;
	case OPT_JSON:
		o->json = true;
		return 0;
	case GENOPT_NO_BOS:
		q->add_bos = 0;
		return 0;
	case GENOPT_TOP_PROBS:
		o->top_probs = v->i;
		q->return_probs = 1;
		q->return_top_k = v->i;
		return 0;
	case GENOPT_SEED:
		q->seed = v->seed;
		q->has_seed = true;
		return 0;
	case GENOPT_STOP:
		if (wire_string(o, v->flag, v->str))
			return -1;
		o->stops[q->n_stop_strings++] = v->str;
		q->stop_strings = o->stops;
		return 0;
	case GENOPT_BAN:
		if (wire_string(o, v->flag, v->str))
			return -1;
		o->bans[q->n_banned_strings++] = v->str;
		q->banned_strings = o->bans;
		return 0;
	case GENOPT_STOP_TOKEN:
		o->stop_tokens[q->n_stop_tokens++] = v->i;
		q->stop_tokens = o->stop_tokens;
		return 0;
	case GENOPT_BIAS:
		/* -inf goes as -1e29: within the wire's finite range and far
		 * enough below any logit that the token is never drawn */
		o->bias_ids[q->n_bias] = v->token;
		o->bias_values[q->n_bias] = isinf(v->f) ? -1e29f : v->f;
		q->n_bias++;
		q->bias_ids = o->bias_ids;
		q->bias_values = o->bias_values;
		return 0;
	case GENOPT_DRY_BREAKERS:
		for (int i = 0; i < v->n_breakers; i++) {
			memcpy(o->breakers[i], v->breakers[i], sizeof(v->breakers[i]));
			o->breaker_ptrs[i] = o->breakers[i];
		}
		q->dry_sequence_breakers = o->breaker_ptrs;
		q->n_dry_sequence_breakers = (size_t)v->n_breakers;
		return 0;
	case GENOPT_GRAMMAR:
	case GENOPT_JSON_SCHEMA:
		o->constraint_text = v->text;
		break;
	default:
		break;
	}
	switch (o->ps.opts[v->id].kind) {
	case GENOPT_FLAG:
		*(int *)(base + field[v->id]) = 1;
		return 0;
	case GENOPT_INT:
	case GENOPT_INT_OPT:
		*(int *)(base + field[v->id]) = v->i;
		return 0;
	case GENOPT_FLOAT:
		*(float *)(base + field[v->id]) = v->f;
		return 0;
	case GENOPT_STR:
	case GENOPT_FILE:
		*(const char **)(base + field[v->id]) = v->text ? v->text : v->str;
		return 0;
	default:
		return -1;
	}
}

int gen_opts_take(struct gen_opts *o, const char *cmd, int argc, char **argv, int *i)
{
	const char *a = argv[*i];
	const struct genopt *p = genopt_find(&o->ps, a);
	struct genopt_value v;

	if (!p)
		p = genopt_find_in(own_head, 1, a);
	if (!p)
		p = genopt_find_in(own_tail, 1, a);
	if (!p)
		return 0;
	snprintf(o->ps.prog, sizeof(o->ps.prog), "exl %s", cmd);
	if (genopt_take(&o->ps, p, argc, argv, i, &v) || store(o, &v))
		return -1;
	return 1;
}

int gen_opts_finish(struct gen_opts *o, const char *cmd)
{
	snprintf(o->ps.prog, sizeof(o->ps.prog), "exl %s", cmd);
	if (genopt_finish(&o->ps))
		return -1;
	o->p.model = o->model;
	return 0;
}
