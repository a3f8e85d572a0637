/* Integration tests: a real exld process and real clients (libexlclient
 * and raw sockets).  One subcommand per test; each exits 0 (pass), 1
 * (fail) or 77 (skip: no test models).
 *
 *   activate    started by systemd-socket-activate: serves on the passed
 *               socket and reports READY=1 to NOTIFY_SOCKET
 *   concurrent  16 clients stream different greedy prompts at once (ring
 *               and socket streams); each gets exactly `exld run`'s output
 *   kill        200 clients killed mid-stream: jobs cancelled, memory freed,
 *               others unaffected, the daemon's RSS flat
 *   garbage     bad bytes, truncated and oversized msgpack, wrong types,
 *               unknown ops: errors or closed connections, daemon serves on
 *   drain       WATCHDOG=1 pings; SIGTERM ends running jobs with reason
 *               shutdown, exit 0
 *   admin       load / unload by name with progress, bad names, cancel;
 *               status reports the model's device and memory
 *   limits      per-uid job and token limits from a config file; cancel
 *   poll        the event-loop interface: exl_fd + exl_next(..., 0)
 *   suspend     a client that stops reading: its paused jobs give their KV
 *               back to a waiting job, then finish exactly as `exld run`
 *   stalled     a 64-token request behind 12 clients that never read their
 *               (small) rings finishes within 2 s, with exld run's text
 *   trickle     8 clients reading one record every 100 ms beside normal
 *               requests: their prompts are not computed again and again
 *               (at most once each in a 10 s window), their streams stay exld run's
 *   bigdone     a result too large for the ring: announced in the ring by a
 *               DONE_SOCKET record, delivered on the socket
 *   mixed       exl_generate_many, and a blocking generate on a connection
 *               that streams a submitted job: nothing is lost
 *   logits      return_logits: the rows reach exl_event (also events set
 *               aside by a blocking generate), argmax = the greedy token
 *   features    the hello lists exld's optional features; the library
 *               refuses, unsent, an option of a feature a daemon (a fake
 *               one on a thread: an older exld, or one listing some) did
 *               not list
 *   wakes       a poll-mode ring reader that bumps poll_epoch for every
 *               record and never reads its socket: at most one wake message
 *               waits for it, not one per record
 *   utf8        str fields that are not UTF-8 are refused naming the byte;
 *               byte tokens that make no character (in the prompt ids and
 *               forced into the output) come back as U+FFFD: every str the
 *               daemon sends is valid UTF-8
 *   spec        speculative decoding through libexlclient: jobs drafting
 *               with a loaded model (stories260K for itself) or n-gram
 *               lookup (with a ban, a stop string and a regex), submitted
 *               together with plain ones, give exactly the ids of the same
 *               jobs without drafting; status counts the proposals; a draft
 *               model with another vocabulary, or not loaded, is refused;
 *               beam search: one beam is greedy, four report their score
 */
#include <errno.h>
#include <msgpack.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client/lib/client_internal.h"
#include "exlclient.h"
#include "harness.h"
#include "raw_conn.h"
#include "tests/common/check.h"

#define MODEL "stories260K"

static char model_path[1200];

static const char *const prompts[16] = {
	"Once upon a time", "Lily liked to", "The little dog", "One day, Tom",
	"The sun was", "Sara had a big", "There was a cat", "Ben wanted to",
	"In the park,", "The bird flew", "Mom said", "A boy named Tim",
	"The red ball", "She was very happy", "They played with",
	/* long: in the concurrent test it prefills in chunks of 16 beside the
	 * others' decodes */
	"Once upon a time, there was a little girl named Lily. She loved to play outside in "
	"the park with her friends. One day, she saw a big red ball under a tree. She ran to "
	"the ball and picked it up. Then a little boy came and said he wanted to play too. "
	"Lily smiled and gave him the ball, and they played all day until the sun went down. "
	"The next morning, Lily",
};

/* ---- streaming a job through the library ---- */

/* Streams one job to its end; *text is the concatenated stream. */
static int stream_job(struct exl_client *c, const struct exl_gen_params *p, const char *prompt,
		      char **text, char *reason, size_t reason_len)
{
	uint64_t job;
	size_t len = 0, cap = 256;
	char *buf = malloc(cap);

	*text = NULL;
	if (!buf)
		return -1;
	buf[0] = 0;
	int rc = exl_submit(c, p, prompt, &job);
	if (rc) {
		fprintf(stderr, "submit: %s\n", exl_errmsg(c));
		free(buf);
		return rc;
	}
	for (;;) {
		struct exl_event ev;
		rc = exl_next(c, &ev, 30000);
		if (rc) {
			fprintf(stderr, "next: %s\n", exl_errmsg(c));
			free(buf);
			return rc;
		}
		if (ev.job != job)
			continue;
		if (ev.type == EXL_EVENT_DONE) {
			snprintf(reason, reason_len, "%s", ev.result->stop_reason);
			break;
		}
		while (len + ev.text_len + 1 > cap) {
			char *q = realloc(buf, cap *= 2);
			if (!q) {
				free(buf);
				return -1;
			}
			buf = q;
		}
		memcpy(buf + len, ev.text, ev.text_len);
		len += ev.text_len;
		buf[len] = 0;
	}
	*text = buf;
	return 0;
}

static int connect_to(struct daemon *d, struct exl_client **c, bool ring)
{
	char err[512];
	struct exl_connect_opts o = { .client_name = "test", .no_ring = !ring, .timeout_ms = 30000 };

	int rc = exl_connect(c, d->sock, &o, err, sizeof(err));
	if (rc)
		fprintf(stderr, "connect %s: %s\n", d->sock, err);
	return rc;
}

static void greedy(struct exl_gen_params *p, int n)
{
	exl_gen_params_init(p);
	p->temperature = 0;
	p->max_new_tokens = n;
}

/* The first model's status. */
static int model_status(struct exl_client *c, struct exl_model_status *ms)
{
	struct exl_daemon_status st;
	int rc = exl_status(c, &st);

	if (!rc && st.n_models != 1)
		rc = -1;
	if (!rc)
		*ms = st.models[0];
	free(st.models);
	return rc;
}

/* ---- activate ---- */

static int test_activate(void)
{
	struct daemon d;
	struct exl_client *c = NULL;
	struct exl_gen_params p;
	char *text = NULL, reason[32];
	char sa[] = "/usr/bin/systemd-socket-activate";
	int ret = 1;

	if (access(sa, X_OK)) {
		printf("systemd-socket-activate is not installed; skipping\n");
		return SKIP;
	}
	char *expected = h_expected(model_path, prompts[0], 40);
	if (!expected)
		return 1;
	if (h_prepare(&d))
		goto out;
	char *argv[] = { sa, "-l", d.sock, "-E", "NOTIFY_SOCKET", (char *)h_exld(),
			 "--config", "/dev/null", "--models", (char *)h_models_dir(),
			 "--load", MODEL, "--threads", "1",
			 /* a socket path of its own that must stay unused */
			 "--socket", "/nonexistent/exld.sock", NULL };
	if (h_spawn(&d, argv))
		goto out;
	/* systemd-socket-activate binds, then listens, then starts exld: the
	 * socket file exists a moment before a connect is taken (refused). */
	for (int i = 0; i < 500 && access(d.sock, F_OK); i++)
		usleep(10000);
	{
		struct exl_connect_opts o = { .client_name = "test", .timeout_ms = 30000 };
		char err[512];
		int rc = -1;

		for (int i = 0; i < 500; i++) {
			rc = exl_connect(&c, d.sock, &o, err, sizeof(err));
			if (!rc || !strstr(err, "refused"))
				break;
			usleep(10000);
		}
		if (rc) {
			fprintf(stderr, "connect %s: %s\n", d.sock, err);
			goto out;
		}
	}
	if (!h_wait_notify(&d, "READY=1", 30000)) {
		fprintf(stderr, "FAIL: no READY=1 on NOTIFY_SOCKET; got: %s\n", d.notes);
		goto out;
	}
	if (!strstr(d.notes, "STATUS=")) {
		fprintf(stderr, "FAIL: no STATUS= line before READY=1; got: %s\n", d.notes);
		goto out;
	}
	greedy(&p, 40);
	if (stream_job(c, &p, prompts[0], &text, reason, sizeof(reason)))
		goto out;
	if (strcmp(text, expected)) {
		fprintf(stderr, "FAIL: stream '%s' != exld run '%s'\n", text, expected);
		goto out;
	}
	exl_close(c);
	c = NULL;
	int st = h_stop(&d);
	if (st != 0) {
		fprintf(stderr, "FAIL: exld exited with %d after SIGTERM\n", st);
		goto out;
	}
	printf("socket activation: READY=1, served '%s'\n", text);
	ret = 0;
out:
	exl_close(c);
	free(text);
	free(expected);
	h_cleanup(&d);
	return ret;
}

/* ---- concurrent ---- */

struct worker {
	struct daemon *d;
	pthread_barrier_t *start;    /* every client connected: submit together */
	int i;
	const char *expected;
	int ok;
	char msg[512];
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct exl_client *c;
	struct exl_gen_params p;
	char *text = NULL, reason[32];
	bool ring = w->i % 2 == 0;

	if (connect_to(w->d, &c, ring)) {
		snprintf(w->msg, sizeof(w->msg), "client %d: connect failed", w->i);
		pthread_barrier_wait(w->start);
		return NULL;
	}
	pthread_barrier_wait(w->start);
	greedy(&p, 60);
	p.stream = ring ? EXL_STREAM_MODE_RING : EXL_STREAM_MODE_SOCKET;
	if (stream_job(c, &p, prompts[w->i], &text, reason, sizeof(reason))) {
		snprintf(w->msg, sizeof(w->msg), "client %d: %s", w->i, exl_errmsg(c));
	} else if (strcmp(text, w->expected)) {
		snprintf(w->msg, sizeof(w->msg), "client %d (%s, '%s'): got '%s', exld run gives '%s'",
			 w->i, ring ? "ring" : "socket", prompts[w->i], text, w->expected);
	} else {
		w->ok = 1;
	}
	free(text);
	exl_close(c);
	return NULL;
}

static int test_concurrent(void)
{
	struct daemon d = { .pid = -1, .notify_fd = -1 }; /* for h_cleanup before h_prepare */
	struct worker w[16];
	pthread_t th[16];
	char *expected[16] = { 0 };
	int ret = 1;

	char conf[128];
	for (int i = 0; i < 16; i++)
		if (!(expected[i] = h_expected(model_path, prompts[i], 60)))
			goto out_free;
	if (h_prepare(&d))
		goto out;
	/* prompts in chunks of 16 tokens, so the long one takes several steps
	 * beside the others' decodes (exld run prefills it in one) */
	snprintf(conf, sizeof(conf), "%s/exld.conf", d.dir);
	FILE *f = fopen(conf, "w");
	if (!f)
		goto out;
	fprintf(f, "prefill_chunk = 16\n");
	fclose(f);
	const char *extra[] = { "--config", conf, NULL };
	if (h_start(&d, MODEL, extra))
		goto out;
	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, 16);
	for (int i = 0; i < 16; i++) {
		w[i] = (struct worker){ .d = &d, .start = &start, .i = i, .expected = expected[i] };
		pthread_create(&th[i], NULL, worker_main, &w[i]);
	}
	int ok = 0;
	for (int i = 0; i < 16; i++) {
		pthread_join(th[i], NULL);
		if (!w[i].ok)
			fprintf(stderr, "FAIL: %s\n", w[i].msg);
		ok += w[i].ok;
	}
	pthread_barrier_destroy(&start);
	if (ok != 16)
		goto out;
	/* They ran together: the forward passes carried several tokens each on
	 * average (one stream at a time would be one token a pass, plus the
	 * prompts' chunks). */
	{
		struct exl_client *c = NULL;
		struct exl_model_status ms = { .tokens_generated = 0 };
		int rc = connect_to(&d, &c, false);
		/* the figures are a snapshot the engine takes between steps */
		for (int i = 0; !rc && i < 500; i++) {
			rc = model_status(c, &ms);
			if (rc || ms.tokens_generated == 16 * 60)
				break;
			usleep(10000);
		}
		exl_close(c);
		if (rc) {
			fprintf(stderr, "FAIL: status after the streams\n");
			goto out;
		}
		double per_step = ms.steps ? (double)(ms.tokens_generated + ms.tokens_prompt) /
					     (double)ms.steps : 0.0;
		printf("%llu generated + %llu prompt tokens in %llu forward passes: %.1f a pass\n",
		       (unsigned long long)ms.tokens_generated,
		       (unsigned long long)ms.tokens_prompt, (unsigned long long)ms.steps,
		       per_step);
		if (ms.tokens_generated != 16 * 60 || per_step < 2.0) {
			fprintf(stderr, "FAIL: %llu tokens generated, %.1f tokens a pass: the "
				"streams were not batched\n",
				(unsigned long long)ms.tokens_generated, per_step);
			goto out;
		}
	}
	if (h_stop(&d) != 0) {
		fprintf(stderr, "FAIL: exld did not exit 0 after SIGTERM\n");
		goto out;
	}
	printf("16 concurrent clients: every stream equals exld run's output\n");
	ret = 0;
out:
	h_cleanup(&d);
out_free:
	for (int i = 0; i < 16; i++)
		free(expected[i]);
	return ret;
}

/* ---- kill ---- */

/* Child: streams a job that fills its small ring (it never reads past the
 * first event), tells the parent, and waits to be killed. */
static void killed_client(struct daemon *d, int fd)
{
	struct exl_client *c;
	struct exl_connect_opts o = { .ring_size = 65536, .timeout_ms = 10000 };
	struct exl_gen_params p;
	struct exl_event ev;
	char err[256];
	uint64_t job;

	if (exl_connect(&c, d->sock, &o, err, sizeof(err)))
		_exit(2);
	greedy(&p, 400);
	p.return_probs = 1;
	p.return_top_k = 64; /* ~560 bytes a token: the 64 KiB ring fills */
	if (exl_submit(c, &p, prompts[3], &job) || exl_next(c, &ev, 10000))
		_exit(3);
	if (write(fd, "x", 1) != 1)
		_exit(4);
	pause();
	_exit(0);
}

static int status_of(struct exl_client *c, struct exl_daemon_status *st)
{
	int rc = exl_status(c, st);
	free(st->models);
	st->models = NULL;
	return rc;
}

static int kill_one(struct daemon *d)
{
	int fds[2];
	char b;

	if (pipe(fds) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		close(fds[0]);
		killed_client(d, fds[1]);
	}
	close(fds[1]);
	ssize_t n = read(fds[0], &b, 1);
	close(fds[0]);
	kill(pid, SIGKILL);
	int status;
	waitpid(pid, &status, 0);
	return n == 1 ? 0 : -1;
}

/* Waits until the daemon has no jobs and only `conns` connections. */
static int wait_quiet(struct exl_client *c, int conns, struct exl_daemon_status *st)
{
	for (int i = 0; i < 1000; i++) {
		if (status_of(c, st))
			return -1;
		if (st->jobs == 0 && st->connections == conns)
			return 0;
		usleep(10000);
	}
	return -1;
}

