/* exl's generation options: the shared ones (common/cli/gen_args.h) taken
 * into struct exl_gen_params, plus --model and --json (docs/exl.md lists
 * them). */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "client/exl/exl_cli.h"

enum { OPT_MODEL = GENOPT_OWN, OPT_JSON, OPT_EMBEDDING };

static const struct genopt own_head[] = {
	{ OPT_MODEL, "--model", "-m", GENOPT_STR, 0, 0, 0, "model", "NAME",
	  "the loaded model (default: the only one loaded)" },
};

static const struct genopt own_tail[] = {
	{ OPT_JSON, "--json", NULL, GENOPT_FLAG, 0, 0, 0, NULL, NULL,
	  "print each result as one line of JSON" },
	{ OPT_EMBEDDING, "--embedding", NULL, GENOPT_STR, 0, 0, 0, "embeddings", "ALIAS=FILE",
	  "where ALIAS occurs in the prompt, use FILE's rows (raw float32 [n][n_embd]) in "
	  "place of token embeddings (repeatable)" },
};

#define N_TAIL (sizeof(own_tail) / sizeof(own_tail[0]))

static int take_embedding(struct gen_opts *o, const char *spec);

/* Where the plain values land (common/cli/gen_args.h). */
#define EXL_FIELD(id, exl, run) [id] = GEN_FIELD(struct gen_opts, exl),
static const struct gen_field field[GENOPT_N] = { GEN_FIELDS(EXL_FIELD) };

/* exl's ranges where they differ from exld run's. */
static void narrow(struct genopt_parser *ps)
{
	ps->opts[GENOPT_TOP_PROBS].min = 1;
}

void gen_opts_usage(FILE *out)
{
	struct genopt_parser ps;

	genopt_parser_init(&ps, "exl ", stderr);
	narrow(&ps);
	genopt_usage_line(out, &own_head[0]);
	genopt_usage(out, &ps);
	for (size_t i = 0; i < N_TAIL; i++)
		genopt_usage_line(out, &own_tail[i]);
}

int gen_opts_init(struct gen_opts *o, int argc, char *err, size_t errlen)
{
	memset(o, 0, sizeof(*o));
	exl_gen_params_init(&o->p);
	if (gen_args_init(&o->a, "exl ", argc, o, field, err, errlen))
		return -1;
	narrow(&o->a.ps);
	return 0;
}

void gen_opts_free(struct gen_opts *o)
{
	for (size_t i = 0; i < o->n_embd; i++) {
		free((char *)o->embd[i].alias);
		free((float *)o->embd[i].rows);
	}
	free(o->embd);
	o->embd = NULL;
	o->n_embd = 0;
	gen_args_free(&o->a);
}

/* --embedding ALIAS=FILE: the file's float32 rows; their count is the
 * daemon's to check against the model's n_embd. */
static int take_embedding(struct gen_opts *o, const char *spec)
{
	const char *eq = strchr(spec, '=');
	struct exl_input_embedding *e;
	FILE *f = NULL;
	char *buf = NULL, *alias = NULL;
	long len;

	if (!eq || eq == spec || !eq[1]) {
		fprintf(stderr, "%s: --embedding '%s': expected ALIAS=FILE\n", o->a.ps.prog, spec);
		return -1;
	}
	f = fopen(eq + 1, "rb");
	if (!f || fseek(f, 0, SEEK_END) || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
		fprintf(stderr, "%s: --embedding: cannot read '%s': %s\n", o->a.ps.prog, eq + 1,
			strerror(errno));
		goto fail;
	}
	if (len == 0 || len % 4 || len > (64l << 20)) {
		fprintf(stderr, "%s: --embedding: '%s' has %ld bytes, not float32 rows (at most "
			"64 MiB)\n", o->a.ps.prog, eq + 1, len);
		goto fail;
	}
	buf = malloc((size_t)len);
	alias = strndup(spec, (size_t)(eq - spec));
	e = realloc(o->embd, (o->n_embd + 1) * sizeof(*e));
	if (e)
		o->embd = e;
	if (!buf || !alias || !e || fread(buf, 1, (size_t)len, f) != (size_t)len) {
		fprintf(stderr, "%s: --embedding: cannot read '%s'\n", o->a.ps.prog, eq + 1);
		goto fail;
	}
	fclose(f);
	o->embd[o->n_embd].alias = alias;
	o->embd[o->n_embd].rows = (const float *)(void *)buf;
	o->embd[o->n_embd].n_floats = (size_t)len / 4;
	o->n_embd++;
	return 0;
fail:
	if (f)
		fclose(f);
	free(buf);
	free(alias);
	return -1;
}

