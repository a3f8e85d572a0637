/* exld run's command line: every generation option, checked for form and
 * range here (values the model decides, like token ids, are checked when
 * the job is created). */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/cmd_run.h"

enum kind {
	K_FLAG,      /* bool at off := true */
	K_NOBOS,     /* add_bos := 0 */
	K_INT,       /* int at off, in [min, max] */
	K_FLOAT,     /* float at off, in [min, max] */
	K_STR,       /* const char * at off */
	K_SEED,
	K_STOP,      /* repeatable */
	K_STOP_TOKEN,
	K_BAN,
	K_BIAS,
	K_BREAKERS,
	K_CFG,
	K_MIROSTAT,  /* optional value: alone it means v2 */
	K_FILE,      /* const char * at off := the file's contents */
	K_HELP,
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

#define O(m) offsetof(struct run_opts, m)
#define S(m) offsetof(struct run_opts, s.m)
#define P(m) offsetof(struct run_opts, s.sampling.m)

static const struct opt opts[] = {
	{ "--model", NULL, K_STR, O(model), 0, 0, "FILE", "GGUF model (required)" },
	{ "--prompt", NULL, K_STR, O(prompt), 0, 0, "TEXT", "prompt (required; may be empty)" },
	{ "-n", "--n-predict", K_INT, S(max_new_tokens), 0, 1 << 24, "N",
	  "tokens to generate (default 128)" },
	{ "--min-new", NULL, K_INT, S(min_new_tokens), 0, 1 << 24, "N",
	  "no stop before N tokens (EOS and stop tokens/strings wait)" },
	{ "--temperature", "--temp", K_FLOAT, P(temperature), 0, 100, "T",
	  "0 = greedy (default 0.8)" },
	{ "--temperature-last", NULL, K_FLAG, P(temperature_last), 0, 0, NULL,
	  "apply the temperature after the truncation samplers" },
	{ "--top-k", NULL, K_INT, P(top_k), 0, 1 << 30, "K", "0 = off, 1 = greedy (default 40)" },
	{ "--top-p", NULL, K_FLOAT, P(top_p), 0, 1, "P", "nucleus mass, 1 = off (default 0.95)" },
	{ "--min-p", NULL, K_FLOAT, P(min_p), 0, 1, "P", "0 = off (default 0.05)" },
	{ "--typical", NULL, K_FLOAT, P(typical), 0, 1, "P", "locally typical mass, 1 = off" },
	{ "--tfs", NULL, K_FLOAT, P(tfs), 0, 1, "Z", "tail-free sampling, 1 = off" },
	{ "--top-a", NULL, K_FLOAT, P(top_a), 0, 1, "A", "0 = off" },
	{ "--rep-pen", NULL, K_FLOAT, P(rep_pen), 0.0001, 100, "P", "repetition penalty, 1 = off" },
	{ "--rep-range", NULL, K_INT, P(rep_range), -1, 1 << 24, "N",
	  "tokens it looks back, -1 = all (default 64)" },
	{ "--rep-decay", NULL, K_INT, P(rep_decay), 0, 1 << 24, "N",
	  "tokens before the range with a fading penalty" },
	{ "--freq-pen", NULL, K_FLOAT, P(freq_pen), -100, 100, "F", "frequency penalty" },
	{ "--pres-pen", NULL, K_FLOAT, P(pres_pen), -100, 100, "F", "presence penalty" },
	{ "--no-repeat-ngram", NULL, K_INT, P(no_repeat_ngram), 0, 64, "N",
	  "never repeat an n-gram of N tokens" },
	{ "--dry-mult", NULL, K_FLOAT, P(dry_mult), 0, 100, "M", "DRY multiplier, 0 = off" },
	{ "--dry-base", NULL, K_FLOAT, P(dry_base), 1, 100, "B", "DRY base (default 1.75)" },
	{ "--dry-allowed-len", NULL, K_INT, P(dry_allowed_len), 1, 512, "N",
	  "DRY allowed length (default 2)" },
	{ "--dry-range", NULL, K_INT, P(dry_range), 0, 1 << 24, "N",
	  "DRY looks back N tokens, 0 = all" },
	{ "--dry-breakers", NULL, K_BREAKERS, 0, 0, 0, "LIST",
	  "comma-separated sequence breakers (\\n \\t \\, \\\\ escapes; \"\" = none)" },
	{ "--xtc-prob", NULL, K_FLOAT, P(xtc_prob), 0, 1, "P", "XTC probability, 0 = off" },
	{ "--xtc-thresh", NULL, K_FLOAT, P(xtc_thresh), 0, 1, "T", "XTC threshold (default 0.1)" },
	{ "--mirostat", NULL, K_MIROSTAT, P(mirostat), 0, 2, "[V]",
	  "mirostat v2 (V: 0 = off, 2 = v2; v1 is not offered)" },
	{ "--mirostat-tau", NULL, K_FLOAT, P(mirostat_tau), 0.0001, 100, "T", "default 5" },
	{ "--mirostat-eta", NULL, K_FLOAT, P(mirostat_eta), 0, 1, "E", "default 0.1" },
	{ "--bias", NULL, K_BIAS, 0, 0, 0, "ID=V", "add V (or -inf) to token ID's logit; repeatable" },
	{ "--seed", NULL, K_SEED, 0, 0, 0, "S", "sampling seed (default: random)" },
	{ "--stop", NULL, K_STOP, 0, 0, 0, "STR", "stop string; repeatable" },
	{ "--stop-token", NULL, K_STOP_TOKEN, 0, 0, 0, "ID", "stop token id; repeatable" },
	{ "--ban", NULL, K_BAN, 0, 0, 0, "STR", "banned string (backtrack and resample); repeatable" },
	{ "--token-healing", NULL, K_FLAG, S(token_healing), 0, 0, NULL,
	  "regenerate the prompt's last token(s)" },
	{ "--cfg-scale", NULL, K_CFG, S(cfg_scale), -100, 100, "S",
	  "classifier-free guidance scale (needs --negative)" },
	{ "--negative", NULL, K_STR, O(negative), 0, 0, "TEXT", "negative prompt for CFG" },
	{ "--grammar", NULL, K_FILE, S(grammar), 0, 0, "FILE",
	  "GBNF grammar the output must match" },
	{ "--json-schema", NULL, K_FILE, S(json_schema), 0, 0, "FILE",
	  "JSON schema the output must satisfy" },
	{ "--regex", NULL, K_STR, S(regex), 0, 0, "RE", "regular expression the whole output matches" },
	{ "--prefer-eos", NULL, K_FLAG, S(filter_prefer_eos), 0, 0, NULL,
	  "end as soon as the grammar / schema / regex is complete" },
	{ "--ignore-eos", NULL, K_FLAG, S(ignore_eos), 0, 0, NULL, "do not stop at end of text" },
	{ "--completion-only", NULL, K_FLAG, S(completion_only), 0, 0, NULL,
	  "print (and report) the completion without the prompt" },
	{ "--special", NULL, K_FLAG, S(encode_special_tokens), 0, 0, NULL,
	  "parse special tokens written in the prompt" },
	{ "--decode-special", NULL, K_FLAG, S(decode_special_tokens), 0, 0, NULL,
	  "show special tokens in the output" },
	{ "--no-bos", NULL, K_NOBOS, 0, 0, 0, NULL, "do not add BOS to the prompt" },
	{ "--top-probs", NULL, K_INT, O(top_probs), 0, EXL_GEN_MAX_TOP_PROBS, "K",
	  "report each token's probability and the K most likely" },
	{ "--json", NULL, K_FLAG, O(json), 0, 0, NULL, "print the result as one JSON line" },
	{ "--threads", "-t", K_INT, O(threads), 0, 1024, "N", "CPU threads (default: one per core)" },
	{ "--kv-tokens", NULL, K_INT, O(kv_tokens), 1, 1 << 24, "N",
	  "KV cache size (default: prompt + N)" },
	{ "--device", NULL, K_STR, O(device), 0, 0, "D", "cpu (default), cuda or cuda:N" },
	{ "--warmup", NULL, K_FLAG, O(warmup), 0, 0, NULL,
	  "run one untimed pass first (touches every weight page)" },
	{ "--help", "-h", K_HELP, 0, 0, 0, NULL, "this text" },
};

static void usage(FILE *out)
{
	fprintf(out, "usage: exld run --model FILE --prompt TEXT [options]\n");
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
		const struct opt *p = &opts[i];
		char lhs[64];

		snprintf(lhs, sizeof(lhs), "%s%s%s%s%s", p->name, p->alt ? ", " : "",
			 p->alt ? p->alt : "", p->arg ? " " : "", p->arg ? p->arg : "");
		fprintf(out, "  %-24s %s\n", lhs, p->help);
	}
}