static int test_kill(void)
{
	struct daemon d;
	struct exl_client *c = NULL;
	struct exl_gen_params p;
	struct exl_daemon_status st;
	char *text = NULL, reason[32];
	int ret = 1;
	char *expected = h_expected(model_path, prompts[5], 60);

	if (!expected)
		return 1;
	if (h_prepare(&d) || h_start(&d, MODEL, NULL) || connect_to(&d, &c, true))
		goto out;
	greedy(&p, 60);
	long rss0 = 0;
	for (int i = 0; i < 220; i++) {
		REQUIRE(kill_one(&d) == 0, "client %d never got its first event", i);
		if (i == 19) {
			REQUIRE(wait_quiet(c, 1, &st) == 0, "jobs %d, connections %d after 20 kills",
				st.jobs, st.connections);
			rss0 = h_rss_kib(d.pid);
		}
		if (i % 50 == 49) {
			/* another client, unaffected */
			REQUIRE(stream_job(c, &p, prompts[5], &text, reason, sizeof(reason)) == 0,
				"witness stream failed");
			REQUIRE(!strcmp(text, expected), "witness got '%s', exld run gives '%s'", text,
				expected);
			free(text);
			text = NULL;
		}
	}
	/* The killed clients' jobs were paused on full rings: only the
	 * cancellation on close can have ended them. */
	REQUIRE(wait_quiet(c, 1, &st) == 0, "after 220 kills: %d jobs, %d connections left",
		st.jobs, st.connections);
	long rss1 = h_rss_kib(d.pid);
	printf("RSS after 20 kills %ld KiB, after 220 kills %ld KiB\n", rss0, rss1);
	/* 200 leaked 64 KiB rings alone would be 12.5 MiB.  Under
	 * AddressSanitizer freed memory sits in its quarantine, so RSS says
	 * nothing; LeakSanitizer checks the daemon's exit instead (h_stop). */
	if (H_ASAN)
		printf("AddressSanitizer build: RSS not compared, leaks checked at exit\n");
	else
		REQUIRE(rss1 - rss0 < 4096, "RSS grew by %ld KiB over 200 killed clients", rss1 - rss0);
	exl_close(c);
	c = NULL;
	REQUIRE(h_stop(&d) == 0, "exld did not exit 0 after SIGTERM");
	ret = 0;
out:
	exl_close(c);
	free(text);
	free(expected);
	h_cleanup(&d);
	return ret;
}

/* ---- garbage ---- */

/* Expects an error reply with code; prints its message. */
static int expect_error(struct raw *r, const char *code, const char *what)
{
	msgpack_unpacked up;

	msgpack_unpacked_init(&up);
	int n = raw_read(r, &up, 10000);
	bool ok = n == 1 && str_is(get(&up.data, "op"), "error") && str_is(get(&up.data, "code"), code);
	if (ok) {
		const msgpack_object *m = get(&up.data, "message");
		printf("  %-28s -> %s: %.*s\n", what, code, m ? (int)m->via.str.size : 0,
		       m ? m->via.str.ptr : "");
	} else {
		fprintf(stderr, "FAIL: %s: wanted an error '%s', got %s\n", what, code,
			n == 0 ? "a closed connection" : n < 0 ? "nothing" : "another reply");
		if (n == 1)
			msgpack_object_print(stderr, up.data), fputc('\n', stderr);
	}
	msgpack_unpacked_destroy(&up);
	return ok ? 0 : -1;
}

static int expect_closed(struct raw *r, const char *what)
{
	msgpack_unpacked up;

	msgpack_unpacked_init(&up);
	int n;
	/* an error message may come first */
	while ((n = raw_read(r, &up, 10000)) == 1)
		;
	msgpack_unpacked_destroy(&up);
	if (n != 0) {
		fprintf(stderr, "FAIL: %s: the connection stayed open\n", what);
		return -1;
	}
	printf("  %-28s -> connection closed\n", what);
	return 0;
}

/* A map {op: <op>, ...} built with the packer. */
static void pack_req(msgpack_sbuffer *sb, const char *op, int n_more)
{
	msgpack_packer pk;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 1 + n_more);
	msgpack_pack_str_with_body(&pk, "op", 2);
	msgpack_pack_str_with_body(&pk, op, strlen(op));
}

static int send_sb(struct raw *r, msgpack_sbuffer *sb)
{
	int rc = raw_send(r, sb->data, sb->size);
	msgpack_sbuffer_clear(sb);
	return rc;
}

static int still_serves(struct daemon *d, const char *expected)
{
	struct exl_client *c;
	struct exl_gen_params p;
	char *text = NULL, reason[32];

	if (connect_to(d, &c, true))
		return -1;
	greedy(&p, 40);
	int rc = stream_job(c, &p, prompts[0], &text, reason, sizeof(reason));
	exl_close(c);
	if (rc || strcmp(text, expected)) {
		fprintf(stderr, "FAIL: a good client got '%s' instead of '%s'\n", text ? text : "", expected);
		free(text);
		return -1;
	}
	free(text);
	return 0;
}

static int test_garbage(void)
{
	struct daemon d;
	struct raw r;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	int ret = 1;
	char *expected = h_expected(model_path, prompts[0], 40);

	if (!expected)
		return 1;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	if (h_prepare(&d) || h_start(&d, MODEL, NULL))
		goto out;

	/* One connection collects every recoverable mistake and stays usable. */
	REQUIRE(raw_open(&d, &r) == 0, "connect");
	REQUIRE(raw_send(&r, "GET / HTTP/1.1\r\n", 1) == 0, "send");  /* 'G' is fixint 71 */
	REQUIRE(expect_error(&r, "bad_request", "a bare integer") == 0);
	pack_req(&sb, "fly", 0);
	REQUIRE(send_sb(&r, &sb) == 0 && expect_error(&r, "unknown_op", "op \"fly\"") == 0);
	msgpack_pack_map(&pk, 1);
	msgpack_pack_str_with_body(&pk, "op", 2);
	msgpack_pack_int(&pk, 5);
	REQUIRE(send_sb(&r, &sb) == 0 && expect_error(&r, "bad_request", "op: 5") == 0);
	msgpack_pack_map(&pk, 1);
	msgpack_pack_str_with_body(&pk, "id", 2);
	msgpack_pack_int(&pk, 1);
	REQUIRE(send_sb(&r, &sb) == 0 && expect_error(&r, "bad_request", "no op") == 0);
	pack_req(&sb, "generate", 1);
	msgpack_pack_str_with_body(&pk, "prompt", 6);
	msgpack_pack_int(&pk, 123);
	REQUIRE(send_sb(&r, &sb) == 0 && expect_error(&r, "bad_request", "prompt: 123") == 0);
	pack_req(&sb, "generate", 2);
	msgpack_pack_str_with_body(&pk, "prompt", 6);
	msgpack_pack_str_with_body(&pk, "x", 1);
	msgpack_pack_str_with_body(&pk, "top_k", 5);
	msgpack_pack_double(&pk, 0.5);
	REQUIRE(send_sb(&r, &sb) == 0 && expect_error(&r, "bad_request", "top_k: 0.5") == 0);
	pack_req(&sb, "generate", 2);
	msgpack_pack_str_with_body(&pk, "prompt", 6);
	msgpack_pack_str_with_body(&pk, "x", 1);
	msgpack_pack_str_with_body(&pk, "stop", 4);
	msgpack_pack_array(&pk, 400);
	for (int i = 0; i < 400; i++)
		msgpack_pack_int(&pk, 1);
	REQUIRE(send_sb(&r, &sb) == 0 && expect_error(&r, "too_large", "400 stop conditions") == 0);
	pack_req(&sb, "generate", 2);
	msgpack_pack_str_with_body(&pk, "prompt", 6);
	msgpack_pack_str_with_body(&pk, "x", 1);
	msgpack_pack_str_with_body(&pk, "max_new_tokens", 14);
	msgpack_pack_int(&pk, 100000000);
	REQUIRE(send_sb(&r, &sb) == 0 && expect_error(&r, "bad_request", "max_new_tokens 1e8") == 0);
	pack_req(&sb, "load", 1);
	msgpack_pack_str_with_body(&pk, "model", 5);
	msgpack_pack_str_with_body(&pk, "../../etc/passwd", 16);
	REQUIRE(send_sb(&r, &sb) == 0 && expect_error(&r, "bad_request", "load ../../etc/passwd") == 0);
	pack_req(&sb, "tokenize", 2);
	msgpack_pack_str_with_body(&pk, "model", 5);
	msgpack_pack_str_with_body(&pk, "nosuch", 6);
	msgpack_pack_str_with_body(&pk, "text", 4);
	msgpack_pack_str_with_body(&pk, "a", 1);
	REQUIRE(send_sb(&r, &sb) == 0 && expect_error(&r, "unknown_model", "tokenize, unknown model") == 0);
	pack_req(&sb, "detokenize", 1);
	msgpack_pack_str_with_body(&pk, "ids", 3);
	msgpack_pack_array(&pk, 1);
	msgpack_pack_int(&pk, 99999);
	REQUIRE(send_sb(&r, &sb) == 0 && expect_error(&r, "bad_request", "detokenize id 99999") == 0);
	pack_req(&sb, "cancel", 1);
	msgpack_pack_str_with_body(&pk, "job", 3);
	msgpack_pack_int(&pk, 424242);
	REQUIRE(send_sb(&r, &sb) == 0 && expect_error(&r, "unknown_job", "cancel of no job") == 0);
	/* ... and the same connection still answers */
	pack_req(&sb, "tokenize", 1);
	msgpack_pack_str_with_body(&pk, "text", 4);
	msgpack_pack_str_with_body(&pk, "Once upon a time", 16);
	REQUIRE(send_sb(&r, &sb) == 0, "send");
	{
		msgpack_unpacked up;
		msgpack_unpacked_init(&up);
		REQUIRE(raw_read(&r, &up, 10000) == 1 && str_is(get(&up.data, "op"), "tokenize"),
			"tokenize after the errors");
		const msgpack_object *ids = get(&up.data, "ids");
		REQUIRE(ids && ids->type == MSGPACK_OBJECT_ARRAY && ids->via.array.size == 5 &&
			ids->via.array.ptr[1].via.u64 == 403, "tokenize gave the wrong ids");
		msgpack_unpacked_destroy(&up);
		printf("  the same connection still tokenizes\n");
	}
	raw_close(&r);

	/* Unrecoverable input closes that connection only. */
	static const uint8_t invalid[] = { 0x81, 0xc1 };
	REQUIRE(raw_open(&d, &r) == 0 && raw_send(&r, invalid, sizeof(invalid)) == 0, "send");
	REQUIRE(expect_closed(&r, "byte 0xc1") == 0);
	raw_close(&r);

	uint8_t junk[4096];
	srand(7);
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)rand();
	junk[100] = 0xc1;
	REQUIRE(raw_open(&d, &r) == 0 && raw_send(&r, junk, sizeof(junk)) == 0, "send");
	REQUIRE(expect_closed(&r, "4 KiB of random bytes") == 0);
	raw_close(&r);

	static const uint8_t huge_str[] = { 0x81, 0xa2, 'o', 'p', 0xdb, 0xff, 0xff, 0xff, 0xf0, 'x' };
	REQUIRE(raw_open(&d, &r) == 0 && raw_send(&r, huge_str, sizeof(huge_str)) == 0, "send");
	REQUIRE(expect_error(&r, "too_large", "str32 of 4 GiB") == 0);
	REQUIRE(expect_closed(&r, "  then") == 0);
	raw_close(&r);

	static const uint8_t huge_arr[] = { 0x81, 0xa2, 'o', 'p', 0xdd, 0xff, 0xff, 0xff, 0xff };
	REQUIRE(raw_open(&d, &r) == 0 && raw_send(&r, huge_arr, sizeof(huge_arr)) == 0, "send");
	REQUIRE(expect_error(&r, "too_large", "array32 of 4G items") == 0);
	raw_close(&r);

	uint8_t deep[40];
	for (int i = 0; i < 40; i++)
		deep[i] = 0x91; /* [[[[...]]]] */
	REQUIRE(raw_open(&d, &r) == 0 && raw_send(&r, deep, sizeof(deep)) == 0, "send");
	REQUIRE(expect_error(&r, "too_large", "40 nested arrays") == 0);
	raw_close(&r);

	/* truncated: a map that promises 3 pairs, then the client leaves */
	static const uint8_t trunc[] = { 0x83, 0xa2, 'o', 'p', 0xa6, 's', 't', 'a' };
	REQUIRE(raw_open(&d, &r) == 0 && raw_send(&r, trunc, sizeof(trunc)) == 0, "send");
	shutdown(r.fd, SHUT_WR);
	REQUIRE(expect_closed(&r, "truncated map") == 0);
	raw_close(&r);

	/* a truncated message held open while another client is served */
	REQUIRE(raw_open(&d, &r) == 0 && raw_send(&r, trunc, sizeof(trunc)) == 0, "send");
	REQUIRE(still_serves(&d, expected) == 0, "serving beside a stalled partial message");
	raw_close(&r);

	REQUIRE(still_serves(&d, expected) == 0, "serving after the garbage");
	printf("  a good client still gets the right stream\n");
	REQUIRE(h_stop(&d) == 0, "exld did not exit 0 after SIGTERM");
	ret = 0;
out:
	msgpack_sbuffer_destroy(&sb);
	free(expected);
	h_cleanup(&d);
	return ret;
}

/* ---- drain ---- */

static int test_drain(void)
{
	struct daemon d;
	struct exl_client *c = NULL;
	struct exl_connect_opts o = { .ring_size = 65536, .timeout_ms = 30000 };
	struct exl_gen_params p;
	struct exl_event ev;
	char err[256];
	uint64_t job;
	int ret = 1;

	/* the watchdog as systemd would set it up: pings come while the
	 * engine thread turns */
	setenv("WATCHDOG_USEC", "1000000", 1);
	int started = h_prepare(&d) || h_start(&d, MODEL, NULL);
	unsetenv("WATCHDOG_USEC");
	if (started)
		goto out;
	REQUIRE(h_wait_notify(&d, "WATCHDOG=1", 5000), "no WATCHDOG=1 within 5 s: %s", d.notes);
	REQUIRE(exl_connect(&c, d.sock, &o, err, sizeof(err)) == 0, "connect: %s", err);
	greedy(&p, 400);
	p.return_top_k = 64; /* the ring fills and the job pauses: it runs until drained */
	REQUIRE(exl_submit(c, &p, prompts[1], &job) == 0, "submit: %s", exl_errmsg(c));
	REQUIRE(exl_next(c, &ev, 10000) == 0, "first event: %s", exl_errmsg(c));
	kill(d.pid, SIGTERM);
	const char *reason = NULL;
	for (int i = 0; i < 100000; i++) {
		int rc = exl_next(c, &ev, 10000);
		REQUIRE(rc == 0, "while draining: %s", exl_errmsg(c));
		if (ev.type == EXL_EVENT_DONE) {
			reason = ev.result->stop_reason;
			break;
		}
	}
	REQUIRE(reason && !strcmp(reason, "shutdown"), "the job ended with '%s', not shutdown",
		reason ? reason : "(nothing)");
	int status;
	REQUIRE(waitpid(d.pid, &status, 0) == d.pid, "waitpid");
	d.pid = -1;
	REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exld exited with status %d", status);
	REQUIRE(h_wait_notify(&d, "STOPPING=1", 1000), "no STOPPING=1 notification");
	printf("WATCHDOG=1 pings; SIGTERM: the running job ended with 'shutdown', exld exited 0\n");
	ret = 0;
out:
	exl_close(c);
	h_cleanup(&d);
	return ret;
}

/* ---- admin ---- */

static void on_progress(uint64_t done, uint64_t total, void *user)
{
	uint64_t *last = user;

	if (done <= total)
		last[0] = done, last[1] = total;
}

/* [0] done, [1] total, [2] reports, [3] reports that went backwards,
 * [4] the first report's done */
