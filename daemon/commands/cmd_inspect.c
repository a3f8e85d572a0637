/* exld inspect: print a GGUF model's metadata and tensors. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "daemon/commands/commands.h"
#include "daemon/core/gguf/gguf.h"
#include "kernels/formats/dtype.h"

#define ARRAY_SHOWN 8     /* array elements printed before "..." */
#define STRING_SHOWN 160  /* string bytes printed before "..." */

/* Prints s quoted, with control and non-ASCII bytes escaped, cut at max. */
static void print_str(FILE *out, struct gguf_str s, uint64_t max)
{
	fputc('"', out);
	for (uint64_t i = 0; i < s.len && i < max; i++) {
		unsigned char c = (unsigned char)s.ptr[i];

		if (c == '"' || c == '\\')
			fprintf(out, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", out);
		else if (c >= 0x20 && c < 0x7f)
			fputc(c, out);
		else
			fprintf(out, "\\x%02x", c);
	}
	fputc('"', out);
	if (s.len > max)
		fprintf(out, "... (%" PRIu64 " bytes)", s.len);
}

static void print_array(FILE *out, const struct gguf_array *a, int depth);

static void print_elem(FILE *out, const struct gguf_array *a, uint64_t i, int depth)
{
	int64_t iv;
	double dv;

	switch (a->elem_type) {
	case GGUF_VT_STRING:
		print_str(out, a->strs[i], 40);
		break;
	case GGUF_VT_ARRAY:
		print_array(out, &a->arrs[i], depth + 1);
		break;
	case GGUF_VT_FLOAT32:
	case GGUF_VT_FLOAT64:
		if (exl_gguf_arr_get_f64(a, i, &dv))
			fprintf(out, "%g", dv);
		break;
	case GGUF_VT_BOOL:
		if (exl_gguf_arr_get_i64(a, i, &iv))
			fputs(iv ? "true" : "false", out);
		break;
	case GGUF_VT_UINT64: {
		uint64_t u;

		memcpy(&u, (const uint8_t *)a->data + i * 8, 8);
		fprintf(out, "%" PRIu64, u);
		break;
	}
	default:
		if (exl_gguf_arr_get_i64(a, i, &iv))
			fprintf(out, "%" PRId64, iv);
		break;
	}
}

static void print_array(FILE *out, const struct gguf_array *a, int depth)
{
	uint64_t shown = depth ? 4 : ARRAY_SHOWN;

	fputc('[', out);
	for (uint64_t i = 0; i < a->count && i < shown; i++) {
		if (i)
			fputs(", ", out);
		print_elem(out, a, i, depth);
	}
	if (a->count > shown)
		fprintf(out, ", ... (%" PRIu64 " elements)", a->count);
	fputc(']', out);
}

static void print_value(FILE *out, const struct gguf_value *v)
{
	switch (v->type) {
	case GGUF_VT_UINT8:
	case GGUF_VT_UINT16:
	case GGUF_VT_UINT32:
	case GGUF_VT_UINT64:
		fprintf(out, "%" PRIu64, v->u64);
		break;
	case GGUF_VT_INT8:
	case GGUF_VT_INT16:
	case GGUF_VT_INT32:
	case GGUF_VT_INT64:
		fprintf(out, "%" PRId64, v->i64);
		break;
	case GGUF_VT_FLOAT32:
	case GGUF_VT_FLOAT64:
		fprintf(out, "%g", v->f64);
		break;
	case GGUF_VT_BOOL:
		fputs(v->u64 ? "true" : "false", out);
		break;
	case GGUF_VT_STRING:
		print_str(out, v->str, STRING_SHOWN);
		break;
	case GGUF_VT_ARRAY:
		print_array(out, &v->arr, 0);
		break;
	default:
		fputs("?", out);
		break;
	}
}

static void print_type(FILE *out, const struct gguf_value *v)
{
	if (v->type != GGUF_VT_ARRAY) {
		fputs(exl_gguf_vtype_name(v->type), out);
		return;
	}
	/* array[array[string]] for nested arrays, by their first element */
	const struct gguf_array *a = &v->arr;
	int depth = 0;

	fputs("array[", out);
	while (a->elem_type == GGUF_VT_ARRAY && a->count && depth < 8) {
		fputs("array[", out);
		a = &a->arrs[0];
		depth++;
	}
	fputs(exl_gguf_vtype_name(a->elem_type), out);
	for (int i = 0; i <= depth; i++)
		fputc(']', out);
}

static void print_key(FILE *out, struct gguf_str key)
{
	for (uint64_t i = 0; i < key.len; i++) {
		unsigned char c = (unsigned char)key.ptr[i];

		if (c >= 0x20 && c < 0x7f)
			fputc(c, out);
		else
			fprintf(out, "\\x%02x", c);
	}
}

/* "<arch>.<suffix>": prints the value, or "-" when absent. */
static void print_hparam(FILE *out, const struct gguf_file *f, const char *arch, const char *suffix)
{
	char key[256];
	const struct gguf_kv *kv;

	snprintf(key, sizeof(key), "%s.%s", arch, suffix);
	kv = exl_gguf_find_kv(f, key);
	fprintf(out, "  %-34s ", suffix);
	if (kv)
		print_value(out, &kv->val);
	else
		fputs("-", out);
	fputc('\n', out);
}

static void print_count(FILE *out, uint64_t n)
{
	if (n >= 1000000000)
		fprintf(out, "%.2fB", n / 1e9);
	else if (n >= 1000000)
		fprintf(out, "%.2fM", n / 1e6);
	else if (n >= 1000)
		fprintf(out, "%.2fK", n / 1e3);
	else
		fprintf(out, "%" PRIu64, n);
}

static void print_bytes(FILE *out, uint64_t n)
{
	if (n >= (1ull << 30))
		fprintf(out, "%.2f GiB", n / (double)(1ull << 30));
	else if (n >= (1ull << 20))
		fprintf(out, "%.2f MiB", n / (double)(1ull << 20));
	else if (n >= (1ull << 10))
		fprintf(out, "%.2f KiB", n / (double)(1ull << 10));
	else
		fprintf(out, "%" PRIu64 " B", n);
}

static void print_summary(FILE *out, const char *path, const struct gguf_file *f)
{
	static const char *const hparams[] = {
		"context_length", "embedding_length", "block_count", "feed_forward_length",
		"attention.head_count", "attention.head_count_kv",
		"attention.layer_norm_rms_epsilon", "rope.freq_base", "rope.dimension_count",
	};
	char arch[128] = "", prefix[160], str[128];
	const struct gguf_array *tokens;
	uint64_t params = 0, bytes = 0, ftype;

	fprintf(out, "file:          %s (%zu bytes)\n", path, f->size);
	fprintf(out, "gguf version:  %u\n", f->version);
	fprintf(out, "alignment:     %u\n", f->alignment);
	fprintf(out, "kv pairs:      %" PRIu64 "\n", f->n_kv);
	fprintf(out, "tensors:       %" PRIu64 "\n", f->n_tensors);
	if (exl_gguf_get_str(f, "general.name", str, sizeof(str)))
		fprintf(out, "name:          %s\n", str);
	if (!exl_gguf_get_str(f, "general.architecture", arch, sizeof(arch)))
		snprintf(arch, sizeof(arch), "?");
	fprintf(out, "architecture:  %s\n", arch);
	if (exl_gguf_get_u64(f, "general.file_type", &ftype))
		fprintf(out, "file type:     %" PRIu64 "\n", ftype);
	fprintf(out, "hyperparameters:\n");
	for (size_t i = 0; i < sizeof(hparams) / sizeof(hparams[0]); i++)
		print_hparam(out, f, arch, hparams[i]);
	snprintf(prefix, sizeof(prefix), "%s.rope.scaling.", arch);
	for (uint64_t i = 0; i < f->n_kv; i++) {
		const struct gguf_kv *kv = &f->kv[i];
		size_t pl = strlen(prefix);

		if (kv->key.len > pl && !memcmp(kv->key.ptr, prefix, pl)) {
			struct gguf_str rest = { kv->key.len - strlen(arch) - 1, kv->key.ptr + strlen(arch) + 1 };
			int w = (int)(rest.len < 34 ? rest.len : 34);

			fprintf(out, "  %.*s%*s ", w, rest.ptr, 34 - w, "");
			print_value(out, &kv->val);
			fputc('\n', out);
		}
	}

	fprintf(out, "tokenizer:     ");
	if (exl_gguf_get_str(f, "tokenizer.ggml.model", str, sizeof(str)))
		fprintf(out, "%s", str);
	else
		fputs("-", out);
	tokens = exl_gguf_get_arr(f, "tokenizer.ggml.tokens");
	if (tokens)
		fprintf(out, ", vocabulary %" PRIu64, tokens->count);
	if (exl_gguf_get_str(f, "tokenizer.ggml.pre", str, sizeof(str)))
		fprintf(out, ", pre %s", str);
	fputc('\n', out);

	for (uint64_t i = 0; i < f->n_tensors; i++) {
		const struct gguf_tensor *t = &f->tensors[i];
		/* validated by the reader: the product fits in int64 */
		params += t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
		bytes += t->nbytes;
	}
	fprintf(out, "parameters:    ");
	print_count(out, params);
	fprintf(out, " (%" PRIu64 ")\n", params);
	fprintf(out, "weight bytes:  ");
	print_bytes(out, bytes);
	fprintf(out, " (%" PRIu64 ")\n", bytes);

	uint64_t width = 0;

	for (uint64_t i = 0; i < f->n_tensors; i++)
		if (f->tensors[i].name.len > width)
			width = f->tensors[i].name.len;
	if (width > 48)
		width = 48;
	fprintf(out, "tensors:\n");
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		const struct gguf_tensor *t = &f->tensors[i];
		const struct exl_dtype_info *info = exl_dtype_info(t->type);

		fputs("  ", out);
		print_key(out, t->name);
		fprintf(out, "%*s  %-7s [", (int)(t->name.len < width ? width - t->name.len : 0), "",
			info->name);
		for (uint32_t d = 0; d < t->n_dims; d++)
			fprintf(out, "%s%" PRIu64, d ? ", " : "", t->ne[d]);
		fputs("]\n", out);
	}
}

