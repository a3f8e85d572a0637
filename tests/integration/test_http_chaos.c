/* HTTP chaos: four clients at once on exld's OpenAI and Ollama endpoints,
 * requests drawn from a seeded generator: completions and chats, streamed
 * (SSE, NDJSON) or not, with sampling, stops, seeds, logprobs and JSON
 * response formats; embeddings, tokenizing, model lists; bodies that are
 * malformed or of the wrong types; and clients that hang up mid-response
 * or send half a request and leave: 120 requests a client.  The daemon is small on purpose (4
 * running jobs, 64-token passes).
 *
 * Every response read whole must be well formed: a status line; an error
 * status with a JSON body; a 200 with one JSON value, or an SSE stream
 * whose every event is JSON and which ends with [DONE], or NDJSON lines
 * whose last says "done": true.  Afterwards no job is left, /health is
 * ok, and exld exits 0 (in the ASan/UBSan build: with no report).
 *
 *   test_http_chaos [SEED]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/json_parse.h"
#include "exlclient.h"
#include "chaos.h"
#include "harness.h"
#include "http_client.h"

#define MODEL "stories260K"
#define N_WORKERS 4

static struct target tgt;

static const char *const prompts[] = {
	"Once upon a time", "", "Lily \\u00e9 liked", "The little dog\\n", "\\u2581\\u2581",
	"<s>Tom</s>",
};
static const char *const paths[] = {
	"/v1/completions", "/v1/chat/completions", "/api/generate", "/api/chat",
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

struct worker {
	uint64_t seed;
	int requests, full, hung_up, errors, failed;
	char why[512];
};

/* A generation request's body for path kind k (index into paths). */
static void gen_body(char *b, size_t cap, int k, uint64_t *s, bool *stream)
{
	const char *p = prompts[chaos_pick(s, N(prompts))];
	int n = (int)chaos_pick(s, 60);
	double t = chaos_pick(s, 3) ? 0.1 * chaos_pick(s, 12) : 0.0;
	unsigned seed = (unsigned)chaos_pick(s, 1000);
	const char *stop = chaos_pick(s, 3) ? "" : ", \"stop\": [\".\", \"\\n\"]";
	char extra[320] = "";

	*stream = chaos_pick(s, 2);
	if (k == 0 && chaos_pick(s, 4) == 0)
		snprintf(extra, sizeof(extra), ", \"logprobs\": %u", chaos_pick(s, 4));
	if (k == 1 && chaos_pick(s, 5) == 0)
		snprintf(extra, sizeof(extra), ", \"response_format\": {\"type\": \"json_object\"}");
	else if ((k == 1 || k == 3) && chaos_pick(s, 5) == 0)
		/* a forced call (the model's template has no tool form) or none */
		snprintf(extra, sizeof(extra), ", \"tools\": [{\"type\": \"function\", \"function\": "
			 "{\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"properties\": "
			 "{\"n\": {\"type\": \"integer\"}}}}}]%s",
			 k == 1 && chaos_pick(s, 2) ? ", \"tool_choice\": \"required\"" : "");
	if (k >= 2 && chaos_pick(s, 5) == 0)
		snprintf(extra, sizeof(extra), ", \"format\": \"json\"");
	switch (k) {
	case 0:
		snprintf(b, cap, "{\"model\": \"%s\", \"prompt\": \"%s\", \"max_tokens\": %d, "
			 "\"temperature\": %.1f, \"seed\": %u, \"stream\": %s%s%s}", MODEL, p, n, t, seed,
			 *stream ? "true" : "false", stop, extra);
		break;
	case 1:
		snprintf(b, cap, "{\"model\": \"%s\", \"messages\": [{\"role\": \"system\", \"content\": "
			 "\"Be brief.\"}, {\"role\": \"user\", \"content\": \"%s\"}], \"max_tokens\": %d, "
			 "\"temperature\": %.1f, \"seed\": %u, \"stream\": %s%s%s}", MODEL, p, n, t, seed,
			 *stream ? "true" : "false", stop, extra);
		break;
	case 2:
		snprintf(b, cap, "{\"model\": \"%s\", \"prompt\": \"%s\", \"raw\": %s, \"stream\": %s, "
			 "\"options\": {\"num_predict\": %d, \"temperature\": %.1f, \"seed\": %u}%s}",
			 MODEL, p, chaos_pick(s, 2) ? "true" : "false", *stream ? "true" : "false", n, t, seed,
			 extra);
		break;
	default:
		snprintf(b, cap, "{\"model\": \"%s\", \"messages\": [{\"role\": \"user\", \"content\": "
			 "\"%s\"}], \"stream\": %s, \"options\": {\"num_predict\": %d, \"temperature\": "
			 "%.1f, \"seed\": %u}%s}", MODEL, p, *stream ? "true" : "false", n, t, seed,
			 extra);
		break;
	}
}