static void on_progress_steps(uint64_t done, uint64_t total, void *user)
{
	uint64_t *st = user;

	if (!st[2])
		st[4] = done;
	st[3] += done < st[0] || done > total;
	st[0] = done;
	st[1] = total;
	st[2]++;
}

/* A child as uid 65534: load and unload are refused with forbidden. */
static int not_admin_refused(struct daemon *d)
{
	pid_t pid = fork();
	int status;

	if (pid < 0)
		return -1;
	if (pid == 0) {
		struct exl_client *c;
		char err[256];
		struct exl_connect_opts o = { .timeout_ms = 10000 };

		if (setgid(65534) || setuid(65534)) {
			perror("setuid 65534");
			_exit(2);
		}
		if (exl_connect(&c, d->sock, &o, err, sizeof(err))) {
			fprintf(stderr, "uid 65534: connect: %s\n", err);
			_exit(3);
		}
		int rl = exl_load(c, MODEL, NULL, NULL);
		printf("  uid 65534: load -> %s\n", exl_errmsg(c));
		int ru = exl_unload(c, MODEL, false);
		printf("  uid 65534: unload -> %s\n", exl_errmsg(c));
		exl_close(c);
		_exit(rl == EXL_E_FORBIDDEN && ru == EXL_E_FORBIDDEN ? 0 : 4);
	}
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

struct unload_call {
	struct exl_client *c;
	int rc;
	_Atomic int returned;
};

static void *unload_main(void *arg)
{
	struct unload_call *u = arg;

	u->rc = exl_unload(u->c, MODEL, false);
	atomic_store(&u->returned, 1);
	return NULL;
}

/* c2 starts a job that pauses on its small ring; c unloads without cancel:
 * the model shows "unloading" and the unload does not return while the job
 * is paused; once c2 reads, the job runs to max_new_tokens and the unload
 * returns 0. */
static int unload_waits(struct daemon *d, struct exl_client *c, struct exl_client *c2)
{
	struct exl_client *c3 = NULL;
	struct exl_gen_params p;
	struct exl_event ev;
	struct unload_call u = { c, -1, 0 };
	struct exl_model_status ms = { .state = "" };
	pthread_t th;
	bool started = false;
	const char *reason = NULL;
	uint64_t job;
	int ret = 1;

	greedy(&p, 400);
	p.return_top_k = 64;
	REQUIRE(connect_to(d, &c3, true) == 0, "connect");
	REQUIRE(exl_submit(c2, &p, prompts[2], &job) == 0, "submit: %s", exl_errmsg(c2));
	REQUIRE(exl_next(c2, &ev, 10000) == 0, "first event");
	for (int i = 0; i < 500 && ms.jobs_paused != 1; i++) {
		REQUIRE(model_status(c3, &ms) == 0, "status: %s", exl_errmsg(c3));
		usleep(10000);
	}
	REQUIRE(ms.jobs_paused == 1, "the job did not pause");
	REQUIRE(pthread_create(&th, NULL, unload_main, &u) == 0, "thread");
	started = true;
	for (int i = 0; i < 500 && strcmp(ms.state, "unloading"); i++) {
		REQUIRE(model_status(c3, &ms) == 0, "status: %s", exl_errmsg(c3));
		usleep(10000);
	}
	REQUIRE(!strcmp(ms.state, "unloading"), "model state '%s', not unloading", ms.state);
	usleep(300000);
	REQUIRE(!atomic_load(&u.returned), "the unload returned while a job ran (rc %d)", u.rc);
	for (int i = 0; i < 100000 && !reason; i++) {
		REQUIRE(exl_next(c2, &ev, 10000) == 0, "reading the job: %s", exl_errmsg(c2));
		if (ev.type == EXL_EVENT_DONE)
			reason = ev.result->stop_reason;
	}
	REQUIRE(reason && !strcmp(reason, "max_new_tokens"), "the job ended with '%s'",
		reason ? reason : "");
	pthread_join(th, NULL);
	started = false;
	REQUIRE(u.rc == 0, "unload: %d", u.rc);
	ret = 0;
out:
	if (started)
		pthread_join(th, NULL);
	exl_close(c3);
	return ret;
}

/* The status reply's memory fields for a model on the CPU backend, through
 * the library and on the wire: device "cpu", its weights (the mapped file's
 * bytes, as "models" counts them), the KV pool of the default 8192 tokens
 * in RAM, no device memory of its own (device_free / device_total 0). */
static uint64_t u64_of(const msgpack_object *o)
{
	return o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o->via.u64 : UINT64_MAX;
}

static int check_status_memory(struct daemon *d, struct exl_client *c)
{
	static const char *const keys[] = { "weight_bytes", "kv_bytes", "buffer_bytes",
					    "device_free", "device_total" };
	struct exl_daemon_status st;
	struct exl_model_info *ml = NULL;
	const struct exl_model_status *m = NULL;
	uint64_t weights = 0;
	size_t n = 0;
	struct raw r = { .fd = -1 };
	msgpack_sbuffer sb;
	msgpack_unpacked up;
	int ret = 1;

	msgpack_sbuffer_init(&sb);
	msgpack_unpacked_init(&up);
	memset(&st, 0, sizeof(st));
	REQUIRE(exl_models(c, &ml, &n) == 0, "models: %s", exl_errmsg(c));
	for (size_t i = 0; i < n; i++)
		if (!strcmp(ml[i].name, MODEL))
			weights = ml[i].weight_bytes;
	REQUIRE(weights > 0, "models gives no weight bytes for " MODEL);
	REQUIRE(exl_status(c, &st) == 0, "status: %s", exl_errmsg(c));
	for (size_t i = 0; i < st.n_models; i++)
		if (!strcmp(st.models[i].name, MODEL))
			m = &st.models[i];
	REQUIRE(m, MODEL " is not in the status");
	REQUIRE(!strcmp(m->device, "cpu"), "device \"%s\"", m->device);
	REQUIRE(m->weight_bytes == weights, "status weight_bytes %llu, models %llu",
		(unsigned long long)m->weight_bytes, (unsigned long long)weights);
	REQUIRE(m->kv_pages * 32 == 8192 && m->kv_bytes > 0 &&
		m->kv_bytes % ((uint64_t)m->kv_pages * 32) == 0,
		"kv pool: %d pages, %llu bytes", m->kv_pages, (unsigned long long)m->kv_bytes);
	REQUIRE(m->buffer_bytes >= m->kv_bytes, "buffer bytes %llu < kv bytes %llu",
		(unsigned long long)m->buffer_bytes, (unsigned long long)m->kv_bytes);
	REQUIRE(m->device_free == 0 && m->device_total == 0, "cpu device memory %llu of %llu",
		(unsigned long long)m->device_free, (unsigned long long)m->device_total);
	printf("status: %s on %s, weights %llu, kv %llu, buffers %llu bytes\n", m->name,
	       m->device, (unsigned long long)m->weight_bytes, (unsigned long long)m->kv_bytes,
	       (unsigned long long)m->buffer_bytes);

	/* The same on the wire, key by key. */
	REQUIRE(raw_open(d, &r) == 0, "connect");
	pack_req(&sb, "status", 0);
	REQUIRE(send_sb(&r, &sb) == 0 && raw_read(&r, &up, 10000) == 1, "raw status");
	const msgpack_object *models = get(&up.data, "models");
	REQUIRE(models && models->type == MSGPACK_OBJECT_ARRAY && models->via.array.size == 1,
		"status models");
	const msgpack_object *e = &models->via.array.ptr[0];
	REQUIRE(str_is(get(e, "device"), "cpu"), "wire: device");
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		REQUIRE(u64_of(get(e, keys[i])) != UINT64_MAX, "wire: %s missing or not an unsigned "
			"integer", keys[i]);
	REQUIRE(u64_of(get(e, "weight_bytes")) == weights &&
		u64_of(get(e, "kv_bytes")) == m->kv_bytes &&
		u64_of(get(e, "device_free")) == 0 && u64_of(get(e, "device_total")) == 0,
		"wire values differ from the library's");
	ret = 0;
out:
	if (r.fd >= 0)
		raw_close(&r);
	msgpack_unpacked_destroy(&up);
	msgpack_sbuffer_destroy(&sb);
	free(st.models);
	free(ml);
	return ret;
}

static int test_admin(void)
{
	struct daemon d;
	struct exl_client *c = NULL;
	struct exl_model_info *ml = NULL;
	size_t n;
	uint64_t prog[2] = { 0, 0 };
	int ret = 1;

	/* a model directory of its own: the real model and a truncated copy */
	char dir[128], link_to[1200], path[200];
	if (h_prepare(&d))
		goto out;
	snprintf(dir, sizeof(dir), "%s/models", d.dir);
	snprintf(link_to, sizeof(link_to), "%s", model_path);
	snprintf(path, sizeof(path), "%s/" MODEL ".gguf", dir);
	REQUIRE(mkdir(dir, 0700) == 0 && symlink(link_to, path) == 0, "model dir %s", dir);
	snprintf(path, sizeof(path), "%s/broken.gguf", dir);
	{
		FILE *in = fopen(model_path, "rb"), *outf = fopen(path, "wb");
		char buf[100000];
		size_t got = in ? fread(buf, 1, sizeof(buf), in) : 0;
		REQUIRE(in && outf && got == sizeof(buf) && fwrite(buf, 1, got, outf) == got,
			"writing %s", path);
		fclose(in);
		fclose(outf);
	}
	/* a 28 MB model: the load reports progress as it goes */
	{
		char cmd[1600];
		const char *bd = getenv("EXLD_BUILDDIR");
		snprintf(cmd, sizeof(cmd), "%s/tests/tools/exld-mkmodel --dim 512 --layers 8 "
			 "--heads 8 --vocab 1024 --type q8_0 --threads 1 -o %s/big.gguf >/dev/null",
			 bd ? bd : "build", dir);
		REQUIRE(system(cmd) == 0, "%s", cmd);
	}
	/* uid 65534 reaches the socket too (the admin check is what stops it) */
	char conf[200];
	snprintf(conf, sizeof(conf), "%s/exld.conf", d.dir);
	FILE *cf = fopen(conf, "w");
	REQUIRE(cf != NULL, "writing %s", conf);
	fprintf(cf, "socket_mode = 0666\n");
	fclose(cf);
	REQUIRE(chmod(d.dir, 0711) == 0, "chmod %s", d.dir);
	const char *extra[] = { "--models", dir, "--config", conf, NULL };
	if (h_start(&d, NULL, extra) || connect_to(&d, &c, true))
		goto out;
	if (getuid() == 0) {
		REQUIRE(not_admin_refused(&d) == 0, "a non-admin uid could load or unload");
		printf("load and unload from uid 65534 (not an admin) -> forbidden\n");
	} else {
		printf("not root: the non-admin refusal is not checked\n");
	}
	REQUIRE(exl_models(c, &ml, &n) == 0, "models: %s", exl_errmsg(c));
	bool listed = false;
	for (size_t i = 0; i < n; i++)
		listed |= !strcmp(ml[i].name, MODEL) && !strcmp(ml[i].state, "available");
	free(ml);
	REQUIRE(listed, MODEL " is not listed as available");
	struct exl_gen_params p;
	struct exl_result r;
	greedy(&p, 10);
	REQUIRE(exl_generate(c, &p, "Hi", &r) == EXL_E_UNKNOWN_MODEL, "generate with no model loaded");
	REQUIRE(exl_load(c, "nosuch", NULL, NULL) == EXL_E_NOT_FOUND, "load nosuch: %s", exl_errmsg(c));
	REQUIRE(exl_load(c, "../" MODEL, NULL, NULL) == EXL_E_BAD_REQUEST, "load ../: %s", exl_errmsg(c));
	REQUIRE(exl_load(c, "broken", NULL, NULL) == EXL_E_LOAD_FAILED && strstr(exl_errmsg(c), "past the end"),
		"load broken: %s", exl_errmsg(c));
	printf("load of a truncated file -> load_failed: %s\n", exl_errmsg(c));
	REQUIRE(exl_load(c, MODEL, on_progress, prog) == 0, "load: %s", exl_errmsg(c));
	REQUIRE(prog[1] == 1185376 && prog[0] == prog[1], "progress ended at %llu of %llu",
		(unsigned long long)prog[0], (unsigned long long)prog[1]);
	{
		struct stat bst;
		uint64_t big[5] = { 0, 0, 0, 0, 1 };
		char bp[200];
		snprintf(bp, sizeof(bp), "%s/big.gguf", dir);
		REQUIRE(stat(bp, &bst) == 0, "stat %s", bp);
		REQUIRE(exl_load(c, "big", on_progress_steps, big) == 0, "load big: %s", exl_errmsg(c));
		/* reports while it runs (the first at 0; more every so often),
		 * never backwards, the last at the total */
		REQUIRE(big[1] == (uint64_t)bst.st_size && big[0] == big[1] && big[2] >= 2 &&
			big[4] == 0 && !big[3],
			"big: progress %llu of %llu in %llu reports, the first at %llu (went back: "
			"%llu)", (unsigned long long)big[0], (unsigned long long)big[1],
			(unsigned long long)big[2], (unsigned long long)big[4],
			(unsigned long long)big[3]);
		printf("load of a %lld-byte model: %llu progress reports from 0 to the total\n",
		       (long long)bst.st_size, (unsigned long long)big[2]);
		REQUIRE(exl_unload(c, "big", false) == 0, "unload big: %s", exl_errmsg(c));
	}
	REQUIRE(exl_load(c, MODEL, NULL, NULL) == EXL_E_EXISTS, "second load: %s", exl_errmsg(c));
	REQUIRE(check_status_memory(&d, c) == 0, "status memory fields");
	REQUIRE(exl_generate(c, &p, "Hi", &r) == 0, "generate: %s", exl_errmsg(c));
	exl_result_free(&r);
	REQUIRE(exl_unload(c, MODEL, false) == 0, "unload: %s", exl_errmsg(c));
	REQUIRE(exl_unload(c, MODEL, false) == EXL_E_UNKNOWN_MODEL, "second unload");
	printf("load (progress %llu/%llu bytes), generate, unload by name\n",
	       (unsigned long long)prog[0], (unsigned long long)prog[1]);

	/* unload without cancel waits for a running (here: paused) job */
	struct exl_client *c2;
	struct exl_connect_opts o = { .ring_size = 65536, .timeout_ms = 30000 };
	char err[256];
	uint64_t job;
	struct exl_event ev;
	REQUIRE(exl_load(c, MODEL, NULL, NULL) == 0, "reload: %s", exl_errmsg(c));
	REQUIRE(exl_connect(&c2, d.sock, &o, err, sizeof(err)) == 0, "connect: %s", err);
	REQUIRE(unload_waits(&d, c, c2) == 0, "unload without cancel");
	printf("unload without cancel: the model stays until its paused job ends "
	       "(max_new_tokens), then goes\n");
	exl_close(c2);
	c2 = NULL;

	/* unload with cancel: a paused job ends with reason unloaded */
	REQUIRE(exl_load(c, MODEL, NULL, NULL) == 0, "reload: %s", exl_errmsg(c));
	REQUIRE(exl_connect(&c2, d.sock, &o, err, sizeof(err)) == 0, "connect: %s", err);
	greedy(&p, 400);
	p.return_top_k = 64;
	REQUIRE(exl_submit(c2, &p, prompts[2], &job) == 0, "submit: %s", exl_errmsg(c2));
	REQUIRE(exl_next(c2, &ev, 10000) == 0, "first event");
	REQUIRE(exl_unload(c, MODEL, true) == 0, "unload cancel: %s", exl_errmsg(c));
	const char *reason = NULL;
	for (int i = 0; i < 100000 && !reason; i++) {
		REQUIRE(exl_next(c2, &ev, 10000) == 0, "after unload: %s", exl_errmsg(c2));
		if (ev.type == EXL_EVENT_DONE)
			reason = ev.result->stop_reason;
	}
	REQUIRE(reason && !strcmp(reason, "unloaded"), "job ended with '%s'", reason ? reason : "");
	exl_close(c2);
	printf("unload with cancel: the running job ended with 'unloaded'\n");
	REQUIRE(h_stop(&d) == 0, "exld did not exit 0");
	ret = 0;
out:
	exl_close(c);
	h_cleanup(&d);
	return ret;
}

/* ---- limits ---- */

static int test_limits(void)
{
	struct daemon d;
	struct exl_client *c = NULL, *c2 = NULL;
	struct exl_connect_opts o = { .ring_size = 65536, .timeout_ms = 30000 };
	struct exl_gen_params p;
	struct exl_event ev;
	struct exl_result r;
	char err[256], conf[128];
	uint64_t job, job2;
	int ret = 1;

	if (h_prepare(&d))
		goto out;
	snprintf(conf, sizeof(conf), "%s/exld.conf", d.dir);
	FILE *f = fopen(conf, "w");
	REQUIRE(f != NULL, "writing %s", conf);
	fprintf(f, "# limits for the test\nmax_jobs_per_uid = 1\nmax_new_tokens = 200\n"
		"max_connections_per_uid = 2\n");
	fclose(f);
	const char *extra[] = { "--config", conf, NULL };
	if (h_start(&d, MODEL, extra))
		goto out;
	REQUIRE(exl_connect(&c, d.sock, &o, err, sizeof(err)) == 0, "connect: %s", err);
	REQUIRE(exl_connect(&c2, d.sock, &o, err, sizeof(err)) == 0, "connect: %s", err);
	{
		struct exl_client *c3 = NULL;
		int rc = exl_connect(&c3, d.sock, &o, err, sizeof(err));
		REQUIRE(rc == EXL_E_LIMIT && c3 == NULL && strstr(err, "max_connections_per_uid"),
			"a third connection of the uid: rc %d: %s", rc, err);
		printf("  a third connection of the uid -> limit: %s\n", err);
	}
	greedy(&p, 201);
	REQUIRE(exl_submit(c, &p, prompts[0], &job) == EXL_E_LIMIT, "max_new_tokens 201 over 200: %s",
		exl_errmsg(c));
	printf("  max_new_tokens over the limit -> limit: %s\n", exl_errmsg(c));
	/* no max_new_tokens: the default (256) is cut to the limit, not refused */
	exl_gen_params_init(&p);
	p.temperature = 0;
	p.ignore_eos = 1;
	REQUIRE(exl_generate(c, &p, prompts[0], &r) == 0, "a job with the default length: %s",
		exl_errmsg(c));
	REQUIRE(r.new_tokens == 200 && !strcmp(r.stop_reason, "max_new_tokens"),
		"the default length under a limit of 200: %d tokens, '%s'", r.new_tokens,
		r.stop_reason);
	exl_result_free(&r);
	printf("  no max_new_tokens under a limit of 200 -> 200 tokens\n");
	greedy(&p, 200);
	p.return_top_k = 64; /* pauses on the small ring: stays running */
	REQUIRE(exl_submit(c, &p, prompts[0], &job) == 0, "first job: %s", exl_errmsg(c));
	REQUIRE(exl_next(c, &ev, 10000) == 0, "first event");
	/* the same uid on another connection */
	REQUIRE(exl_submit(c2, &p, prompts[1], &job2) == EXL_E_LIMIT, "second job of the uid: %s",
		exl_errmsg(c2));
	printf("  a second concurrent job of the uid -> limit: %s\n", exl_errmsg(c2));
	REQUIRE(exl_cancel(c, job) == 0, "cancel: %s", exl_errmsg(c));
	const char *reason = NULL;
	for (int i = 0; i < 100000 && !reason; i++) {
		REQUIRE(exl_next(c, &ev, 10000) == 0, "after cancel: %s", exl_errmsg(c));
		if (ev.type == EXL_EVENT_DONE)
			reason = ev.result->stop_reason;
	}
	REQUIRE(reason && !strcmp(reason, "cancelled"), "cancelled job ended with '%s'",
		reason ? reason : "");
	REQUIRE(exl_cancel(c, job) == EXL_E_UNKNOWN_JOB, "cancel of an ended job");
	greedy(&p, 20);
	REQUIRE(exl_generate(c2, &p, prompts[1], &r) == 0, "the uid may run a job again: %s",
		exl_errmsg(c2));
	exl_result_free(&r);
	printf("  cancel -> 'cancelled'; then the uid runs again\n");
	/* a closed connection no longer counts (the daemon sees the close in
	 * its own time) */
	exl_close(c2);
	c2 = NULL;
	int rc3 = -1;
	for (int i = 0; i < 200 && rc3; i++) {
		rc3 = exl_connect(&c2, d.sock, &o, err, sizeof(err));
		if (rc3)
			usleep(10000);
	}
	REQUIRE(rc3 == 0, "connecting after closing one: %s", err);
	printf("  after closing one, the uid connects again\n");
	REQUIRE(h_stop(&d) == 0, "exld did not exit 0");
	ret = 0;
out:
	exl_close(c);
	exl_close(c2);
	h_cleanup(&d);
	return ret;
}

/* ---- poll: the event-loop interface ---- */

static int test_poll(void)
{
	struct daemon d;
	struct exl_client *c = NULL;
	struct exl_gen_params p;
	uint64_t job;
	size_t len = 0;
	char text[4096] = "";
	int ret = 1, waits = 0;
	char *expected = h_expected(model_path, prompts[4], 60);

	if (!expected)
		return 1;
	if (h_prepare(&d) || h_start(&d, MODEL, NULL) || connect_to(&d, &c, true))
		goto out;
	greedy(&p, 60);
	REQUIRE(exl_submit(c, &p, prompts[4], &job) == 0, "submit: %s", exl_errmsg(c));
	for (bool done = false; !done;) {
		struct exl_event ev;
		int rc = exl_next(c, &ev, 0);
		if (rc == EXL_E_TIMEOUT) {
			struct pollfd pf = { .fd = exl_fd(c), .events = POLLIN };
			REQUIRE(poll(&pf, 1, 10000) == 1, "exl_fd never became readable");
			waits++;
			continue;
		}
		REQUIRE(rc == 0, "next: %s", exl_errmsg(c));
		if (ev.type == EXL_EVENT_DONE) {
			done = true;
		} else {
			REQUIRE(len + ev.text_len < sizeof(text), "too much text");
			memcpy(text + len, ev.text, ev.text_len);
			len += ev.text_len;
			text[len] = 0;
		}
	}
	REQUIRE(!strcmp(text, expected), "poll-mode stream '%s' != exld run '%s'", text, expected);
	printf("event-loop reading (%d polls on exl_fd): the stream equals exld run's output\n", waits);
	REQUIRE(h_stop(&d) == 0, "exld did not exit 0");
	ret = 0;
out:
	exl_close(c);
	free(expected);
	h_cleanup(&d);
	return ret;
}

/* ---- suspend: a client that stops reading ---- */

/* The model's counters, read off the wire: tokens_prompt, and
 * tokens_recomputed (-1 when this exld does not report it). */
static int wire_counters(struct daemon *d, uint64_t *prompt, int64_t *recomputed)
{
	struct raw r = { .fd = -1 };
	msgpack_sbuffer sb;
	msgpack_unpacked up;
	int ret = -1;

	msgpack_sbuffer_init(&sb);
	msgpack_unpacked_init(&up);
	if (raw_open(d, &r))
		goto out;
	pack_req(&sb, "status", 0);
	if (send_sb(&r, &sb) || raw_read(&r, &up, 10000) != 1)
		goto out;
	const msgpack_object *models = get(&up.data, "models");
	if (!models || models->type != MSGPACK_OBJECT_ARRAY || models->via.array.size != 1)
		goto out;
	const msgpack_object *m = &models->via.array.ptr[0];
	const msgpack_object *rc = get(m, "tokens_recomputed");

	*prompt = u64_of(get(m, "tokens_prompt"));
	*recomputed = rc ? (int64_t)u64_of(rc) : -1;
	ret = *prompt == UINT64_MAX ? -1 : 0;
out:
	if (r.fd >= 0)
		raw_close(&r);
	msgpack_unpacked_destroy(&up);
	msgpack_sbuffer_destroy(&sb);
	return ret;
}

struct text_buf {
	char *s;
	size_t len, cap;
};

static int text_add(struct text_buf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = (b->len + n + 1) * 2;
		char *q = realloc(b->s, cap);
		if (!q)
			return -1;
		b->s = q;
		b->cap = cap;
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = 0;
	return 0;
}

/* Client A reserves the whole KV pool with two long jobs and stops
 * reading; client B's job must still run: A's jobs give up their
 * reservations (after suspend_after_ms), and since B needs more pages than
 * are free beside the ones they keep, one of them gives its pages back
 * too.  When A reads again its jobs go on to exactly the text they would
 * have had: the reclaimed one maps back what the prefix cache kept and
 * recomputes the rest from its tokens. */
static int test_suspend(void)
{
	enum { N_A = 2, N_LONG = 500, N_B = 1015 };
	struct daemon d;
	struct exl_client *a = NULL, *b = NULL;
	struct exl_connect_opts oa = { .ring_size = 65536, .timeout_ms = 30000 };
	struct exl_connect_opts ob = { .timeout_ms = 20000 };
	struct exl_gen_params p;
	struct exl_model_status ms;
	struct exl_result r = { 0 };
	struct text_buf got[N_A] = { { 0 } };
	char *want[N_A] = { NULL }, *want_b = NULL, err[256], conf[128];
	uint64_t job[N_A], prompt_tokens;
	int64_t recomputed;
	bool done[N_A] = { false };
	int ret = 1, n_done = 0;

	if (h_prepare(&d))
		goto out;
	for (int i = 0; i < N_A; i++) {
		want[i] = h_expected(model_path, prompts[i], N_LONG);
		REQUIRE(want[i] != NULL, "exld run on '%s'", prompts[i]);
	}
	want_b = h_expected(model_path, prompts[5], N_B);
	REQUIRE(want_b != NULL, "exld run on '%s'", prompts[5]);
	snprintf(conf, sizeof(conf), "%s/exld.conf", d.dir);
	FILE *f = fopen(conf, "w");
	REQUIRE(f != NULL, "writing %s", conf);
	/* 32 pages of 32: two jobs of ~505 positions reserve all of them;
	 * paused, they hold a few each, and B reserves all 32 */
	fprintf(f, "kv_tokens = 1024\nkv_page_size = 32\nsuspend_after_ms = 300\n");
	fclose(f);
	const char *extra[] = { "--config", conf, NULL };
	if (h_start(&d, MODEL, extra))
		goto out;
	REQUIRE(exl_connect(&a, d.sock, &oa, err, sizeof(err)) == 0, "connect: %s", err);
	REQUIRE(exl_connect(&b, d.sock, &ob, err, sizeof(err)) == 0, "connect: %s", err);
	greedy(&p, N_LONG);
	p.return_top_k = 64; /* fills the 64 KiB ring long before the end */
	for (int i = 0; i < N_A; i++)
		REQUIRE(exl_submit(a, &p, prompts[i], &job[i]) == 0, "submit: %s", exl_errmsg(a));
	for (int i = 0; i < 1000; i++) {
		REQUIRE(model_status(b, &ms) == 0, "status: %s", exl_errmsg(b));
		if (ms.jobs_paused == N_A)
			break;
		usleep(10000);
	}
	REQUIRE(ms.jobs_paused == N_A, "A's jobs never paused (%d paused, %d running)",
		ms.jobs_paused, ms.jobs_running);
	printf("  A's %d jobs paused on its full ring; %d of %d KV pages free\n", N_A,
	       ms.kv_pages_free, ms.kv_pages);

	/* B: blocked until A's jobs give up their reservations and pages */
	greedy(&p, N_B);
	REQUIRE(exl_generate(b, &p, prompts[5], &r) == 0,
		"B's job did not run while A held the pool: %s", exl_errmsg(b));
	REQUIRE(!strcmp(r.text, want_b), "B's text '%s' != exld run '%s'", r.text, want_b);
	/* the figures are a snapshot the engine takes between steps */
	for (int i = 0; i < 500; i++) {
		REQUIRE(model_status(b, &ms) == 0, "status: %s", exl_errmsg(b));
		if (ms.jobs_queued == 0)
			break;
		usleep(10000);
	}
	REQUIRE(ms.jobs_paused == N_A && ms.jobs_queued == 0, "after B: %d paused, %d queued",
		ms.jobs_paused, ms.jobs_queued);
	printf("  B's job ran while A did not read (%d of %d KV pages free after it)\n",
	       ms.kv_pages_free, ms.kv_pages);

	/* A reads again: its jobs map or recompute their KV and finish */
	while (n_done < N_A) {
		struct exl_event ev;
		int i;

		REQUIRE(exl_next(a, &ev, 30000) == 0, "A: next: %s", exl_errmsg(a));
		for (i = 0; i < N_A && ev.job != job[i]; i++)
			;
		REQUIRE(i < N_A && !done[i], "A: an event for job %llu", (unsigned long long)ev.job);
		if (ev.type == EXL_EVENT_DONE) {
			REQUIRE(!strcmp(ev.result->stop_reason, "max_new_tokens"),
				"A's job %d ended with '%s'", i, ev.result->stop_reason);
			done[i] = true;
			n_done++;
			continue;
		}
		REQUIRE(text_add(&got[i], ev.text, ev.text_len) == 0, "out of memory");
	}
	for (int i = 0; i < N_A; i++)
		REQUIRE(got[i].s && !strcmp(got[i].s, want[i]),
			"A's job %d after its suspension:\n'%s'\n!= exld run\n'%s'", i,
			got[i].s ? got[i].s : "", want[i]);
	/* B reserved the whole pool, so it ran only once A's jobs gave their
	 * pages back; how many positions they recomputed depends on what of
	 * their pages B (which may stop at EOS) left in the prefix cache. */
	REQUIRE(wire_counters(&d, &prompt_tokens, &recomputed) == 0, "status");
	printf("  A read again: both jobs finished with exld run's %d-token text (%lld positions "
	       "recomputed)\n", N_LONG, (long long)recomputed);
	REQUIRE(h_stop(&d) == 0, "exld did not exit 0");
	ret = 0;
out:
	exl_result_free(&r);
	exl_close(a);
	exl_close(b);
	for (int i = 0; i < N_A; i++) {
		free(want[i]);
		free(got[i].s);
	}
	free(want_b);
	h_cleanup(&d);
	return ret;
}

/* ---- stalled and trickle: readers that stop reading must not delay
 * everyone else (issue 14) ---- */

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A wall-time bound for these tests, and their window.  The bounds catch
 * a job that waits for other clients' timeouts (a second a round of them),
 * not a slow forward pass.  The sanitizer build is unoptimized as well as
 * instrumented: its forward pass is some 30 times slower, so a round of
 * stalled jobs filling their rings (~120 tokens each) takes over a second
 * there by itself, and the suite runs on loaded 2-core machines.  It gets
 * 10 times the time: there the bound only catches gross waits, and the
 * release build's is the real check. */
static double time_bound(double seconds)
{
	return H_ASAN ? 10.0 * seconds : seconds;
}

/* The pools.  A stalled job reserves its whole context (2048 positions, 64
 * pages of 32): 4096 positions hold two at a time, as in the issue's
 * figures (5.5 s behind 12, 28 s behind 60: a second a round of two).  A
 * trickle job reserves ~62 pages: 8192 positions (the CPU default) hold
 * four of the eight. */
#define STALL_CONF "kv_tokens = 4096\nkv_page_size = 32\n"
#define TRICKLE_CONF "kv_tokens = 8192\nkv_page_size = 32\n"

/* Clients that ask for a long generation with the smallest ring and never
 * read: their jobs fill the ring (64 candidates a token: ~550 bytes, so
 * ~120 tokens) and pause.  A normal 64-token request submitted behind 12
 * of them must not wait for their rounds: paused jobs give up their slot
 * and reservation as soon as it waits. */
static int test_stalled(void)
{
	enum { N_STALLED = 12, N_NORMAL = 64 };
	struct daemon d;
	struct exl_client *stalled[N_STALLED] = { NULL }, *c = NULL;
	struct exl_connect_opts os = { .ring_size = EXL_RING_SIZE_MIN, .timeout_ms = 30000 };
	struct exl_connect_opts on = { .timeout_ms = 60000 };
	struct exl_gen_params p;
	struct exl_model_status ms;
	struct exl_result r = { 0 };
	char *want = NULL, err[256], conf[128];
	int ret = 1;

	if (h_prepare(&d))
		goto out;
	want = h_expected(model_path, prompts[0], N_NORMAL);
	REQUIRE(want != NULL, "exld run on '%s'", prompts[0]);
	snprintf(conf, sizeof(conf), "%s/exld.conf", d.dir);
	FILE *f = fopen(conf, "w");
	REQUIRE(f != NULL, "writing %s", conf);
	fputs(STALL_CONF, f);
	fclose(f);
	const char *extra[] = { "--config", conf, NULL };
	if (h_start(&d, MODEL, extra))
		goto out;
	REQUIRE(exl_connect(&c, d.sock, &on, err, sizeof(err)) == 0, "connect: %s", err);
	greedy(&p, 2000);
	p.ignore_eos = 1;
	p.return_top_k = 64;
	for (int i = 0; i < N_STALLED; i++) {
		uint64_t job;

		REQUIRE(exl_connect(&stalled[i], d.sock, &os, err, sizeof(err)) == 0, "connect: %s",
			err);
		REQUIRE(exl_submit(stalled[i], &p, prompts[1 + i], &job) == 0, "submit: %s",
			exl_errmsg(stalled[i]));
	}

	/* Right behind them: the normal request. */
	greedy(&p, N_NORMAL);
	double t0 = mono_s();
	REQUIRE(exl_generate(c, &p, prompts[0], &r) == 0, "the normal request: %s", exl_errmsg(c));
	double took = mono_s() - t0;
	REQUIRE(model_status(c, &ms) == 0, "status: %s", exl_errmsg(c));
	printf("  a %d-token request behind %d stalled readers: %.2f s (queued %.2f s); then %d "
	       "paused, %d of them suspended, %d queued\n", N_NORMAL, N_STALLED, took,
	       r.time_queued, ms.jobs_paused, ms.jobs_suspended, ms.jobs_queued);
	REQUIRE(!strcmp(r.text, want), "its text '%s' != exld run '%s'", r.text, want);
	REQUIRE(took < time_bound(2.0), "it took %.2f s (bound %.1f s)", took, time_bound(2.0));
	/* gone, so the drain at SIGTERM does not wait for them to read */
	for (int i = 0; i < N_STALLED; i++) {
		exl_close(stalled[i]);
		stalled[i] = NULL;
	}
	REQUIRE(h_stop(&d) == 0, "exld did not exit 0");
	ret = 0;
out:
	exl_result_free(&r);
	exl_close(c);
	for (int i = 0; i < N_STALLED; i++)
		exl_close(stalled[i]);
	free(want);
	h_cleanup(&d);
	return ret;
}

/* A client that reads one record every 100 ms: slower than its job makes
 * them, so the job is paused nearly all the time.  In the sanitizer build
 * (time_bound's reasons) a job may make fewer than 10 tokens a second, so
 * the reader waits 300 ms there: a reader that keeps up never pauses its
 * job, which then holds its reservation, and the queue behind it, to its
 * end. */
struct trickle {
	struct daemon *d;
	char prompt[1024];
	int prompt_tokens;
	char *want;              /* exld run's greedy text for prompt */
	struct text_buf got;
	atomic_int events;
	atomic_bool *stop;
	char msg[512];
};

static void *trickle_main(void *arg)
{
	struct trickle *t = arg;
	struct exl_connect_opts o = { .ring_size = EXL_RING_SIZE_MIN, .timeout_ms = 30000 };
	struct exl_client *c = NULL;
	struct exl_gen_params p;
	int32_t *ids = NULL;
	size_t n_ids = 0;
	uint64_t job;
	char err[256];

	if (exl_connect(&c, t->d->sock, &o, err, sizeof(err))) {
		snprintf(t->msg, sizeof(t->msg), "connect: %s", err);
		return NULL;
	}
	if (exl_tokenize(c, NULL, t->prompt, strlen(t->prompt), -1, false, &ids, &n_ids)) {
		snprintf(t->msg, sizeof(t->msg), "tokenize: %s", exl_errmsg(c));
		goto out;
	}
	t->prompt_tokens = (int)n_ids;
	greedy(&p, 1700);
	p.ignore_eos = 1;
	p.return_top_k = 64;
	if (exl_submit(c, &p, t->prompt, &job)) {
		snprintf(t->msg, sizeof(t->msg), "submit: %s", exl_errmsg(c));
		goto out;
	}
	while (!atomic_load(t->stop)) {
		struct exl_event ev;
		int rc = exl_next(c, &ev, 200);

		if (rc == EXL_E_TIMEOUT)
			continue;
		if (rc) {
			snprintf(t->msg, sizeof(t->msg), "next: %s", exl_errmsg(c));
			break;
		}
		if (ev.type == EXL_EVENT_DONE) {
			snprintf(t->msg, sizeof(t->msg), "the job ended (%s)",
				 ev.result->stop_reason);
			break;
		}
		if (text_add(&t->got, ev.text, ev.text_len)) {
			snprintf(t->msg, sizeof(t->msg), "out of memory");
			break;
		}
		atomic_fetch_add(&t->events, 1);
		usleep(H_ASAN ? 300000 : 100000);
	}
out:
	free(ids);
	exl_close(c);
	return NULL;
}

/* Back-to-back normal requests while the trickle readers read. */
struct normal_load {
	struct daemon *d;
	const char *want;
	atomic_bool *stop;
	int done;
	atomic_uint_fast64_t prompt_computed; /* prompt tokens not taken from the cache */
	double worst;
	double worst_queued;        /* the daemon's time_queued of the slowest */
	char msg[512];
};

static void *normal_main(void *arg)
{
	struct normal_load *n = arg;
	struct exl_connect_opts o = { .timeout_ms = 60000 };
	struct exl_client *c = NULL;
	struct exl_gen_params p;
	char err[256];

	if (exl_connect(&c, n->d->sock, &o, err, sizeof(err))) {
		snprintf(n->msg, sizeof(n->msg), "connect: %s", err);
		return NULL;
	}
	greedy(&p, 64);
	while (!atomic_load(n->stop)) {
		struct exl_result r;
		double t0 = mono_s();

		if (exl_generate(c, &p, prompts[0], &r)) {
			snprintf(n->msg, sizeof(n->msg), "generate: %s", exl_errmsg(c));
			break;
		}
		double took = mono_s() - t0, queued = r.time_queued;
		bool same = !strcmp(r.text, n->want);

		atomic_fetch_add(&n->prompt_computed, (uint64_t)(r.prompt_tokens - r.cached_tokens));
		exl_result_free(&r);
		if (!same) {
			snprintf(n->msg, sizeof(n->msg), "a normal request's text differs from exld "
				 "run's");
			break;
		}
		n->done++;
		if (took > n->worst) {
			n->worst = took;
			n->worst_queued = queued;
		}
	}
	exl_close(c);
	return NULL;
}

/* Eight clients read one record every 100 ms (each token fills the ring
 * again at once, so their jobs are paused nearly all the time) and the
 * eight jobs' reservations do not all fit the pool; once all stream, a
 * ninth client sends normal requests for a fixed window.  The prompt
 * tokens the daemon computes beyond each prompt's first computation (and
 * the normal requests' own) are what the trickle readers cost in
 * recomputation: each prompt may be recomputed at most once in all.  The
 * streamed texts stay exld run's. */
static int test_trickle(void)
{
	enum { N_TRICKLE = 8, N_WANT = 200 };
	const int window_s = H_ASAN ? 20 : 10; /* time_bound's reasons */
	struct daemon d;
	struct trickle t[N_TRICKLE];
	struct normal_load nl = { 0 };
	pthread_t th[N_TRICKLE], nth;
	bool started[N_TRICKLE] = { false }, nstarted = false;
	atomic_bool stop, stop_normal;
	char *want_normal = NULL, conf[128];
	uint64_t prompt0 = 0, prompt1 = 0;
	int64_t rec0 = -1, rec1 = -1;
	int ret = 1;

	atomic_init(&stop, false);
	atomic_init(&stop_normal, false);
	memset(t, 0, sizeof(t));
	if (h_prepare(&d))
		goto out;
	want_normal = h_expected(model_path, prompts[0], 64);
	REQUIRE(want_normal != NULL, "exld run on '%s'", prompts[0]);
	for (int i = 0; i < N_TRICKLE; i++) {
		/* distinct from the first page on: no prefix is shared */
		snprintf(t[i].prompt, sizeof(t[i].prompt), "%s %s %s", prompts[1 + i], prompts[15],
			 prompts[15]);
		t[i].d = &d;
		t[i].stop = &stop;
		atomic_init(&t[i].events, 0);
		t[i].want = h_expected(model_path, t[i].prompt, N_WANT);
		REQUIRE(t[i].want != NULL, "exld run on trickle prompt %d", i);
	}
	snprintf(conf, sizeof(conf), "%s/exld.conf", d.dir);
	FILE *f = fopen(conf, "w");
	REQUIRE(f != NULL, "writing %s", conf);
	fputs(TRICKLE_CONF, f);
	fclose(f);
	const char *extra[] = { "--config", conf, NULL };
	if (h_start(&d, MODEL, extra))
		goto out;
	REQUIRE(wire_counters(&d, &prompt0, &rec0) == 0, "status");
	nl = (struct normal_load){ .d = &d, .want = want_normal, .stop = &stop_normal };
	atomic_init(&nl.prompt_computed, 0);
	for (int i = 0; i < N_TRICKLE; i++) {
		REQUIRE(pthread_create(&th[i], NULL, trickle_main, &t[i]) == 0, "thread");
		started[i] = true;
	}
	/* Four fit at a time: the others start as the first four fill their
	 * rings and are suspended.  Then the normal requests come. */
	double t0 = mono_s();
	int streaming = 0;

	while (streaming < N_TRICKLE && mono_s() - t0 < time_bound(10.0)) {
		usleep(50000);
		streaming = 0;
		for (int i = 0; i < N_TRICKLE; i++)
			streaming += atomic_load(&t[i].events) > 0;
	}
	REQUIRE(streaming == N_TRICKLE, "%d of %d trickle jobs streamed within %.0f s", streaming,
		N_TRICKLE, time_bound(10.0));
	printf("  the %d trickle jobs streamed after %.2f s\n", N_TRICKLE, mono_s() - t0);
	REQUIRE(pthread_create(&nth, NULL, normal_main, &nl) == 0, "thread");
	nstarted = true;
	sleep((unsigned)window_s);
	/* The normal requests stop, so that what they computed is known, and
	 * the status (a snapshot the engine takes every 100 ms) catches up. */
	atomic_store(&stop_normal, true);
	pthread_join(nth, NULL);
	nstarted = false;
	usleep(300000);
	REQUIRE(wire_counters(&d, &prompt1, &rec1) == 0, "status");
	/* which trickle prompts were computed: those whose job streamed */
	uint64_t normal = atomic_load(&nl.prompt_computed), first = 0;
	int running = 0, least = -1;

	for (int i = 0; i < N_TRICKLE; i++) {
		int ev = atomic_load(&t[i].events);

		if (ev > 0) {
			first += (uint64_t)t[i].prompt_tokens;
			running++;
		}
		if (least < 0 || ev < least)
			least = ev;
	}
	atomic_store(&stop, true);
	for (int i = 0; i < N_TRICKLE; i++)
		if (started[i])
			pthread_join(th[i], NULL);
	memset(started, 0, sizeof(started));

	int64_t again = (int64_t)(prompt1 - prompt0) - (int64_t)first - (int64_t)normal;
	printf("  then %d s: %d trickle readers (%d streaming, the slowest read %d records), %d normal "
	       "requests (the slowest %.2f s, %.2f s of it queued)\n", window_s, N_TRICKLE, running,
	       least, nl.done, nl.worst, nl.worst_queued);
	printf("  prompt tokens computed: %llu; first computations %llu, normal requests %llu: "
	       "%lld recomputed\n", (unsigned long long)(prompt1 - prompt0),
	       (unsigned long long)first, (unsigned long long)normal,
	       (long long)again);
	if (rec1 >= 0)
		printf("  tokens_recomputed (prompt and output positions computed again): %lld\n",
		       (long long)(rec1 - rec0));
	for (int i = 0; i < N_TRICKLE; i++) {
		REQUIRE(!t[i].msg[0], "trickle reader %d: %s", i, t[i].msg);
		size_t n = t[i].got.len < strlen(t[i].want) ? t[i].got.len : strlen(t[i].want);

		REQUIRE(n == 0 || !memcmp(t[i].got.s, t[i].want, n),
			"trickle reader %d's stream '%s' is not exld run's '%s'", i,
			t[i].got.s ? t[i].got.s : "", t[i].want);
	}
	REQUIRE(!nl.msg[0], "normal requests: %s", nl.msg);
	REQUIRE(running == N_TRICKLE, "%d of %d trickle jobs streamed", running, N_TRICKLE);
	REQUIRE(nl.done > 0 && nl.worst < time_bound(2.0),
		"%d normal requests, the slowest %.2f s (bound %.1f s)", nl.done, nl.worst,
		time_bound(2.0));
	int64_t prompts_total = 0;

	for (int i = 0; i < N_TRICKLE; i++)
		prompts_total += t[i].prompt_tokens;
	REQUIRE(again <= prompts_total, "%lld prompt tokens recomputed: more than each trickle "
		"prompt once (%lld)", (long long)again, (long long)prompts_total);
	/* Output positions too: the jobs are suspended nearly every time
	 * they pause, and a job that gave its pages back at each suspension
	 * would recompute part of a page every 100 ms (some 10,000 positions
	 * in 10 s).  Pages are reclaimed only when a resumed job's reservation
	 * does not fit otherwise, which the slow sanitizer build's longer
	 * steps make more frequent: at most each prompt's worth per 10 s. */
	int64_t allowed = prompts_total * window_s / 10;

	REQUIRE(rec1 < 0 || rec1 - rec0 <= allowed, "%lld positions recomputed: more than each "
		"trickle prompt's worth per 10 s (%lld)", (long long)(rec1 - rec0),
		(long long)allowed);
	REQUIRE(h_stop(&d) == 0, "exld did not exit 0");
	ret = 0;
out:
	atomic_store(&stop, true);
	atomic_store(&stop_normal, true);
	for (int i = 0; i < N_TRICKLE; i++)
		if (started[i])
			pthread_join(th[i], NULL);
	if (nstarted)
		pthread_join(nth, NULL);
	for (int i = 0; i < N_TRICKLE; i++) {
		free(t[i].want);
		free(t[i].got.s);
	}
	free(want_normal);
	h_cleanup(&d);
	return ret;
}

/* ---- bigdone: a result too large for the ring ---- */

static int test_bigdone(void)
{
	enum { N = 300 };
	struct daemon d;
	struct exl_client *c = NULL;
	struct exl_connect_opts o = { .ring_size = 65536, .timeout_ms = 30000 };
	struct exl_gen_params p;
	struct exl_result r = { 0 };
	struct exl_event ev;
	char err[256];
	uint64_t job;
	int ret = 1, marker = -1;
	char *want = h_expected(model_path, prompts[3], N);

	if (!want)
		return 1;
	if (h_prepare(&d) || h_start(&d, MODEL, NULL))
		goto out;
	REQUIRE(exl_connect(&c, d.sock, &o, err, sizeof(err)) == 0, "connect: %s", err);
	/* the text, ids and 64 candidates of 300 tokens: far over 64 KiB */
	greedy(&p, N);
	p.return_text = 1;
	p.return_top_k = 64;

	/* Through the library: the whole result arrives. */
	REQUIRE(exl_generate(c, &p, prompts[3], &r) == 0, "generate: %s", exl_errmsg(c));
	REQUIRE(r.text && !strcmp(r.text, want), "text '%s' != exld run '%s'", r.text ? r.text : "",
		want);
	REQUIRE(r.new_tokens == N, "%d tokens", r.new_tokens);
	printf("  a %d-token result with 64 candidates each arrives whole\n", N);

	/* In the ring itself: the job's records end with DONE_SOCKET. */
	REQUIRE(exl_submit(c, &p, prompts[3], &job) == 0, "submit: %s", exl_errmsg(c));
	/* a wait ends at each record: bound the waits, not the records */
	for (int waits = 0; marker < 0 && waits < 10000;) {
		struct exl_rec_hdr h;
		const uint8_t *payload;
		size_t len;
		int got = exl_cl_ring_peek(c, &h, &payload, &len);

		REQUIRE(got >= 0, "ring: %s", exl_errmsg(c));
		if (got == 0) {
			exl_cl_ring_release(c);
			exl_cl_ring_wait(c, 1000);
			waits++;
			continue;
		}
		REQUIRE(h.job == job, "a record of job %llu", (unsigned long long)h.job);
		if (h.type == EXL_REC_DONE || h.type == EXL_REC_DONE_SOCKET)
			marker = h.type;
	}
	exl_cl_ring_release(c);
	REQUIRE(marker == EXL_REC_DONE_SOCKET, "the job's last ring record is of type %d, not "
		"DONE_SOCKET (%d)", marker, EXL_REC_DONE_SOCKET);
	REQUIRE(exl_next(c, &ev, 30000) == 0, "next: %s", exl_errmsg(c));
	REQUIRE(ev.type == EXL_EVENT_DONE && ev.job == job, "after DONE_SOCKET: event %d of job %llu",
		ev.type, (unsigned long long)ev.job);
	printf("  the ring announced it (DONE_SOCKET); the socket delivered it\n");
	REQUIRE(h_stop(&d) == 0, "exld did not exit 0");
	ret = 0;
out:
	exl_result_free(&r);
	exl_close(c);
	free(want);
	h_cleanup(&d);
	return ret;
}

/* ---- mixed: blocking and streaming calls on one connection ---- */

static int test_mixed(void)
{
	enum { N = 40, MANY = 3 };
	struct daemon d;
	struct exl_client *c = NULL;
	struct exl_gen_params p;
	struct exl_result r = { 0 }, many[MANY];
	struct text_buf got = { 0 };
	struct exl_event ev;
	char *want[MANY + 1] = { NULL };
	const char *const prompt_list[MANY] = { prompts[6], prompts[7], prompts[8] };
	uint64_t job;
	int ret = 1, n_many = 0;

	memset(many, 0, sizeof(many));
	for (int i = 0; i < MANY; i++) {
		want[i] = h_expected(model_path, prompt_list[i], N);
		if (!want[i])
			goto early;
	}
	want[MANY] = h_expected(model_path, prompts[9], N);
	if (!want[MANY])
		goto early;
	if (h_prepare(&d) || h_start(&d, MODEL, NULL) || connect_to(&d, &c, true))
		goto out;
	greedy(&p, N);

	/* several prompts in one blocking call */
	REQUIRE(exl_generate_many(c, &p, prompt_list, MANY, many) == 0, "generate_many: %s",
		exl_errmsg(c));
	n_many = MANY;
	for (int i = 0; i < MANY; i++)
		REQUIRE(many[i].text && !strcmp(many[i].text, want[i]) && many[i].new_tokens == N,
			"generate_many[%d]: '%s' != exld run '%s'", i,
			many[i].text ? many[i].text : "", want[i]);
	printf("  exl_generate_many: %d prompts, each exld run's text\n", MANY);

	/* a submitted job streams while a blocking generate runs */
	REQUIRE(exl_submit(c, &p, prompts[9], &job) == 0, "submit: %s", exl_errmsg(c));
	REQUIRE(exl_generate(c, &p, prompt_list[0], &r) == 0, "generate: %s", exl_errmsg(c));
	REQUIRE(!strcmp(r.text, want[0]), "generate: '%s' != '%s'", r.text, want[0]);
	for (bool done = false; !done;) {
		REQUIRE(exl_next(c, &ev, 30000) == 0, "next: %s", exl_errmsg(c));
		REQUIRE(ev.job == job, "an event of job %llu", (unsigned long long)ev.job);
		if (ev.type == EXL_EVENT_DONE) {
			REQUIRE(!strcmp(ev.result->stop_reason, "max_new_tokens") &&
				ev.result->new_tokens == N, "the submitted job ended '%s' after %d",
				ev.result->stop_reason, ev.result->new_tokens);
			done = true;
		} else {
			REQUIRE(text_add(&got, ev.text, ev.text_len) == 0, "out of memory");
		}
	}
	REQUIRE(got.s && !strcmp(got.s, want[MANY]), "the submitted job streamed '%s', not '%s'",
		got.s ? got.s : "", want[MANY]);
	printf("  a job streamed around a blocking generate: all its events, exld run's text\n");
	REQUIRE(h_stop(&d) == 0, "exld did not exit 0");
	ret = 0;
out:
	exl_close(c);
	h_cleanup(&d);
early:
	exl_result_free(&r);
	for (int i = 0; i < n_many; i++)
		exl_result_free(&many[i]);
	for (int i = 0; i <= MANY; i++)
		free(want[i]);
	free(got.s);
	return ret;
}

/* ---- logits ---- */

/* Checks a TOKENS event's logits: one row of the model's vocabulary per
 * token, whose argmax (greedy, no penalties) is the token.  The rows
 * counted so far go to *rows. */
static int check_logit_rows(const struct exl_event *ev, size_t *rows, const char *what)
{
	if (!ev->n_ids)
		return 0;
	if (!ev->logits || ev->n_vocab != 512) {
		fprintf(stderr, "%s: %zu tokens with logits %p of %zu\n", what, ev->n_ids,
			(const void *)ev->logits, ev->n_vocab);
		return -1;
	}
	for (size_t i = 0; i < ev->n_ids; i++) {
		const float *row = ev->logits + i * ev->n_vocab;
		size_t best = 0;

		for (size_t k = 1; k < ev->n_vocab; k++)
			if (row[k] > row[best])
				best = k;
		if ((int32_t)best != ev->ids[i]) {
			fprintf(stderr, "%s: row %zu's argmax is %zu, the token %d\n", what, *rows + i,
				best, ev->ids[i]);
			return -1;
		}
	}
	*rows += ev->n_ids;
	return 0;
}

/* return_logits reaches the library user: each TOKENS event of a job
 * streamed over the socket carries its rows, also when the events were set
 * aside during a blocking generate; a ring job is refused as before. */
static int test_logits(void)
{
	enum { N = 30 };
	struct daemon d;
	struct exl_client *c = NULL;
	struct exl_gen_params p, plain;
	struct exl_result r = { 0 };
	struct exl_event ev;
	uint64_t job;
	size_t rows = 0;
	int ret = 1;

	if (h_prepare(&d) || h_start(&d, MODEL, NULL) || connect_to(&d, &c, true))
		goto out;
	greedy(&p, N);
	greedy(&plain, N);
	p.return_logits = 1;

	/* AUTO on a ring connection: the library streams it over the socket */
	REQUIRE(exl_submit(c, &p, prompts[0], &job) == 0, "submit: %s", exl_errmsg(c));
	for (bool done = false; !done;) {
		REQUIRE(exl_next(c, &ev, 30000) == 0, "next: %s", exl_errmsg(c));
		if (ev.type == EXL_EVENT_DONE) {
			REQUIRE(ev.logits == NULL, "a DONE event with logits");
			REQUIRE(ev.result->new_tokens == N && rows == N, "%zu rows for %d tokens", rows,
				ev.result->new_tokens);
			done = true;
		} else {
			REQUIRE(check_logit_rows(&ev, &rows, "streamed") == 0, "streamed rows");
		}
	}
	printf("  return_logits: %zu rows of 512, each one's argmax its token\n", rows);

	/* set aside while a blocking generate runs, handed out afterwards */
	rows = 0;
	REQUIRE(exl_submit(c, &p, prompts[1], &job) == 0, "submit: %s", exl_errmsg(c));
	REQUIRE(exl_generate(c, &plain, prompts[2], &r) == 0, "generate: %s", exl_errmsg(c));
	for (bool done = false; !done;) {
		REQUIRE(exl_next(c, &ev, 30000) == 0, "next: %s", exl_errmsg(c));
		REQUIRE(ev.job == job, "an event of job %llu", (unsigned long long)ev.job);
		if (ev.type == EXL_EVENT_DONE)
			done = true;
		else
			REQUIRE(check_logit_rows(&ev, &rows, "held") == 0, "held rows");
	}
	REQUIRE(rows == N, "%zu rows set aside for %d tokens", rows, N);
	printf("  events set aside during exl_generate keep their logits\n");

	/* without return_logits: none */
	REQUIRE(exl_submit(c, &plain, prompts[3], &job) == 0, "submit: %s", exl_errmsg(c));
	for (bool done = false; !done;) {
		REQUIRE(exl_next(c, &ev, 30000) == 0, "next: %s", exl_errmsg(c));
		REQUIRE(!ev.logits && !ev.n_vocab, "logits not asked for");
		done = ev.type == EXL_EVENT_DONE;
	}
	/* asked for on the ring: the daemon's refusal, as documented */
	p.stream = EXL_STREAM_MODE_RING;
	REQUIRE(exl_submit(c, &p, prompts[4], &job) == EXL_E_BAD_REQUEST &&
		strstr(exl_errmsg(c), "return_logits"), "logits on the ring: %s", exl_errmsg(c));
	REQUIRE(h_stop(&d) == 0, "exld did not exit 0");
	ret = 0;
out:
	exl_close(c);
	h_cleanup(&d);
	exl_result_free(&r);
	return ret;
}

/* ---- features ---- */

/* The optional features exld lists in its hello, written out here (a
 * feature the daemon gains is added here and to docs/protocol.md). */
static const char *const daemon_features[] = {
	"penalties", "no_repeat_ngram", "typical", "tfs", "top_a", "token_bias", "dry", "xtc",
	"mirostat", "banned_strings", "token_healing", "cfg", "grammar", "json_schema", "regex",
	"return_logits", "speculative", "beam_search", "truncate", "embeddings", "lora", "fim",
};
#define N_DAEMON_FEATURES (sizeof(daemon_features) / sizeof(daemon_features[0]))

/* A stand-in daemon on a thread, for one connection: a hello reply with
 * the features given (comma-separated), or without the key (an exld from
 * before it), and no ring; each generate accepted and ended at once. */
struct fake {
	int lfd;
	char dir[64];
	char path[108];
	const char *features;     /* NULL: no "features" key */
	atomic_int generates;     /* generate requests that arrived */
	pthread_t th;
	bool running;
};

static void pk_str(msgpack_packer *pk, const char *s, size_t n)
{
	msgpack_pack_str_with_body(pk, s, n);
}

#define PK_KEY(pk, s) pk_str((pk), (s), strlen(s))

/* Starts a reply map: op, the request's id, and n more fields. */
static void fake_head(msgpack_packer *pk, const msgpack_object *req, const char *op, uint32_t n)
{
	const msgpack_object *id = get(req, "id");

	msgpack_pack_map(pk, 1 + (id ? 1 : 0) + n);
	PK_KEY(pk, "op");
	PK_KEY(pk, op);
	if (id) {
		PK_KEY(pk, "id");
		msgpack_pack_object(pk, *id);
	}
}

static void fake_answer(struct fake *f, msgpack_packer *pk, const msgpack_object *req, uint64_t job)
{
	const msgpack_object *op = get(req, "op");

	if (str_is(op, "hello")) {
		fake_head(pk, req, "hello", f->features ? 7 : 6);
		PK_KEY(pk, "version");
		msgpack_pack_int(pk, EXL_PROTOCOL_VERSION);
		PK_KEY(pk, "server");
		PK_KEY(pk, "fake-exld 0.0.1");
		PK_KEY(pk, "max_message");
		msgpack_pack_uint32(pk, 1u << 24);
		PK_KEY(pk, "uid");
		msgpack_pack_uint32(pk, (uint32_t)getuid());
		PK_KEY(pk, "pid");
		msgpack_pack_int32(pk, (int32_t)getpid());
		PK_KEY(pk, "ring");
		msgpack_pack_false(pk);
		if (f->features) {
			size_t n = *f->features ? 1 : 0;
			for (const char *s = f->features; *s; s++)
				n += *s == ',';
			PK_KEY(pk, "features");
			msgpack_pack_array(pk, n);
			for (const char *s = f->features; *s;) {
				size_t len = strcspn(s, ",");
				pk_str(pk, s, len);
				s += len + (s[len] == ',');
			}
		}
	} else if (str_is(op, "generate")) {
		atomic_fetch_add(&f->generates, 1);
		fake_head(pk, req, "generate", 3);
		PK_KEY(pk, "job");
		msgpack_pack_uint64(pk, job);
		PK_KEY(pk, "model");
		PK_KEY(pk, MODEL);
		PK_KEY(pk, "prompt_tokens");
		msgpack_pack_int(pk, 1);
		fake_head(pk, req, "done", 4);
		PK_KEY(pk, "job");
		msgpack_pack_uint64(pk, job);
		PK_KEY(pk, "stop_reason");
		PK_KEY(pk, "max_new_tokens");
		PK_KEY(pk, "prompt_tokens");
		msgpack_pack_int(pk, 1);
		PK_KEY(pk, "new_tokens");
		msgpack_pack_int(pk, 0);
	} else {
		fake_head(pk, req, "error", 2);
		PK_KEY(pk, "code");
		PK_KEY(pk, "unknown_op");
		PK_KEY(pk, "message");
		PK_KEY(pk, "the fake knows hello and generate");
	}
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	msgpack_unpacker unp;
	msgpack_unpacked up;
	uint64_t job = 0;
	int fd = accept(f->lfd, NULL, NULL);

	if (fd < 0)
		return NULL;
	msgpack_unpacker_init(&unp, 65536);
	msgpack_unpacked_init(&up);
	for (;;) {
		while (msgpack_unpacker_next(&unp, &up) == MSGPACK_UNPACK_SUCCESS) {
			msgpack_sbuffer sb;
			msgpack_packer pk;

			msgpack_sbuffer_init(&sb);
			msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
			fake_answer(f, &pk, &up.data, ++job);
			if (send(fd, sb.data, sb.size, MSG_NOSIGNAL) != (ssize_t)sb.size)
				fprintf(stderr, "fake: send: %s\n", strerror(errno));
			msgpack_sbuffer_destroy(&sb);
		}
		if (!msgpack_unpacker_reserve_buffer(&unp, 65536))
			break;
		ssize_t n = recv(fd, msgpack_unpacker_buffer(&unp),
				 msgpack_unpacker_buffer_capacity(&unp), 0);
		if (n <= 0)
			break;
		msgpack_unpacker_buffer_consumed(&unp, (size_t)n);
	}
	msgpack_unpacked_destroy(&up);
	msgpack_unpacker_destroy(&unp);
	close(fd);
	return NULL;
}

static int fake_start(struct fake *f, const char *features)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };

	memset(f, 0, sizeof(*f));
	f->lfd = -1;
	f->features = features;
	snprintf(f->dir, sizeof(f->dir), "/tmp/exld-fake-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->path, sizeof(f->path), "%s/s.sock", f->dir);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", f->path);
	f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (f->lfd < 0 || bind(f->lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(f->lfd, 1) < 0)
		return -1;
	if (pthread_create(&f->th, NULL, fake_main, f))
		return -1;
	f->running = true;
	return 0;
}

