/* exld run's insides: options (cmd_run_opts.c) and the JSON result
 * (cmd_run_json.c), used by cmd_run.c only. */
#ifndef EXL_CMD_RUN_H
#define EXL_CMD_RUN_H

#include <stdbool.h>
#include <stdio.h>

#include "common/json_string.h"
#include "daemon/core/generator/generator.h"

struct exl_tokenizer;

struct run_opts {
	const char *model;
	const char *prompt;
	const char *negative;
	const char *device;
	int threads;
	int kv_tokens;
	bool warmup;
	bool json;
	int top_probs;
	const char *dump_logits;  /* --dump-logits FILE (common/logits_file.h) */
	const char *draft_model;  /* --draft-model FILE|NAME */
	struct exl_gen_settings s;
	/* the lists s points into, sized by argc */
	const char **stops;
	int32_t *stop_tokens;
	const char **bans;
	struct exl_token_bias *bias;
	char *constraint_text;   /* --grammar / --json-schema file contents */
};

/* Fills o from argv.  0: run; 1: help printed; -1: a message was printed
 * (exit status 2).  run_opts_free() in every case. */
int run_parse_args(int argc, char **argv, struct run_opts *o);
void run_opts_free(struct run_opts *o);

/* The result as one JSON object on one line. */
int run_print_json(FILE *out, const struct exl_gen_result *r, const struct exl_tokenizer *tok);

/* JSON string literal of n bytes (invalid UTF-8 becomes U+FFFD). */
static inline void run_json_string(FILE *out, const char *s, size_t n)
{
	json_string(out, s, n);
}

#endif
