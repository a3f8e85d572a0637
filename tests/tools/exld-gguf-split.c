/* exld-gguf-split: writes a GGUF as the parts llama.cpp's gguf-split
 * makes, for the tests of split models (daemon/core/gguf/gguf_split.h):
 * PREFIX-00001-of-0000N.gguf with all the metadata, then the parts with
 * only split.no / split.count / split.tensors.count, the tensors dealt out
 * in order, as evenly as their count allows.
 *
 *   exld-gguf-split --parts N IN.gguf PREFIX
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/gguf/gguf.h"
#include "daemon/core/gguf/gguf_write.h"

#define MAX_PARTS 99

static int write_part(const struct gguf_file *in, int k, int n, const char *prefix, char *err,
		      size_t errlen)
{
	struct gguf_writer *w = exl_gguf_writer_new();
	uint64_t first = in->n_tensors * (uint64_t)k / (uint64_t)n;
	uint64_t end = in->n_tensors * (uint64_t)(k + 1) / (uint64_t)n;
	char path[4096], key[512];
	int rc;

	if (!w) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (uint64_t i = 0; k == 0 && i < in->n_kv; i++) {
		snprintf(key, sizeof(key), "%.*s", (int)in->kv[i].key.len, in->kv[i].key.ptr);
		exl_gguf_writer_set(w, key, &in->kv[i].val);
	}
	exl_gguf_writer_set_u16(w, "split.no", (uint16_t)k);
	exl_gguf_writer_set_u16(w, "split.count", (uint16_t)n);
	exl_gguf_writer_set_i32(w, "split.tensors.count", (int32_t)in->n_tensors);
	for (uint64_t i = first; i < end; i++) {
		const struct gguf_tensor *t = &in->tensors[i];
		char name[512];

		snprintf(name, sizeof(name), "%.*s", (int)t->name.len, t->name.ptr);
		exl_gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data);
	}
	snprintf(path, sizeof(path), "%s-%05d-of-%05d.gguf", prefix, k + 1, n);
	rc = exl_gguf_writer_write_file(w, path, err, errlen);
	exl_gguf_writer_free(w);
	if (!rc)
		fprintf(stderr, "exld-gguf-split: wrote %s: %llu tensors\n", path,
			(unsigned long long)(end - first));
	return rc;
}

int main(int argc, char **argv)
{
	struct gguf_file *in;
	char err[512];
	int n;

	if (argc != 5 || strcmp(argv[1], "--parts") || (n = atoi(argv[2])) < 2 || n > MAX_PARTS) {
		fprintf(stderr, "usage: exld-gguf-split --parts N IN.gguf PREFIX (2 <= N <= %d)\n",
			MAX_PARTS);
		return 2;
	}
	in = exl_gguf_open(argv[3], err, sizeof(err));
	if (!in) {
		fprintf(stderr, "exld-gguf-split: %s\n", err);
		return 1;
	}
	if ((uint64_t)n > in->n_tensors) {
		fprintf(stderr, "exld-gguf-split: %s has %llu tensors, fewer than %d parts\n",
			argv[3], (unsigned long long)in->n_tensors, n);
		exl_gguf_close(in);
		return 1;
	}
	for (int k = 0; k < n; k++) {
		if (write_part(in, k, n, argv[4], err, sizeof(err))) {
			fprintf(stderr, "exld-gguf-split: %s\n", err);
			exl_gguf_close(in);
			return 1;
		}
	}
	exl_gguf_close(in);
	return 0;
}
