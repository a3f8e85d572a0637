/* LoRA adapters through a real exld and libexlclient: two random adapters
 * made by exld-mkmodel for stories260K are loaded by name; three jobs
 * submitted together (no adapter, adapter A at 1, adapter B at 0.7) share
 * the model's batches, and each generates exactly the ids `exld run
 * --lora FILE[:SCALE]` gives alone.  A bad adapter is refused at load with
 * the reason, an unknown one at generate, and an unloaded one is gone.
 * Over the HTTP API (/v1/completions and Ollama's /api/generate, "lora" in
 * the body or options), the same adapters give the msgpack job's text, and
 * a bad or unknown one is a 400 or 404 naming "lora". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exlclient.h"
#include "harness.h"
#include "http_client.h"
#include "tests/common/check.h"

#define MODEL "stories260K"
#define PROMPT "Once upon a time"
#define N_NEW 48
#define MAX_IDS 256
#define N_TWINS 4

struct twin {
	const char *adapter;    /* NULL: none */
	float scale;
	int ngram_draft;        /* speculative decoding from the job's own tokens */
	int32_t want[MAX_IDS];
	int n_want;
	int32_t got[MAX_IDS];
	int n_got;
	uint64_t job;
	bool done;
};

static int twin_expected(struct twin *t, const char *model_path, const char *dir)
{
	char nbuf[16], lora[512], out[65536];
	char *argv[24];
	int n = 0;

	snprintf(nbuf, sizeof(nbuf), "%d", N_NEW);
	argv[n++] = (char *)h_exld();
	argv[n++] = "run";
	argv[n++] = "--model";
	argv[n++] = (char *)model_path;
	argv[n++] = "--prompt";
	argv[n++] = PROMPT;
	argv[n++] = "-n";
	argv[n++] = nbuf;
	argv[n++] = "--temperature";
	argv[n++] = "0";
	argv[n++] = "--ignore-eos";
	argv[n++] = "--threads";
	argv[n++] = "1";
	argv[n++] = "--json";
	if (t->adapter) {
		snprintf(lora, sizeof(lora), "%s/%s.gguf:%g", dir, t->adapter, (double)t->scale);
		argv[n++] = "--lora";
		argv[n++] = lora;
	}
	argv[n] = NULL;
	if (h_run_capture(argv, out, sizeof(out)))
		return -1;
	t->n_want = h_parse_ids(out, t->want, MAX_IDS);
	return t->n_want == N_NEW ? 0 : -1;
}

static int mkadapter(const char *dir, const char *name, const char *seed, const char *extra)
{
	char mk[1024], base[600], out[600], log[256];
	char *argv[16];
	int n = 0;

	snprintf(mk, sizeof(mk), "%s/tests/tools/exld-mkmodel", getenv("EXLD_BUILDDIR"));
	snprintf(base, sizeof(base), "%s/%s.gguf", dir, MODEL);
	snprintf(out, sizeof(out), "%s/%s.gguf", dir, name);
	argv[n++] = mk;
	argv[n++] = "--lora-for";
	argv[n++] = base;
	argv[n++] = "--rank";
	argv[n++] = "8";
	argv[n++] = "--seed";
	argv[n++] = (char *)seed;
	if (extra)
		argv[n++] = (char *)extra;
	argv[n++] = "-o";
	argv[n++] = out;
	argv[n] = NULL;
	return h_run_capture(argv, log, sizeof(log));
}

static bool same(const int32_t *a, int na, const int32_t *b, int nb)
{
	return na == nb && !memcmp(a, b, (size_t)na * sizeof(*a));
}

/* s with JSON's escapes, as the daemon writes strings (json_out.c). */
static void json_escape(const char *s, char *out, size_t cap)
{
	size_t n = 0;

	for (; *s && n + 8 < cap; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\') {
			out[n++] = '\\';
			out[n++] = (char)ch;
		} else if (ch == '\n' || ch == '\r' || ch == '\t') {
			out[n++] = '\\';
			out[n++] = ch == '\n' ? 'n' : ch == '\r' ? 'r' : 't';
		} else if (ch < 0x20) {
			n += (size_t)snprintf(out + n, cap - n, "\\u%04x", ch);
		} else {
			out[n++] = (char)ch;
		}
	}
	out[n] = 0;
}

