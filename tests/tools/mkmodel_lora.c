/* exld-mkmodel --lora-for: a random LoRA adapter for a base GGUF, in
 * llama.cpp's adapter format (general.type adapter, adapter.type lora,
 * adapter.lora.alpha; "<base>.lora_a" [in, r] and "<base>.lora_b" [r, out]
 * in F32), for every block's attention and FFN projections the base has
 * (or those --lora-targets names).  The values come from a seeded PRNG, so
 * a file depends only on the base's shapes and the options. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/gguf/gguf.h"
#include "daemon/core/gguf/gguf_write.h"
#include "kernels/formats/dtype.h"
#include "tests/tools/mkmodel_lora.h"

static const char *const targets[] = {
	"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
};
#define N_TARGETS (sizeof(targets) / sizeof(targets[0]))

struct fill_ctx {
	uint64_t seed;
	int64_t cols;
	float amp;
};

static uint64_t next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Uniform in [-amp, amp). */
static int fill(void *ctx, void *dst, size_t nbytes, char *err, size_t errlen)
{
	const struct fill_ctx *c = ctx;
	float *f = dst;
	uint64_t s = c->seed;

	(void)err;
	(void)errlen;
	for (size_t i = 0; i < nbytes / sizeof(float); i++)
		f[i] = c->amp * (float)((double)(next(&s) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
	return 0;
}

static bool wanted(const char *list, const char *t)
{
	size_t n = strlen(t);

	if (!list)
		return true;
	for (const char *p = list; *p;) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);

		if (len == n && !strncmp(p, t, n))
			return true;
		p += len + (e ? 1 : 0);
	}
	return false;
}

int mkmodel_lora(const struct mkmodel_lora_opts *o)
{
	char err[512], arch[64];
	struct gguf_file *base = exl_gguf_open(o->base, err, sizeof(err));
	struct gguf_writer *w = NULL;
	struct fill_ctx *ctx = NULL;
	int rc = 1, n = 0;

	if (!base) {
		fprintf(stderr, "exld-mkmodel: %s\n", err);
		return 1;
	}
	if (!exl_gguf_get_str(base, "general.architecture", arch, sizeof(arch))) {
		fprintf(stderr, "exld-mkmodel: %s has no general.architecture\n", o->base);
		goto out;
	}
	w = exl_gguf_writer_new();
	ctx = calloc(base->n_tensors * 2 + 1, sizeof(*ctx));
	if (!w || !ctx) {
		fprintf(stderr, "exld-mkmodel: out of memory\n");
		goto out;
	}
	exl_gguf_writer_set_str(w, "general.architecture", arch);
	exl_gguf_writer_set_str(w, "general.type", "adapter");
	exl_gguf_writer_set_str(w, "general.name", "exld-mkmodel random LoRA");
	exl_gguf_writer_set_str(w, "adapter.type", "lora");
	if (!o->no_alpha)
		exl_gguf_writer_set_f32(w, "adapter.lora.alpha", (float)o->alpha);
	for (uint64_t i = 0; i < base->n_tensors; i++) {
		const struct gguf_tensor *t = &base->tensors[i];
		char name[128];
		int il;
		int off = 0;

		if (t->name.len >= 100 || t->n_dims != 2)
			continue;
		memcpy(name, t->name.ptr, t->name.len);
		name[t->name.len] = '\0';
		if (sscanf(name, "blk.%d.%n", &il, &off) != 1 || !off)
			continue;
		for (size_t k = 0; k < N_TARGETS; k++) {
			size_t tl = strlen(targets[k]);
			char an[160], bn[160];
			int64_t in = (int64_t)t->ne[0], out = (int64_t)t->ne[1], r = o->rank;

			if (strncmp(name + off, targets[k], tl) || strcmp(name + off + tl, ".weight") ||
			    !wanted(o->targets, targets[k]))
				continue;
			if (o->bad_shape && n == 0)
				in += 1;
			snprintf(an, sizeof(an), "%s.lora_a", name);
			snprintf(bn, sizeof(bn), "%s.lora_b", name);
			/* A x is about as large as x; B (A x) a tenth of it before
			 * alpha / r, so the adapter moves the logits visibly */
			ctx[n] = (struct fill_ctx){ o->seed * 1000003u + (uint64_t)n * 2 + 1, in,
						     (float)(sqrt(3.0 / (double)in)) };
			const uint64_t nea[2] = { (uint64_t)in, (uint64_t)r };
			if (exl_gguf_writer_add_tensor_fill(w, an, EXL_F32, 2, nea, fill, &ctx[n]))
				break;
			n++;
			ctx[n] = (struct fill_ctx){ o->seed * 1000003u + (uint64_t)n * 2 + 2, r,
						     (float)(0.1 * sqrt(3.0 / (double)r)) };
			const uint64_t neb[2] = { (uint64_t)r, (uint64_t)out };
			if (exl_gguf_writer_add_tensor_fill(w, bn, EXL_F32, 2, neb, fill, &ctx[n]))
				break;
			n++;
		}
	}
	if (!n) {
		fprintf(stderr, "exld-mkmodel: %s has none of the target weights\n", o->base);
		goto out;
	}
	if (exl_gguf_writer_error(w) || exl_gguf_writer_write_file(w, o->out, err, sizeof(err))) {
		fprintf(stderr, "exld-mkmodel: %s\n",
			exl_gguf_writer_error(w) ? exl_gguf_writer_error(w) : err);
		goto out;
	}
	fprintf(stderr, "exld-mkmodel: wrote %s: a rank-%d LoRA adapter (alpha %g) for %s, %d "
		"tensors\n", o->out, o->rank, o->alpha, o->base, n);
	rc = 0;
out:
	exl_gguf_writer_free(w);
	free(ctx);
	exl_gguf_close(base);
	return rc;
}

