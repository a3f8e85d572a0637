/* Chaos: several clients on one exld at once, each doing what real ones
 * do, in an order and with settings drawn from a seeded generator: jobs
 * of every feature (sampling, stop and banned strings, healing, a
 * grammar or schema, probabilities, drafting, beams, every stream mode),
 * read to the end, cancelled after a few events, left unread for a while
 * (the ring fills, the job pauses and is suspended), or abandoned by
 * closing the connection mid-stream; tokenizing, status, and now and then
 * the model unloaded (its jobs let finish, or ended) and loaded again
 * under everyone's jobs.  The daemon is small on purpose (4 running jobs, a 64 KiB ring
 * a client, a 512-position KV pool) so that queueing, pausing and
 * suspension happen.  100 operations a client.
 *
 * It checks that every job that was not abandoned ends exactly once with
 * a known reason (an error with a message), that a job not ended from
 * outside (cancelled, unloaded) streamed as many tokens as its result
 * holds, and one that was no more,
 * that no call waits past 30 s, and at the end that no job is left
 * running, a plain job still gives exld run's output, and the daemon exits
 * 0 (in the ASan/UBSan build: with no report).
 *
 *   test_chaos [SEED]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exlclient.h"
#include "chaos.h"
#include "harness.h"

#define MODEL "stories260K"
#define N_WORKERS 4
#define MAX_JOBS 3

static const char *sock;

static const char *const prompts[] = {
	"Once upon a time", "Lily liked to", "", "The little dog ran", "One day, Tom",
	"\xe2\x96\x81", "<s>Sara had</s>", "A boy named Tim went to the park and",
};
static const char *const words[] = { "the", "a", " ", "\n", "Lily", ".", "\xc3\xa9", "park" };
static const char *const grammars[] = {
	"root ::= [a-z ]{1,20} \".\"", "root ::= \"yes\" | \"no\"",
};
static const char *const schemas[] = {
	"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8}},"
	"\"required\":[\"name\"]}",
};
static const char *const reasons[] = {
	"stop_token", "stop_string", "max_new_tokens", "max_context", "end_filter", "cancelled",
	"unloaded", "shutdown", "error",
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

struct worker {
	int id;
	uint64_t seed;
	int jobs, done, cancelled, abandoned, reloads, failed;
	char why[512];
};

#define FAIL(w, ...) \
	do { \
		snprintf((w)->why, sizeof((w)->why), __VA_ARGS__); \
		(w)->failed = 1; \
		return -1; \
	} while (0)

/* Settings a real client might send, any combination. */
static void random_params(struct exl_gen_params *p, uint64_t *s, const char **stops,
			  const char **bans)
{
	exl_gen_params_init(p);
	p->has_seed = true;
	p->seed = chaos_rand(s);
	p->max_new_tokens = (int)chaos_pick(s, 80);
	if (chaos_pick(s, 4) == 0)
		p->temperature = 0;
	else
		p->temperature = 0.2f + 0.2f * (float)chaos_pick(s, 8);
	if (chaos_pick(s, 3) == 0)
		p->top_k = (int)chaos_pick(s, 50);
	if (chaos_pick(s, 3) == 0)
		p->top_p = 0.5f + 0.05f * (float)chaos_pick(s, 10);
	if (chaos_pick(s, 4) == 0)
		p->repetition_penalty = 1.1f;
	if (chaos_pick(s, 6) == 0)
		p->xtc_probability = 0.5f, p->xtc_threshold = 0.05f;
	if (chaos_pick(s, 6) == 0)
		p->dry_multiplier = 0.8f;
	if (chaos_pick(s, 5) == 0) {
		stops[0] = words[chaos_pick(s, N(words))];
		p->stop_strings = stops;
		p->n_stop_strings = 1;
	}
	if (chaos_pick(s, 6) == 0) {
		bans[0] = words[chaos_pick(s, N(words))];
		p->banned_strings = bans;
		p->n_banned_strings = 1;
	}
	if (chaos_pick(s, 6) == 0)
		p->token_healing = 1;
	switch (chaos_pick(s, 10)) {
	case 0: p->grammar = grammars[chaos_pick(s, N(grammars))]; break;
	case 1: p->json_schema = schemas[0]; break;
	case 2: p->regex = "[a-z ]+"; break;
	default: break;
	}
	if (chaos_pick(s, 5) == 0)
		p->return_probs = 1, p->return_top_k = (int)chaos_pick(s, 5);
	if (chaos_pick(s, 8) == 0)
		p->ngram_draft = 2, p->draft_tokens = 4;
	else if (chaos_pick(s, 10) == 0)
		p->num_beams = 1 + (int)chaos_pick(s, 3), p->return_probs = 0, p->return_top_k = 0;
	if (chaos_pick(s, 8) == 0)
		p->negative_prompt = prompts[chaos_pick(s, N(prompts))], p->cfg_scale = 1.5f;
	if (p->num_beams && p->negative_prompt)
		p->negative_prompt = NULL;
	p->stream = (enum exl_stream_mode)chaos_pick(s, 4);
	if (chaos_pick(s, 4) == 0)
		p->ignore_eos = 1;
}

