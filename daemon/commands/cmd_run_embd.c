/* exld run --embedding ALIAS=FILE: input embedding blocks from raw float32
 * files (docs/protocol.md, "Input embeddings"). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/commands/cmd_run.h"

void *exl_read_whole_file(const char *path, size_t max, size_t *len, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t n = 0, cap = 0;

	if (!f) {
		snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
		return NULL;
	}
	for (;;) {
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 1 << 16;
			char *b;

			if (cap > max) {
				snprintf(err, errlen, "'%s' is larger than %zu bytes", path, max);
				goto fail;
			}
			b = realloc(buf, nc);
			if (!b) {
				snprintf(err, errlen, "out of memory reading '%s'", path);
				goto fail;
			}
			buf = b;
			cap = nc;
		}
		size_t got = fread(buf + n, 1, cap - n, f);

		n += got;
		if (got == 0)
			break;
	}
	if (ferror(f)) {
		snprintf(err, errlen, "cannot read '%s': %s", path, strerror(errno));
		goto fail;
	}
	if (n > max) {
		snprintf(err, errlen, "'%s' is larger than %zu bytes", path, max);
		goto fail;
	}
	fclose(f);
	*len = n;
	return buf;
fail:
	fclose(f);
	free(buf);
	return NULL;
}

int exl_run_load_embeddings(struct run_opts *o, int n_embd, char *err, size_t errlen)
{
	size_t row = (size_t)n_embd * sizeof(float);

	if (!o->n_embd_specs)
		return 0;
	o->blocks = calloc((size_t)o->n_embd_specs, sizeof(*o->blocks));
	o->block_rows = calloc((size_t)o->n_embd_specs, sizeof(*o->block_rows));
	if (!o->blocks || !o->block_rows) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (int i = 0; i < o->n_embd_specs; i++) {
		const char *spec = o->embd_specs[i], *eq = strchr(spec, '=');
		char sub[384];
		size_t len;

		if (!eq || eq == spec || !eq[1]) {
			snprintf(err, errlen, "--embedding '%s': expected ALIAS=FILE", spec);
			return -1;
		}
		void *data = exl_read_whole_file(eq + 1, (size_t)EXL_GEN_MAX_EMBD_ROWS * row, &len,
						 sub, sizeof(sub));
		if (!data) {
			snprintf(err, errlen, "--embedding: %s", sub);
			return -1;
		}
		o->block_rows[i] = data;
		if (len == 0 || len % row) {
			snprintf(err, errlen, "--embedding '%s': %zu bytes is not a whole number of "
				 "rows of %d float32 (%zu bytes, the model's n_embd)", eq + 1, len,
				 n_embd, row);
			return -1;
		}
		/* the alias is the spec up to '=', NUL-terminated in place of it */
		size_t al = (size_t)(eq - spec);
		char *alias = malloc(al + 1);

		if (!alias) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		memcpy(alias, spec, al);
		alias[al] = 0;
		o->blocks[i].alias = alias;
		o->blocks[i].rows = data;
		o->blocks[i].n_rows = (int)(len / row);
	}
	o->s.embeddings = o->blocks;
	o->s.n_embeddings = o->n_embd_specs;
	return 0;
}
