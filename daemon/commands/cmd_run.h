/* exld run's insides: options (cmd_run_opts.c) and its output, the JSON
 * result and the --top-probs lines (cmd_run_json.c), used by cmd_run.c
 * only. */
#ifndef EXL_CMD_RUN_H
#define EXL_CMD_RUN_H

#include <stdbool.h>
#include <stdio.h>

#include "common/cli/gen_args.h"
#include "daemon/core/generator/generator.h"

struct exl_tokenizer;

struct run_opts {
	const char *model;
	const char *prompt;
	const char *negative;
	const char *suffix;    /* fill-in-the-middle: what follows the gap */
	const char *device;
	int threads;
	int kv_tokens;
	bool warmup;
	bool warmup_full;  /* --warmup-full: the warm-up pass is a prompt as long */
	bool json;
	int top_probs;
	const char *dump_logits;  /* --dump-logits FILE (common/logits_file.h) */
	const char *draft_model;  /* --draft-model FILE|NAME */
	struct exl_gen_settings s;
	/* The shared options' parser (common/cli/gen_args.h: the members
	 * above that they set), and the lists s points into. */
	struct gen_args a;
	struct exl_token_bias *bias; /* the --bias pairs, in the sampler's shape */
	const char **embd_specs;     /* the --embedding ALIAS=FILE values */
	int n_embd_specs;
	struct exl_embd_block *blocks; /* made from them once the model is loaded */
	float **block_rows;
};

/* The --embedding files, read as raw float32 rows of n_embd into o->blocks
 * and hooked into o->s.  -1 with a message. */
int exl_run_load_embeddings(struct run_opts *o, int n_embd, char *err, size_t errlen);

/* A whole file of at most max bytes, malloc'ed, its size in *len; NULL
 * with a message. */
void *exl_read_whole_file(const char *path, size_t max, size_t *len, char *err, size_t errlen);

/* Fills o from argv.  0: run; 1: help printed; -1: a message was printed
 * (exit status 2).  exl_run_opts_free() in every case. */
int exl_run_parse_args(int argc, char **argv, struct run_opts *o);
void exl_run_opts_free(struct run_opts *o);

/* The result as one JSON object on one line (common/cli/gen_output.h). */
int exl_run_print_json(FILE *out, const struct exl_gen_result *r, const struct exl_tokenizer *tok);

/* The --top-probs lines of a chunk, on out. */
void exl_run_print_probs(FILE *out, const struct exl_chunk *c, const struct exl_tokenizer *tok);

#endif