/* The greedy text of the msgpack API for adapter (NULL: none) at scale. */
static int msgpack_text(struct exl_client *c, const char *adapter, float scale, char *out,
			size_t cap)
{
	struct exl_gen_params p;
	struct exl_result r;
	const char *names[1] = { adapter };
	float scales[1] = { scale };

	exl_gen_params_init(&p);
	p.max_new_tokens = N_NEW;
	p.temperature = 0.0f;
	p.ignore_eos = 1;
	if (adapter) {
		p.lora_names = names;
		p.lora_scales = scales;
		p.n_loras = 1;
	}
	if (exl_generate(c, &p, PROMPT, &r))
		return -1;
	snprintf(out, cap, "%s", r.text);
	exl_result_free(&r);
	return 0;
}

/* LoRA over the HTTP API, on the daemon's unix: listener. */
static void http_lora(struct exl_client *c, const char *http_path)
{
	const struct target t = { .path = http_path };
	char plain[4096], with_b[4096], esc[8192], body[1024], want[8300];
	struct resp r = { 0 };

	if (msgpack_text(c, NULL, 1.0f, plain, sizeof(plain)) ||
	    msgpack_text(c, "loraB", 0.7f, with_b, sizeof(with_b))) {
		CHECK(0, "msgpack generate for the HTTP comparison: %s", exl_errmsg(c));
		return;
	}
	CHECK(strcmp(plain, with_b), "loraB changes the msgpack job's text");

	/* OpenAI completions, [name, scale] */
	snprintf(body, sizeof(body), "{\"model\": \"%s\", \"prompt\": \"%s\", \"max_tokens\": %d, "
		 "\"temperature\": 0, \"ignore_eos\": true, \"lora\": [[\"loraB\", 0.7]]}",
		 MODEL, PROMPT, N_NEW);
	json_escape(with_b, esc, sizeof(esc));
	snprintf(want, sizeof(want), "\"text\":\"%s\"", esc);
	CHECK(post(&t, "/v1/completions", body, &r) == 0 && r.status == 200 &&
	      strstr(r.body, want), "/v1/completions with lora [[loraB, 0.7]]: %d %s", r.status,
	      r.body ? r.body : "(nothing)");
	resp_free(&r);

	/* Ollama generate, {name, scale} in options */
	snprintf(body, sizeof(body), "{\"model\": \"%s\", \"prompt\": \"%s\", \"raw\": true, "
		 "\"stream\": false, \"options\": {\"num_predict\": %d, \"temperature\": 0, "
		 "\"ignore_eos\": true, \"lora\": [{\"name\": \"loraB\", \"scale\": 0.7}]}}",
		 MODEL, PROMPT, N_NEW);
	snprintf(want, sizeof(want), "\"response\":\"%s\"", esc);
	CHECK(post(&t, "/api/generate", body, &r) == 0 && r.status == 200 && strstr(r.body, want),
	      "/api/generate with options.lora [{name: loraB, scale: 0.7}]: %d %s", r.status,
	      r.body ? r.body : "(nothing)");
	resp_free(&r);

	/* no lora: the plain text */
	snprintf(body, sizeof(body), "{\"model\": \"%s\", \"prompt\": \"%s\", \"max_tokens\": %d, "
		 "\"temperature\": 0, \"ignore_eos\": true, \"lora\": []}", MODEL, PROMPT, N_NEW);
	json_escape(plain, esc, sizeof(esc));
	snprintf(want, sizeof(want), "\"text\":\"%s\"", esc);
	CHECK(post(&t, "/v1/completions", body, &r) == 0 && r.status == 200 &&
	      strstr(r.body, want), "/v1/completions with lora []: %d %s", r.status,
	      r.body ? r.body : "(nothing)");
	resp_free(&r);

	/* refusals */
	CHECK(post(&t, "/v1/completions", "{\"prompt\": \"x\", \"lora\": [\"loraC\"]}", &r) == 0 &&
	      r.status == 404 && strstr(r.body, "\"param\":\"lora\"") &&
	      strstr(r.body, "no adapter 'loraC'"), "an unknown adapter: %d %s", r.status,
	      r.body ? r.body : "(nothing)");
	resp_free(&r);
	CHECK(post(&t, "/v1/completions", "{\"prompt\": \"x\", \"lora\": [[\"loraB\", 5000]]}",
		   &r) == 0 && r.status == 400 && strstr(r.body, "\"param\":\"lora\"") &&
	      strstr(r.body, "wants a scale in [-1000, 1000]"), "scale 5000: %d %s", r.status,
	      r.body ? r.body : "(nothing)");
	resp_free(&r);
	CHECK(post(&t, "/v1/completions", "{\"prompt\": \"x\", \"lora\": [{\"id\": 0}]}", &r) == 0 &&
	      r.status == 400 && strstr(r.body, "name the adapter"), "llama.cpp's id form: %d %s",
	      r.status, r.body ? r.body : "(nothing)");
	resp_free(&r);
	CHECK(post(&t, "/v1/completions", "{\"prompt\": \"x\", \"lora\": \"loraB\"}", &r) == 0 &&
	      r.status == 400 && strstr(r.body, "wants an array of adapter names"),
	      "lora as a string: %d %s", r.status, r.body ? r.body : "(nothing)");
	resp_free(&r);
	CHECK(post(&t, "/v1/completions", "{\"prompt\": \"x\", \"lora\": [\"../etc\"]}", &r) == 0 &&
	      r.status == 400 && strstr(r.body, "wants an adapter name"), "a path as a name: %d %s",
	      r.status, r.body ? r.body : "(nothing)");
	resp_free(&r);
}

