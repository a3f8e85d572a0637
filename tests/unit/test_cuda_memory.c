/* Device memory without a GPU: the KV pool sizing arithmetic, and loads on
 * a fake CUDA device (tests/unit/cuda_fake_module.c, FAKE_VRAM) whose
 * memory the environment sets.  One case per process, since the module
 * and its device are set up once:
 *
 *   sizing           exl_kv_bytes_per_token / exl_kv_tokens_for_memory
 *                    against hand-computed values (no module, no model)
 *   fits FAKE        4 MiB free: stories260K loads, the KV pool left unset
 *                    is 90% of what is free after the weights in whole
 *                    pages, and the backend reports what it holds
 *   nofit FAKE       0.5 MiB free: refused before any upload, with the
 *                    bytes needed and the MiB free of the total
 *   upload FAKE      a device that reports 1 GiB free but gives 0.5 MiB:
 *                    the failing upload names the tensor and carries the
 *                    backend's numbers; everything uploaded is given back
 *   kvfit FAKE       weights fit, an 8192-token pool does not: refused
 *                    with both numbers before anything is allocated
 *   kvauto FAKE      weights fit, not one KV page after them: kv_tokens
 *                    unset is refused with the numbers
 *   cow FAKE         copy on write of a shared KV page: device-to-device
 *                    copies, one per layer for K and V, no download,
 *                    copy_in or sync
 *
 * The model cases exit 77 without the test models.
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/core/model/kvcache.h"
#include "daemon/core/model/model.h"
#include "kernels/backend.h"
#include "kernels/backend_select.h"
#include "tests/common/check.h"

#define MIB (1024.0 * 1024.0)
#define PAGE 32

/* The fake module's call counts (cuda_fake_module.c). */
struct exl_cuda_fake_counts {
	long upload, alloc, download, copy_in, copy, sync;
	uint64_t used, weights, buffers;
};

static const struct exl_cuda_fake_counts *counts;
static char model_path[1024];

/* ---- sizing ----------------------------------------------------------- */

