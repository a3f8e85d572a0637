/* libFuzzer target for the GGUF reader: any input must be refused with a
 * message or accepted with every pointer inside the input.  See
 * docs/fuzzing.md for how to build, seed and run it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/gguf/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

static void walk_array(const struct gguf_array *a)
{
	for (uint64_t i = 0; i < a->count; i++) {
		if (a->elem_type == GGUF_VT_STRING && a->strs[i].len)
			sink += (uint8_t)a->strs[i].ptr[a->strs[i].len - 1];
		else if (a->elem_type == GGUF_VT_ARRAY)
			walk_array(&a->arrs[i]);
	}
	if (a->count && a->elem_type != GGUF_VT_STRING && a->elem_type != GGUF_VT_ARRAY)
		sink += ((const uint8_t *)a->data)[a->count * exl_gguf_vtype_size(a->elem_type) -
						   1];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[512];
	struct gguf_file *f;
	uint32_t u;

	/* An exact-size copy, so reading one byte past the input is caught. */
	uint8_t *buf = malloc(size ? size : 1);

	if (!buf)
		return 0;
	if (size)
		memcpy(buf, data, size);
	err[0] = '\0';
	f = exl_gguf_open_buffer(buf, size, err, sizeof(err));
	if (!f) {
		if (!err[0] || strncmp(err, "gguf: ", 6))
			abort(); /* refused without a message */
		free(buf);
		return 0;
	}
	for (uint64_t i = 0; i < f->n_kv; i++) {
		const struct gguf_kv *kv = &f->kv[i];

		sink += (uint8_t)kv->key.ptr[kv->key.len - 1];
		if (kv->val.type == GGUF_VT_STRING && kv->val.str.len)
			sink += (uint8_t)kv->val.str.ptr[kv->val.str.len - 1];
		else if (kv->val.type == GGUF_VT_ARRAY)
			walk_array(&kv->val.arr);
	}
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		const struct gguf_tensor *t = &f->tensors[i];

		sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
	}
	if (exl_gguf_get_u32(f, "general.alignment", &u))
		sink += u;
	exl_gguf_close(f);
	free(buf);
	return 0;
}
