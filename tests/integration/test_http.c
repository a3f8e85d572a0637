/* The HTTP front against a real exld, over raw sockets (docs/http.md):
 *
 *   errors      bad JSON, bad fields, unknown models, unknown and
 *               unimplemented endpoints, wrong methods: the right status in
 *               the OpenAI or Ollama error shape; a Host or Origin that is
 *               not loopback is refused; the greedy text of
 *               /v1/completions is exld run's
 *   apikey      http_api_key: 401 without the Bearer token or with another,
 *               200 with it; /health needs none
 *   disconnect  a client that hangs up (streaming or not) cancels its job:
 *               the daemon's job count is back to 0 at once, long before
 *               the job could have ended
 *   uid         a unix: listener counts requests against the peer's uid
 *               (SO_PEERCRED: uid_limit applies, status counts its job),
 *               a TCP one against http_uid
 *   garbage     mutated requests (methods, headers, chunked bodies, huge
 *               and truncated JSON) never take the daemon down, and a good
 *               request still works after them
 *   drain       SIGTERM while a stream runs: the stream ends, exld exits 0
 *
 * Skips (77) without the test models.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exlclient.h"
#include "harness.h"
#include "http_client.h"
#include "tests/common/check.h"

/* The daemon's job count and tokens generated, over the msgpack socket. */
static int daemon_status(struct daemon *d, int *jobs, uint64_t *generated, int *uid_jobs)
{
	struct exl_client *c;
	struct exl_daemon_status st;
	char err[256];

	if (exl_connect(&c, d->sock, NULL, err, sizeof(err)))
		return -1;
	int rc = exl_status(c, &st);
	exl_close(c);
	if (rc)
		return -1;
	*jobs = st.jobs;
	if (generated)
		*generated = st.n_models ? st.models[0].tokens_generated : 0;
	if (uid_jobs)
		*uid_jobs = st.uid_jobs;
	free(st.models);
	return 0;
}

static int start(struct daemon *d, const char *http, const char *const *more)
{
	const char *extra[16] = { "--http", http };
	int n = 2;

	for (int i = 0; more && more[i] && n < 15; i++)
		extra[n++] = more[i];
	extra[n] = NULL;
	return h_start(d, "stories260K", extra);
}

/* ---- errors ---- */