static int case_sizing(void)
{
	static const struct {
		uint64_t free_bytes, per_token;
		int page;
		int64_t max;
		int want;
	} t[] = {
		/* 8 GiB free, a 7B-like model (32 layers x 8 KV heads x 128:
		 * 128 KiB a token): 90% is 7.2 GiB = 58982 tokens, 1843 pages */
		{ 8ull << 30, 131072, 32, 0, 58976 },
		/* the same, capped at context x jobs = 4096 x 8 */
		{ 8ull << 30, 131072, 32, 4096 * 8, 32768 },
		/* a cap that is not whole pages rounds up to whole pages */
		{ 8ull << 30, 131072, 32, 1000, 1024 },
		/* ... unless free memory is the tighter bound */
		{ 100 * 131072, 131072, 32, 1000, 64 },
		/* 90% of 100 tokens' worth is 90 tokens: 2 pages of 32 */
		{ 100 * 131072, 131072, 32, 0, 64 },
		/* less than one page in 90%: nothing */
		{ 35 * 1000, 1000, 32, 0, 0 },
		/* exactly one page in 90% */
		{ 40000, 1000, 32, 0, 32 },
		/* huge free memory: EXL_KV_MAX_TOKENS, no overflow */
		{ UINT64_MAX, 1, 32, 0, EXL_KV_MAX_TOKENS },
		{ UINT64_MAX, 1, 48, INT64_MAX, EXL_KV_MAX_TOKENS / 48 * 48 },
		/* no free memory, bad arguments */
		{ 0, 131072, 32, 0, 0 },
		{ 1ull << 30, 0, 32, 0, 0 },
		{ 1ull << 30, 1024, 0, 0, 0 },
	};

	REQUIRE(exl_kv_bytes_per_token(32, 8, 128) == 131072, "7B per token %llu",
		(unsigned long long)exl_kv_bytes_per_token(32, 8, 128));
	REQUIRE(exl_kv_bytes_per_token(5, 4, 8) == 640, "stories260K-like per token");
	REQUIRE(exl_kv_bytes_per_token(0, 8, 128) == 0 && exl_kv_bytes_per_token(1, -1, 8) == 0,
		"bad shapes");
	REQUIRE(exl_kv_bytes_per_token(INT32_MAX, 1024, 128) == 4ull * INT32_MAX * 1024 * 128,
		"large shape");
	REQUIRE(exl_kv_bytes_per_token(INT32_MAX, INT32_MAX, 2) == 0 &&
		exl_kv_bytes_per_token(INT32_MAX, INT32_MAX, INT32_MAX) == 0, "overflow");
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		int got = exl_kv_tokens_for_memory(t[i].free_bytes, t[i].per_token, t[i].page,
						   t[i].max);

		REQUIRE(got == t[i].want, "case %zu: %llu bytes free, %llu a token, page %d, max "
			"%lld: %d tokens, want %d", i, (unsigned long long)t[i].free_bytes,
			(unsigned long long)t[i].per_token, t[i].page, (long long)t[i].max, got,
			t[i].want);
	}
	/* After a reservation (a mixed model's local pool) out of the 90 %:
	 * 1000 bytes free give 900, at 10 a token and pages of 1. */
	REQUIRE(exl_kv_tokens_after(1000, 0, 10, 1, 0) == 90, "no reservation: %d",
		exl_kv_tokens_after(1000, 0, 10, 1, 0));
	REQUIRE(exl_kv_tokens_after(1000, 300, 10, 1, 0) == 60, "300 reserved: %d",
		exl_kv_tokens_after(1000, 300, 10, 1, 0));
	REQUIRE(exl_kv_tokens_after(1000, 300, 10, 16, 0) == 48, "pages of 16: %d",
		exl_kv_tokens_after(1000, 300, 10, 16, 0));
	REQUIRE(exl_kv_tokens_after(1000, 900, 10, 1, 0) == 0 &&
		exl_kv_tokens_after(1000, 901, 10, 1, 0) == 0 &&
		exl_kv_tokens_after(1000, UINT64_MAX, 10, 1, 0) == 0, "all reserved");
	printf("%zu sizing cases\n", sizeof(t) / sizeof(t[0]));
	return 0;
out:
	return 1;
}

/* ---- on the fake device ----------------------------------------------- */

/* The fake CUDA backend, with the module's counts. */
static int fake_backend(const char *module, struct exl_backend **be)
{
	const struct exl_cuda_fake_counts *(*get)(void);
	char err[512];
	void *h, *sym;

	setenv("EXLD_CUDA_MODULE", module, 1);
	REQUIRE(exl_backend_create_by_name("cuda:0", 1, be, err, sizeof(err)) == 0,
		"fake cuda backend: %s", err);
	/* the loader's handle: the module is in already */
	h = dlopen(module, RTLD_NOW | RTLD_NOLOAD);
	REQUIRE(h, "the module is not loaded");
	sym = dlsym(h, "exl_cuda_fake_counts");
	REQUIRE(sym, "not the FAKE_VRAM module");
	memcpy(&get, &sym, sizeof(get));
	counts = get();
	return 0;
out:
	return 1;
}

static int have_model(void)
{
	const char *dir = getenv("EXLD_MODELS");

	snprintf(model_path, sizeof(model_path), "%s/stories260K.gguf",
		 dir ? dir : "../shared/models");
	if (access(model_path, R_OK) != 0) {
		printf("skipped: no test model %s\n", model_path);
		return 0;
	}
	return 1;
}

/* Reads "<number> MiB free of <number> MiB" out of msg. */
static bool free_of(const char *msg, double *fr, double *tot)
{
	for (const char *p = msg; (p = strstr(p, " MiB free of ")); p++) {
		const char *q = p;

		while (q > msg && (q[-1] == '.' || (q[-1] >= '0' && q[-1] <= '9')))
			q--;
		if (sscanf(q, "%lf MiB free of %lf MiB", fr, tot) == 2)
			return true;
	}
	return false;
}