static void print_kv(FILE *out, const struct gguf_file *f)
{
	for (uint64_t i = 0; i < f->n_kv; i++) {
		const struct gguf_kv *kv = &f->kv[i];

		print_key(out, kv->key);
		fputs("  ", out);
		print_type(out, &kv->val);
		fputs("  ", out);
		print_value(out, &kv->val);
		fputc('\n', out);
	}
}

static void usage(FILE *out)
{
	fprintf(out, "usage: exld inspect [--kv] FILE\n"
		     "  print a GGUF model's architecture, hyperparameters, tokenizer and tensors\n"
		     "  --kv   print every metadata key with its type and value instead\n");
}

int exl_cmd_inspect(int argc, char **argv)
{
	const char *path = NULL;
	bool show_kv = false;
	struct gguf_file *f;
	char err[512];

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--kv")) {
			show_kv = true;
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			fprintf(stderr, "exld inspect: unknown option %s\n", argv[i]);
			usage(stderr);
			return 2;
		} else if (path) {
			fprintf(stderr, "exld inspect: one file at a time\n");
			return 2;
		} else {
			path = argv[i];
		}
	}
	if (!path) {
		usage(stderr);
		return 2;
	}
	f = exl_gguf_open(path, err, sizeof(err));
	if (!f) {
		fprintf(stderr, "exld inspect: %s: %s\n", path, err);
		return 1;
	}
	if (show_kv)
		print_kv(stdout, f);
	else
		print_summary(stdout, path, f);
	exl_gguf_close(f);
	if (fflush(stdout) || ferror(stdout)) {
		fprintf(stderr, "exld inspect: error writing output\n");
		return 1;
	}
	return 0;
}
