/* exld: the daemon, and its offline subcommands. */
#include <stdio.h>
#include <string.h>

#include "daemon/commands/commands.h"

struct subcommand {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *help;
};

static const struct subcommand subcommands[] = {
	{ "run", exl_cmd_run, "run --model FILE --prompt TEXT [options]  complete a prompt (options: exld run --help)" },
	{ "embed", exl_cmd_embed, "embed --model FILE [--pooling P] [--normalize] TEXT...  one embedding (JSON) per text" },
	{ "inspect", exl_cmd_inspect, "inspect FILE              print a GGUF model's metadata and tensors" },
	{ "tokenize", exl_cmd_tokenize, "tokenize --model FILE [--no-bos] [--special]  text on stdin -> token ids" },
	{ "detokenize", exl_cmd_detokenize, "detokenize --model FILE [--special]  token ids on stdin -> text" },
	{ "chat-template", exl_cmd_chat_template, "chat-template --model FILE [--template FILE]  a conversation (JSON) on stdin -> the prompt" },
};

static void usage(FILE *out)
{
	fprintf(out, "usage: exld [daemon options]      run the daemon (see exld --help)\n");
	for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
		fprintf(out, "       exld %s\n", subcommands[i].help);
}

int main(int argc, char **argv)
{
	/* No subcommand, or options: the daemon itself. */
	if (argc < 2 || (argv[1][0] == '-' && strcmp(argv[1], "-h")))
		return exl_cmd_serve(argc, argv);
	if (argc >= 2) {
		for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
			if (!strcmp(argv[1], subcommands[i].name))
				return subcommands[i].fn(argc - 1, argv + 1);
		if (!strcmp(argv[1], "help") || !strcmp(argv[1], "-h")) {
			usage(stdout);
			return 0;
		}
	}
	usage(stderr);
	return 2;
}
