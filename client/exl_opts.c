/* exl's generation options: the names and ranges of `exld run`'s, mapped
 * onto struct exl_gen_params (docs/exl.md lists them). */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "client/exl_cli.h"

#define MAX_BREAKERS 32
#define MAX_BREAKER_LEN 63
#define MAX_TOP_PROBS EXL_MAX_TOP_K_RETURN

enum kind {
	K_STR,       /* const char * at off */
	K_INT,       /* int at off, in [min, max] */
	K_FLOAT,     /* float at off, in [min, max] */
	K_TRUE,      /* tri-state int at off := 1 */
	K_NOBOS,
	K_SEED,
	K_STOP,
	K_STOP_TOKEN,
	K_BAN,
	K_BIAS,
	K_BREAKERS,
	K_CFG,
	K_MIROSTAT,  /* optional value: alone it means v2 */
	K_TOP_PROBS,
	K_JSON,
	K_FILE,      /* const char * at off := the file's contents */
};

struct opt {
	const char *name;
	const char *alt;
	enum kind kind;
	size_t off;
	double min;
	double max;
	const char *arg;
	const char *help;
};

#define O(m) offsetof(struct gen_opts, m)
#define P(m) offsetof(struct gen_opts, p.m)

static const struct opt opts[] = {
	{ "--model", "-m", K_STR, O(model), 0, 0, "NAME",
	  "the loaded model (default: the only one loaded)" },
	{ "-n", "--n-predict", K_INT, P(max_new_tokens), 0, 1 << 24, "N",
	  "tokens to generate (default: the daemon's, 256)" },
	{ "--min-new", NULL, K_INT, P(min_new_tokens), 0, 1 << 24, "N",
	  "no stop before N tokens (EOS and stop tokens/strings wait)" },
	{ "--temperature", "--temp", K_FLOAT, P(temperature), 0, 100, "T",
	  "0 = greedy (default 0.8)" },
	{ "--temperature-last", NULL, K_TRUE, P(temperature_last), 0, 0, NULL,
	  "apply the temperature after the truncation samplers" },
	{ "--top-k", NULL, K_INT, P(top_k), 0, 1 << 30, "K", "0 = off, 1 = greedy (default 40)" },
	{ "--top-p", NULL, K_FLOAT, P(top_p), 0, 1, "P", "nucleus mass, 1 = off (default 0.95)" },
	{ "--min-p", NULL, K_FLOAT, P(min_p), 0, 1, "P", "0 = off (default 0.05)" },
	{ "--typical", NULL, K_FLOAT, P(typical), 0, 1, "P", "locally typical mass, 1 = off" },
	{ "--tfs", NULL, K_FLOAT, P(tfs), 0, 1, "Z", "tail-free sampling, 1 = off" },
	{ "--top-a", NULL, K_FLOAT, P(top_a), 0, 1, "A", "0 = off" },
	{ "--rep-pen", NULL, K_FLOAT, P(repetition_penalty), 0.0001, 100, "P",
	  "repetition penalty, 1 = off" },
	{ "--rep-range", NULL, K_INT, P(penalty_range), -1, 1 << 24, "N",
	  "tokens it looks back, -1 = all (default 64)" },
	{ "--rep-decay", NULL, K_INT, P(penalty_decay), 0, 1 << 24, "N",
	  "tokens before the range with a fading penalty" },
	{ "--freq-pen", NULL, K_FLOAT, P(frequency_penalty), -100, 100, "F", "frequency penalty" },
	{ "--pres-pen", NULL, K_FLOAT, P(presence_penalty), -100, 100, "F", "presence penalty" },
	{ "--no-repeat-ngram", NULL, K_INT, P(no_repeat_ngram), 0, 64, "N",
	  "never repeat an n-gram of N tokens" },
	{ "--dry-mult", NULL, K_FLOAT, P(dry_multiplier), 0, 100, "M", "DRY multiplier, 0 = off" },
	{ "--dry-base", NULL, K_FLOAT, P(dry_base), 1, 100, "B", "DRY base (default 1.75)" },
	{ "--dry-allowed-len", NULL, K_INT, P(dry_allowed_length), 1, 512, "N",
	  "DRY allowed length (default 2)" },
	{ "--dry-range", NULL, K_INT, P(dry_range), 0, 1 << 24, "N",
	  "DRY looks back N tokens, 0 = all" },
	{ "--dry-breakers", NULL, K_BREAKERS, 0, 0, 0, "LIST",
	  "comma-separated sequence breakers (\\n \\t \\, \\\\ escapes; \"\" = none)" },
	{ "--xtc-prob", NULL, K_FLOAT, P(xtc_probability), 0, 1, "P", "XTC probability, 0 = off" },
	{ "--xtc-thresh", NULL, K_FLOAT, P(xtc_threshold), 0, 1, "T", "XTC threshold (default 0.1)" },
	{ "--mirostat", NULL, K_MIROSTAT, P(mirostat), 0, 2, "[V]",
	  "mirostat v2 (V: 0 = off, 2 = v2)" },
	{ "--mirostat-tau", NULL, K_FLOAT, P(mirostat_tau), 0.0001, 100, "T", "default 5" },
	{ "--mirostat-eta", NULL, K_FLOAT, P(mirostat_eta), 0, 1, "E", "default 0.1" },
	{ "--bias", NULL, K_BIAS, 0, 0, 0, "ID=V", "add V (or -inf) to token ID's logit; repeatable" },
	{ "--seed", NULL, K_SEED, 0, 0, 0, "S", "sampling seed (default: random)" },
	{ "--stop", NULL, K_STOP, 0, 0, 0, "STR", "stop string; repeatable" },
	{ "--stop-token", NULL, K_STOP_TOKEN, 0, 0, 0, "ID", "stop token id; repeatable" },
	{ "--ban", NULL, K_BAN, 0, 0, 0, "STR", "banned string (backtrack and resample); repeatable" },
	{ "--token-healing", NULL, K_TRUE, P(token_healing), 0, 0, NULL,
	  "regenerate the prompt's last token(s)" },
	{ "--cfg-scale", NULL, K_CFG, P(cfg_scale), -100, 100, "S",
	  "classifier-free guidance scale (needs --negative)" },
	{ "--negative", NULL, K_STR, P(negative_prompt), 0, 0, "TEXT", "negative prompt for CFG" },
	{ "--grammar", NULL, K_FILE, P(grammar), 0, 0, "FILE", "GBNF grammar the output must match" },
	{ "--json-schema", NULL, K_FILE, P(json_schema), 0, 0, "FILE",
	  "JSON schema the output must satisfy" },
	{ "--regex", NULL, K_STR, P(regex), 0, 0, "RE", "regular expression the whole output matches" },
	{ "--prefer-eos", NULL, K_TRUE, P(filter_prefer_eos), 0, 0, NULL,
	  "end as soon as the grammar / schema / regex is complete" },
	{ "--ignore-eos", NULL, K_TRUE, P(ignore_eos), 0, 0, NULL, "do not stop at end of text" },
	{ "--completion-only", NULL, K_TRUE, P(completion_only), 0, 0, NULL,
	  "print (and report) the completion without the prompt" },
	{ "--special", NULL, K_TRUE, P(encode_special), 0, 0, NULL,
	  "parse special tokens written in the prompt" },
	{ "--decode-special", NULL, K_TRUE, P(decode_special), 0, 0, NULL,
	  "show special tokens in the output" },
	{ "--no-bos", NULL, K_NOBOS, 0, 0, 0, NULL, "do not add BOS to the prompt" },
	{ "--top-probs", NULL, K_TOP_PROBS, 0, 1, MAX_TOP_PROBS, "K",
	  "report each token's probability and the K most likely" },
	{ "--json", NULL, K_JSON, 0, 0, 0, NULL, "print each result as one line of JSON" },
};

