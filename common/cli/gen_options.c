/* The generation options' table and the parser of their values, shared by
 * exl (client/exl/exl_opts.c) and exld run (daemon/commands/cmd_run_opts.c). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli/gen_options.h"

#define MAX_FILE (16u << 20)

/* id, name, alt, kind, min, max, max_count, wire key, metavar, help */
#define OPT(id, name, alt, kind, min, max, n, wire, arg, help) \
	[id] = { id, name, alt, kind, min, max, n, wire, arg, help }
/* The same for an option whose wire key has a range: min and max are that
 * range (common/gen_ranges.c), filled in by genopt_parser_init(). */
#define OPTW(id, name, alt, kind, n, wire, arg, help) \
	[id] = { id, name, alt, kind, 0, 0, n, wire, arg, help }

const struct genopt genopt_table[GENOPT_N] = {
	OPTW(GENOPT_MAX_NEW, "-n", "--n-predict", GENOPT_INT, 0, "max_new_tokens", "N",
	    "tokens to generate (default: the daemon's, 256)"),
	OPTW(GENOPT_MIN_NEW, "--min-new", NULL, GENOPT_INT, 0, "min_new_tokens", "N",
	    "no stop before N tokens (EOS and stop tokens/strings wait)"),
	OPTW(GENOPT_TEMPERATURE, "--temperature", "--temp", GENOPT_FLOAT, 0, "temperature",
	    "T", "0 = greedy (default 0.8)"),
	OPT(GENOPT_TEMPERATURE_LAST, "--temperature-last", NULL, GENOPT_FLAG, 0, 0, 0,
	    "temperature_last", NULL, "apply the temperature after the truncation samplers"),
	OPTW(GENOPT_TOP_K, "--top-k", NULL, GENOPT_INT, 0, "top_k", "K",
	    "0 = off, 1 = greedy (default 40)"),
	OPTW(GENOPT_TOP_P, "--top-p", NULL, GENOPT_FLOAT, 0, "top_p", "P",
	    "nucleus mass, 1 = off (default 0.95)"),
	OPTW(GENOPT_MIN_P, "--min-p", NULL, GENOPT_FLOAT, 0, "min_p", "P",
	    "0 = off (default 0.05)"),
	OPTW(GENOPT_TYPICAL, "--typical", NULL, GENOPT_FLOAT, 0, "typical", "P",
	    "locally typical mass, 1 = off"),
	OPTW(GENOPT_TFS, "--tfs", NULL, GENOPT_FLOAT, 0, "tfs", "Z",
	    "tail-free sampling, 1 = off"),
	OPTW(GENOPT_TOP_A, "--top-a", NULL, GENOPT_FLOAT, 0, "top_a", "A", "0 = off"),
	OPTW(GENOPT_REP_PEN, "--rep-pen", NULL, GENOPT_FLOAT, 0, "repetition_penalty",
	    "P", "repetition penalty, 1 = off"),
	OPTW(GENOPT_REP_RANGE, "--rep-range", NULL, GENOPT_INT, 0, "penalty_range", "N",
	    "tokens it looks back, -1 = all (default 64)"),
	OPTW(GENOPT_REP_DECAY, "--rep-decay", NULL, GENOPT_INT, 0, "penalty_decay", "N",
	    "tokens before the range with a fading penalty"),
	OPTW(GENOPT_FREQ_PEN, "--freq-pen", NULL, GENOPT_FLOAT, 0, "frequency_penalty",
	    "F", "frequency penalty"),
	OPTW(GENOPT_PRES_PEN, "--pres-pen", NULL, GENOPT_FLOAT, 0, "presence_penalty",
	    "F", "presence penalty"),
	OPTW(GENOPT_NO_REPEAT_NGRAM, "--no-repeat-ngram", NULL, GENOPT_INT, 0,
	    "no_repeat_ngram", "N", "never repeat an n-gram of N tokens"),
	OPTW(GENOPT_DRY_MULT, "--dry-mult", NULL, GENOPT_FLOAT, 0, "dry_multiplier", "M",
	    "DRY multiplier, 0 = off"),
	OPTW(GENOPT_DRY_BASE, "--dry-base", NULL, GENOPT_FLOAT, 0, "dry_base", "B",
	    "DRY base (default 1.75)"),
	OPTW(GENOPT_DRY_ALLOWED_LEN, "--dry-allowed-len", NULL, GENOPT_INT, 0,
	    "dry_allowed_length", "N", "DRY allowed length (default 2)"),
	OPTW(GENOPT_DRY_RANGE, "--dry-range", NULL, GENOPT_INT, 0, "dry_range", "N",
	    "DRY looks back N tokens, 0 = all"),
	OPT(GENOPT_DRY_BREAKERS, "--dry-breakers", NULL, GENOPT_BREAKERS, 0, 0, 0,
	    "dry_sequence_breakers", "LIST",
	    "comma-separated sequence breakers (\\n \\t \\, \\\\ escapes; \"\" = none)"),
	OPTW(GENOPT_XTC_PROB, "--xtc-prob", NULL, GENOPT_FLOAT, 0, "xtc_probability", "P",
	    "XTC probability, 0 = off"),
	OPTW(GENOPT_XTC_THRESH, "--xtc-thresh", NULL, GENOPT_FLOAT, 0, "xtc_threshold", "T",
	    "XTC threshold (default 0.1)"),
	OPTW(GENOPT_MIROSTAT, "--mirostat", NULL, GENOPT_INT_OPT, 0, "mirostat", "[V]",
	    "mirostat v2 (V: 0 = off, 2 = v2)"),
	OPTW(GENOPT_MIROSTAT_TAU, "--mirostat-tau", NULL, GENOPT_FLOAT, 0,
	    "mirostat_tau", "T", "default 5"),
	OPTW(GENOPT_MIROSTAT_ETA, "--mirostat-eta", NULL, GENOPT_FLOAT, 0, "mirostat_eta", "E",
	    "default 0.1"),
	OPTW(GENOPT_BIAS, "--bias", NULL, GENOPT_BIAS_LIST, EXL_MAX_BIAS, "token_bias", "ID=V",
	    "add V (or -inf) to token ID's logit; repeatable"),
	OPT(GENOPT_SEED, "--seed", NULL, GENOPT_U64, 0, 0, 0, "seed", "S",
	    "sampling seed (default: random)"),
	OPT(GENOPT_STOP, "--stop", NULL, GENOPT_STR_LIST, 0, 0, EXL_MAX_STOP_STRINGS, "stop", "STR",
	    "stop string; repeatable"),
	OPT(GENOPT_STOP_TOKEN, "--stop-token", NULL, GENOPT_ID_LIST, 0, INT32_MAX,
	    EXL_MAX_STOP_TOKENS, "stop", "ID", "stop token id; repeatable"),
	OPT(GENOPT_BAN, "--ban", NULL, GENOPT_STR_LIST, 0, 0, EXL_MAX_BANNED, "banned_strings",
	    "STR", "banned string (backtrack and resample); repeatable"),
	OPT(GENOPT_TOKEN_HEALING, "--token-healing", NULL, GENOPT_FLAG, 0, 0, 0, "token_healing",
	    NULL, "regenerate the prompt's last token(s)"),
	OPTW(GENOPT_CFG_SCALE, "--cfg-scale", NULL, GENOPT_FLOAT, 0, "cfg_scale", "S",
	    "classifier-free guidance scale (needs --negative)"),
	OPT(GENOPT_NEGATIVE, "--negative", NULL, GENOPT_STR, 0, 0, 0, "negative_prompt", "TEXT",
	    "negative prompt for CFG"),
	OPT(GENOPT_GRAMMAR, "--grammar", NULL, GENOPT_FILE, 0, 0, 0, "grammar", "FILE",
	    "GBNF grammar the output must match"),
	OPT(GENOPT_JSON_SCHEMA, "--json-schema", NULL, GENOPT_FILE, 0, 0, 0, "json_schema", "FILE",
	    "JSON schema the output must satisfy"),
	OPT(GENOPT_REGEX, "--regex", NULL, GENOPT_STR, 0, 0, 0, "regex", "RE",
	    "regular expression the whole output matches"),
	OPT(GENOPT_PREFER_EOS, "--prefer-eos", NULL, GENOPT_FLAG, 0, 0, 0, "filter_prefer_eos",
	    NULL, "end as soon as the grammar / schema / regex is complete"),
	OPT(GENOPT_IGNORE_EOS, "--ignore-eos", NULL, GENOPT_FLAG, 0, 0, 0, "ignore_eos", NULL,
	    "do not stop at end of text"),
	OPT(GENOPT_COMPLETION_ONLY, "--completion-only", NULL, GENOPT_FLAG, 0, 0, 0,
	    "completion_only", NULL, "print (and report) the completion without the prompt"),
	OPT(GENOPT_SPECIAL, "--special", NULL, GENOPT_FLAG, 0, 0, 0, "encode_special", NULL,
	    "parse special tokens written in the prompt"),
	OPT(GENOPT_DECODE_SPECIAL, "--decode-special", NULL, GENOPT_FLAG, 0, 0, 0,
	    "decode_special", NULL, "show special tokens in the output"),
	OPT(GENOPT_NO_BOS, "--no-bos", NULL, GENOPT_FLAG, 0, 0, 0, "add_bos", NULL,
	    "do not add BOS to the prompt"),
	OPTW(GENOPT_TOP_PROBS, "--top-probs", NULL, GENOPT_INT, 0,
	    "return_top_k", "K", "report each token's probability and the K most likely"),
	OPT(GENOPT_DRAFT_MODEL, "--draft-model", NULL, GENOPT_STR, 0, 0, 0, "draft_model", "NAME",
	    "speculative decoding: proposals from the loaded model NAME (same vocabulary)"),
	OPTW(GENOPT_DRAFT_TOKENS, "--draft-tokens", NULL, GENOPT_INT, 0, "draft_tokens", "N",
	    "the most tokens proposed per step (default 4)"),
	OPTW(GENOPT_NGRAM_DRAFT, "--ngram-draft", NULL, GENOPT_INT, 0, "ngram_draft", "N",
	    "speculative decoding: propose what followed the last N..1 tokens before"),
	OPTW(GENOPT_BEAMS, "--beams", NULL, GENOPT_INT, 0, "num_beams", "N",
	    "beam search with N beams (output at the end; sampling options do not apply)"),
	OPTW(GENOPT_LENGTH_PENALTY, "--length-penalty", NULL, GENOPT_FLOAT, 0, "length_penalty",
	    "L", "beams rank by log-probability / length^L (default 1)"),
	OPT(GENOPT_TRUNCATE, "--truncate", NULL, GENOPT_FLAG, 0, 0, 0, "truncate", NULL,
	    "cut a prompt too long for the context to its last (context - N) tokens "
	    "after BOS instead of refusing it"),
	OPT(GENOPT_LORA, "--lora", NULL, GENOPT_LORA_LIST, -EXL_LORA_SCALE_MAX,
	    EXL_LORA_SCALE_MAX, EXL_MAX_LORAS, "lora", "NAME[:SCALE]",
	    "apply a LoRA adapter at SCALE (default 1); repeatable"),
	OPT(GENOPT_SUFFIX, "--suffix", NULL, GENOPT_STR, 0, 0, 0, "suffix", "TEXT",
	    "fill in the middle: TEXT comes after the gap, the prompt before it (a code "
	    "model's FIM tokens frame them)"),
};