static bool is_json(const char *text, size_t len)
{
	char err[128];
	struct exl_json_doc *d = exl_json_parse(text, len, err, sizeof(err));

	exl_json_free(d);
	return d != NULL;
}

/* A chunked body (Transfer-Encoding: chunked) joined in place; false
 * when the chunks are malformed or the last (size 0) is missing. */
static bool dechunk(char *body, size_t *len)
{
	char *in = body, *out = body, *end = body + *len;

	for (;;) {
		char *nl = memchr(in, '\n', (size_t)(end - in));
		char *after;
		unsigned long n;

		if (!nl)
			return false;
		n = strtoul(in, &after, 16);
		if (after == in)
			return false;
		in = nl + 1;
		if (n == 0) {
			*len = (size_t)(out - body);
			return true;
		}
		if ((size_t)(end - in) < n + 2 || in[n] != '\r' || in[n + 1] != '\n')
			return false;
		memmove(out, in, n);
		out += n;
		in += n + 2;
	}
}

/* Checks a whole response to a request on path (stream: asked to stream).
 * NULL when well formed, else what is wrong. */
static const char *check_response(char *raw, size_t len, const char *path, bool stream,
				  int *status)
{
	char *body = strstr(raw, "\r\n\r\n");

	if (len < 12 || strncmp(raw, "HTTP/1.1 ", 9) || !body)
		return "no status line or no header end";
	*status = atoi(raw + 9);
	body += 4;
	size_t blen = len - (size_t)(body - raw);
	body[-2] = 0; /* the headers, as a string */
	if (strcasestr(raw, "\r\nTransfer-Encoding: chunked") && !dechunk(body, &blen))
		return "a chunked body that does not end with its last chunk";

	if (*status != 200) {
		if (*status < 400 || *status > 599)
			return "a status that is neither 200 nor an error";
		return is_json(body, blen) ? NULL : "an error without a JSON body";
	}
	bool sse = !strncmp(path, "/v1/", 4) && stream;
	bool ndjson = !strncmp(path, "/api/", 5) && stream && strcmp(path, "/api/embed");

	if (!sse && !ndjson)
		return is_json(body, blen) ? NULL : "a 200 whose body is not one JSON value";
	/* line by line */
	bool done = false;
	const char *p = body, *end = body + blen;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);

		if (n && p[n - 1] == '\r')
			n--;
		if (n) {
			if (done)
				return "a line after the stream's end";
			if (sse) {
				if (n < 6 || strncmp(p, "data: ", 6))
					return "an SSE line that is not data";
				if (n == 12 && !strncmp(p + 6, "[DONE]", 6))
					done = true;
				else if (!is_json(p + 6, n - 6))
					return "an SSE event that is not JSON";
			} else {
				char err[128];
				struct exl_json_doc *d = exl_json_parse(p, n, err, sizeof(err));
				const struct exl_json *dn;

				if (!d)
					return "an NDJSON line that is not JSON";
				dn = exl_json_get(exl_json_root(d), "done");
				done = dn && dn->type == EXL_JSON_BOOL && dn->b;
				exl_json_free(d);
			}
		}
		p = nl ? nl + 1 : end;
	}
	return done ? NULL : "a stream without its end";
}

#define FAIL(w, ...) \
	do { \
		snprintf((w)->why, sizeof((w)->why), __VA_ARGS__); \
		(w)->failed = 1; \
		return; \
	} while (0)

