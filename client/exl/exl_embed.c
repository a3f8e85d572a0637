/* exl embed: one JSON line per text with its embedding, as `exld embed`
 * prints them, through the daemon (exl_embed(): every text one request,
 * sent together, so the daemon batches them). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/exl/exl_cli.h"

static void usage(FILE *out)
{
	fprintf(out, "usage: exl embed [-m MODEL] [--pooling mean|last|cls] [--normalize] "
		"[--truncate] TEXT...\n"
		"  -m, --model NAME   the model (default: the only loaded one)\n"
		"  --pooling P        mean, last or cls (default: the model's pooling_type, else mean)\n"
		"  --normalize        scale each vector to unit L2 norm\n"
		"  --truncate         keep the last tokens of a text longer than the context\n"
		"Prints one JSON line per text: {\"index\":I,\"n_tokens\":N,\"n_embd\":D,"
		"\"embedding\":[...]}\n");
}

int cmd_embed(const struct cli *g, int argc, char **argv)
{
	struct exl_embed_params p;
	const char **texts = calloc((size_t)argc + 1, sizeof(*texts));
	struct exl_embedding *out = NULL;
	struct exl_client *c = NULL;
	size_t n = 0;
	int status = EXL_EXIT_USAGE;

	exl_embed_params_init(&p);
	if (!texts) {
		fprintf(stderr, "exl embed: out of memory\n");
		return EXL_EXIT_FAIL;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		bool val = i + 1 < argc;

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			status = EXL_EXIT_OK;
			goto out;
		} else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && val) {
			p.model = argv[++i];
		} else if (!strcmp(a, "--pooling") && val) {
			p.pooling = argv[++i];
			if (strcmp(p.pooling, "mean") && strcmp(p.pooling, "last") &&
			    strcmp(p.pooling, "cls")) {
				fprintf(stderr, "exl embed: --pooling must be mean, last or cls (got "
					"'%s')\n", p.pooling);
				goto out;
			}
		} else if (!strcmp(a, "--normalize")) {
			p.normalize = true;
		} else if (!strcmp(a, "--truncate")) {
			p.truncate = true;
		} else if (!strcmp(a, "--")) {
			while (++i < argc)
				texts[n++] = argv[i];
		} else if (a[0] == '-' && a[1]) {
			fprintf(stderr, "exl embed: unknown option or missing value '%s'\n", a);
			usage(stderr);
			goto out;
		} else {
			texts[n++] = a;
		}
	}
	if (!n) {
		fprintf(stderr, "exl embed: no text to embed\n");
		usage(stderr);
		goto out;
	}
	out = calloc(n, sizeof(*out));
	if (!out) {
		fprintf(stderr, "exl embed: out of memory\n");
		status = EXL_EXIT_FAIL;
		goto out;
	}
	c = cli_connect(g, &status);
	if (!c)
		goto out;
	int rc = exl_embed(c, &p, texts, n, out);

	if (rc) {
		status = cli_fail(c, rc, "embed", p.model);
		goto out;
	}
	for (size_t t = 0; t < n; t++) {
		printf("{\"index\":%zu,\"n_tokens\":%d,\"n_embd\":%zu", t, out[t].n_tokens,
		       out[t].n_embd);
		if (out[t].truncated_tokens)
			printf(",\"truncated_tokens\":%d", out[t].truncated_tokens);
		printf(",\"embedding\":[");
		for (size_t k = 0; k < out[t].n_embd; k++)
			printf("%s%.9g", k ? "," : "", (double)out[t].values[k]);
		printf("]}\n");
	}
	exl_embeddings_free(out, n);
	status = EXL_EXIT_OK;
	if (fflush(stdout)) {
		fprintf(stderr, "exl embed: cannot write the output\n");
		status = EXL_EXIT_FAIL;
	}
out:
	if (c)
		exl_close(c);
	free(out);
	free(texts);
	return status;
}
