/* exld run's command line: the shared generation options
 * (common/cli/gen_options.h), checked for form and range there (values the model
 * decides, like token ids, are checked when the job is created), mapped onto
 * struct exl_gen_settings, plus run's own options. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli/gen_options.h"
#include "daemon/commands/cmd_run.h"

_Static_assert(GENOPT_MAX_BREAKERS == EXL_SAMPLER_MAX_BREAKERS, "breakers: CLI and sampler disagree");
_Static_assert(GENOPT_MAX_BREAKER_LEN + 1 == EXL_SAMPLER_MAX_BREAKER_LEN,
	       "breakers: CLI and sampler disagree");
_Static_assert(EXL_MAX_TOP_K_RETURN == EXL_GEN_MAX_TOP_PROBS, "top probs: CLI and generator disagree");

enum {
	OPT_MODEL = GENOPT_OWN,
	OPT_PROMPT,
	OPT_JSON,
	OPT_THREADS,
	OPT_KV_TOKENS,
	OPT_DEVICE,
	OPT_WARMUP,
	OPT_DUMP_LOGITS,
	OPT_HELP,
};

/* Before and after the shared options in --help. */
static const struct genopt own_head[] = {
	{ OPT_MODEL, "--model", NULL, GENOPT_STR, 0, 0, 0, NULL, "FILE", "GGUF model (required)" },
	{ OPT_PROMPT, "--prompt", NULL, GENOPT_STR, 0, 0, 0, NULL, "TEXT",
	  "prompt (required; may be empty)" },
};

static const struct genopt own_tail[] = {
	{ OPT_JSON, "--json", NULL, GENOPT_FLAG, 0, 0, 0, NULL, NULL,
	  "print the result as one JSON line" },
	{ OPT_THREADS, "--threads", "-t", GENOPT_INT, 0, 1024, 0, NULL, "N",
	  "CPU threads (default: one per core)" },
	{ OPT_KV_TOKENS, "--kv-tokens", NULL, GENOPT_INT, 1, 1 << 24, 0, NULL, "N",
	  "KV cache size (default: prompt + N)" },
	{ OPT_DEVICE, "--device", NULL, GENOPT_STR, 0, 0, 0, NULL, "D",
	  "cpu (default), cuda or cuda:N" },
	{ OPT_WARMUP, "--warmup", NULL, GENOPT_FLAG, 0, 0, 0, NULL, NULL,
	  "run one untimed pass first (touches every weight page)" },
	{ OPT_DUMP_LOGITS, "--dump-logits", NULL, GENOPT_STR, 0, 0, 0, NULL, "FILE",
	  "write each new token's logits: raw little-endian float32 [tokens][vocab]" },
	{ OPT_HELP, "--help", "-h", GENOPT_FLAG, 0, 0, 0, NULL, NULL, "this text" },
};

#define N_HEAD (sizeof(own_head) / sizeof(own_head[0]))
#define N_TAIL (sizeof(own_tail) / sizeof(own_tail[0]))

/* Where the plain values land; the others are handled in store(). */
#define O(m) offsetof(struct run_opts, m)
#define S(m) offsetof(struct run_opts, s.m)
#define P(m) offsetof(struct run_opts, s.sampling.m)
static const size_t field[GENOPT_N] = {
	[GENOPT_MAX_NEW] = S(max_new_tokens),
	[GENOPT_MIN_NEW] = S(min_new_tokens),
	[GENOPT_TEMPERATURE] = P(temperature),
	[GENOPT_TEMPERATURE_LAST] = P(temperature_last),
	[GENOPT_TOP_K] = P(top_k),
	[GENOPT_TOP_P] = P(top_p),
	[GENOPT_MIN_P] = P(min_p),
	[GENOPT_TYPICAL] = P(typical),
	[GENOPT_TFS] = P(tfs),
	[GENOPT_TOP_A] = P(top_a),
	[GENOPT_REP_PEN] = P(rep_pen),
	[GENOPT_REP_RANGE] = P(rep_range),
	[GENOPT_REP_DECAY] = P(rep_decay),
	[GENOPT_FREQ_PEN] = P(freq_pen),
	[GENOPT_PRES_PEN] = P(pres_pen),
	[GENOPT_NO_REPEAT_NGRAM] = P(no_repeat_ngram),
	[GENOPT_DRY_MULT] = P(dry_mult),
	[GENOPT_DRY_BASE] = P(dry_base),
	[GENOPT_DRY_ALLOWED_LEN] = P(dry_allowed_len),
	[GENOPT_DRY_RANGE] = P(dry_range),
	[GENOPT_XTC_PROB] = P(xtc_prob),
	[GENOPT_XTC_THRESH] = P(xtc_thresh),
	[GENOPT_MIROSTAT] = P(mirostat),
	[GENOPT_MIROSTAT_TAU] = P(mirostat_tau),
	[GENOPT_MIROSTAT_ETA] = P(mirostat_eta),
	[GENOPT_TOKEN_HEALING] = S(token_healing),
	[GENOPT_CFG_SCALE] = S(cfg_scale),
	[GENOPT_NEGATIVE] = O(negative),
	[GENOPT_GRAMMAR] = S(grammar),
	[GENOPT_JSON_SCHEMA] = S(json_schema),
	[GENOPT_REGEX] = S(regex),
	[GENOPT_PREFER_EOS] = S(filter_prefer_eos),
	[GENOPT_IGNORE_EOS] = S(ignore_eos),
	[GENOPT_COMPLETION_ONLY] = S(completion_only),
	[GENOPT_SPECIAL] = S(encode_special_tokens),
	[GENOPT_DECODE_SPECIAL] = S(decode_special_tokens),
	[GENOPT_TOP_PROBS] = O(top_probs),
};