static int test_errors(void)
{
	struct daemon d;
	struct target t = { .port = free_port() };
	char addr[64];
	struct resp r = { 0 };
	int ret = 1;

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", t.port);
	REQUIRE(h_prepare(&d) == 0 && start(&d, addr, NULL) == 0, "daemon did not start");

	REQUIRE(post(&t, "/v1/completions", "{\"prompt\": \"x\", ", &r) == 0 && r.status == 400 &&
		strstr(r.body, "\"type\":\"invalid_request_error\"") &&
		strstr(r.body, "not JSON"), "truncated JSON: %d %s", r.status, r.body);
	resp_free(&r);
	REQUIRE(post(&t, "/v1/completions", "[1, 2]", &r) == 0 && r.status == 400 &&
		strstr(r.body, "must be a JSON object"), "an array body: %d %s", r.status, r.body);
	resp_free(&r);
	REQUIRE(post(&t, "/v1/completions", "{\"prompt\": \"x\", \"top_k\": -3}", &r) == 0 &&
		r.status == 400 && strstr(r.body, "\"param\":\"top_k\"") &&
		strstr(r.body, "wants an integer in [0, 2147483647]"), "top_k -3: %d %s", r.status,
		r.body);
	resp_free(&r);
	REQUIRE(post(&t, "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": "
		   "\"x\"}], \"temperature\": \"hot\"}", &r) == 0 && r.status == 400 &&
		strstr(r.body, "\"param\":\"temperature\""), "temperature hot: %d %s", r.status, r.body);
	resp_free(&r);
	REQUIRE(post(&t, "/v1/chat/completions", "{\"model\": \"stories260K\"}", &r) == 0 &&
		r.status == 400 && strstr(r.body, "\"param\":\"messages\""), "no messages: %d %s",
		r.status, r.body);
	resp_free(&r);
	REQUIRE(post(&t, "/api/generate", "{\"model\": \"stories260K\", \"prompt\": \"x\", "
		   "\"options\": {\"num_predict\": \"many\"}}", &r) == 0 && r.status == 400 &&
		strstr(r.body, "{\"error\":\"options.num_predict: "), "ollama bad option: %d %s",
		r.status, r.body);
	resp_free(&r);
	REQUIRE(post(&t, "/v1/completions", "{\"model\": \"nonesuch\", \"prompt\": \"x\"}", &r) == 0 &&
		r.status == 404 && strstr(r.body, "\"code\":\"model_not_found\""),
		"unknown model: %d %s", r.status, r.body);
	resp_free(&r);
	REQUIRE(post(&t, "/api/chat", "{\"model\": \"nonesuch\", \"messages\": []}", &r) == 0 &&
		r.status == 404 && strstr(r.body, "{\"error\":\""), "ollama unknown model: %d %s",
		r.status, r.body);
	resp_free(&r);
	REQUIRE(post(&t, "/api/pull", "{\"model\": \"llama3\"}", &r) == 0 && r.status == 501 &&
		strstr(r.body, "/api/pull is not implemented"), "pull: %d %s", r.status, r.body);
	resp_free(&r);
	REQUIRE(post(&t, "/v1/images/generations", "{}", &r) == 0 && r.status == 501 &&
		strstr(r.body, "\"code\":\"not_implemented\""), "images: %d %s", r.status, r.body);
	resp_free(&r);
	REQUIRE(request(&t, "GET", "/v1/nothing", NULL, NULL, &r) == 0 && r.status == 404,
		"unknown path: %d", r.status);
	resp_free(&r);
	REQUIRE(request(&t, "GET", "/v1/completions", NULL, NULL, &r) == 0 && r.status == 405,
		"GET completions: %d", r.status);
	resp_free(&r);
	REQUIRE(post(&t, "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 16777216}", &r) == 0 &&
		r.status == 429 && strstr(r.body, "limit"), "over max_new_tokens: %d %s", r.status,
		r.body);
	resp_free(&r);
	/* a web page's request (DNS rebinding, or a cross-origin POST) */
	REQUIRE(request(&t, "GET", "/v1/models", "Host: evil.example:80\r\n", NULL, &r) == 0 &&
		r.status == 403, "foreign Host: %d", r.status);
	resp_free(&r);
	REQUIRE(request(&t, "POST", "/v1/completions", "Origin: http://evil.example\r\n",
		      "{\"prompt\": \"x\"}", &r) == 0 && r.status == 403, "foreign Origin: %d",
		r.status);
	resp_free(&r);
	REQUIRE(request(&t, "GET", "/v1/models", "Origin: http://localhost:3000\r\n", NULL, &r) == 0 &&
		r.status == 200 && strstr(r.body, "\"id\":\"stories260K\""), "models: %d %s", r.status,
		r.body);
	resp_free(&r);

	/* greedy text as `exld run --completion-only` gives it */
	char model[600];
	snprintf(model, sizeof(model), "%s/stories260K.gguf", h_models_dir());
	char *want = h_expected(model, "Once upon a time", 24);
	REQUIRE(want, "exld run failed");
	REQUIRE(post(&t, "/v1/completions", "{\"prompt\": \"Once upon a time\", \"max_tokens\": 24, "
		   "\"temperature\": 0}", &r) == 0 && r.status == 200, "completion: %d", r.status);
	char needle[512];
	snprintf(needle, sizeof(needle), "\"text\":\"%s\"", want);
	REQUIRE(strstr(r.body, needle), "completion %s, want %s", r.body, want);
	free(want);
	resp_free(&r);
	ret = 0;
out:
	resp_free(&r);
	h_stop(&d);
	h_cleanup(&d);
	return ret;
}

/* ---- api key ---- */

static int write_config(struct daemon *d, const char *name, const char *text, char *path,
			size_t len)
{
	snprintf(path, len, "%s/%s", d->dir, name);
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	fputs(text, f);
	return fclose(f);
}