/* After the client closed: the thread ends with its connection (or, when
 * none came, when the shutdown ends its accept). */
static void fake_stop(struct fake *f)
{
	if (f->lfd >= 0)
		shutdown(f->lfd, SHUT_RDWR);
	if (f->running)
		pthread_join(f->th, NULL);
	f->running = false;
	if (f->lfd >= 0)
		close(f->lfd);
	f->lfd = -1;
	if (f->path[0])
		unlink(f->path);
	if (f->dir[0])
		rmdir(f->dir);
	f->path[0] = f->dir[0] = 0;
}

static int fake_connect(struct fake *f, struct exl_client **c)
{
	char err[512];
	struct exl_connect_opts o = { .client_name = "test", .timeout_ms = 10000 };
	int rc = exl_connect(c, f->path, &o, err, sizeof(err));

	if (rc)
		fprintf(stderr, "connect to the fake: %s\n", err);
	return rc;
}

/* The hello reply lists exld's optional features, and the library refuses
 * to send an option of a feature its daemon did not list: nothing leaves,
 * EXL_E_UNSUPPORTED with a message naming the option and the feature. */
static int test_features(void)
{
	struct daemon d;
	struct raw r = { .fd = -1 };
	struct exl_client *c = NULL;
	struct exl_gen_params p;
	struct exl_result res = { 0 };
	struct fake f = { .lfd = -1 };
	msgpack_sbuffer sb;
	msgpack_unpacked up;
	int ret = 1, rc;

	msgpack_sbuffer_init(&sb);
	msgpack_unpacked_init(&up);
	if (h_prepare(&d) || h_start(&d, MODEL, NULL))
		goto out;

	/* exld's list, on the wire */
	REQUIRE(raw_open(&d, &r) == 0, "connect: %s", strerror(errno));
	pack_req(&sb, "hello", 1);
	{
		msgpack_packer pk;
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		PK_KEY(&pk, "ring");
		msgpack_pack_false(&pk);
	}
	REQUIRE(send_sb(&r, &sb) == 0, "send hello");
	REQUIRE(raw_read(&r, &up, 10000) == 1 && str_is(get(&up.data, "op"), "hello"), "no hello reply");
	const msgpack_object *fl = get(&up.data, "features");
	REQUIRE(fl && fl->type == MSGPACK_OBJECT_ARRAY && fl->via.array.size == N_DAEMON_FEATURES,
		"hello's features: %s, %u of them", fl ? "there" : "absent",
		fl && fl->type == MSGPACK_OBJECT_ARRAY ? fl->via.array.size : 0);
	for (size_t i = 0; i < N_DAEMON_FEATURES; i++)
		REQUIRE(str_is(&fl->via.array.ptr[i], daemon_features[i]), "feature %zu is not '%s'", i,
			daemon_features[i]);
	printf("  exld's hello lists its %zu optional features\n", N_DAEMON_FEATURES);

	/* through the library: every one listed, and options of each go */
	REQUIRE(connect_to(&d, &c, true) == 0, "connect");
	for (size_t i = 0; i < N_DAEMON_FEATURES; i++)
		REQUIRE(exl_server_feature(c, daemon_features[i]), "'%s' not listed", daemon_features[i]);
	REQUIRE(!exl_server_feature(c, "num_beams") && !exl_server_feature(c, ""), "num_beams listed");
	greedy(&p, 8);
	p.grammar = "root ::= [a-z ]+";
	p.dry_multiplier = 0.5f;
	p.mirostat = 2;
	p.negative_prompt = "The end";
	p.cfg_scale = 1.5f;
	REQUIRE(exl_generate(c, &p, prompts[0], &res) == 0, "generate with optional options: %s",
		exl_errmsg(c));
	exl_result_free(&res);
	exl_close(c);
	c = NULL;
	REQUIRE(h_stop(&d) == 0, "exld did not exit 0");

	/* a daemon from before the list: no optional feature */
	REQUIRE(fake_start(&f, NULL) == 0, "fake: %s", strerror(errno));
	REQUIRE(fake_connect(&f, &c) == 0, "connect to the fake");
	REQUIRE(!exl_server_feature(c, "grammar"), "grammar listed by a hello without features");
	greedy(&p, 4);
	p.grammar = "root ::= \"a\"";
	rc = exl_generate(c, &p, prompts[0], &res);
	exl_result_free(&res);
	REQUIRE(rc == EXL_E_UNSUPPORTED && !strcmp(exl_status_name(rc), "unsupported") &&
		strstr(exl_errmsg(c), "generate: grammar: this exld does not offer the feature "
		     "\"grammar\" (its hello lists no features") &&
		strstr(exl_errmsg(c), "nothing was sent"),
		"grammar to an older daemon: %d (%s) '%s'", rc, exl_status_name(rc), exl_errmsg(c));
	printf("  an older daemon: %s\n", exl_errmsg(c));
	uint64_t job;
	greedy(&p, 4);
	p.dry_multiplier = 1;
	rc = exl_submit(c, &p, prompts[0], &job);
	REQUIRE(rc == EXL_E_UNSUPPORTED && strstr(exl_errmsg(c), "dry_multiplier") &&
		strstr(exl_errmsg(c), "\"dry\""), "dry to an older daemon: %d '%s'", rc, exl_errmsg(c));
	/* core options, and a feature's option turned off, need nothing */
	greedy(&p, 4);
	p.top_p = 0.9f;
	p.token_healing = 0;
	REQUIRE(exl_generate(c, &p, prompts[0], &res) == 0, "core options to an older daemon: %s",
		exl_errmsg(c));
	exl_result_free(&res);
	exl_close(c);
	c = NULL;
	fake_stop(&f);
	REQUIRE(atomic_load(&f.generates) == 1, "%d generate requests reached the fake, not 1",
		atomic_load(&f.generates));

	/* a daemon listing some */
	REQUIRE(fake_start(&f, "grammar,xtc") == 0, "fake: %s", strerror(errno));
	REQUIRE(fake_connect(&f, &c) == 0, "connect to the fake");
	REQUIRE(exl_server_feature(c, "grammar") && exl_server_feature(c, "xtc") &&
		!exl_server_feature(c, "dry"), "the fake's list");
	greedy(&p, 4);
	p.grammar = "root ::= \"a\"";
	p.xtc_probability = 0.5f;
	REQUIRE(exl_generate(c, &p, prompts[0], &res) == 0, "listed features: %s", exl_errmsg(c));
	exl_result_free(&res);
	p.repetition_penalty = 1.1f;
	rc = exl_generate(c, &p, prompts[0], &res);
	exl_result_free(&res);
	REQUIRE(rc == EXL_E_UNSUPPORTED && strstr(exl_errmsg(c), "repetition_penalty") &&
		strstr(exl_errmsg(c), "\"penalties\" (its hello does not list it)"),
		"penalties not listed: %d '%s'", rc, exl_errmsg(c));
	exl_close(c);
	c = NULL;
	fake_stop(&f);
	REQUIRE(atomic_load(&f.generates) == 1, "%d generate requests reached the fake, not 1",
		atomic_load(&f.generates));
	printf("  a partial list: listed features go, the others are refused unsent\n");
	ret = 0;
out:
	exl_close(c);
	fake_stop(&f);
	if (r.fd >= 0)
		raw_close(&r);
	msgpack_unpacked_destroy(&up);
	msgpack_sbuffer_destroy(&sb);
	h_cleanup(&d);
	return ret;
}