static void usage(FILE *out, const struct genopt_parser *ps)
{
	fprintf(out, "usage: exld run --model FILE --prompt TEXT [options]\n");
	for (size_t i = 0; i < N_HEAD; i++)
		genopt_usage_line(out, &own_head[i]);
	genopt_usage(out, ps);
	for (size_t i = 0; i < N_TAIL; i++)
		genopt_usage_line(out, &own_tail[i]);
}

static void store_own(struct run_opts *o, const struct genopt_value *v)
{
	switch (v->id) {
	case OPT_MODEL: o->model = v->str; break;
	case OPT_PROMPT: o->prompt = v->str; break;
	case OPT_JSON: o->json = true; break;
	case OPT_THREADS: o->threads = v->i; break;
	case OPT_KV_TOKENS: o->kv_tokens = v->i; break;
	case OPT_DEVICE: o->device = v->str; break;
	case OPT_WARMUP: o->warmup = true; break;
	case OPT_DUMP_LOGITS: o->dump_logits = v->str; break;
	default: break;
	}
}

static void store(struct run_opts *o, const struct genopt_parser *ps, struct genopt_value *v)
{
	struct exl_gen_settings *s = &o->s;
	char *base = (char *)o;

	switch (v->id) {
	case GENOPT_NO_BOS:
		s->add_bos = 0;
		return;
	case GENOPT_SEED:
		s->seed = v->seed;
		s->has_seed = true;
		return;
	case GENOPT_STOP:
		o->stops[s->n_stop_strings++] = v->str;
		return;
	case GENOPT_BAN:
		o->bans[s->n_banned_strings++] = v->str;
		return;
	case GENOPT_STOP_TOKEN:
		o->stop_tokens[s->n_stop_tokens++] = v->i;
		return;
	case GENOPT_BIAS:
		o->bias[s->sampling.n_bias].id = v->token;
		o->bias[s->sampling.n_bias++].bias = v->f;
		return;
	case GENOPT_DRY_BREAKERS:
		s->sampling.n_dry_breakers = v->n_breakers;
		memcpy(s->sampling.dry_breakers, v->breakers,
		       (size_t)v->n_breakers * sizeof(v->breakers[0]));
		return;
	case GENOPT_GRAMMAR:
	case GENOPT_JSON_SCHEMA:
		o->constraint_text = v->text;
		break;
	default:
		break;
	}
	switch (ps->opts[v->id].kind) {
	case GENOPT_FLAG:
		*(bool *)(base + field[v->id]) = true;
		break;
	case GENOPT_INT:
	case GENOPT_INT_OPT:
		*(int *)(base + field[v->id]) = v->i;
		break;
	case GENOPT_FLOAT:
		*(float *)(base + field[v->id]) = v->f;
		break;
	case GENOPT_STR:
	case GENOPT_FILE:
		*(const char **)(base + field[v->id]) = v->text ? v->text : v->str;
		break;
	default:
		break;
	}
}

int run_parse_args(int argc, char **argv, struct run_opts *o)
{
	memset(o, 0, sizeof(*o));
	exl_gen_settings_init(&o->s);
	o->s.max_new_tokens = 128;
	o->device = "cpu";
	size_t n = argc > 0 ? (size_t)argc : 1;

	o->stops = calloc(n, sizeof(*o->stops));
	o->bans = calloc(n, sizeof(*o->bans));
	o->stop_tokens = calloc(n, sizeof(*o->stop_tokens));
	o->bias = calloc(n, sizeof(*o->bias));
	if (!o->stops || !o->bans || !o->stop_tokens || !o->bias) {
		fprintf(stderr, "exld run: out of memory\n");
		return -1;
	}
	o->s.stop_strings = o->stops;
	o->s.banned_strings = o->bans;
	o->s.stop_tokens = o->stop_tokens;
	o->s.sampling.bias = o->bias;

	struct genopt_parser ps;

	genopt_parser_init(&ps, "exld run", stderr);
	ps.opts[GENOPT_MAX_NEW].help = "tokens to generate (default 128)";
	ps.opts[GENOPT_MIROSTAT].help = "mirostat v2 (V: 0 = off, 2 = v2; v1 is not offered)";
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const struct genopt *p = genopt_find_in(own_head, N_HEAD, a);
		struct genopt_value v;

		if (!p)
			p = genopt_find(&ps, a);
		if (!p)
			p = genopt_find_in(own_tail, N_TAIL, a);
		if (!p) {
			fprintf(stderr, "exld run: unknown option '%s'\n", a);
			usage(stderr, &ps);
			return -1;
		}
		if (p->id == OPT_HELP) {
			usage(stdout, &ps);
			return 1;
		}
		if (genopt_take(&ps, p, argc, argv, &i, &v))
			return -1;
		if (p->id >= GENOPT_OWN)
			store_own(o, &v);
		else
			store(o, &ps, &v);
	}
	if (!o->model || !o->prompt) {
		fprintf(stderr, "exld run: --model and --prompt are required\n");
		usage(stderr, &ps);
		return -1;
	}
	if (genopt_finish(&ps))
		return -1;
	if (o->top_probs) {
		o->s.return_probs = true;
		o->s.return_top_k = o->top_probs;
	}
	if (o->dump_logits)
		o->s.return_logits = true;
	return 0;
}

void run_opts_free(struct run_opts *o)
{
	free(o->stops);
	free(o->bans);
	free(o->stop_tokens);
	free(o->bias);
	free(o->constraint_text);
	o->constraint_text = NULL;
	o->stops = o->bans = NULL;
	o->stop_tokens = NULL;
	o->bias = NULL;
}