static int case_fits(const char *module)
{
	struct exl_backend *be;
	struct exl_backend_mem mem;
	struct exl_model *m;
	struct exl_kvcache *kv;
	char err[512];

	setenv("EXLD_FAKE_VRAM_FREE_MIB", "4", 1);
	if (fake_backend(module, &be))
		return 1;
	m = exl_model_load(model_path, be, err, sizeof(err));
	REQUIRE(m, "load: %s", err);
	REQUIRE(be->ops->mem_info(be, &mem, err, sizeof(err)) == 0, "mem_info: %s", err);
	REQUIRE(!strcmp(mem.device, "cuda:0"), "device %s", mem.device);
	REQUIRE(mem.weight_bytes == exl_model_weight_bytes(m) && counts->weights == mem.weight_bytes,
		"weights: backend %llu, model %zu", (unsigned long long)mem.weight_bytes,
		exl_model_weight_bytes(m));
	REQUIRE(mem.total_bytes == 1024 * 1024 * 1024ull &&
		mem.free_bytes == 4 * 1024 * 1024ull - mem.weight_bytes,
		"free %llu of %llu", (unsigned long long)mem.free_bytes,
		(unsigned long long)mem.total_bytes);

	const struct exl_hparams *hp = exl_model_hparams(m);
	uint64_t per_token = 2ull * 2 * hp->n_layer * hp->n_head_kv * hp->head_dim;
	int want = (int)((mem.free_bytes * 9 / 10) / per_token / PAGE * PAGE);
	int got = exl_kvcache_auto_tokens(be, hp->n_layer, hp->n_head_kv, hp->head_dim, PAGE,
					  (int64_t)hp->n_ctx_train * 64, err, sizeof(err));
	REQUIRE(got == want && got > 0, "auto kv tokens %d, want %d (%s)", got, want,
		got < 0 ? err : "");
	kv = exl_kvcache_create(be, hp->n_layer, hp->n_head_kv, hp->head_dim, got, PAGE, err,
				sizeof(err));
	REQUIRE(kv, "kv cache of %d tokens: %s", got, err);
	REQUIRE(exl_kvcache_bytes(kv) == (uint64_t)got * per_token &&
		exl_kvcache_bytes(kv) <= mem.free_bytes * 9 / 10, "kv bytes %llu",
		(unsigned long long)exl_kvcache_bytes(kv));
	REQUIRE(be->ops->mem_info(be, &mem, err, sizeof(err)) == 0 &&
		mem.buffer_bytes == exl_kvcache_bytes(kv), "buffers %llu",
		(unsigned long long)mem.buffer_bytes);
	printf("4 MiB free: weights %.2f MiB, KV pool of %d tokens (%.2f MiB), %.2f MiB left\n",
	       mem.weight_bytes / MIB, got, exl_kvcache_bytes(kv) / MIB, mem.free_bytes / MIB);
	exl_kvcache_free(kv);
	exl_model_free(m);
	REQUIRE(counts->used == 0, "%llu bytes still allocated", (unsigned long long)counts->used);
	be->ops->destroy(be);
	return 0;
out:
	return 1;
}

static int case_nofit(const char *module)
{
	struct exl_backend *be;
	char err[512], want[128];
	double fr = 0, tot = 0;

	setenv("EXLD_FAKE_VRAM_FREE_MIB", "0.5", 1);
	if (fake_backend(module, &be))
		return 1;
	REQUIRE(!exl_model_load(model_path, be, err, sizeof(err)), "loaded into 0.5 MiB");
	printf("message: %s\n", err);
	/* stories260K's weights: 1171200 bytes (exl models reports the same) */
	snprintf(want, sizeof(want), "model needs %.1f MiB of VRAM for its weights (1171200 bytes)",
		 1171200 / MIB);
	REQUIRE(strstr(err, want), "\"%s\" lacks \"%s\"", err, want);
	REQUIRE(free_of(err, &fr, &tot) && fr == 0.5 && tot == 1024.0, "free %g of %g in \"%s\"",
		fr, tot, err);
	REQUIRE(strstr(err, "on cuda:0"), "no device in \"%s\"", err);
	REQUIRE(counts->upload == 0 && counts->used == 0, "%ld uploads, %llu bytes held",
		counts->upload, (unsigned long long)counts->used);
	be->ops->destroy(be);
	return 0;
out:
	return 1;
}