/* ---- wakes: a poll-mode reader that never reads its socket ---- */

static int test_wakes(void)
{
	enum { JOBS = 4, N = 400 };
	struct daemon d;
	struct exl_client *c = NULL;
	struct exl_gen_params p;
	msgpack_unpacker unp;
	msgpack_unpacked up;
	uint64_t job[JOBS];
	int ret = 1, n_done = 0, records = 0, wakes = 0, others = 0;
	struct timespec t0, now;

	msgpack_unpacker_init(&unp, 65536);
	msgpack_unpacked_init(&up);
	if (h_prepare(&d) || h_start(&d, MODEL, NULL) || connect_to(&d, &c, true))
		goto out;
	greedy(&p, N);
	p.ignore_eos = 1;
	p.stream = EXL_STREAM_MODE_RING;
	for (int i = 0; i < JOBS; i++)
		REQUIRE(exl_submit(c, &p, prompts[i], &job[i]) == 0, "submit: %s", exl_errmsg(c));

	/* From here on the socket is never read: each record is taken from the
	 * ring, and the reader re-arms poll mode with a new poll_epoch after
	 * each, as an event loop would before sleeping in poll().  The daemon
	 * used to queue one wake message per record, without bound. */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (n_done < JOBS) {
		struct exl_rec_hdr h;
		const uint8_t *payload;
		size_t len;
		int got = exl_cl_ring_peek(c, &h, &payload, &len);

		REQUIRE(got >= 0, "ring: %s", exl_errmsg(c));
		if (got) {
			records++;
			if (h.type == EXL_REC_DONE || h.type == EXL_REC_DONE_SOCKET)
				n_done++;
			exl_cl_ring_release(c);
			exl_cl_ring_arm_poll(c);
			continue;
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		REQUIRE(now.tv_sec - t0.tv_sec < 120, "the jobs did not end (%d done)", n_done);
		usleep(100);
	}
	exl_cl_ring_disarm(c);
	REQUIRE(records >= JOBS * 50, "only %d records", records);

	/* Now read what waited on the socket. */
	for (;;) {
		struct pollfd pf = { .fd = exl_fd(c), .events = POLLIN };
		if (poll(&pf, 1, 500) <= 0)
			break;
		msgpack_unpacker_reserve_buffer(&unp, 65536);
		ssize_t n = recv(exl_fd(c), msgpack_unpacker_buffer(&unp),
				 msgpack_unpacker_buffer_capacity(&unp), MSG_DONTWAIT);
		if (n <= 0)
			break;
		msgpack_unpacker_buffer_consumed(&unp, (size_t)n);
		while (msgpack_unpacker_next(&unp, &up) == MSGPACK_UNPACK_SUCCESS) {
			if (str_is(get(&up.data, "op"), "wake"))
				wakes++;
			else
				others++;
		}
	}
	printf("  %d ring records read, poll_epoch bumped after each, socket never read: "
	       "%d wake messages were waiting (%d other messages)\n", records, wakes, others);
	REQUIRE(wakes <= 2, "%d wake messages queued for %d records: not coalesced", wakes, records);
	REQUIRE(others == 0, "%d unexpected messages", others);
	REQUIRE(h_stop(&d) == 0, "exld did not exit 0");
	ret = 0;
out:
	exl_close(c);
	msgpack_unpacked_destroy(&up);
	msgpack_unpacker_destroy(&unp);
	h_cleanup(&d);
	return ret;
}

/* ---- utf8: the daemon only sends valid UTF-8 in str fields ---- */

/* Independent of the daemon's own check. */
static bool utf8_ok(const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint8_t c = s[i], lo = 0x80, hi = 0xbf;
		size_t k;

		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			k = 2;
		} else if (c >= 0xe0 && c <= 0xef) {
			k = 3;
			lo = c == 0xe0 ? 0xa0 : 0x80;
			hi = c == 0xed ? 0x9f : 0xbf;
		} else if (c >= 0xf0 && c <= 0xf4) {
			k = 4;
			lo = c == 0xf0 ? 0x90 : 0x80;
			hi = c == 0xf4 ? 0x8f : 0xbf;
		} else {
			return false;
		}
		if (i + k > n || s[i + 1] < lo || s[i + 1] > hi)
			return false;
		for (size_t j = 2; j < k; j++)
			if ((s[i + j] & 0xc0) != 0x80)
				return false;
		i += k;
	}
	return true;
}