static int parse_int(const char *opt, const char *v, double min, double max, int *out)
{
	char *end;

	errno = 0;
	long x = strtol(v, &end, 10);
	if (errno || end == v || *end || x < (long)min || x > (long)max) {
		fprintf(stderr, "exld run: %s wants an integer in [%ld, %ld], not '%s'\n", opt,
			(long)min, (long)max, v);
		return -1;
	}
	*out = (int)x;
	return 0;
}

static int parse_float(const char *opt, const char *v, double min, double max, float *out)
{
	char *end;

	errno = 0;
	double x = strtod(v, &end);
	if (errno || end == v || *end || !isfinite(x) || x < min || x > max) {
		fprintf(stderr, "exld run: %s wants a number in [%g, %g], not '%s'\n", opt, min, max, v);
		return -1;
	}
	*out = (float)x;
	return 0;
}

static int parse_bias(const char *v, struct exl_token_bias *b)
{
	const char *eq = strchr(v, '=');
	char *end;
	char id[32];

	if (!eq || eq == v || (size_t)(eq - v) >= sizeof(id))
		goto bad;
	memcpy(id, v, (size_t)(eq - v));
	id[eq - v] = 0;
	errno = 0;
	long x = strtol(id, &end, 10);
	if (errno || *end || x < 0 || x > INT32_MAX)
		goto bad;
	b->id = (int32_t)x;
	if (!strcmp(eq + 1, "-inf")) {
		b->bias = -INFINITY;
		return 0;
	}
	errno = 0;
	double f = strtod(eq + 1, &end);
	if (errno || end == eq + 1 || *end || !isfinite(f) || fabs(f) > 1e6)
		goto bad;
	b->bias = (float)f;
	return 0;
bad:
	fprintf(stderr, "exld run: --bias wants ID=VALUE (a token id, then a number or -inf), "
		"not '%s'\n", v);
	return -1;
}