static int case_upload(const char *module)
{
	struct exl_backend *be;
	char err[512];
	double fr = 0, tot = 0;

	setenv("EXLD_FAKE_VRAM_ALLOC_MIB", "0.5", 1);
	if (fake_backend(module, &be))
		return 1;
	REQUIRE(!exl_model_load(model_path, be, err, sizeof(err)), "loaded into 0.5 MiB");
	printf("message: %s\n", err);
	REQUIRE(strstr(err, "tensor '") && strstr(err, "': cannot upload ") &&
		strstr(err, " bytes to backend cuda"), "no tensor named in \"%s\"", err);
	REQUIRE(strstr(err, "do not fit on CUDA device 0: "), "no backend reason in \"%s\"", err);
	REQUIRE(free_of(err, &fr, &tot) && tot == 1024.0 && fr < 1024.0,
		"free %g of %g in \"%s\"", fr, tot, err);
	REQUIRE(counts->upload > 1 && counts->used == 0,
		"%ld uploads, %llu bytes still held after the failed load", counts->upload,
		(unsigned long long)counts->used);
	be->ops->destroy(be);
	return 0;
out:
	return 1;
}

static int case_kvfit(const char *module)
{
	struct exl_backend *be;
	struct exl_model *m;
	char err[512];
	double fr = 0, tot = 0;

	setenv("EXLD_FAKE_VRAM_FREE_MIB", "2", 1);
	if (fake_backend(module, &be))
		return 1;
	m = exl_model_load(model_path, be, err, sizeof(err));
	REQUIRE(m, "load: %s", err);
	const struct exl_hparams *hp = exl_model_hparams(m);
	long allocs = counts->alloc;
	REQUIRE(!exl_kvcache_create(be, hp->n_layer, hp->n_head_kv, hp->head_dim, 8192, PAGE, err,
				  sizeof(err)), "an 8192-token pool fit in 2 MiB");
	printf("message: %s\n", err);
	REQUIRE(strstr(err, "kv cache: 8192 tokens need 5.0 MiB of VRAM (5242880 bytes)"),
		"\"%s\"", err);
	REQUIRE(free_of(err, &fr, &tot) && tot == 1024.0 &&
		fr == (double)(long)((2 * MIB - 1171200) / MIB * 10 + 0.5) / 10,
		"free %g of %g in \"%s\"", fr, tot, err);
	REQUIRE(counts->alloc == allocs && counts->buffers == 0, "allocated before refusing");
	exl_model_free(m);
	be->ops->destroy(be);
	return 0;
out:
	return 1;
}

static int case_kvauto(const char *module)
{
	struct exl_backend *be;
	struct exl_model *m;
	char err[512], free_mib[32];

	/* the weights and 10 KB: half a 20 KiB page, less in 90% */
	snprintf(free_mib, sizeof(free_mib), "%.9f", (1171200 + 10000) / MIB);
	setenv("EXLD_FAKE_VRAM_FREE_MIB", free_mib, 1);
	if (fake_backend(module, &be))
		return 1;
	m = exl_model_load(model_path, be, err, sizeof(err));
	REQUIRE(m, "load: %s", err);
	const struct exl_hparams *hp = exl_model_hparams(m);
	REQUIRE(exl_kvcache_auto_tokens(be, hp->n_layer, hp->n_head_kv, hp->head_dim, PAGE, 0, err,
				      sizeof(err)) == -1, "a page fit");
	printf("message: %s\n", err);
	REQUIRE(strstr(err, "not even one page of 32 tokens (0.02 MiB) fits in 90% of the 0.0 MiB "
		      "free (of 1024.0 MiB) on cuda:0"), "\"%s\"", err);
	exl_model_free(m);
	be->ops->destroy(be);
	return 0;
out:
	return 1;
}

