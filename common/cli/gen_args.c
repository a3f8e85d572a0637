/* The generation options of one command line, taken and kept
 * (common/cli/gen_args.h). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli/gen_args.h"

/* Whether a member of size bytes can hold a value of kind.  The offsets
 * come from the program as bare numbers: this is what stands in for the
 * type check a direct assignment would have had. */
static bool fits(enum genopt_kind kind, size_t size)
{
	switch (kind) {
	case GENOPT_FLAG:
		return size == sizeof(bool) || size == sizeof(int);
	case GENOPT_INT:
	case GENOPT_INT_OPT:
		return size == sizeof(int);
	case GENOPT_FLOAT:
		return size == sizeof(float);
	case GENOPT_STR:
	case GENOPT_FILE:
		return size == sizeof(const char *);
	case GENOPT_U64:
		return size == sizeof(uint64_t);
	default:
		return false;     /* the lists are kept here, never in a member */
	}
}

int gen_args_init(struct gen_args *a, const char *prog, int argc, void *base,
		  const struct gen_field *field, char *err, size_t errlen)
{
	size_t n = argc > 0 ? (size_t)argc : 1;

	memset(a, 0, sizeof(*a));
	genopt_parser_init(&a->ps, prog, stderr);
	for (int id = 0; id < GENOPT_N; id++) {
		if (field[id].size && !fits(a->ps.opts[id].kind, field[id].size)) {
			snprintf(err, errlen, "%s: the member it is kept in has the wrong size",
				 a->ps.opts[id].name);
			return -1;
		}
	}
	a->base = base;
	a->field = field;
	a->stops = calloc(n, sizeof(*a->stops));
	a->bans = calloc(n, sizeof(*a->bans));
	a->stop_tokens = calloc(n, sizeof(*a->stop_tokens));
	a->bias_ids = calloc(n, sizeof(*a->bias_ids));
	a->bias_values = calloc(n, sizeof(*a->bias_values));
	a->lora_names = calloc(n, sizeof(*a->lora_names));
	a->lora_scales = calloc(n, sizeof(*a->lora_scales));
	if (!a->stops || !a->bans || !a->stop_tokens || !a->bias_ids || !a->bias_values ||
	    !a->lora_names || !a->lora_scales) {
		gen_args_free(a);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	return 0;
}

void gen_args_free(struct gen_args *a)
{
	free(a->stops);
	free(a->bans);
	free(a->stop_tokens);
	free(a->bias_ids);
	free(a->bias_values);
	free(a->constraint_text);
	for (size_t i = 0; a->lora_names && i < a->n_loras; i++)
		free(a->lora_names[i]);
	free(a->lora_names);
	free(a->lora_scales);
	a->lora_names = NULL;
	a->lora_scales = NULL;
	a->n_loras = 0;
	a->stops = a->bans = NULL;
	a->stop_tokens = a->bias_ids = NULL;
	a->bias_values = NULL;
	a->constraint_text = NULL;
}

static void put_plain(struct gen_args *a, const struct genopt_value *v)
{
	const struct gen_field *f = &a->field[v->id];
	char *at = (char *)a->base + f->off;

	if (!f->size)
		return;
	switch (a->ps.opts[v->id].kind) {
	case GENOPT_FLAG:
		/* --no-bos is the one flag that turns its setting off */
		if (f->size == sizeof(bool))
			*(bool *)at = v->id != GENOPT_NO_BOS;
		else
			*(int *)at = v->id != GENOPT_NO_BOS;
		break;
	case GENOPT_INT:
	case GENOPT_INT_OPT:
		*(int *)at = v->i;
		break;
	case GENOPT_FLOAT:
		*(float *)at = v->f;
		break;
	case GENOPT_STR:
	case GENOPT_FILE:
		*(const char **)at = v->text ? v->text : v->str;
		break;
	case GENOPT_U64:
		*(uint64_t *)at = v->seed;
		break;
	default:
		break;
	}
}

/* The lists cannot overflow: each entry took two of the argc arguments. */
static int keep(struct gen_args *a, const struct genopt_value *v)
{
	switch (v->id) {
	case GENOPT_LORA:
		a->lora_names[a->n_loras] = strndup(v->str, v->name_len);
		if (!a->lora_names[a->n_loras]) {
			fprintf(a->ps.msg, "%s: out of memory\n", a->ps.prog);
			return -1;
		}
		a->lora_scales[a->n_loras++] = v->f;
		return 0;
	case GENOPT_STOP:
		a->stops[a->n_stops++] = v->str;
		return 0;
	case GENOPT_BAN:
		a->bans[a->n_bans++] = v->str;
		return 0;
	case GENOPT_STOP_TOKEN:
		a->stop_tokens[a->n_stop_tokens++] = v->i;
		return 0;
	case GENOPT_BIAS:
		a->bias_ids[a->n_bias] = v->token;
		a->bias_values[a->n_bias++] = v->f;
		return 0;
	case GENOPT_DRY_BREAKERS:
		a->n_breakers = v->n_breakers;
		memcpy(a->breakers, v->breakers, (size_t)v->n_breakers * sizeof(v->breakers[0]));
		for (int i = 0; i < v->n_breakers; i++)
			a->breaker_ptrs[i] = a->breakers[i];
		return 0;
	case GENOPT_GRAMMAR:
	case GENOPT_JSON_SCHEMA:
		/* the parser refuses a second one: nothing is lost here */
		a->constraint_text = v->text;
		break;
	default:
		break;
	}
	put_plain(a, v);
	return 0;
}

int gen_args_take(struct gen_args *a, const struct genopt *p, int argc, char **argv, int *i,
		  struct genopt_value *v)
{
	if (genopt_take(&a->ps, p, argc, argv, i, v))
		return -1;
	if (v->id >= 0 && v->id < GENOPT_N)
		return keep(a, v);
	return 0;
}