int main(void)
{
	struct daemon d;
	struct exl_client *c = NULL;
	/* the fourth is the second again, decoded speculatively: its
	 * proposals are verified under the adapter, so the same ids */
	struct twin tw[N_TWINS] = {
		{ .adapter = NULL, .scale = 1.0f },
		{ .adapter = "loraA", .scale = 1.0f },
		{ .adapter = "loraB", .scale = 0.7f },
		{ .adapter = "loraA", .scale = 1.0f, .ngram_draft = 2 },
	};
	char mdir[200], model_path[300], src[1024], err[512], http_path[300], http_arg[320];
	int ret = 1;

	if (!h_models_dir()) {
		printf("EXLD_MODELS has no stories260K.gguf; skipping\n");
		return SKIP;
	}
	if (!getenv("EXLD_BUILDDIR")) {
		printf("EXLD_BUILDDIR is not set (run it through meson test); skipping\n");
		return SKIP;
	}
	snprintf(src, sizeof(src), "%s/%s.gguf", h_models_dir(), MODEL);
	if (h_prepare(&d))
		return 1;
	/* A model directory of our own: the model and the adapters beside it. */
	snprintf(mdir, sizeof(mdir), "%s/models", d.dir);
	snprintf(model_path, sizeof(model_path), "%s/%s.gguf", mdir, MODEL);
	REQUIRE(mkdir(mdir, 0700) == 0 && symlink(src, model_path) == 0, "model directory");
	REQUIRE(mkadapter(mdir, "loraA", "1", NULL) == 0, "exld-mkmodel --lora-for (A)");
	REQUIRE(mkadapter(mdir, "loraB", "2", NULL) == 0, "exld-mkmodel --lora-for (B)");
	REQUIRE(mkadapter(mdir, "badshape", "3", "--lora-bad-shape") == 0, "bad adapter");
	REQUIRE(mkadapter(mdir, "noalpha", "4", "--lora-no-alpha") == 0, "adapter without alpha");
	for (int i = 0; i < N_TWINS; i++)
		REQUIRE(twin_expected(&tw[i], model_path, mdir) == 0, "exld run for job %d", i);
	CHECK(!same(tw[0].want, tw[0].n_want, tw[1].want, tw[1].n_want) &&
	      !same(tw[0].want, tw[0].n_want, tw[2].want, tw[2].n_want),
	      "the adapters change exld run's greedy output");

	setenv("EXLD_MODELS", mdir, 1);
	snprintf(http_path, sizeof(http_path), "%s/http.sock", d.dir);
	snprintf(http_arg, sizeof(http_arg), "unix:%s", http_path);
	const char *extra[] = { "--http", http_arg, NULL };
	REQUIRE(!h_start(&d, MODEL, extra), "exld did not start");
	REQUIRE(exl_connect(&c, d.sock, NULL, err, sizeof(err)) == 0, "connect: %s", err);
	REQUIRE(exl_load(c, "loraA", NULL, NULL) == 0, "load loraA: %s", exl_errmsg(c));
	REQUIRE(exl_load(c, "loraB", NULL, NULL) == 0, "load loraB: %s", exl_errmsg(c));
	CHECK(exl_load(c, "loraA", NULL, NULL) == EXL_E_EXISTS, "loading loraA twice: %s",
	      exl_errmsg(c));
	CHECK(exl_load(c, "badshape", NULL, NULL) == EXL_E_BAD_REQUEST &&
	      strstr(exl_errmsg(c), "wrong base model"), "a misshaped adapter: %s", exl_errmsg(c));
	CHECK(exl_load(c, "noalpha", NULL, NULL) == EXL_E_BAD_REQUEST &&
	      strstr(exl_errmsg(c), "adapter.lora.alpha is missing"), "no alpha: %s",
	      exl_errmsg(c));

	/* The jobs at once: one connection, submitted back to back. */
	for (int i = 0; i < N_TWINS; i++) {
		struct exl_gen_params p;
		const char *names[1] = { tw[i].adapter };
		float scales[1] = { tw[i].scale };

		exl_gen_params_init(&p);
		p.max_new_tokens = N_NEW;
		p.temperature = 0.0f;
		p.ignore_eos = 1;
		if (tw[i].ngram_draft)
			p.ngram_draft = tw[i].ngram_draft;
		if (tw[i].adapter) {
			p.lora_names = names;
			p.lora_scales = scales;
			p.n_loras = 1;
		}
		REQUIRE(exl_submit(c, &p, PROMPT, &tw[i].job) == 0, "submit %d: %s", i,
			exl_errmsg(c));
	}
	for (int left = N_TWINS; left > 0;) {
		struct exl_event ev;

		REQUIRE(exl_next(c, &ev, 60000) == 0, "next: %s", exl_errmsg(c));
		for (int i = 0; i < N_TWINS; i++) {
			struct twin *t = &tw[i];

			if (ev.job != t->job)
				continue;
			if (ev.type == EXL_EVENT_DONE) {
				CHECK(!strcmp(ev.result->stop_reason, "max_new_tokens"),
				      "job %d ended with %s", i, ev.result->stop_reason);
				t->done = true;
				left--;
				break;
			}
			for (size_t k = 0; k < ev.n_ids && t->n_got < MAX_IDS; k++)
				t->got[t->n_got++] = ev.ids[k];
		}
	}
	for (int i = 0; i < N_TWINS; i++)
		CHECK(same(tw[i].got, tw[i].n_got, tw[i].want, tw[i].n_want),
		      "job %d (%s at %g): the daemon's %d ids differ from exld run's %d", i,
		      tw[i].adapter ? tw[i].adapter : "no adapter", (double)tw[i].scale, tw[i].n_got,
		      tw[i].n_want);

	http_lora(c, http_path);

	/* An adapter not loaded, and one unloaded, are refused by name. */
	{
		struct exl_gen_params p;
		const char *names[1] = { "loraC" };
		struct exl_result r;

		exl_gen_params_init(&p);
		p.max_new_tokens = 4;
		p.lora_names = names;
		p.n_loras = 1;
		CHECK(exl_generate(c, &p, PROMPT, &r) == EXL_E_NOT_FOUND &&
		      strstr(exl_errmsg(c), "no adapter 'loraC'"), "unknown adapter: %s",
		      exl_errmsg(c));
		REQUIRE(exl_unload(c, "loraA", false) == 0, "unload loraA: %s", exl_errmsg(c));
		names[0] = "loraA";
		CHECK(exl_generate(c, &p, PROMPT, &r) == EXL_E_NOT_FOUND, "unloaded adapter: %s",
		      exl_errmsg(c));
	}
	ret = check_failures ? 1 : 0;
out:
	if (c)
		exl_close(c);
	h_cleanup(&d);
	if (check_failures)
		ret = 1;
	return ret;
}