static int test_apikey(void)
{
	struct daemon d;
	struct target t = { .port = free_port() };
	char addr[64], conf[256];
	struct resp r = { 0 };
	int ret = 1;

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", t.port);
	REQUIRE(h_prepare(&d) == 0, "prepare");
	REQUIRE(write_config(&d, "key.conf", "http_api_key = s3cret-key\n", conf, sizeof(conf)) == 0,
		"config");
	const char *more[] = { "--config", conf, NULL };
	REQUIRE(start(&d, addr, more) == 0, "daemon did not start");
	REQUIRE(request(&t, "GET", "/v1/models", NULL, NULL, &r) == 0 && r.status == 401 &&
		strstr(r.body, "\"code\":\"invalid_api_key\""), "no key: %d %s", r.status, r.body);
	resp_free(&r);
	REQUIRE(request(&t, "GET", "/v1/models", "Authorization: Bearer s3cret-kez\r\n", NULL, &r) == 0 &&
		r.status == 401, "wrong key: %d", r.status);
	resp_free(&r);
	REQUIRE(request(&t, "GET", "/v1/models", "Authorization: Bearer s3cret-key-\r\n", NULL, &r) == 0 &&
		r.status == 401, "longer key: %d", r.status);
	resp_free(&r);
	REQUIRE(request(&t, "POST", "/api/generate", NULL, "{}", &r) == 0 && r.status == 401 &&
		strstr(r.body, "{\"error\":\""), "ollama no key: %d %s", r.status, r.body);
	resp_free(&r);
	REQUIRE(request(&t, "GET", "/v1/models", "Authorization: Bearer s3cret-key\r\n", NULL, &r) == 0 &&
		r.status == 200, "right key: %d %s", r.status, r.body);
	resp_free(&r);
	REQUIRE(request(&t, "GET", "/health", NULL, NULL, &r) == 0 && r.status == 200 &&
		strstr(r.body, "\"status\":\"ok\""), "health: %d %s", r.status, r.body);
	resp_free(&r);
	ret = 0;
out:
	resp_free(&r);
	h_stop(&d);
	h_cleanup(&d);
	return ret;
}

/* ---- disconnect ---- */

/* A model whose context holds a long job (32768 positions), and a config
 * (conf) that lets a job ask for 20000 tokens. */