void genopt_parser_init(struct genopt_parser *ps, const char *prog, FILE *msg)
{
	memset(ps, 0, sizeof(*ps));
	snprintf(ps->prog, sizeof(ps->prog), "%s", prog);
	ps->msg = msg;
	memcpy(ps->opts, genopt_table, sizeof(ps->opts));
	for (size_t i = 0; i < GENOPT_N; i++) {
		struct genopt *p = &ps->opts[i];

		if (!p->wire || (p->kind != GENOPT_INT && p->kind != GENOPT_INT_OPT &&
				 p->kind != GENOPT_FLOAT && p->kind != GENOPT_BIAS_LIST))
			continue;
		ps->range[i] = genrange_find(p->wire);
		if (ps->range[i]) {
			p->min = ps->range[i]->min;
			p->max = ps->range[i]->max;
		}
	}
}

const struct genopt *genopt_find_in(const struct genopt *t, size_t n, const char *a)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(a, t[i].name) || (t[i].alt && !strcmp(a, t[i].alt)))
			return &t[i];
	return NULL;
}

const struct genopt *genopt_find(const struct genopt_parser *ps, const char *a)
{
	return genopt_find_in(ps->opts, GENOPT_N, a);
}

void genopt_usage_line(FILE *out, const struct genopt *p)
{
	char lhs[64];

	snprintf(lhs, sizeof(lhs), "%s%s%s%s%s", p->name, p->alt ? ", " : "",
		 p->alt ? p->alt : "", p->arg ? " " : "", p->arg ? p->arg : "");
	fprintf(out, "  %-24s %s\n", lhs, p->help);
}