#define N_OPTS (sizeof(opts) / sizeof(opts[0]))

void gen_opts_usage(FILE *out)
{
	for (size_t i = 0; i < N_OPTS; i++) {
		const struct opt *p = &opts[i];
		char lhs[64];

		snprintf(lhs, sizeof(lhs), "%s%s%s%s%s", p->name, p->alt ? ", " : "",
			 p->alt ? p->alt : "", p->arg ? " " : "", p->arg ? p->arg : "");
		fprintf(out, "  %-24s %s\n", lhs, p->help);
	}
}

int gen_opts_init(struct gen_opts *o, int argc, char *err, size_t errlen)
{
	size_t n = argc > 0 ? (size_t)argc : 1;

	memset(o, 0, sizeof(*o));
	exl_gen_params_init(&o->p);
	o->stops = calloc(n, sizeof(*o->stops));
	o->stop_tokens = calloc(n, sizeof(*o->stop_tokens));
	o->bans = calloc(n, sizeof(*o->bans));
	o->bias_ids = calloc(n, sizeof(*o->bias_ids));
	o->bias_values = calloc(n, sizeof(*o->bias_values));
	o->breakers = calloc(MAX_BREAKERS, sizeof(*o->breakers));
	o->breaker_ptrs = calloc(MAX_BREAKERS, sizeof(*o->breaker_ptrs));
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

static int parse_int(const char *cmd, const char *opt, const char *v, double min, double max,
		     int *out)
{
	char *end;

	errno = 0;
	long x = strtol(v, &end, 10);
	if (errno || end == v || *end || x < (long)min || x > (long)max) {
		fprintf(stderr, "exl %s: %s wants an integer in [%ld, %ld], not '%s'\n", cmd, opt,
			(long)min, (long)max, v);
		return -1;
	}
	*out = (int)x;
	return 0;
}

static int parse_float(const char *cmd, const char *opt, const char *v, double min, double max,
		       float *out)
{
	char *end;

	errno = 0;
	double x = strtod(v, &end);
	if (errno || end == v || *end || !isfinite(x) || x < min || x > max) {
		fprintf(stderr, "exl %s: %s wants a number in [%g, %g], not '%s'\n", cmd, opt, min,
			max, v);
		return -1;
	}
	*out = (float)x;
	return 0;
}

/* ID=V; V may be -inf (sent as -1e29, within the wire's finite range and
 * far enough below any logit that the token is never drawn). */
static int parse_bias(const char *cmd, const char *v, int32_t *id, float *bias)
{
	const char *eq = strchr(v, '=');
	char num[32];
	char *end;

	if (!eq || eq == v || (size_t)(eq - v) >= sizeof(num))
		goto bad;
	memcpy(num, v, (size_t)(eq - v));
	num[eq - v] = 0;
	errno = 0;
	long x = strtol(num, &end, 10);
	if (errno || *end || x < 0 || x > INT32_MAX)
		goto bad;
	*id = (int32_t)x;
	if (!strcmp(eq + 1, "-inf")) {
		*bias = -1e29f;
		return 0;
	}
	errno = 0;
	double f = strtod(eq + 1, &end);
	if (errno || end == eq + 1 || *end || !isfinite(f) || fabs(f) > 1e6)
		goto bad;
	*bias = (float)f;
	return 0;
bad:
	fprintf(stderr, "exl %s: --bias wants ID=VALUE (a token id, then a number or -inf), "
		"not '%s'\n", cmd, v);
	return -1;
}

static int parse_breakers(const char *cmd, const char *v, struct gen_opts *o)
{
	size_t n = 0, len = 0;
	char cur[MAX_BREAKER_LEN + 1];

	if (*v) {
		for (const char *c = v;; c++) {
			if (*c == ',' || !*c) {
				if (!len || n == MAX_BREAKERS)
					goto bad;
				memcpy(o->breakers[n], cur, len);
				o->breakers[n][len] = 0;
				o->breaker_ptrs[n] = o->breakers[n];
				n++;
				len = 0;
				if (!*c)
					break;
				continue;
			}
			char ch = *c;
			if (ch == '\\') {
				c++;
				ch = *c == 'n' ? '\n' : *c == 't' ? '\t' : *c == ',' ? ',' :
				     *c == '\\' ? '\\' : 0;
				if (!ch)
					goto bad;
			}
			if (len >= MAX_BREAKER_LEN)
				goto bad;
			cur[len++] = ch;
		}
	}
	o->p.dry_sequence_breakers = o->breaker_ptrs;
	o->p.n_dry_sequence_breakers = n;
	return 0;
bad:
	fprintf(stderr, "exl %s: --dry-breakers wants up to %d comma-separated non-empty strings "
		"of at most %d bytes (escapes \\n \\t \\, \\\\), not '%s'\n", cmd, MAX_BREAKERS,
		MAX_BREAKER_LEN, v);
	return -1;
}

/* The whole of a constraint file (at most 16 MiB, no NUL bytes). */
static int read_text_file(const char *cmd, const char *opt, const char *path, char **out)
{
	const size_t max = 16u << 20;
	FILE *f = fopen(path, "rb");
	char *buf;
	size_t n;

	if (!f) {
		fprintf(stderr, "exl %s: %s: cannot open '%s': %s\n", cmd, opt, path, strerror(errno));
		return -1;
	}
	buf = malloc(max + 1);
	if (!buf) {
		fprintf(stderr, "exl %s: out of memory\n", cmd);
		fclose(f);
		return -1;
	}
	n = fread(buf, 1, max + 1, f);
	if (ferror(f) || n > max || memchr(buf, 0, n)) {
		fprintf(stderr, "exl %s: %s: '%s' %s\n", cmd, opt, path, ferror(f) ?
			"could not be read" : n > max ? "is over 16 MiB" : "holds a NUL byte");
		fclose(f);
		free(buf);
		return -1;
	}
	fclose(f);
	buf[n] = 0;
	*out = buf;
	return 0;
}

static const struct opt *find(const char *a)
{
	for (size_t i = 0; i < N_OPTS; i++)
		if (!strcmp(a, opts[i].name) || (opts[i].alt && !strcmp(a, opts[i].alt)))
			return &opts[i];
	return NULL;
}

/* An option with a value: v. */
static int take_value(struct gen_opts *o, const char *cmd, const struct opt *p, const char *a,
		      const char *v)
{
	char *base = (char *)o;
	struct exl_gen_params *q = &o->p;

	switch (p->kind) {
	case K_STR:
		*(const char **)(base + p->off) = v;
		return 0;
	case K_FILE:
		if (o->constraint_text) {
			fprintf(stderr, "exl %s: give at most one of --grammar and --json-schema\n", cmd);
			return -1;
		}
		if (read_text_file(cmd, a, v, &o->constraint_text))
			return -1;
		*(const char **)(base + p->off) = o->constraint_text;
		return 0;
	case K_INT:
		return parse_int(cmd, a, v, p->min, p->max, (int *)(base + p->off));
	case K_FLOAT:
		return parse_float(cmd, a, v, p->min, p->max, (float *)(base + p->off));
	case K_CFG:
		o->cfg_set = true;
		return parse_float(cmd, a, v, p->min, p->max, (float *)(base + p->off));
	case K_TOP_PROBS:
		if (parse_int(cmd, a, v, p->min, p->max, &o->top_probs))
			return -1;
		q->return_probs = 1;
		q->return_top_k = o->top_probs;
		return 0;
	case K_SEED: {
		char *end;

		errno = 0;
		q->seed = strtoull(v, &end, 10);
		if (errno || end == v || *end || *v == '-') {
			fprintf(stderr, "exl %s: --seed wants an unsigned integer, not '%s'\n", cmd, v);
			return -1;
		}
		q->has_seed = true;
		return 0;
	}
	case K_STOP:
		if (q->n_stop_strings == EXL_MAX_STOP_STRINGS)
			goto too_many;
		if (!*v || strlen(v) > EXL_MAX_STRING_ITEM) {
			fprintf(stderr, "exl %s: --stop wants 1 to %d bytes\n", cmd, EXL_MAX_STRING_ITEM);
			return -1;
		}
		o->stops[q->n_stop_strings++] = v;
		q->stop_strings = o->stops;
		return 0;
	case K_BAN:
		if (q->n_banned_strings == EXL_MAX_BANNED)
			goto too_many;
		if (!*v || strlen(v) > EXL_MAX_STRING_ITEM) {
			fprintf(stderr, "exl %s: --ban wants 1 to %d bytes\n", cmd, EXL_MAX_STRING_ITEM);
			return -1;
		}
		o->bans[q->n_banned_strings++] = v;
		q->banned_strings = o->bans;
		return 0;
	case K_STOP_TOKEN: {
		int id;

		if (q->n_stop_tokens == EXL_MAX_STOP_TOKENS)
			goto too_many;
		if (parse_int(cmd, a, v, 0, INT32_MAX, &id))
			return -1;
		o->stop_tokens[q->n_stop_tokens++] = id;
		q->stop_tokens = o->stop_tokens;
		return 0;
	}
	case K_BIAS:
		if (q->n_bias == EXL_MAX_BIAS)
			goto too_many;
		if (parse_bias(cmd, v, &o->bias_ids[q->n_bias], &o->bias_values[q->n_bias]))
			return -1;
		q->n_bias++;
		q->bias_ids = o->bias_ids;
		q->bias_values = o->bias_values;
		return 0;
	case K_BREAKERS:
		return parse_breakers(cmd, v, o);
	default:
		return -1;
	}
too_many:
	fprintf(stderr, "exl %s: too many %s options\n", cmd, a);
	return -1;
}

int gen_opts_take(struct gen_opts *o, const char *cmd, int argc, char **argv, int *i)
{
	const char *a = argv[*i];
	const struct opt *p = find(a);

	if (!p)
		return 0;
	switch (p->kind) {
	case K_TRUE:
		*(int *)((char *)o + p->off) = 1;
		return 1;
	case K_NOBOS:
		o->p.add_bos = 0;
		return 1;
	case K_JSON:
		o->json = true;
		return 1;
	case K_MIROSTAT:
		/* "--mirostat" alone, or followed by its version */
		if (*i + 1 < argc && argv[*i + 1][0] >= '0' && argv[*i + 1][0] <= '9') {
			(*i)++;
			return parse_int(cmd, a, argv[*i], p->min, p->max, &o->p.mirostat) ? -1 : 1;
		}
		o->p.mirostat = 2;
		return 1;
	default:
		break;
	}
	if (*i + 1 >= argc) {
		fprintf(stderr, "exl %s: %s needs a value\n", cmd, a);
		return -1;
	}
	(*i)++;
	return take_value(o, cmd, p, a, argv[*i]) ? -1 : 1;
}

int gen_opts_finish(struct gen_opts *o, const char *cmd)
{
	if (o->cfg_set != (o->p.negative_prompt != NULL)) {
		fprintf(stderr, "exl %s: --cfg-scale and --negative go together\n", cmd);
		return -1;
	}
	if ((o->p.grammar != NULL) + (o->p.json_schema != NULL) + (o->p.regex != NULL) > 1) {
		fprintf(stderr, "exl %s: give at most one of --grammar, --json-schema and --regex\n",
			cmd);
		return -1;
	}
	o->p.model = o->model;
	return 0;
}