static int make_long_model(struct daemon *d, char *dir, size_t len, char *conf, size_t clen)
{
	char cmd[1024], src[600];

	if (write_config(d, "long.conf", "max_new_tokens = 100000\n", conf, clen))
		return -1;
	snprintf(dir, len, "%s/models", d->dir);
	snprintf(src, sizeof(src), "%s/stories260K.gguf", h_models_dir());
	snprintf(cmd, sizeof(cmd), "mkdir -p %s && ln -s %s %s/ && %s/tests/tools/exld-mkmodel "
		 "--dim 128 --layers 4 --ctx 32768 -o %s/long.gguf >/dev/null", dir, src, dir,
		 getenv("EXLD_BUILDDIR") ? getenv("EXLD_BUILDDIR") : ".", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* Sends a request and hangs up after ms; the job must be gone at once. */
static int hang_up(struct daemon *d, const struct target *t, const char *body, int ms,
		   const char *what)
{
	char head[512];
	int fd = dial(t), jobs = -1;
	uint64_t gen0 = 0, gen = 0;

	if (fd < 0)
		return -1;
	daemon_status(d, &jobs, &gen0, NULL);
	snprintf(head, sizeof(head), "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
		 "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n", strlen(body));
	if (send_all(fd, head, strlen(head)) || send_all(fd, body, strlen(body))) {
		close(fd);
		return -1;
	}
	/* the job runs */
	long end = now_ms() + 10000;
	while (now_ms() < end && (daemon_status(d, &jobs, &gen, NULL) || jobs != 1))
		usleep(10000);
	if (jobs != 1) {
		fprintf(stderr, "%s: the job never ran\n", what);
		close(fd);
		return -1;
	}
	usleep((useconds_t)ms * 1000);
	close(fd);
	end = now_ms() + 3000;
	while (now_ms() < end && (daemon_status(d, &jobs, &gen, NULL) || jobs != 0))
		usleep(10000);
	if (jobs != 0) {
		fprintf(stderr, "%s: %d jobs 3 s after the client hung up\n", what, jobs);
		return -1;
	}
	/* 20000 tokens at this model's speed take far longer than that */
	if (gen - gen0 >= 20000) {
		fprintf(stderr, "%s: the job ran to its end (%llu tokens)\n", what,
			(unsigned long long)(gen - gen0));
		return -1;
	}
	return 0;
}

static int test_disconnect(void)
{
	struct daemon d;
	struct target t = { .port = free_port() };
	char addr[64], dir[512], conf[512];
	int ret = 1;

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", t.port);
	REQUIRE(h_prepare(&d) == 0 && make_long_model(&d, dir, sizeof(dir), conf, sizeof(conf)) == 0,
		"prepare");
	const char *extra[] = { "--http", addr, "--models", dir, "--load", "long", "--config", conf,
				NULL };
	REQUIRE(h_start(&d, NULL, extra) == 0, "daemon did not start");
	REQUIRE(hang_up(&d, &t, "{\"prompt\": \"Once\", \"max_tokens\": 20000, \"ignore_eos\": true}",
		      300, "not streaming") == 0, "not streaming");
	REQUIRE(hang_up(&d, &t, "{\"prompt\": \"Once\", \"max_tokens\": 20000, \"ignore_eos\": true, "
		      "\"stream\": true}", 300, "streaming") == 0, "streaming");
	ret = 0;
out:
	h_stop(&d);
	h_cleanup(&d);
	return ret;
}

/* ---- uid accounting ---- */

static int test_uid(void)
{
	struct daemon d;
	struct target tu = { 0 }, tt = { .port = free_port() };
	char unix_addr[256], tcp_addr[64], conf[256], text[512], sock[200];
	struct resp r = { 0 };
	int ret = 1, jobs = -1, uid_jobs = -1;

	REQUIRE(h_prepare(&d) == 0, "prepare");
	snprintf(sock, sizeof(sock), "%s/http.sock", d.dir);
	tu.path = sock;
	snprintf(unix_addr, sizeof(unix_addr), "unix:%s", sock);
	snprintf(tcp_addr, sizeof(tcp_addr), "127.0.0.1:%d", tt.port);
	/* our uid may run 1 job of at most 8 tokens; TCP clients are uid
	 * 4242, which may run none */
	snprintf(text, sizeof(text), "uid_limit = %u 1 8\nhttp_uid = 4242\nuid_limit = 4242 0 100\n",
		 (unsigned)getuid());
	REQUIRE(write_config(&d, "uid.conf", text, conf, sizeof(conf)) == 0, "config");
	const char *more[] = { "--http", tcp_addr, "--config", conf, NULL };
	REQUIRE(start(&d, unix_addr, more) == 0, "daemon did not start");

	REQUIRE(post(&tu, "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 9}", &r) == 0 &&
		r.status == 429 && strstr(r.body, "uid"), "unix, 9 tokens: %d %s", r.status, r.body);
	REQUIRE(strstr(r.body, "limit of 8"), "unix: not our uid's limit: %s", r.body);
	resp_free(&r);
	REQUIRE(post(&tu, "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 8, "
		   "\"temperature\": 0}", &r) == 0 && r.status == 200, "unix, 8 tokens: %d %s",
		r.status, r.body);
	resp_free(&r);
	REQUIRE(post(&tt, "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 8}", &r) == 0 &&
		r.status == 429 && strstr(r.body, "uid 4242"), "tcp: %d %s", r.status, r.body);
	resp_free(&r);

	/* a running job over the unix listener counts in our uid's jobs */
	int fd = dial(&tu);
	const char *body = "{\"prompt\": \"x\", \"max_tokens\": 8, \"stream\": true}";
	char head[256];
	snprintf(head, sizeof(head), "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
		 "Connection: close\r\nContent-Length: %zu\r\n\r\n%s", strlen(body), body);
	REQUIRE(fd >= 0 && send_all(fd, head, strlen(head)) == 0, "send");
	/* the one job it may have: a second is refused while it runs, or it
	 * is already done; either way the count is ours */
	char *all = read_all(fd, 10000, NULL);
	close(fd);
	REQUIRE(all && strstr(all, "data: [DONE]"), "stream: %s", all ? all : "(nothing)");
	free(all);
	REQUIRE(daemon_status(&d, &jobs, NULL, &uid_jobs) == 0 && jobs == 0 && uid_jobs == 0,
		"after: jobs %d uid_jobs %d", jobs, uid_jobs);
	ret = 0;
out:
	resp_free(&r);
	h_stop(&d);
	h_cleanup(&d);
	return ret;
}

/* ---- garbage ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)rng_state;
}

static const char *const seeds[] = {
	"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 40\r\n\r\n"
	"{\"prompt\": \"x\", \"max_tokens\": 2}      ",
	"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
	"1a\r\n{\"messages\": [{\"role\": \"\r\n19\r\nuser\", \"content\": \"hi\"}]}\r\n0\r\n\r\n",
	"POST /api/generate HTTP/1.1\r\nHost: [::1]\r\nContent-Length: 57\r\n\r\n"
	"{\"prompt\":\"a\",\"stream\":false,\"options\":{\"num_predict\":2}}",
	"GET /v1/models HTTP/1.0\r\n\r\n",
	"GET /api/tags?x=%zz HTTP/1.1\r\nHost: 127.0.0.1\r\nX: " "\x01\xff" "\r\n\r\n",
	"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 21\r\n\r\n{\"content\": \"hello\"}",
	"DELETE /api/delete HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
	"BREW /coffee HTCPCP/1.0\r\n\r\n",
};

static const char *const splices[] = {
	"\r\n", "\r\n\r\n", "Content-Length: 999999999999\r\n", "Transfer-Encoding: chunked\r\n",
	"ffffffffffffffff\r\n", "{", "}", "[", "]", "\"", "\\u0000", "\\ud800", "1e999", "-0",
	"null", "{\"prompt\":[[[[[[[[[[", "Expect: 100-continue\r\n", "Connection: keep-alive\r\n",
	" HTTP/1.1", "\xc0\x80", "\"max_tokens\": 16777216", "\"n\": 99",
};

static int test_garbage(void)
{
	struct daemon d;
	struct target t = { .port = free_port() };
	char addr[64], buf[8192];
	struct resp r = { 0 };
	int ret = 1;

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", t.port);
	REQUIRE(h_prepare(&d) == 0 && start(&d, addr, NULL) == 0, "daemon did not start");
	for (int i = 0; i < 400; i++) {
		const char *s = seeds[rnd() % (sizeof(seeds) / sizeof(seeds[0]))];
		size_t n = strlen(s);

		memcpy(buf, s, n);
		for (int m = 0, k = (int)(rnd() % 4); m < k; m++) {
			size_t at = n ? rnd() % n : 0;
			switch (rnd() % 4) {
			case 0: /* flip a byte */
				if (n)
					buf[at] = (char)(rnd() & 0xff);
				break;
			case 1: { /* insert a piece that means something */
				const char *p = splices[rnd() % (sizeof(splices) / sizeof(splices[0]))];
				size_t pn = strlen(p);
				if (n + pn < sizeof(buf)) {
					memmove(buf + at + pn, buf + at, n - at);
					memcpy(buf + at, p, pn);
					n += pn;
				}
				break;
			}
			case 2: /* truncate */
				n = at;
				break;
			default: /* delete a run */
				if (n) {
					size_t k2 = rnd() % 8;
					if (k2 > n - at)
						k2 = n - at;
					memmove(buf + at, buf + at + k2, n - at - k2);
					n -= k2;
				}
				break;
			}
		}
		int fd = dial(&t);
		REQUIRE(fd >= 0, "input %d: the daemon is gone", i);
		send_all(fd, buf, n);
		if (rnd() % 2)
			shutdown(fd, SHUT_WR);
		/* a kept-alive connection stays open: read what comes, briefly */
		char *got = read_all(fd, rnd() % 3 ? 20 : 300, NULL);
		free(got);
		close(fd);
	}
	/* a body as large as the daemon takes, and one byte more */
	size_t big = (16u << 20) + 1;
	char *huge = malloc(big + 256);
	REQUIRE(huge, "out of memory");
	int hl = snprintf(huge, 256, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
			  "Content-Length: %zu\r\n\r\n", big);
	memset(huge + hl, '[', big);
	int fd = dial(&t);
	REQUIRE(fd >= 0, "dial");
	send_all(fd, huge, (size_t)hl + big);
	free(huge);
	char *got = read_all(fd, 10000, NULL);
	close(fd);
	REQUIRE(got && strstr(got, " 413 "),
		"oversized body: %.200s", got ? got : "");
	free(got);

	REQUIRE(post(&t, "/v1/completions", "{\"prompt\": \"Once upon a time\", \"max_tokens\": 4, "
		   "\"temperature\": 0}", &r) == 0 && r.status == 200, "after the garbage: %d",
		r.status);
	REQUIRE(kill(d.pid, 0) == 0, "the daemon died");
	ret = 0;