static int num(const char *a, const char *v, double lo, double hi, double *out)
{
	char *end;
	double d;

	if (!v) {
		fprintf(stderr, "exld-mkmodel: %s needs a value\n", a);
		return -1;
	}
	d = strtod(v, &end);
	if (end == v || *end || !(d >= lo && d <= hi)) {
		fprintf(stderr, "exld-mkmodel: %s '%s': not a number in [%g, %g]\n", a, v, lo, hi);
		return -1;
	}
	*out = d;
	return 0;
}

int mkmodel_lora_main(int argc, char **argv)
{
	struct mkmodel_lora_opts o = { .rank = 8, .alpha = 16.0, .seed = 1 };

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		double d;

		if (!strcmp(a, "--lora-no-alpha")) {
			o.no_alpha = true;
			continue;
		}
		if (!strcmp(a, "--lora-bad-shape")) {
			o.bad_shape = true;
			continue;
		}
		if (!v) {
			fprintf(stderr, "exld-mkmodel: %s needs a value (or is unknown with "
				"--lora-for)\n", a);
			return 2;
		}
		i++;
		if (!strcmp(a, "--lora-for")) {
			o.base = v;
		} else if (!strcmp(a, "-o")) {
			o.out = v;
		} else if (!strcmp(a, "--lora-targets")) {
			o.targets = v;
		} else if (!strcmp(a, "--rank")) {
			if (num(a, v, 1, 4096, &d))
				return 2;
			o.rank = (int)d;
		} else if (!strcmp(a, "--alpha")) {
			if (num(a, v, 0, 1e6, &o.alpha))
				return 2;
		} else if (!strcmp(a, "--seed")) {
			if (num(a, v, 0, 9007199254740992.0, &d))
				return 2;
			o.seed = (uint64_t)d;
		} else {
			fprintf(stderr, "exld-mkmodel: %s is not an option of --lora-for\n", a);
			return 2;
		}
	}
	if (!o.base || !o.out) {
		fprintf(stderr, "exld-mkmodel: --lora-for BASE.gguf needs -o FILE\n");
		return 2;
	}
	return mkmodel_lora(&o);
}