static int case_cow(const char *module)
{
	enum { LAYERS = 3, HEADS = 2, HDIM = 8 };
	struct exl_backend *be;
	struct exl_kvcache *kv;
	struct exl_kv_seq a, b;
	int32_t t[PAGE * 2 + 1];
	char err[512];

	if (fake_backend(module, &be))
		return 1;
	kv = exl_kvcache_create(be, LAYERS, HEADS, HDIM, 8 * PAGE, PAGE, err, sizeof(err));
	REQUIRE(kv, "kv cache: %s", err);
	for (int i = 0; i < 2 * PAGE + 1; i++)
		t[i] = i + 1;
	exl_kv_seq_init(&a);
	exl_kv_seq_init(&b);
	REQUIRE(exl_kv_seq_reserve(kv, &a, 2 * PAGE) == 0 &&
		exl_kv_seq_commit(kv, &a, t, 2 * PAGE) == 0, "fill a");
	/* mark the shared page in every layer */
	int32_t shared = a.pages[1];
	size_t page_halfs = (size_t)HEADS * PAGE * HDIM;
	for (int l = 0; l < LAYERS; l++) {
		uint16_t *k = (uint16_t *)exl_kvcache_layer(kv, l)->k + (size_t)shared * page_halfs;
		uint16_t *v = (uint16_t *)exl_kvcache_layer(kv, l)->v + (size_t)shared * page_halfs;

		for (size_t i = 0; i < page_halfs; i++) {
			k[i] = (uint16_t)(100 * l + i);
			v[i] = (uint16_t)(7000 + 100 * l + i);
		}
	}
	REQUIRE(exl_kv_seq_share_prefix(kv, &b, t, 2 * PAGE + 1) == 2 * PAGE, "share");
	exl_kv_seq_truncate(kv, &b, PAGE + 3);
	struct exl_cuda_fake_counts before = *counts;
	REQUIRE(exl_kv_seq_reserve(kv, &b, 1) == 0 && b.pages[1] != shared, "copy on write");
	printf("copy on write of one page, %d layers: %ld copies, %ld downloads, %ld copy_in, "
	       "%ld syncs\n", LAYERS, counts->copy - before.copy, counts->download - before.download,
	       counts->copy_in - before.copy_in, counts->sync - before.sync);
	REQUIRE(counts->copy - before.copy == 2 * LAYERS, "%ld copies",
		counts->copy - before.copy);
	REQUIRE(counts->download == before.download && counts->copy_in == before.copy_in &&
		counts->sync == before.sync, "a host round trip or a wait");
	for (int l = 0; l < LAYERS; l++) {
		const struct exl_kv_layer *kl = exl_kvcache_layer(kv, l);

		REQUIRE(!memcmp((uint16_t *)kl->k + (size_t)b.pages[1] * page_halfs,
			      (uint16_t *)kl->k + (size_t)shared * page_halfs, page_halfs * 2) &&
			!memcmp((uint16_t *)kl->v + (size_t)b.pages[1] * page_halfs,
			      (uint16_t *)kl->v + (size_t)shared * page_halfs, page_halfs * 2),
			"layer %d: the copy differs", l);
	}
	exl_kv_seq_release(kv, &a);
	exl_kv_seq_release(kv, &b);
	exl_kvcache_free(kv);
	be->ops->destroy(be);
	return 0;
out:
	return 1;
}

int main(int argc, char **argv)
{
	const char *c = argc > 1 ? argv[1] : "";
	const char *module = argc > 2 ? argv[2] : NULL;

	if (!strcmp(c, "sizing"))
		return case_sizing();
	if (!module) {
		fprintf(stderr, "usage: test_cuda_memory sizing | "
			"{fits|nofit|upload|kvfit|kvauto|cow} FAKE_MODULE\n");
		return 2;
	}
	if (!strcmp(c, "cow"))
		return case_cow(module);
	if (!have_model())
		return 77;
	if (!strcmp(c, "fits"))
		return case_fits(module);
	if (!strcmp(c, "nofit"))
		return case_nofit(module);
	if (!strcmp(c, "upload"))
		return case_upload(module);
	if (!strcmp(c, "kvfit"))
		return case_kvfit(module);
	if (!strcmp(c, "kvauto"))
		return case_kvauto(module);
	fprintf(stderr, "unknown case \"%s\"\n", c);
	return 2;
}