static int parse_breakers(const char *v, struct exl_sampler_params *p)
{
	int n = 0;
	size_t len = 0;
	char cur[EXL_SAMPLER_MAX_BREAKER_LEN];

	if (!*v) {
		p->n_dry_breakers = 0;
		return 0;
	}
	for (const char *c = v;; c++) {
		if (*c == ',' || !*c) {
			if (!len || n == EXL_SAMPLER_MAX_BREAKERS)
				goto bad;
			memcpy(p->dry_breakers[n], cur, len);
			p->dry_breakers[n][len] = 0;
			n++;
			len = 0;
			if (!*c)
				break;
			continue;
		}
		char ch = *c;

		if (ch == '\\') {
			c++;
			ch = *c == 'n' ? '\n' : *c == 't' ? '\t' : *c == ',' ? ',' : *c == '\\' ? '\\' : 0;
			if (!ch)
				goto bad;
		}
		if (len + 1 >= sizeof(cur))
			goto bad;
		cur[len++] = ch;
	}
	p->n_dry_breakers = n;
	return 0;
bad:
	fprintf(stderr, "exld run: --dry-breakers wants up to %d comma-separated non-empty strings "
		"of at most %d bytes (escapes \\n \\t \\, \\\\), not '%s'\n",
		EXL_SAMPLER_MAX_BREAKERS, EXL_SAMPLER_MAX_BREAKER_LEN - 1, v);
	return -1;
}