void genopt_usage(FILE *out, const struct genopt_parser *ps)
{
	for (size_t i = 0; i < GENOPT_N; i++)
		genopt_usage_line(out, &ps->opts[i]);
}

/* What p takes: its wire range (with the bounds a program may have
 * narrowed), or a plain interval for an option that is not on the wire. */
static struct genrange range_of(const struct genopt_parser *ps, const struct genopt *p)
{
	struct genrange r = { .integer = p->kind != GENOPT_FLOAT };

	if (p->id >= 0 && p->id < GENOPT_N && ps->range[p->id])
		r = *ps->range[p->id];
	r.min = p->min;
	r.max = p->max;
	return r;
}

static int parse_int(const struct genopt_parser *ps, const struct genopt *p, const char *opt,
		     const char *v, int *out)
{
	struct genrange r = range_of(ps, p);
	char what[96];
	char *end;

	errno = 0;
	long x = strtol(v, &end, 10);
	if (errno || end == v || *end || !genrange_ok(&r, (double)x)) {
		genrange_describe(&r, what, sizeof(what));
		fprintf(ps->msg, "%s: %s wants %s, not '%s'\n", ps->prog, opt, what, v);
		return -1;
	}
	*out = (int)x;
	return 0;
}

/* The value is checked as it goes on the wire, rounded to float (so 1e-50
 * is not taken where 0 is refused); the double is checked first, as a
 * double out of float's range has no float. */