struct job_state {
	uint64_t id;
	size_t streamed;
	bool done, cancelled;
	enum exl_stream_mode mode;
};

static bool known_reason(const char *r)
{
	for (size_t i = 0; i < N(reasons); i++)
		if (!strcmp(r, reasons[i]))
			return true;
	return false;
}

/* One round: up to MAX_JOBS jobs, then one way of reading them.  Returns
 * 1 when the connection was closed on purpose (the caller reconnects), 0,
 * or -1 on a failure (w->why). */
static int round_of_jobs(struct exl_client *c, struct worker *w, uint64_t *s)
{
	struct job_state js[MAX_JOBS];
	const char *stops[1], *bans[1];
	int n = 0, want = 1 + (int)chaos_pick(s, MAX_JOBS);
	int how = (int)chaos_pick(s, 8); /* 0-3 read all, 4 cancel, 5 close, 6-7 stall */
	int after = (int)chaos_pick(s, 6);

	for (int i = 0; i < want; i++) {
		struct exl_gen_params p;
		uint64_t id;

		random_params(&p, s, stops, bans);
		if (exl_submit(c, &p, prompts[chaos_pick(s, N(prompts))], &id)) {
			/* refused: a combination the daemon does not take, a limit */
			if (!exl_errmsg(c)[0])
				FAIL(w, "a refused job without a message");
			continue;
		}
		js[n++] = (struct job_state){ .id = id, .mode = p.stream };
		w->jobs++;
	}
	if (!n)
		return 0;
	if (how >= 6)
		h_sleep_ms(50 + 50 * (long)chaos_pick(s, 4)); /* the client does not read */
	int events = 0, left = n;

	while (left) {
		struct exl_event ev;
		int rc = exl_next(c, &ev, 30000);

		if (rc)
			FAIL(w, "exl_next: %s (%d jobs left)", exl_errmsg(c), left);
		struct job_state *j = NULL;
		for (int i = 0; i < n; i++)
			if (js[i].id == ev.job)
				j = &js[i];
		if (!j)
			FAIL(w, "an event for job %llu, never submitted here", (unsigned long long)ev.job);
		if (j->done)
			FAIL(w, "an event for job %llu after its end", (unsigned long long)ev.job);
		if (ev.type == EXL_EVENT_TOKENS) {
			j->streamed += ev.n_ids;
		} else {
			const struct exl_result *r = ev.result;

			j->done = true;
			left--;
			w->done++;
			if (!known_reason(r->stop_reason))
				FAIL(w, "job %llu ended with reason '%s'", (unsigned long long)ev.job,
				     r->stop_reason);
			if (!strcmp(r->stop_reason, "error") && (!r->error || !r->error[0]))
				FAIL(w, "job %llu: an error without a message", (unsigned long long)ev.job);
			/* A job ended from outside (cancelled, unloaded) may end
			 * with tokens it had not streamed yet (held for a stop
			 * string, or for a client that was not reading): its
			 * result holds every one, its stream no more. */
			bool outside = j->cancelled || !strcmp(r->stop_reason, "cancelled") ||
				       !strcmp(r->stop_reason, "unloaded") ||
				       !strcmp(r->stop_reason, "shutdown");
			if (strcmp(r->stop_reason, "error") && j->mode != EXL_STREAM_MODE_NONE &&
			    (outside ? j->streamed > (size_t)r->new_tokens :
				       j->streamed != (size_t)r->new_tokens))
				FAIL(w, "job %llu: %zu tokens streamed, %d in its result (%s)",
				     (unsigned long long)ev.job, j->streamed, r->new_tokens, r->stop_reason);
		}
		events++;
		if (how == 4 && events == after)
			for (int i = 0; i < n; i++)
				if (!js[i].done && !js[i].cancelled) {
					js[i].cancelled = true;
					w->cancelled++;
					/* a job that ended before the cancel came is
					 * unknown_job (docs/protocol.md): its DONE
					 * is on its way */
					int rc = exl_cancel(c, js[i].id);
					if (rc && rc != EXL_E_UNKNOWN_JOB)
						FAIL(w, "cancel: %s", exl_errmsg(c));
				}
		if (how == 5 && events == after) {
			w->abandoned += left;
			return 1;
		}
	}
	return 0;
}

