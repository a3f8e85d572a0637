/* exl, the command-line client of exld: what its command files share. */
#ifndef EXL_CLI_H
#define EXL_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "exlclient.h"
#include "common/cli/gen_args.h"

/* Exit statuses (exl --help lists them). */
enum {
	EXL_EXIT_OK = 0,
	EXL_EXIT_FAIL = 1,        /* a request or a job failed, or output could not be written */
	EXL_EXIT_USAGE = 2,       /* a bad option or value */
	EXL_EXIT_CONNECT = 3,     /* no daemon at the socket, or no access to it */
	EXL_EXIT_MODEL = 4,       /* the model is not loaded / has no file */
	EXL_EXIT_FORBIDDEN = 5,   /* load / unload by a user who is not an admin */
	EXL_EXIT_UNSUPPORTED = 6, /* an option the daemon does not offer (an older exld) */
	EXL_EXIT_INTERRUPTED = 130, /* Ctrl-C (generate, bench) */
};

/* Options before the command. */
struct cli {
	const char *socket;       /* --socket; NULL: $EXLD_SOCKET, else the default */
};

/* The socket exl connects to. */
const char *cli_socket_path(const struct cli *g);

/* Connects (with a ring); on failure prints why, with a hint, and returns
 * NULL with *status set to the exit status. */
struct exl_client *cli_connect(const struct cli *g, int *status);

/* Prints "exl: WHAT: message" for the failed call rc on c (with a hint for
 * an unknown model when model is given) and returns the exit status. */
int cli_fail(struct exl_client *c, int rc, const char *what, const char *model);

/* The exit status for a library / daemon status code. */
int cli_exit_status(int rc);

/* SIGINT: a flag instead of death (no SA_RESTART, so a blocking read
 * returns EINTR).  cli_sigint_count() is how many arrived since the last
 * cli_sigint_clear(). */
int cli_sigint_install(char *err, size_t errlen);
int cli_sigint_count(void);
void cli_sigint_clear(void);

/* Reads all of fd (at most max bytes) into a malloc'ed NUL-terminated
 * string; NULL with a message. */
char *cli_read_all(int fd, size_t max, size_t *len, char *err, size_t errlen);

/* "1.5 MiB" into buf. */
const char *cli_bytes(uint64_t n, char *buf, size_t size);

/* ---- generation options (exl_opts.c) ---- */

struct gen_opts {
	struct exl_gen_params p;
	const char *model;
	bool json;
	int top_probs;            /* --top-probs K */
	struct exl_input_embedding *embd; /* --embedding blocks (malloc'ed) */
	size_t n_embd;
	/* The shared options' parser (common/cli/gen_args.h: the members
	 * above that they set), and the lists p points into. */
	struct gen_args a;
};

/* Sizes the lists for argc arguments.  -1 with a message on failure. */
int gen_opts_init(struct gen_opts *o, int argc, char *err, size_t errlen);
void gen_opts_free(struct gen_opts *o);

/* Takes the option at argv[*i] when it is a generation option (advancing
 * *i past its value): 1 taken, 0 not a generation option, -1 bad (a
 * message was printed). */
int gen_opts_take(struct gen_opts *o, const char *cmd, int argc, char **argv, int *i);

/* After the last option: checks pairs (--cfg-scale with --negative).
 * -1 with a message printed. */
int gen_opts_finish(struct gen_opts *o, const char *cmd);

/* The generation options' help lines. */
void gen_opts_usage(FILE *out);

/* ---- output: JSON and --top-probs lines (exl_json.c) ---- */

/* Per-token candidates gathered from a stream, for --top-probs. */
struct top_tokens {
	int k;                    /* candidates per token */
	size_t n;                 /* tokens */
	size_t cap;
	int32_t *ids;             /* [n][k] */
	float *probs;             /* [n][k] */
};

int top_tokens_add(struct top_tokens *t, const struct exl_event *ev);
void top_tokens_free(struct top_tokens *t);

/* Token texts for JSON and --top-probs lines: detokenized one id at a
 * time (its own text, special tokens shown) and cached. */
struct token_texts;
struct token_texts *token_texts_new(struct exl_client *c, const char *model);
void token_texts_free(struct token_texts *tt);
/* The text of id (never NULL: "" when the daemon could not say). */
const char *token_text(struct token_texts *tt, int32_t id, size_t *len);

/* One result as one line of JSON, the same as `exld run --json`'s
 * (common/cli/gen_output.h), with top's candidates when given. */
int json_result(FILE *out, const struct exl_result *r, const struct top_tokens *top,
		struct token_texts *tt);

/* exld run's --top-probs lines for a TOKENS event, on out, each after
 * prefix. */
void print_top_probs(FILE *out, const char *prefix, const struct exl_event *ev,
		     struct token_texts *tt);

/* ---- commands ---- */

int cmd_generate(const struct cli *g, int argc, char **argv);
int cmd_chat(const struct cli *g, int argc, char **argv);
int cmd_models(const struct cli *g, int argc, char **argv);
int cmd_load(const struct cli *g, int argc, char **argv);
int cmd_unload(const struct cli *g, int argc, char **argv);
int cmd_status(const struct cli *g, int argc, char **argv);
int cmd_bench(const struct cli *g, int argc, char **argv);
int cmd_embed(const struct cli *g, int argc, char **argv);

#endif