/* Every str in o, keys included. */
static bool all_strs_utf8(const msgpack_object *o)
{
	switch (o->type) {
	case MSGPACK_OBJECT_STR:
		return utf8_ok((const uint8_t *)o->via.str.ptr, o->via.str.size);
	case MSGPACK_OBJECT_ARRAY:
		for (uint32_t i = 0; i < o->via.array.size; i++)
			if (!all_strs_utf8(&o->via.array.ptr[i]))
				return false;
		return true;
	case MSGPACK_OBJECT_MAP:
		for (uint32_t i = 0; i < o->via.map.size; i++)
			if (!all_strs_utf8(&o->via.map.ptr[i].key) ||
			    !all_strs_utf8(&o->via.map.ptr[i].val))
				return false;
		return true;
	default:
		return true;
	}
}

#define FFFD "\xef\xbf\xbd"

static int test_utf8(void)
{
	/* stories260K: <0xNN> is id 3 + NN */
	enum { TOK_BOS = 1, TOK_E2 = 3 + 0xe2, TOK_FF = 3 + 0xff };
	struct daemon d;
	struct raw r = { .fd = -1 };
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_unpacked up;
	char stream[256] = "", done_text[256] = "";
	size_t stream_len = 0;
	int ret = 1, n_msgs = 0;
	bool done = false;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_unpacked_init(&up);
	if (h_prepare(&d) || h_start(&d, MODEL, NULL))
		goto out;
	REQUIRE(raw_open(&d, &r) == 0, "connect");

	/* A prompt with a byte that is no UTF-8 was echoed in done.text. */
	pack_req(&sb, "generate", 3);
	msgpack_pack_str_with_body(&pk, "prompt", 6);
	msgpack_pack_str_with_body(&pk, "Once upon a time\xff", 17);
	msgpack_pack_str_with_body(&pk, "max_new_tokens", 14);
	msgpack_pack_int(&pk, 4);
	msgpack_pack_str_with_body(&pk, "return_text", 11);
	msgpack_pack_true(&pk);
	REQUIRE(send_sb(&r, &sb) == 0, "send");
	REQUIRE(raw_read(&r, &up, 10000) == 1 && all_strs_utf8(&up.data), "a reply that is not UTF-8");
	REQUIRE(str_is(get(&up.data, "op"), "error") && str_is(get(&up.data, "code"), "bad_request"),
		"a prompt ending in 0xff was not refused");
	{
		const msgpack_object *m = get(&up.data, "message");
		const char *want = "prompt: not valid UTF-8 (byte 0xff at offset 16)";
		REQUIRE(m && m->type == MSGPACK_OBJECT_STR &&
			memmem(m->via.str.ptr, m->via.str.size, want, strlen(want)),
			"the message does not name the byte");
		printf("  prompt \"Once upon a time\\xff\" -> bad_request: %.*s\n", (int)m->via.str.size,
		       m->via.str.ptr);
	}
	/* stop strings and the id, which replies echo */
	pack_req(&sb, "generate", 2);
	msgpack_pack_str_with_body(&pk, "prompt", 6);
	msgpack_pack_str_with_body(&pk, "x", 1);
	msgpack_pack_str_with_body(&pk, "stop", 4);
	msgpack_pack_array(&pk, 1);
	msgpack_pack_str_with_body(&pk, "\xe2\x82", 2);
	REQUIRE(send_sb(&r, &sb) == 0 && expect_error(&r, "bad_request", "stop [\"\\xe2\\x82\"]") == 0);
	pack_req(&sb, "status", 1);
	msgpack_pack_str_with_body(&pk, "id", 2);
	msgpack_pack_str_with_body(&pk, "\xc0\x80", 2);
	REQUIRE(send_sb(&r, &sb) == 0 && expect_error(&r, "bad_request", "id \"\\xc0\\x80\"") == 0);

	/* The daemon's own text: prompt ids <0xFF> <0xE2> make no
	 * character, and a bias forces <0xE2> three times, each cut off by the
	 * next and the last by the end: U+FFFD for each, in the stream and in
	 * done.text (the prompt's two, then the completion's three). */
	pack_req(&sb, "generate", 7);
	msgpack_pack_str_with_body(&pk, "prompt_ids", 10);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_int(&pk, TOK_BOS);
	msgpack_pack_int(&pk, TOK_FF);
	msgpack_pack_int(&pk, TOK_E2);
	msgpack_pack_str_with_body(&pk, "max_new_tokens", 14);
	msgpack_pack_int(&pk, 3);
	msgpack_pack_str_with_body(&pk, "temperature", 11);
	msgpack_pack_int(&pk, 0);
	msgpack_pack_str_with_body(&pk, "token_bias", 10);
	msgpack_pack_map(&pk, 1);
	msgpack_pack_int(&pk, TOK_E2);
	msgpack_pack_double(&pk, 100.0);
	msgpack_pack_str_with_body(&pk, "stream", 6);
	msgpack_pack_str_with_body(&pk, "socket", 6);
	msgpack_pack_str_with_body(&pk, "return_text", 11);
	msgpack_pack_true(&pk);
	msgpack_pack_str_with_body(&pk, "ignore_eos", 10);
	msgpack_pack_true(&pk);
	REQUIRE(send_sb(&r, &sb) == 0, "send");
	while (!done) {
		REQUIRE(raw_read(&r, &up, 10000) == 1, "no done message");
		n_msgs++;
		REQUIRE(all_strs_utf8(&up.data), "message %d holds a str that is not UTF-8", n_msgs);
		const msgpack_object *op = get(&up.data, "op"), *t = get(&up.data, "text");
		REQUIRE(!str_is(op, "error"), "the job was refused");
		if (str_is(op, "token") && t && t->type == MSGPACK_OBJECT_STR) {
			REQUIRE(stream_len + t->via.str.size < sizeof(stream), "too much text");
			memcpy(stream + stream_len, t->via.str.ptr, t->via.str.size);
			stream_len += t->via.str.size;
		} else if (str_is(op, "done")) {
			REQUIRE(t && t->type == MSGPACK_OBJECT_STR && t->via.str.size < sizeof(done_text),
				"done without text");
			memcpy(done_text, t->via.str.ptr, t->via.str.size);
			done = true;
		}
	}
	REQUIRE(!strcmp(done_text, FFFD FFFD FFFD FFFD FFFD), "done.text '%s'", done_text);
	/* the stream ends with the job: the last U+FFFD comes with done only */
	REQUIRE(!strcmp(stream, FFFD FFFD) || !strcmp(stream, FFFD FFFD FFFD), "streamed '%s'", stream);
	printf("  byte tokens that make no character: %d messages, all UTF-8; done.text = 5 x U+FFFD\n",
	       n_msgs);
	REQUIRE(h_stop(&d) == 0, "exld did not exit 0");
	ret = 0;
out:
	if (r.fd >= 0)
		raw_close(&r);
	msgpack_unpacked_destroy(&up);
	msgpack_sbuffer_destroy(&sb);
	h_cleanup(&d);
	return ret;
}