/* A stop or banned string goes on the wire, which takes 1 to
 * EXL_MAX_STRING_ITEM bytes; the job takes whole UTF-8 characters only
 * (one that is not could match inside a character and cut it). */
static int wire_string(const struct gen_opts *o, const char *flag, const char *s)
{
	size_t n = strlen(s);
	size_t bad = exl_utf8_bad_at((const char *)s, n);

	if (!n || n > EXL_MAX_STRING_ITEM) {
		fprintf(stderr, "%s: %s wants 1 to %d bytes\n", o->a.ps.prog, flag,
			EXL_MAX_STRING_ITEM);
		return -1;
	}
	if (bad < n) {
		fprintf(stderr, "%s: %s: not valid UTF-8 (bad byte at offset %zu)\n", o->a.ps.prog,
			flag, bad);
		return -1;
	}
	return 0;
}

int gen_opts_take(struct gen_opts *o, const char *cmd, int argc, char **argv, int *i)
{
	const char *a = argv[*i];
	const struct genopt *p = genopt_find(&o->a.ps, a);
	struct genopt_value v;

	if (!p)
		p = genopt_find_in(own_head, 1, a);
	if (!p)
		p = genopt_find_in(own_tail, N_TAIL, a);
	if (!p)
		return 0;
	snprintf(o->a.ps.prog, sizeof(o->a.ps.prog), "exl %s", cmd);
	if (gen_args_take(&o->a, p, argc, argv, i, &v))
		return -1;
	switch (p->id) {
	case OPT_MODEL:
		o->model = v.str;
		break;
	case OPT_JSON:
		o->json = true;
		break;
	case OPT_EMBEDDING:
		if (take_embedding(o, v.str))
			return -1;
		break;
	case GENOPT_STOP:
	case GENOPT_BAN:
		if (wire_string(o, v.flag, v.str))
			return -1;
		break;
	default:
		break;
	}
	return 1;
}

/* Points the params at the lists.  A list goes on the wire only when it
 * was given: an older exld refuses a key it does not know, even empty. */
static void hook_lists(struct exl_gen_params *q, struct gen_args *a)
{
	if (a->n_stops) {
		q->stop_strings = a->stops;
		q->n_stop_strings = a->n_stops;
	}
	if (a->n_bans) {
		q->banned_strings = a->bans;
		q->n_banned_strings = a->n_bans;
	}
	if (a->n_stop_tokens) {
		q->stop_tokens = a->stop_tokens;
		q->n_stop_tokens = a->n_stop_tokens;
	}
	if (a->n_bias) {
		/* -inf goes as -1e29: within the wire's finite range and far
		 * enough below any logit that the token is never drawn */
		for (size_t i = 0; i < a->n_bias; i++)
			if (isinf(a->bias_values[i]))
				a->bias_values[i] = -1e29f;
		q->bias_ids = a->bias_ids;
		q->bias_values = a->bias_values;
		q->n_bias = a->n_bias;
	}
	if (a->ps.count[GENOPT_DRY_BREAKERS]) {
		q->dry_sequence_breakers = a->breaker_ptrs;
		q->n_dry_sequence_breakers = (size_t)a->n_breakers;
	}
}

int gen_opts_finish(struct gen_opts *o, const char *cmd)
{
	struct exl_gen_params *q = &o->p;

	snprintf(o->a.ps.prog, sizeof(o->a.ps.prog), "exl %s", cmd);
	if (genopt_finish(&o->a.ps))
		return -1;
	q->model = o->model;
	q->has_seed = o->a.ps.count[GENOPT_SEED] > 0;
	if (o->top_probs) {
		q->return_probs = 1;
		q->return_top_k = o->top_probs;
	}
	hook_lists(q, &o->a);
	if (o->n_embd) {
		q->embeddings = o->embd;
		q->n_embeddings = o->n_embd;
	}
	return 0;
}