static int parse_float(const struct genopt_parser *ps, const struct genopt *p, const char *opt,
		       const char *v, float *out)
{
	struct genrange r = range_of(ps, p);
	char what[96];
	char *end;

	errno = 0;
	double x = strtod(v, &end);
	if (errno || end == v || *end || !genrange_ok(&r, x) || !genrange_ok(&r, (double)(float)x)) {
		genrange_describe(&r, what, sizeof(what));
		fprintf(ps->msg, "%s: %s wants %s, not '%s'\n", ps->prog, opt, what, v);
		return -1;
	}
	*out = (float)x;
	return 0;
}

static int parse_seed(const struct genopt_parser *ps, const char *v, uint64_t *out)
{
	char *end;

	errno = 0;
	*out = strtoull(v, &end, 10);
	if (errno || end == v || *end || *v == '-') {
		fprintf(ps->msg, "%s: --seed wants an unsigned integer, not '%s'\n", ps->prog, v);
		return -1;
	}
	return 0;
}

/* ID=V; V a number in the wire's range for token_bias, or -inf. */
static int parse_bias(const struct genopt_parser *ps, const struct genopt *p, const char *v,
		      int32_t *id, float *bias)
{
	struct genrange r = range_of(ps, p);
	char what[96];
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
		*bias = -INFINITY;
		return 0;
	}
	errno = 0;
	double f = strtod(eq + 1, &end);
	if (errno || end == eq + 1 || *end || !genrange_ok(&r, f) ||
	    !genrange_ok(&r, (double)(float)f))
		goto bad;
	*bias = (float)f;
	return 0;
bad:
	genrange_describe(&r, what, sizeof(what));
	fprintf(ps->msg, "%s: --bias wants ID=VALUE (a token id, then %s or -inf), not '%s'\n",
		ps->prog, what, v);
	return -1;
}

/* NAME[:SCALE]: the text after the last ':' is the scale when it is a
 * number, else part of the name (a path may hold a ':'). */
static int parse_lora(const struct genopt_parser *ps, const struct genopt *p, const char *v,
		      struct genopt_value *out)
{
	const char *colon = strrchr(v, ':');