static void one_request(struct worker *w, uint64_t *s)
{
	char body[1024], head[512];
	const char *path;
	bool stream = false;
	int kind = (int)chaos_pick(s, 12);

	if (kind < 6) {
		path = paths[kind % 4];
		gen_body(body, sizeof(body), kind % 4, s, &stream);
	} else if (kind == 6) {
		path = chaos_pick(s, 2) ? "/v1/embeddings" : "/api/embed";
		snprintf(body, sizeof(body), "{\"model\": \"%s\", \"input\": [\"%s\", \"%s\"]}", MODEL,
			 prompts[chaos_pick(s, N(prompts))], prompts[chaos_pick(s, N(prompts))]);
	} else if (kind == 7) {
		path = "/tokenize";
		snprintf(body, sizeof(body), "{\"content\": \"%s\", \"with_pieces\": %s}",
			 prompts[chaos_pick(s, N(prompts))], chaos_pick(s, 2) ? "true" : "false");
	} else if (kind == 8) {
		/* a body cut short, or of the wrong types */
		path = paths[chaos_pick(s, 4)];
		gen_body(body, sizeof(body), (int)(chaos_pick(s, 4)), s, &stream);
		if (chaos_pick(s, 2))
			body[chaos_pick(s, (unsigned)strlen(body))] = 0;
		else
			snprintf(body, sizeof(body), "{\"model\": 7, \"prompt\": [1, {}], \"max_tokens\": "
				 "-5, \"messages\": \"x\", \"stream\": \"yes\", \"temperature\": 1e999}");
		stream = false;
	} else {
		const char *gets[] = { "/v1/models", "/api/tags", "/api/ps", "/health", "/api/version" };
		struct resp r = { 0 };
		const char *g = gets[chaos_pick(s, N(gets))];

		w->requests++;
		if (request(&tgt, "GET", g, "", NULL, &r))
			FAIL(w, "GET %s: no response", g);
		int status;
		const char *bad = check_response(r.raw, strlen(r.raw), g, false, &status);
		resp_free(&r);
		if (bad)
			FAIL(w, "GET %s: %s", g, bad);
		w->full++;
		return;
	}
	w->requests++;
	int fd = dial(&tgt);
	if (fd < 0)
		FAIL(w, "cannot connect");
	size_t blen = strlen(body);
	snprintf(head, sizeof(head), "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
		 "application/json\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n", path, blen);
	unsigned how = chaos_pick(s, 8); /* 0: half the request, 1-2: hang up early, else read all */

	if (how == 0) {
		/* headers and part of the body, then gone */
		send_all(fd, head, strlen(head));
		send_all(fd, body, blen / 2);
		close(fd);
		w->hung_up++;
		return;
	}
	if (send_all(fd, head, strlen(head)) || send_all(fd, body, blen)) {
		close(fd);
		FAIL(w, "POST %s: send failed", path);
	}
	if (how <= 2) {
		char buf[256];
		ssize_t n = read(fd, buf, 1 + chaos_pick(s, sizeof(buf) - 1));

		(void)n;
		close(fd);
		w->hung_up++;
		return;
	}
	size_t len = 0;
	char *raw = read_all(fd, 60000, &len);
	close(fd);
	if (!raw)
		FAIL(w, "POST %s: no response", path);
	int status = 0;
	const char *bad = check_response(raw, len, path, stream, &status);
	if (bad) {
		snprintf(w->why, sizeof(w->why), "POST %s %.160s: %s: %.200s", path, body, bad, raw);
		w->failed = 1;
		free(raw);
		return;
	}
	w->full++;
	w->errors += status != 200;
	free(raw);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint64_t s = w->seed;

	for (int i = 0; i < 120 && !w->failed; i++)
		one_request(w, &s);
	return NULL;
}

int main(int argc, char **argv)
{
	struct daemon d;
	struct worker w[N_WORKERS];
	pthread_t th[N_WORKERS];
	uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : 20261127;
	char conf[128], addr[64];
	int ret = 1, failed = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!h_models_dir()) {
		printf("the test models (EXLD_MODELS/stories260K.gguf) are absent; skipping\n");
		return SKIP;
	}
	if (h_prepare(&d))
		return 1;
	if (chaos_config(&d, "", conf, sizeof(conf)))
		return 1;
	tgt.port = free_port();
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", tgt.port);
	const char *extra[] = { "--config", conf, "--http", addr, NULL };
	if (h_start(&d, MODEL, extra))
		goto out;
	for (int i = 0; i < N_WORKERS; i++) {
		w[i] = (struct worker){ .seed = seed * 2654435761u + (uint64_t)i * 7919u + 1 };
		pthread_create(&th[i], NULL, worker_main, &w[i]);
	}
	for (int i = 0; i < N_WORKERS; i++) {
		pthread_join(th[i], NULL);
		printf("client %d: %d requests, %d read whole (%d errors), %d hung up%s%s\n", i,
		       w[i].requests, w[i].full, w[i].errors, w[i].hung_up,
		       w[i].failed ? ": FAILED: " : "", w[i].failed ? w[i].why : "");
		failed |= w[i].failed;
	}
	if (failed)
		goto out;

	/* Afterwards: every job ended (the hung-up ones cancelled), healthy. */
	if (chaos_wait_idle(&d))
		goto out;
	struct resp r = { 0 };
	if (request(&tgt, "GET", "/health", "", NULL, &r) || r.status != 200) {
		fprintf(stderr, "/health after the chaos: %s\n", r.raw ? r.raw : "no response");
		goto out;
	}
	resp_free(&r);
	if (h_stop(&d) != 0) {
		fprintf(stderr, "exld did not exit 0\n");
		goto out;
	}
	printf("http chaos (seed %llu): every response well formed, exld exited 0\n",
	       (unsigned long long)seed);
	ret = 0;
out:
	h_cleanup(&d);
	return ret;
}