static int connect_worker(struct exl_client **c, struct worker *w, uint64_t *s)
{
	char err[512];
	struct exl_connect_opts o = {
		.client_name = "chaos", .no_ring = chaos_pick(s, 4) == 0, .ring_size = 65536,
		.timeout_ms = 30000,
	};

	if (exl_connect(c, sock, &o, err, sizeof(err)))
		FAIL(w, "connect: %.400s", err);
	return 0;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint64_t s = w->seed;
	struct exl_client *c = NULL;

	if (connect_worker(&c, w, &s))
		return NULL;
	for (int op = 0; op < 100 && !w->failed; op++) {
		if (chaos_pick(&s, 30) == 0) {
			/* the model goes and comes back under everyone's jobs;
			 * another client's unload or load racing this one is
			 * refused with a message */
			if (exl_unload(c, MODEL, chaos_pick(&s, 2)) && !exl_errmsg(c)[0]) {
				snprintf(w->why, sizeof(w->why), "an unload refused without a message");
				w->failed = 1;
			}
			if (exl_load(c, MODEL, NULL, NULL) && !exl_errmsg(c)[0]) {
				snprintf(w->why, sizeof(w->why), "a load refused without a message");
				w->failed = 1;
			}
			w->reloads++;
			continue;
		}
		switch (chaos_pick(&s, 6)) {
		case 0: {
			int32_t *ids = NULL;
			size_t n = 0;
			const char *text = prompts[chaos_pick(&s, N(prompts))];

			/* refused only while the model is away, with a message */
			if (exl_tokenize(c, NULL, text, strlen(text), -1, chaos_pick(&s, 2), &ids, &n) &&
			    !exl_errmsg(c)[0]) {
				snprintf(w->why, sizeof(w->why), "tokenize refused without a message");
				w->failed = 1;
			}
			free(ids);
			break;
		}
		case 1: {
			struct exl_daemon_status st;

			if (exl_status(c, &st)) {
				snprintf(w->why, sizeof(w->why), "status: %s", exl_errmsg(c));
				w->failed = 1;
				break;
			}
			free(st.models);
			break;
		}
		default: {
			int rc = round_of_jobs(c, w, &s);

			if (rc == 1) {
				exl_close(c);
				c = NULL;
				if (connect_worker(&c, w, &s))
					return NULL;
			}
			break;
		}
		}
	}
	exl_close(c);
	return NULL;
}

int main(int argc, char **argv)
{
	struct daemon d;
	struct worker w[N_WORKERS];
	pthread_t th[N_WORKERS];
	uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : 20261127;
	char conf[128], model_path[4096];
	int ret = 1, failed = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!h_models_dir()) {
		printf("the test models (EXLD_MODELS/stories260K.gguf) are absent; skipping\n");
		return SKIP;
	}
	snprintf(model_path, sizeof(model_path), "%s/" MODEL ".gguf", h_models_dir());
	char *expected = h_expected(model_path, "Once upon a time", 40);
	if (!expected || h_prepare(&d))
		return 1;
	if (chaos_config(&d, "ring_size = 64K\n", conf, sizeof(conf)))
		return 1;
	const char *extra[] = { "--config", conf, "--kv-tokens", "512", NULL };
	if (h_start(&d, MODEL, extra))
		goto out;
	sock = d.sock;
	for (int i = 0; i < N_WORKERS; i++) {
		w[i] = (struct worker){ .id = i, .seed = seed * 2654435761u + (uint64_t)i * 40503u + 1 };
		pthread_create(&th[i], NULL, worker_main, &w[i]);
	}
	for (int i = 0; i < N_WORKERS; i++) {
		pthread_join(th[i], NULL);
		printf("client %d: %d jobs, %d ended, %d cancelled, %d abandoned, %d reloads%s%s\n", i,
		       w[i].jobs, w[i].done, w[i].cancelled, w[i].abandoned, w[i].reloads,
		       w[i].failed ? ": FAILED: " : "", w[i].failed ? w[i].why : "");
		failed |= w[i].failed;
	}
	if (failed)
		goto out;

	/* Afterwards: nothing left running, and a plain job as exld run. */
	if (chaos_wait_idle(&d))
		goto out;
	struct exl_client *c;
	struct exl_connect_opts o = { .client_name = "check", .timeout_ms = 30000 };
	char err[512];

	if (exl_connect(&c, d.sock, &o, err, sizeof(err))) {
		fprintf(stderr, "connect: %s\n", err);
		goto out;
	}
	/* a client's last unload may have raced another's load */
	if (exl_load(c, MODEL, NULL, NULL) && !strstr(exl_errmsg(c), "loaded"))
		fprintf(stderr, "load at the end: %s\n", exl_errmsg(c));
	struct exl_gen_params p;
	struct exl_result r;

	exl_gen_params_init(&p);
	p.temperature = 0;
	p.max_new_tokens = 40;
	int rc = exl_generate(c, &p, "Once upon a time", &r);
	exl_close(c);
	if (rc || strcmp(r.text, expected)) {
		fprintf(stderr, "after the chaos: '%s' (%s), exld run: '%s'\n", rc ? "" : r.text,
			rc ? "failed" : "ok", expected);
		if (!rc)
			exl_result_free(&r);
		goto out;
	}
	exl_result_free(&r);
	if (h_stop(&d) != 0) {
		fprintf(stderr, "exld did not exit 0\n");
		goto out;
	}
	printf("chaos (seed %llu): the daemon served every client and exited 0\n",
	       (unsigned long long)seed);
	ret = 0;
out:
	free(expected);
	h_cleanup(&d);
	return ret;
}