out:
	resp_free(&r);
	h_stop(&d);
	h_cleanup(&d);
	return ret;
}

/* ---- drain ---- */

/* SIGTERM while a streamed and a whole answer are being made: each client
 * gets its answer's end, the shutdown error, before the daemon exits. */
static int test_drain(void)
{
	struct daemon d;
	struct target t = { .port = free_port() };
	char addr[64], dir[512], head[2][512], conf[512];
	int ret = 1, jobs = -1, fd[2] = { -1, -1 };
	char *all[2] = { NULL, NULL };
	const char *body[2] = {
		"{\"prompt\": \"Once\", \"max_tokens\": 20000, \"ignore_eos\": true, \"stream\": true}",
		"{\"prompt\": \"Twice\", \"max_tokens\": 20000, \"ignore_eos\": true}",
	};

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", t.port);
	REQUIRE(h_prepare(&d) == 0 && make_long_model(&d, dir, sizeof(dir), conf, sizeof(conf)) == 0,
		"prepare");
	const char *extra[] = { "--http", addr, "--models", dir, "--load", "long", "--config", conf,
				NULL };
	REQUIRE(h_start(&d, NULL, extra) == 0, "daemon did not start");
	for (int i = 0; i < 2; i++) {
		fd[i] = dial(&t);
		snprintf(head[i], sizeof(head[i]), "POST /v1/completions HTTP/1.1\r\n"
			 "Host: 127.0.0.1\r\nContent-Length: %zu\r\n\r\n%s", strlen(body[i]), body[i]);
		REQUIRE(fd[i] >= 0 && send_all(fd[i], head[i], strlen(head[i])) == 0, "send %d", i);
	}
	long end = now_ms() + 10000;
	while (now_ms() < end && (daemon_status(&d, &jobs, NULL, NULL) || jobs != 2))
		usleep(10000);
	REQUIRE(jobs == 2, "the jobs never ran (%d running)", jobs);
	kill(d.pid, SIGTERM);
	for (int i = 0; i < 2; i++) {
		all[i] = read_all(fd[i], 15000, NULL);
		const char *a = all[i] ? all[i] : "";
		size_t n = strlen(a);
		REQUIRE(strstr(a, "\"code\":\"shutdown\""), "answer %d's end: %.300s", i,
			a + (n > 300 ? n - 300 : 0));
	}
	REQUIRE(strstr(all[0], "HTTP/1.1 200 ") == all[0], "the stream's status: %.60s", all[0]);
	REQUIRE(strstr(all[1], "HTTP/1.1 503 ") == all[1], "the whole answer's status: %.60s",
		all[1]);
	int st = h_stop(&d);
	REQUIRE(st == 0, "exit status %d", st);
	ret = 0;
out:
	for (int i = 0; i < 2; i++) {
		free(all[i]);
		if (fd[i] >= 0)
			close(fd[i]);
	}
	h_stop(&d);
	h_cleanup(&d);
	return ret;
}

int main(int argc, char **argv)
{
	const char *which = argc > 1 ? argv[1] : "";

	if (!h_models_dir()) {
		printf("SKIP: no test models (EXLD_MODELS)\n");
		return SKIP;
	}
	signal(SIGPIPE, SIG_IGN);
	if (!strcmp(which, "errors"))
		return test_errors();
	if (!strcmp(which, "apikey"))
		return test_apikey();
	if (!strcmp(which, "disconnect"))
		return test_disconnect();
	if (!strcmp(which, "uid"))
		return test_uid();
	if (!strcmp(which, "garbage"))
		return test_garbage();
	if (!strcmp(which, "drain"))
		return test_drain();
	fprintf(stderr, "usage: test_http errors|apikey|disconnect|uid|garbage|drain\n");
	return 2;
}
