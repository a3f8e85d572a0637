/* exl: the command-line client of exld (docs/exl.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/exl/exl_cli.h"

struct command {
	const char *name;
	int (*fn)(const struct cli *g, int argc, char **argv);
	const char *args;
	const char *help;
};

static const struct command commands[] = {
	{ "generate", cmd_generate, "[-m MODEL] [options] PROMPT...",
	  "complete prompts, streaming the text (- reads stdin)" },
	{ "chat", cmd_chat, "[-m MODEL] [--system TEXT] [--template NAME]",
	  "talk with a model in its chat format" },
	{ "embed", cmd_embed, "[-m MODEL] [--pooling P] [--normalize] TEXT...",
	  "one embedding per text, as JSON lines" },
	{ "models", cmd_models, "", "list the daemon's models" },
	{ "load", cmd_load, "NAME", "load a model from the daemon's model directory (admin)" },
	{ "unload", cmd_unload, "[--cancel] NAME", "unload a model (admin)" },
	{ "status", cmd_status, "", "models, memory, running jobs, tokens per second" },
	{ "bench", cmd_bench, "[-m MODEL] [-c CLIENTS] [-n TOKENS] [-p PROMPT]",
	  "time to first token and tok/s of concurrent clients" },
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *out)
{
	fprintf(out, "usage: exl [--socket PATH] COMMAND [ARGS]\n\n");
	for (size_t i = 0; i < N_COMMANDS; i++) {
		char lhs[80];

		snprintf(lhs, sizeof(lhs), "%s %s", commands[i].name, commands[i].args);
		fprintf(out, "  %-50s %s\n", lhs, commands[i].help);
	}
	fprintf(out,
		"\n  exl COMMAND --help shows a command's options.\n"
		"\n"
		"options:\n"
		"  --socket PATH   the daemon's socket (default: $" EXL_SOCKET_ENV ", else "
		EXL_DEFAULT_SOCKET ")\n"
		"  --help, -h      this text\n"
		"  --version       exl's version\n"
		"\n"
		"exit status:\n"
		"  0    success\n"
		"  1    a request or a job failed (the message says why)\n"
		"  2    a bad option or value\n"
		"  3    cannot connect to exld (not running, or no access to its socket)\n"
		"  4    unknown model (not loaded, or no such file for load)\n"
		"  5    not allowed (load / unload need an admin uid)\n"
		"  6    the daemon does not offer an option given (an older exld)\n"
		"  130  interrupted by Ctrl-C (generate, bench)\n");
}

int main(int argc, char **argv)
{
	struct cli g = { 0 };
	int i;

	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return EXL_EXIT_OK;
		}
		if (!strcmp(argv[i], "--version")) {
			printf("exl (exld client, protocol %d)\n", EXL_PROTOCOL_VERSION);
			return EXL_EXIT_OK;
		}
		if (!strcmp(argv[i], "--socket") || !strcmp(argv[i], "-s")) {
			if (i + 1 >= argc || !argv[i + 1][0]) {
				fprintf(stderr, "exl: %s wants a path\n", argv[i]);
				return EXL_EXIT_USAGE;
			}
			g.socket = argv[++i];
			continue;
		}
		fprintf(stderr, "exl: unknown option '%s' (exl --help lists them)\n", argv[i]);
		return EXL_EXIT_USAGE;
	}
	if (i >= argc) {
		usage(stderr);
		return EXL_EXIT_USAGE;
	}
	if (!strcmp(argv[i], "help")) {
		usage(stdout);
		return EXL_EXIT_OK;
	}
	for (size_t k = 0; k < N_COMMANDS; k++)
		if (!strcmp(argv[i], commands[k].name))
			return commands[k].fn(&g, argc - i, argv + i);
	fprintf(stderr, "exl: unknown command '%s' (exl --help lists them)\n", argv[i]);
	return EXL_EXIT_USAGE;
}