/* ---- spec ---- */

#define SPEC_N 8
#define SPEC_NEW 48

/* the output repeats it: n-gram lookup has proposals */
static const char spec_repeat[] =
	"Once upon a time, there was a little girl named Lily. She loved to play outside in "
	"the park. One day, Lily went to the park. Once upon a time";

static const char *const spec_prompts[SPEC_N] = {
	spec_repeat, "Tom and Sue went to the park. They", "The dog", "A little bird", "One day, Lily",
	"The sun was", "Ben had a red ball", "Mom said",
};

/* Job i's options: greedy or seeded, n-gram or draft-model proposals (or
 * none: the plain jobs between them), a ban, a stop string and a regex on
 * some. */
static void spec_params(struct exl_gen_params *p, int i, bool draft)
{
	static const char *const ban[] = { "Lily" };
	static const char *const stop[] = { "park." };

	greedy(p, SPEC_NEW);
	p->model = MODEL;
	if (i % 2) {
		p->temperature = 1.0f;
		p->top_k = 0;
		p->top_p = 1.0f;
		p->min_p = 0.0f;
		p->has_seed = true;
		p->seed = 4000 + (uint64_t)i;
	}
	if (i == 2 || i == 3) {
		p->banned_strings = ban;
		p->n_banned_strings = 1;
		p->stop_strings = stop;
		p->n_stop_strings = 1;
		p->regex = "[A-Za-z ,.']+";
	}
	p->return_probs = 1;
	p->return_text = 1; /* the result carries every id */
	if (!draft || i >= 6)
		return;
	if (i % 3 == 2) {
		p->draft_model = MODEL;
		p->draft_tokens = 5;
	} else {
		p->ngram_draft = 3;
	}
}