	out->str = v;
	out->name_len = strlen(v);
	out->f = 1.0f;
	if (colon && colon[1]) {
		char *end;

		errno = 0;
		double f = strtod(colon + 1, &end);
		if (!errno && !*end) {
			if (!(f >= p->min && f <= p->max)) {
				fprintf(ps->msg, "%s: --lora %s: the scale must be in [%g, %g]\n",
					ps->prog, v, p->min, p->max);
				return -1;
			}
			out->f = (float)f;
			out->name_len = (size_t)(colon - v);
		}
	}
	if (!out->name_len) {
		fprintf(ps->msg, "%s: --lora wants NAME[:SCALE], not '%s'\n", ps->prog, v);
		return -1;
	}
	return 0;
}

/* "" is no breakers at all. */
static int parse_breakers(const struct genopt_parser *ps, const char *v, struct genopt_value *out)
{
	int n = 0;
	size_t len = 0;
	char cur[GENOPT_MAX_BREAKER_LEN];

	if (*v) {
		for (const char *c = v;; c++) {
			if (*c == ',' || !*c) {
				if (!len || n == GENOPT_MAX_BREAKERS)
					goto bad;
				memcpy(out->breakers[n], cur, len);
				out->breakers[n][len] = 0;
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
			if (len >= GENOPT_MAX_BREAKER_LEN)
				goto bad;
			cur[len++] = ch;
		}
	}
	out->n_breakers = n;
	return 0;
bad:
	fprintf(ps->msg, "%s: --dry-breakers wants up to %d comma-separated non-empty strings "
		"of at most %d bytes (escapes \\n \\t \\, \\\\), not '%s'\n", ps->prog,
		GENOPT_MAX_BREAKERS, GENOPT_MAX_BREAKER_LEN, v);
	return -1;
}

/* The whole of a constraint file. */
static int read_text_file(const struct genopt_parser *ps, const char *opt, const char *path,
			  char **out)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	size_t n;

	if (!f) {
		fprintf(ps->msg, "%s: %s: cannot open '%s': %s\n", ps->prog, opt, path,
			strerror(errno));
		return -1;
	}
	buf = malloc(MAX_FILE + 1);
	if (!buf) {
		fprintf(ps->msg, "%s: out of memory\n", ps->prog);
		fclose(f);
		return -1;
	}
	n = fread(buf, 1, MAX_FILE + 1, f);
	if (ferror(f) || n > MAX_FILE || memchr(buf, 0, n)) {
		fprintf(ps->msg, "%s: %s: '%s' %s\n", ps->prog, opt, path, ferror(f) ?
			"could not be read" : n > MAX_FILE ? "is over 16 MiB" : "holds a NUL byte");
		fclose(f);
		free(buf);
		return -1;
	}
	fclose(f);
	buf[n] = 0;
	*out = buf;
	return 0;
}

static int parse_value(struct genopt_parser *ps, const struct genopt *p, const char *a,
		       const char *v, struct genopt_value *out)
{
	switch (p->kind) {
	case GENOPT_INT:
	case GENOPT_INT_OPT:
	case GENOPT_ID_LIST:
		return parse_int(ps, p, a, v, &out->i);
	case GENOPT_FLOAT:
		return parse_float(ps, p, a, v, &out->f);
	case GENOPT_STR:
	case GENOPT_STR_LIST:
		out->str = v;
		return 0;
	case GENOPT_FILE:
		if (ps->count[GENOPT_GRAMMAR] || ps->count[GENOPT_JSON_SCHEMA]) {
			fprintf(ps->msg, "%s: give at most one of --grammar and --json-schema\n",
				ps->prog);
			return -1;
		}
		return read_text_file(ps, a, v, &out->text);
	case GENOPT_U64:
		return parse_seed(ps, v, &out->seed);
	case GENOPT_BIAS_LIST:
		return parse_bias(ps, p, v, &out->token, &out->f);
	case GENOPT_BREAKERS:
		return parse_breakers(ps, v, out);
	case GENOPT_LORA_LIST:
		return parse_lora(ps, p, v, out);
	case GENOPT_FLAG:
		break;
	}
	return -1;
}

