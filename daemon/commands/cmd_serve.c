/* exld [daemon options]: runs the daemon in the foreground. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/commands/commands.h"
#include "daemon/server/wire/config.h"
#include "daemon/core/util/log.h"
#include "daemon/server/server.h"

static void serve_usage(FILE *out)
{
	fprintf(out,
		"usage: exld [--config FILE] [--socket PATH] [--models DIR] [--load NAME[,NAME...]]...\n"
		"            [--threads N] [--kv-tokens N] [--device DEV] [--http ADDR]... [--verbose]\n"
		"Runs the daemon in the foreground until SIGTERM.\n"
		"  --config FILE    settings file (default " EXL_CONFIG_DEFAULT_PATH ", skipped when absent)\n"
		"  --socket PATH    listen here (unless systemd passes a socket)\n"
		"  --models DIR     the model directory; a model's NAME is its file name without .gguf\n"
		"  --load NAMES     models to load at start, comma-separated, repeatable (replaces the\n"
		"                   file's list)\n"
		"  --threads N      CPU threads per model (0: one per core)\n"
		"  --kv-tokens N    KV cache positions per model\n"
		"  --device DEV     cpu, cuda or cuda:N\n"
		"  --http ADDR      also serve the OpenAI / Ollama HTTP API on 127.0.0.1:PORT,\n"
		"                   [::1]:PORT or unix:/path (repeatable; replaces the file's)\n"
		"  --verbose        log every connection event\n"
		"Flags override the config file; see docs/configuration.md for every setting.\n");
}

struct flag {
	const char *name;
	const char *key; /* config key */
};

static const struct flag flags[] = {
	{ "--socket", "socket" },
	{ "--models", "models_dir" },
	{ "--load", "load" },
	{ "--threads", "threads" },
	{ "--kv-tokens", "kv_tokens" },
	{ "--device", "device" },
	{ "--http", "http" },
};

int exl_cmd_serve(int argc, char **argv)
{
	struct exl_config cfg;
	const char *config_path = EXL_CONFIG_DEFAULT_PATH;
	bool config_explicit = false;
	char err[1024];
	bool http_seen = false, load_seen = false;
	int i;

	exl_log_init();
	exl_config_defaults(&cfg);
	/* First pass: the config file and --help. */
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			serve_usage(stdout);
			return 0;
		}
		if (!strcmp(argv[i], "--config")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "exld: --config wants a file\n");
				return 2;
			}
			config_path = argv[++i];
			config_explicit = true;
		}
	}
	if (exl_config_load(&cfg, config_path, config_explicit, err, sizeof(err))) {
		fprintf(stderr, "exld: %s\n", err);
		return 2;
	}
	/* Second pass: the flags, over the file. */
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--config")) {
			i++;
			continue;
		}
		if (!strcmp(argv[i], "--verbose") || !strcmp(argv[i], "-v")) {
			exl_log_set_level(EXL_LOG_DEBUG);
			continue;
		}
		size_t f;
		for (f = 0; f < sizeof(flags) / sizeof(flags[0]); f++)
			if (!strcmp(argv[i], flags[f].name))
				break;
		if (f == sizeof(flags) / sizeof(flags[0])) {
			fprintf(stderr, "exld: unknown option '%s'\n", argv[i]);
			serve_usage(stderr);
			return 2;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "exld: %s wants a value\n", argv[i]);
			return 2;
		}
		/* repeatable: the first --load or --http replaces the file's
		 * list, later ones add to it */
		if (!strcmp(flags[f].key, "load") && !load_seen) {
			cfg.n_load = 0;
			load_seen = true;
		}
		if (!strcmp(flags[f].key, "http") && !http_seen) {
			cfg.n_http = 0;
			http_seen = true;
		}
		if (exl_config_set(&cfg, flags[f].key, argv[++i], err, sizeof(err))) {
			fprintf(stderr, "exld: %s: %s\n", flags[f].name, err);
			return 2;
		}
	}
	if (exl_config_check(&cfg, err, sizeof(err))) {
		fprintf(stderr, "exld: %s\n", err);
		return 2;
	}
	return exl_server_run(&cfg);
}