/* The whole of a constraint file (at most 16 MiB, no NUL bytes). */
static int read_text_file(const char *opt, const char *path, char **out)
{
	const size_t max = 16u << 20;
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t n = 0;

	if (!f) {
		fprintf(stderr, "exld run: %s: cannot open '%s': %s\n", opt, path, strerror(errno));
		return -1;
	}
	buf = malloc(max + 1);
	if (!buf) {
		fprintf(stderr, "exld run: out of memory\n");
		fclose(f);
		return -1;
	}
	n = fread(buf, 1, max + 1, f);
	if (ferror(f) || n > max || memchr(buf, 0, n)) {
		fprintf(stderr, "exld run: %s: '%s' %s\n", opt, path, ferror(f) ?
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
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
		if (!strcmp(a, opts[i].name) || (opts[i].alt && !strcmp(a, opts[i].alt)))
			return &opts[i];
	return NULL;
}

static int take(struct run_opts *o, const struct opt *p, const char *a, const char *v)
{
	char *base = (char *)o;
	struct exl_gen_settings *s = &o->s;

	switch (p->kind) {
	case K_INT:
		return parse_int(a, v, p->min, p->max, (int *)(base + p->off));
	case K_FLOAT:
		return parse_float(a, v, p->min, p->max, (float *)(base + p->off));
	case K_CFG:
		o->cfg_set = true;
		return parse_float(a, v, p->min, p->max, (float *)(base + p->off));
	case K_STR:
		*(const char **)(base + p->off) = v;
		return 0;
	case K_FILE:
		if (o->constraint_text) {
			fprintf(stderr, "exld run: give at most one of --grammar and --json-schema\n");
			return -1;
		}
		if (read_text_file(a, v, &o->constraint_text))
			return -1;
		*(const char **)(base + p->off) = o->constraint_text;
		return 0;
	case K_SEED: {
		char *end;

		errno = 0;
		s->seed = strtoull(v, &end, 10);
		if (errno || end == v || *end || *v == '-') {
			fprintf(stderr, "exld run: --seed wants an unsigned integer, not '%s'\n", v);
			return -1;
		}
		s->has_seed = true;
		return 0;
	}
	case K_STOP:
		if (s->n_stop_strings == EXL_GEN_MAX_STOP_STRINGS)
			goto too_many;
		o->stops[s->n_stop_strings++] = v;
		return 0;
	case K_BAN:
		if (s->n_banned_strings == EXL_GEN_MAX_BANNED)
			goto too_many;
		o->bans[s->n_banned_strings++] = v;
		return 0;
	case K_STOP_TOKEN:
		if (s->n_stop_tokens == EXL_GEN_MAX_STOP_TOKENS)
			goto too_many;
		return parse_int(a, v, 0, INT32_MAX, &o->stop_tokens[s->n_stop_tokens++]);
	case K_BIAS:
		if (s->sampling.n_bias == EXL_GEN_MAX_BIAS)
			goto too_many;
		return parse_bias(v, &o->bias[s->sampling.n_bias++]);
	case K_BREAKERS:
		return parse_breakers(v, &s->sampling);
	default:
		return -1;
	}
too_many:
	fprintf(stderr, "exld run: too many %s options\n", a);
	return -1;
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

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const struct opt *p = find(a);

		if (!p) {
			fprintf(stderr, "exld run: unknown option '%s'\n", a);
			usage(stderr);
			return -1;
		}
		switch (p->kind) {
		case K_HELP:
			usage(stdout);
			return 1;
		case K_FLAG:
			*(bool *)((char *)o + p->off) = true;
			continue;
		case K_NOBOS:
			o->s.add_bos = 0;
			continue;
		case K_MIROSTAT:
			/* "--mirostat" alone, or followed by its version */
			if (i + 1 < argc && argv[i + 1][0] >= '0' && argv[i + 1][0] <= '9') {
				if (parse_int(a, argv[++i], p->min, p->max, &o->s.sampling.mirostat))
					return -1;
			} else {
				o->s.sampling.mirostat = 2;
			}
			continue;
		default:
			break;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "exld run: %s needs a value\n", a);
			return -1;
		}
		if (take(o, p, a, argv[++i]))
			return -1;
	}
	if (!o->model || !o->prompt) {
		fprintf(stderr, "exld run: --model and --prompt are required\n");
		usage(stderr);
		return -1;
	}
	if (o->cfg_set != (o->negative != NULL)) {
		fprintf(stderr, "exld run: --cfg-scale and --negative go together\n");
		return -1;
	}
	if ((o->s.grammar != NULL) + (o->s.json_schema != NULL) + (o->s.regex != NULL) > 1) {
		fprintf(stderr, "exld run: give at most one of --grammar, --json-schema and --regex\n");
		return -1;
	}
	if (o->top_probs) {
		o->s.return_probs = true;
		o->s.return_top_k = o->top_probs;
	}
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