int genopt_take(struct genopt_parser *ps, const struct genopt *p, int argc, char **argv, int *i,
		struct genopt_value *v)
{
	const char *a = argv[*i];
	bool shared = p->id >= 0 && p->id < GENOPT_N;
	bool list = p->kind == GENOPT_STR_LIST || p->kind == GENOPT_ID_LIST ||
		    p->kind == GENOPT_BIAS_LIST || p->kind == GENOPT_LORA_LIST;

	memset(v, 0, sizeof(*v));
	v->id = p->id;
	v->flag = a;
	if (p->kind == GENOPT_FLAG)
		goto taken;
	if (p->kind == GENOPT_INT_OPT &&
	    !(*i + 1 < argc && argv[*i + 1][0] >= '0' && argv[*i + 1][0] <= '9')) {
		v->i = (int)p->max;
		goto taken;
	}
	if (p->kind != GENOPT_INT_OPT && *i + 1 >= argc) {
		fprintf(ps->msg, "%s: %s needs a value\n", ps->prog, a);
		return -1;
	}
	(*i)++;
	if (list && shared && ps->count[p->id] >= p->max_count) {
		fprintf(ps->msg, "%s: too many %s options\n", ps->prog, a);
		return -1;
	}
	if (parse_value(ps, p, a, argv[*i], v))
		return -1;
taken:
	if (shared) {
		ps->count[p->id]++;
		ps->value[p->id] = p->kind == GENOPT_FLOAT ? (double)v->f : (double)v->i;
	}
	return 0;
}

int genopt_finish(const struct genopt_parser *ps)
{
	const int *n = ps->count;

	if ((n[GENOPT_CFG_SCALE] > 0) != (n[GENOPT_NEGATIVE] > 0)) {
		fprintf(ps->msg, "%s: --cfg-scale and --negative go together\n", ps->prog);
		return -1;
	}
	if ((n[GENOPT_GRAMMAR] > 0) + (n[GENOPT_JSON_SCHEMA] > 0) + (n[GENOPT_REGEX] > 0) > 1) {
		fprintf(ps->msg, "%s: give at most one of --grammar, --json-schema and --regex\n",
			ps->prog);
		return -1;
	}
	/* The job refuses min_new_tokens over max_new_tokens.  Without -n the
	 * daemon's default (or its per-uid limit) decides, which only it
	 * knows. */
	if (n[GENOPT_DRAFT_MODEL] && n[GENOPT_NGRAM_DRAFT] && ps->value[GENOPT_NGRAM_DRAFT] > 0) {
		fprintf(ps->msg, "%s: give at most one of --draft-model and --ngram-draft\n",
			ps->prog);
		return -1;
	}
	if (n[GENOPT_DRAFT_TOKENS] && !n[GENOPT_DRAFT_MODEL] && !n[GENOPT_NGRAM_DRAFT]) {
		fprintf(ps->msg, "%s: --draft-tokens goes with --draft-model or --ngram-draft\n",
			ps->prog);
		return -1;
	}
	if (n[GENOPT_BEAMS] && ps->value[GENOPT_BEAMS] > 0 &&
	    (n[GENOPT_DRAFT_MODEL] || n[GENOPT_NGRAM_DRAFT] || n[GENOPT_NEGATIVE])) {
		fprintf(ps->msg, "%s: --beams does not combine with --draft-model, --ngram-draft "
			"or --negative\n", ps->prog);
		return -1;
	}
	if (n[GENOPT_LENGTH_PENALTY] && !n[GENOPT_BEAMS]) {
		fprintf(ps->msg, "%s: --length-penalty goes with --beams\n", ps->prog);
		return -1;
	}
	if (n[GENOPT_MIN_NEW] && n[GENOPT_MAX_NEW] &&
	    ps->value[GENOPT_MIN_NEW] > ps->value[GENOPT_MAX_NEW]) {
		fprintf(ps->msg, "%s: --min-new %.0f is over -n %.0f (min_new_tokens <= "
			"max_new_tokens)\n", ps->prog, ps->value[GENOPT_MIN_NEW],
			ps->value[GENOPT_MAX_NEW]);
		return -1;
	}
	return 0;
}
