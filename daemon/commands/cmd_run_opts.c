/* exld run's command line: the shared generation options
 * (common/cli/gen_args.h), checked for form and range there (values the
 * model decides, like token ids, are checked when the job is created),
 * taken into struct exl_gen_settings, plus run's own options. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

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
	OPT_WARMUP_FULL,
	OPT_DUMP_LOGITS,
	OPT_EMBEDDING,
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
	{ OPT_WARMUP_FULL, "--warmup-full", NULL, GENOPT_FLAG, 0, 0, 0, NULL, NULL,
	  "run an untimed prompt as long as the real one first (a backend's first-prompt setup)" },
	{ OPT_DUMP_LOGITS, "--dump-logits", NULL, GENOPT_STR, 0, 0, 0, NULL, "FILE",
	  "write each new token's logits: raw little-endian float32 [tokens][vocab]" },
	{ OPT_EMBEDDING, "--embedding", NULL, GENOPT_STR, 0, 0, 0, NULL, "ALIAS=FILE",
	  "where ALIAS occurs in the prompt, use FILE's rows (raw float32 [n][n_embd]) "
	  "in place of token embeddings (repeatable)" },
	{ OPT_HELP, "--help", "-h", GENOPT_FLAG, 0, 0, 0, NULL, NULL, "this text" },
};

#define N_HEAD (sizeof(own_head) / sizeof(own_head[0]))
#define N_TAIL (sizeof(own_tail) / sizeof(own_tail[0]))

/* Where the plain values land (common/cli/gen_args.h). */
#define RUN_FIELD(id, exl, run) [id] = GEN_FIELD(struct run_opts, run),
static const struct gen_field field[GENOPT_N] = { GEN_FIELDS(RUN_FIELD) };

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
	case OPT_WARMUP_FULL: o->warmup_full = true; break;
	case OPT_DUMP_LOGITS: o->dump_logits = v->str; break;
	case OPT_EMBEDDING: o->embd_specs[o->n_embd_specs++] = v->str; break;
	default: break;
	}
}

/* Points the settings at the lists, in the shapes the job takes. */
static int hook_lists(struct run_opts *o)
{
	struct exl_gen_settings *s = &o->s;
	const struct gen_args *a = &o->a;

	s->stop_strings = a->stops;
	s->n_stop_strings = (int)a->n_stops;
	s->banned_strings = a->bans;
	s->n_banned_strings = (int)a->n_bans;
	s->stop_tokens = a->stop_tokens;
	s->n_stop_tokens = (int)a->n_stop_tokens;
	o->bias = calloc(a->n_bias ? a->n_bias : 1, sizeof(*o->bias));
	if (!o->bias)
		return -1;
	for (size_t i = 0; i < a->n_bias; i++) {
		o->bias[i].id = a->bias_ids[i];
		o->bias[i].bias = a->bias_values[i];
	}
	s->sampling.bias = o->bias;
	s->sampling.n_bias = (int)a->n_bias;
	if (a->ps.count[GENOPT_DRY_BREAKERS]) {
		s->sampling.n_dry_breakers = a->n_breakers;
		memcpy(s->sampling.dry_breakers, a->breakers,
		       (size_t)a->n_breakers * sizeof(a->breakers[0]));
	}
	return 0;
}

int exl_run_parse_args(int argc, char **argv, struct run_opts *o)
{
	struct gen_args *a = &o->a;
	char err[128];

	memset(o, 0, sizeof(*o));
	exl_gen_settings_init(&o->s);
	o->s.max_new_tokens = 128;
	o->device = "cpu";
	o->embd_specs = calloc((size_t)argc + 1, sizeof(*o->embd_specs));
	if (!o->embd_specs) {
		fprintf(stderr, "exld run: out of memory\n");
		return -1;
	}
	if (gen_args_init(a, "exld run", argc, o, field, err, sizeof(err))) {
		fprintf(stderr, "exld run: %s\n", err);
		return -1;
	}
	a->ps.opts[GENOPT_MAX_NEW].help = "tokens to generate (default 128)";
	a->ps.opts[GENOPT_MIROSTAT].help = "mirostat v2 (V: 0 = off, 2 = v2; v1 is not offered)";
	a->ps.opts[GENOPT_DRAFT_MODEL].arg = "FILE|NAME";
	a->ps.opts[GENOPT_DRAFT_MODEL].help = "speculative decoding: proposals from this GGUF (NAME: "
					      "NAME.gguf beside --model), same vocabulary";
	a->ps.opts[GENOPT_LORA].arg = "FILE[:SCALE]";
	a->ps.opts[GENOPT_LORA].help = "apply the LoRA adapter FILE (GGUF) at SCALE (default 1); "
				       "repeatable";
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		const struct genopt *p = genopt_find_in(own_head, N_HEAD, arg);
		struct genopt_value v;

		if (!p)
			p = genopt_find(&a->ps, arg);
		if (!p)
			p = genopt_find_in(own_tail, N_TAIL, arg);
		if (!p) {
			fprintf(stderr, "exld run: unknown option '%s'\n", arg);
			usage(stderr, &a->ps);
			return -1;
		}
		if (p->id == OPT_HELP) {
			usage(stdout, &a->ps);
			return 1;
		}
		if (gen_args_take(a, p, argc, argv, &i, &v))
			return -1;
		if (p->id >= GENOPT_OWN)
			store_own(o, &v);
	}
	if (!o->model || !o->prompt) {
		fprintf(stderr, "exld run: --model and --prompt are required\n");
		usage(stderr, &a->ps);
		return -1;
	}
	if (genopt_finish(&a->ps))
		return -1;
	o->s.has_seed = a->ps.count[GENOPT_SEED] > 0;
	if (hook_lists(o)) {
		fprintf(stderr, "exld run: out of memory\n");
		return -1;
	}
	if (o->top_probs) {
		o->s.return_probs = true;
		o->s.return_top_k = o->top_probs;
	}
	if (o->dump_logits)
		o->s.return_logits = true;
	return 0;
}

void exl_run_opts_free(struct run_opts *o)
{
	gen_args_free(&o->a);
	free(o->bias);
	o->bias = NULL;
	for (int i = 0; o->block_rows && o->blocks && i < o->n_embd_specs; i++) {
		free(o->block_rows[i]);
		free((char *)o->blocks[i].alias);
	}
	free(o->block_rows);
	free(o->blocks);
	free(o->embd_specs);
	o->block_rows = NULL;
	o->blocks = NULL;
	o->embd_specs = NULL;
}