/* Submits the SPEC_N jobs at once on c and gathers their results. */
static int spec_run(struct exl_client *c, bool draft, struct exl_result *out)
{
	struct exl_gen_params p;
	uint64_t job[SPEC_N];
	int done = 0;

	for (int i = 0; i < SPEC_N; i++) {
		spec_params(&p, i, draft);
		if (exl_submit(c, &p, spec_prompts[i], &job[i])) {
			fprintf(stderr, "FAIL: submit %d: %s\n", i, exl_errmsg(c));
			return -1;
		}
	}
	while (done < SPEC_N) {
		struct exl_event ev;

		if (exl_next(c, &ev, 60000)) {
			fprintf(stderr, "FAIL: next: %s\n", exl_errmsg(c));
			return -1;
		}
		if (ev.type != EXL_EVENT_DONE)
			continue;
		for (int i = 0; i < SPEC_N; i++) {
			if (job[i] != ev.job)
				continue;
			out[i] = *ev.result;
			/* the event's result is the library's until the next
			 * call: keep what is compared */
			out[i].ids = malloc(ev.result->n_ids * sizeof(int32_t) + 1);
			out[i].probs = NULL;
			out[i].text = NULL;
			out[i].stop_string = NULL;
			out[i].error = NULL;
			if (!out[i].ids)
				return -1;
			memcpy(out[i].ids, ev.result->ids, ev.result->n_ids * sizeof(int32_t));
			done++;
		}
	}
	return 0;
}

static int test_spec(void)
{
	struct daemon d = { .pid = -1, .notify_fd = -1 };
	struct exl_client *c = NULL;
	struct exl_result plain[SPEC_N], drafted[SPEC_N], r = { 0 }, g = { 0 };
	struct exl_gen_params p;
	struct exl_daemon_status st = { 0 };
	const char *extra[] = { "--load", MODEL ",aidreams260K", NULL };
	int ret = 1;

	memset(plain, 0, sizeof(plain));
	memset(drafted, 0, sizeof(drafted));
	if (h_prepare(&d) || h_start(&d, NULL, extra) || connect_to(&d, &c, true))
		goto out;
	/* the ring holds whole streams: nothing pauses */
	CHECK(exl_server_feature(c, "speculative") && exl_server_feature(c, "beam_search"),
	      "features not listed");
	for (int tries = 0; tries < 600; tries++) {
		int n_loaded = 0;

		CHECK(exl_status(c, &st) == 0, "status: %s", exl_errmsg(c));
		for (size_t i = 0; i < st.n_models; i++)
			n_loaded += !strcmp(st.models[i].state, "loaded");
		free(st.models);
		st.models = NULL;
		if (n_loaded == 2)
			break;
		usleep(50000);
	}
	CHECK(spec_run(c, false, plain) == 0, "the jobs without drafting");
	CHECK(spec_run(c, true, drafted) == 0, "the jobs with drafting");
	int proposed = 0, accepted = 0;

	for (int i = 0; i < SPEC_N; i++) {
		CHECK(plain[i].n_ids > 0 && (plain[i].n_ids == SPEC_NEW ||
					      strcmp(plain[i].stop_reason, "max_new_tokens")),
		      "job %d: %zu ids, %s", i, plain[i].n_ids, plain[i].stop_reason);
		CHECK(!strcmp(plain[i].stop_reason, drafted[i].stop_reason) &&
		      plain[i].n_ids == drafted[i].n_ids &&
		      !memcmp(plain[i].ids, drafted[i].ids, plain[i].n_ids * sizeof(int32_t)),
		      "job %d: %zu ids (%s) drafting, %zu (%s) without", i, drafted[i].n_ids,
		      drafted[i].stop_reason, plain[i].n_ids, plain[i].stop_reason);
		CHECK(plain[i].draft_proposed == 0 && drafted[i].draft_accepted <=
		      drafted[i].draft_proposed, "job %d: %d of %d", i, drafted[i].draft_accepted,
		      drafted[i].draft_proposed);
		proposed += drafted[i].draft_proposed;
		accepted += drafted[i].draft_accepted;
	}
	CHECK(proposed > 0 && accepted > 0, "%d proposed, %d accepted", proposed, accepted);
	printf("  %d jobs (6 drafting) batched together: the ids of the same jobs without "
	       "drafting; %d of %d proposals accepted\n", SPEC_N, accepted, proposed);
	/* the figures are a snapshot the engine takes between steps */
	uint64_t sp = 0, sa = 0;

	for (int tries = 0; tries < 500 && sp < (uint64_t)proposed; tries++) {
		CHECK(exl_status(c, &st) == 0, "status: %s", exl_errmsg(c));
		for (size_t i = 0; i < st.n_models; i++) {
			if (strcmp(st.models[i].name, MODEL))
				continue;
			sp = st.models[i].draft_proposed;
			sa = st.models[i].draft_accepted;
		}
		free(st.models);
		st.models = NULL;
		usleep(10000);
	}
	CHECK(sp == (uint64_t)proposed && sa == (uint64_t)accepted, "status: %llu of %llu",
	      (unsigned long long)sa, (unsigned long long)sp);

	/* refusals, before anything runs */
	greedy(&p, 4);
	p.model = MODEL;
	p.draft_model = "aidreams260K";
	CHECK(exl_generate(c, &p, "Hi", &r) == EXL_E_BAD_REQUEST &&
	      strstr(exl_errmsg(c), "vocabulary"), "another vocabulary: %s", exl_errmsg(c));
	p.draft_model = "nope";
	CHECK(exl_generate(c, &p, "Hi", &r) == EXL_E_UNKNOWN_MODEL &&
	      strstr(exl_errmsg(c), "draft_model"), "not loaded: %s", exl_errmsg(c));
	p.draft_model = MODEL;
	p.ngram_draft = 2;
	CHECK(exl_generate(c, &p, "Hi", &r) == EXL_E_BAD_REQUEST, "both proposers: %s",
	      exl_errmsg(c));
	printf("  refused: a draft model with another vocabulary, one not loaded, two proposers\n");

	/* beam search: one beam is greedy; four end with their score */
	greedy(&p, 30);
	p.model = MODEL;
	CHECK(exl_generate(c, &p, spec_prompts[1], &g) == 0, "greedy: %s", exl_errmsg(c));
	p.num_beams = 1;
	CHECK(exl_generate(c, &p, spec_prompts[1], &r) == 0, "1 beam: %s", exl_errmsg(c));
	CHECK(r.n_ids == g.n_ids && !memcmp(r.ids, g.ids, g.n_ids * sizeof(int32_t)) &&
	      !strcmp(r.text, g.text) && r.num_beams == 1, "1 beam '%s', greedy '%s'", r.text,
	      g.text);
	exl_result_free(&r);
	p.num_beams = 4;
	p.length_penalty = 0.0f;
	CHECK(exl_generate(c, &p, spec_prompts[1], &r) == 0, "4 beams: %s", exl_errmsg(c));
	CHECK(r.num_beams == 4 && r.beam_score < 0.0 && r.n_ids > 0, "4 beams: %d, score %g",
	      r.num_beams, r.beam_score);
	printf("  beams: 1 = greedy ('%s'); 4: '%s', summed log-probability %.3f\n", g.text,
	       r.text, r.beam_score);
	CHECK(h_stop(&d) == 0, "exld did not exit 0");
	ret = 0;
out:
	exl_close(c);
	h_cleanup(&d);
	free(st.models);
	for (int i = 0; i < SPEC_N; i++) {
		free(plain[i].ids);
		free(drafted[i].ids);
	}
	exl_result_free(&r);
	exl_result_free(&g);
	return ret;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 2) {
		fprintf(stderr, "usage: test_daemon activate|concurrent|kill|garbage|drain|admin|limits|"
			"poll|suspend|stalled|trickle|bigdone|mixed|logits|features|wakes|utf8|spec\n");
		return 2;
	}
	if (!h_models_dir()) {
		printf("the test models (EXLD_MODELS/stories260K.gguf) are absent; skipping\n");
		return SKIP;
	}
	snprintf(model_path, sizeof(model_path), "%s/" MODEL ".gguf", h_models_dir());
	signal(SIGPIPE, SIG_IGN);
	if (!strcmp(argv[1], "activate"))
		return test_activate();
	if (!strcmp(argv[1], "concurrent"))
		return test_concurrent();
	if (!strcmp(argv[1], "kill"))
		return test_kill();
	if (!strcmp(argv[1], "garbage"))
		return test_garbage();
	if (!strcmp(argv[1], "drain"))
		return test_drain();
	if (!strcmp(argv[1], "admin"))
		return test_admin();
	if (!strcmp(argv[1], "limits"))
		return test_limits();
	if (!strcmp(argv[1], "poll"))
		return test_poll();
	if (!strcmp(argv[1], "suspend"))
		return test_suspend();
	if (!strcmp(argv[1], "stalled"))
		return test_stalled();
	if (!strcmp(argv[1], "trickle"))
		return test_trickle();
	if (!strcmp(argv[1], "bigdone"))
		return test_bigdone();
	if (!strcmp(argv[1], "mixed"))
		return test_mixed();
	if (!strcmp(argv[1], "logits"))
		return test_logits();
	if (!strcmp(argv[1], "features"))
		return test_features();
	if (!strcmp(argv[1], "wakes"))
		return test_wakes();
	if (!strcmp(argv[1], "utf8"))
		return test_utf8();
	if (!strcmp(argv[1], "spec"))
		return test_spec();
	fprintf(stderr, "unknown test '%s'\n", argv[1]);
	return 2;
}
