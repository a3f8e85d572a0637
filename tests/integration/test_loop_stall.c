/* One client's expensive request must not stall the event loop, and so
 * every other client's traffic: tokenizing a huge text, compiling a huge
 * JSON schema.  A real exld, measured from other clients.
 *
 *   test_loop_stall status   another client's `status` answers within
 *                            0.5 s while a 16 MiB `tokenize` runs; prints
 *                            the worst status latency
 *   test_loop_stall stream   a greedy socket-streaming client (one job
 *                            after another) while another client submits a
 *                            generate with a 16 MiB prompt, then one with a
 *                            1 MiB JSON schema: the largest gap between its
 *                            events stays under 0.5 s; prints the gaps
 *   test_loop_stall ops      what preparing off the loop must keep:
 *                            tokenize / detokenize of large inputs give
 *                            `exld tokenize`'s ids and round-trip; a
 *                            connection's requests are prepared in order,
 *                            and one that sends more than the pool takes
 *                            gets every reply; a job counts against its
 *                            uid's limit while it is prepared; a cancel
 *                            of a job still being prepared ends it
 *                            (accepted, then done "cancelled"); a
 *                            connection closed, a model unloaded and the
 *                            daemon stopped while a request is prepared
 *                            (no crash, no leak: the sanitizer build's
 *                            exld exits 0)
 *
 * Under AddressSanitizer the bounds are 3 times longer, and the large
 * texts 4 MiB (big_size): the loop still reads, copies and decodes
 * (validating the UTF-8 of) each large message itself, which ASan makes
 * several times slower, and the tokenizer runs about 6 times slower. */
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
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exlclient.h"
#include "common/clock.h"
#include "harness.h"
#include "raw_conn.h"
#include "tests/common/check.h"

#define MODEL "stories260K"
#define PROMPT "Once upon a time"
/* Under the default max_message (16 MiB) with the request's other keys;
 * a quarter under AddressSanitizer (see big_size). */
#define BIG big_size()

static double bound_s(void)
{
	return H_ASAN ? 1.5 : 0.5;
}

/* The large requests' text: 16 MiB less room for the other keys.  Under
 * ASan, where tokenizing 16 MiB took up to a minute, it is 4 MiB: still
 * 5-8 s of tokenizing there (the old daemon's loop stalled that long),
 * and the bounds are about the loop, not the size. */
static size_t big_size(void)
{
	return (H_ASAN ? (size_t)4 << 20 : (size_t)16 << 20) - 4096;
}

/* n bytes of story text (ASCII), NUL-terminated; malloc'ed. */
static char *story(size_t n)
{
	static const char para[] =
		"Once upon a time, there was a little girl named Lily. She loved to play "
		"outside in the park with her friends. One day, she saw a big red ball "
		"under a tree. She ran to get it and laughed.\n";
	char *s = malloc(n + 1);

	if (!s)
		return NULL;
	for (size_t i = 0; i < n; i += sizeof(para) - 1) {
		size_t k = n - i < sizeof(para) - 1 ? n - i : sizeof(para) - 1;
		memcpy(s + i, para, k);
	}
	s[n] = 0;
	return s;
}

/* A JSON schema of about 1 MiB: an object with 23,500 optional string
 * properties.  Compiling it takes seconds and ends in a refusal (its
 * grammar is over the 4 MiB grammar limit): the compile is the point. */
static char *big_schema(void)
{
	enum { N = 23500 };
	size_t cap = (size_t)N * 48 + 64, len = 0;
	char *s = malloc(cap);

	if (!s)
		return NULL;
	len += (size_t)snprintf(s + len, cap - len, "{\"type\":\"object\",\"properties\":{");
	for (int i = 0; i < N; i++)
		len += (size_t)snprintf(s + len, cap - len,
					"%s\"key%05d\":{\"type\":\"string\",\"maxLength\":20}",
					i ? "," : "", i);
	snprintf(s + len, cap - len, "}}");
	return s;
}

/* Reads the daemon's notify datagrams while a test runs.  exld updates
 * its STATUS= line every 2 s while tokens flow, and sd_notify() blocks
 * once the socket holds net.unix.max_dgram_qlen (10) unread datagrams:
 * after some 20 s of streaming the daemon's loop would stop in it. */
struct notify_reader {
	int fd;
	atomic_bool stop;
	pthread_t th;
	bool started;
};

static void *notify_main(void *arg)
{
	struct notify_reader *n = arg;
	char buf[1024];

	while (!atomic_load(&n->stop)) {
		struct pollfd p = { .fd = n->fd, .events = POLLIN };

		if (poll(&p, 1, 100) > 0 && recv(n->fd, buf, sizeof(buf), MSG_DONTWAIT) < 0 &&
		    errno != EAGAIN && errno != EINTR)
			break;
	}
	return NULL;
}

static int notify_start(struct notify_reader *n, struct daemon *d)
{
	n->fd = d->notify_fd;
	atomic_init(&n->stop, false);
	n->started = pthread_create(&n->th, NULL, notify_main, n) == 0;
	return n->started ? 0 : -1;
}

/* Before h_cleanup, which closes the socket. */
static void notify_stop(struct notify_reader *n)
{
	if (!n->started)
		return;
	atomic_store(&n->stop, true);
	pthread_join(n->th, NULL);
	n->started = false;
}

static int connect_to(struct daemon *d, struct exl_client **c)
{
	struct exl_connect_opts o = { .no_ring = true, .timeout_ms = 300000 };
	char err[256];

	if (exl_connect(c, d->sock, &o, err, sizeof(err))) {
		fprintf(stderr, "connect: %s\n", err);
		return -1;
	}
	return 0;
}

/* ---- status ---- */

struct tokenizer_client {
	struct daemon *d;
	const char *text;
	size_t len;
	atomic_bool started, finished;
	double t0, t1;
	int rc;
	size_t n_ids;
	char err[256];
};

static void *tokenizer_main(void *arg)
{
	struct tokenizer_client *t = arg;
	struct exl_client *c = NULL;
	int32_t *ids = NULL;

	t->rc = connect_to(t->d, &c) ? -1 : 0;
	atomic_store(&t->started, true);
	t->t0 = exl_now_s();
	if (!t->rc) {
		t->rc = exl_tokenize(c, MODEL, t->text, t->len, -1, false, &ids, &t->n_ids);
		if (t->rc)
			snprintf(t->err, sizeof(t->err), "%s", exl_errmsg(c));
	}
	t->t1 = exl_now_s();
	free(ids);
	exl_close(c);
	atomic_store(&t->finished, true);
	return NULL;
}

static int test_status(void)
{
	struct daemon d = { .pid = -1, .notify_fd = -1 };
	struct notify_reader nr = { .started = false };
	struct exl_client *sc = NULL;
	struct tokenizer_client t = { .d = &d };
	struct exl_daemon_status st;
	pthread_t th;
	bool joined = true;
	char *text = NULL;
	double worst = 0, during = 0;
	int ret = 1, n = 0;

	t.len = BIG;
	text = story(BIG);
	REQUIRE(text != NULL, "out of memory");
	t.text = text;
	if (h_prepare(&d) || h_start(&d, MODEL, NULL))
		goto out;
	REQUIRE(notify_start(&nr, &d) == 0, "pthread_create");
	REQUIRE(connect_to(&d, &sc) == 0);
	REQUIRE(exl_status(sc, &st) == 0, "status: %s", exl_errmsg(sc));
	free(st.models);
	REQUIRE(pthread_create(&th, NULL, tokenizer_main, &t) == 0, "pthread_create");
	joined = false;
	while (!atomic_load(&t.started))
		h_sleep_ms(1);
	/* Status every 20 ms until the tokenize reply has come. */
	while (!atomic_load(&t.finished)) {
		double t0 = exl_now_s();
		int rc = exl_status(sc, &st);
		double dt = exl_now_s() - t0;

		REQUIRE(rc == 0, "status: %s", exl_errmsg(sc));
		free(st.models);
		if (!atomic_load(&t.finished)) {
			n++;
			if (dt > worst)
				worst = dt;
		}
		h_sleep_ms(20);
	}
	pthread_join(th, NULL);
	joined = true;
	during = t.t1 - t.t0;
	REQUIRE(t.rc == 0, "tokenize of %zu bytes: %s", t.len, t.err);
	printf("  tokenize of %zu bytes: %zu ids in %.2f s\n", t.len, t.n_ids, during);
	/* A loop that tokenized on itself would hold a status for about the
	 * whole tokenize (5-11 s).  A quarter of it, at least bound_s(),
	 * still tells that apart, and leaves room for a loaded 2-core CI
	 * machine, where a status once waited 849 ms behind other tests. */
	double bound = bound_s() > during / 4 ? bound_s() : during / 4;

	printf("  %d status requests meanwhile: worst latency %.1f ms (bound %.0f ms%s)\n", n,
	       worst * 1e3, bound * 1e3, H_ASAN ? ", scaled for ASan" : "");
	REQUIRE(t.n_ids > BIG / 16, "only %zu ids", t.n_ids);
	REQUIRE(n >= 3, "only %d status requests while the tokenize ran", n);
	REQUIRE(worst < bound, "a status took %.1f ms while another client's tokenize ran",
		worst * 1e3);
	REQUIRE(h_stop(&d) == 0, "exld did not exit 0");
	ret = 0;
out:
	if (!joined)
		pthread_join(th, NULL);
	exl_close(sc);
	free(text);
	notify_stop(&nr);
	h_cleanup(&d);
	return ret;
}

/* ---- stream ---- */

/* Runs greedy socket-streamed jobs back to back and notes the time of
 * every event (token message or result). */
struct streamer {
	struct daemon *d;
	atomic_bool stop;
	pthread_mutex_t mu;
	double *ts;
	size_t n, cap;
	int jobs;
	int rc;
	char err[256];
};

static int note(struct streamer *s)
{
	double t = exl_now_s();

	pthread_mutex_lock(&s->mu);
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 65536;
		double *p = realloc(s->ts, cap * sizeof(*p));
		if (!p) {
			pthread_mutex_unlock(&s->mu);
			return -1;
		}
		s->ts = p;
		s->cap = cap;
	}
	s->ts[s->n++] = t;
	pthread_mutex_unlock(&s->mu);
	return 0;
}

static void *streamer_main(void *arg)
{
	struct streamer *s = arg;
	struct exl_client *c = NULL;
	struct exl_gen_params p;
	struct exl_event ev;

	s->rc = connect_to(s->d, &c);
	exl_gen_params_init(&p);
	p.temperature = 0;
	p.max_new_tokens = 400;
	p.ignore_eos = 1;
	p.stream = EXL_STREAM_MODE_SOCKET;
	while (!s->rc && !atomic_load(&s->stop)) {
		uint64_t job;

		s->rc = exl_submit(c, &p, PROMPT, &job);
		while (!s->rc) {
			s->rc = exl_next(c, &ev, 60000);
			if (!s->rc && note(s))
				s->rc = EXL_E_NOMEM;
			if (!s->rc && ev.type == EXL_EVENT_DONE)
				break;
		}
		if (s->rc)
			snprintf(s->err, sizeof(s->err), "%s", exl_errmsg(c));
		else
			s->jobs++;
	}
	exl_close(c);
	return NULL;
}

/* The largest gap between consecutive events that overlaps [w0, w1]. */
static double worst_gap(struct streamer *s, double w0, double w1)
{
	double worst = 0;

	pthread_mutex_lock(&s->mu);
	for (size_t i = 1; i < s->n; i++)
		if (s->ts[i] > w0 && s->ts[i - 1] < w1 && s->ts[i] - s->ts[i - 1] > worst)
			worst = s->ts[i] - s->ts[i - 1];
	pthread_mutex_unlock(&s->mu);
	return worst;
}

/* Submits p on a new connection and waits for its end. */
static int big_generate(struct daemon *d, const struct exl_gen_params *p, const char *prompt,
			char *msg, size_t msglen)
{
	struct exl_client *c = NULL;
	struct exl_result r;

	if (connect_to(d, &c))
		return -1;
	int rc = exl_generate(c, p, prompt, &r);
	snprintf(msg, msglen, "%s", rc ? exl_errmsg(c) : r.stop_reason);
	if (!rc)
		exl_result_free(&r);
	exl_close(c);
	return rc;
}

static int test_stream(void)
{
	struct daemon d = { .pid = -1, .notify_fd = -1 };
	struct notify_reader nr = { .started = false };
	struct streamer s = { .d = &d };
	struct exl_gen_params p;
	pthread_t th;
	bool joined = true;
	char *text = NULL, *schema = NULL;
	char msg[600];
	int ret = 1;

	pthread_mutex_init(&s.mu, NULL);
	text = story(BIG);
	schema = big_schema();
	REQUIRE(text && schema, "out of memory");
	if (h_prepare(&d) || h_start(&d, MODEL, NULL))
		goto out;
	REQUIRE(notify_start(&nr, &d) == 0, "pthread_create");
	REQUIRE(pthread_create(&th, NULL, streamer_main, &s) == 0, "pthread_create");
	joined = false;
	h_sleep_ms(1000);

	/* The streamer alone, as a reference. */
	double q0 = exl_now_s();
	h_sleep_ms(1000);
	double quiet = worst_gap(&s, q0, exl_now_s());

	/* A 16 MiB prompt (4 MiB under ASan): tokenized, then refused as
	 * longer than the context. */
	exl_gen_params_init(&p);
	p.max_new_tokens = 1;
	p.stream = EXL_STREAM_MODE_NONE;
	double a0 = exl_now_s();
	int rc = big_generate(&d, &p, text, msg, sizeof(msg));
	double a1 = exl_now_s();
	h_sleep_ms(500);
	double gap_prompt = worst_gap(&s, a0, a1);
	printf("  generate with a %zu-byte prompt: %s (%s) after %.2f s\n", BIG,
	       exl_status_name(rc), msg, a1 - a0);
	REQUIRE(rc == EXL_E_TOO_LARGE, "the %zu-byte prompt was not refused as too large: %s",
		BIG, exl_status_name(rc));

	/* A 1 MiB JSON schema: compiled, then refused (its grammar is too large). */
	exl_gen_params_init(&p);
	p.max_new_tokens = 8;
	p.stream = EXL_STREAM_MODE_NONE;
	p.json_schema = schema;
	double b0 = exl_now_s();
	rc = big_generate(&d, &p, PROMPT, msg, sizeof(msg));
	double b1 = exl_now_s();
	h_sleep_ms(500);
	double gap_schema = worst_gap(&s, b0, b1);
	printf("  generate with a %zu-byte JSON schema: %s (%.120s) after %.2f s\n",
	       strlen(schema), exl_status_name(rc), msg, b1 - b0);
	REQUIRE(rc == EXL_E_BAD_REQUEST, "the 1 MiB schema was not refused: %s",
		exl_status_name(rc));

	atomic_store(&s.stop, true);
	pthread_join(th, NULL);
	joined = true;
	printf("  streamer: %d jobs, %zu events; largest gap: alone %.1f ms, during the "
	       "prompt %.1f ms, during the schema %.1f ms (bound %.0f ms%s)\n", s.jobs, s.n,
	       quiet * 1e3, gap_prompt * 1e3, gap_schema * 1e3, bound_s() * 1e3,
	       H_ASAN ? ", scaled for ASan" : "");
	REQUIRE(s.rc == 0, "streamer: %s", s.err);
	REQUIRE(gap_prompt < bound_s(), "the stream stalled %.1f ms while a %zu-byte prompt was "
		"tokenized", gap_prompt * 1e3, BIG);
	REQUIRE(gap_schema < bound_s(), "the stream stalled %.1f ms while a 1 MiB schema was "
		"compiled", gap_schema * 1e3);
	REQUIRE(h_stop(&d) == 0, "exld did not exit 0");
	ret = 0;
out:
	if (!joined) {
		atomic_store(&s.stop, true);
		pthread_join(th, NULL);
	}
	free(s.ts);
	pthread_mutex_destroy(&s.mu);
	free(text);
	free(schema);
	notify_stop(&nr);
	h_cleanup(&d);
	return ret;
}

/* ---- ops ---- */

static uint64_t u64_of(const msgpack_object *o)
{
	return o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o->via.u64 : 0;
}

static void pk_str(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str_with_body(pk, s, strlen(s));
}

/* {op: "tokenize", id, model, text} */
static void pack_tokenize(msgpack_sbuffer *sb, uint64_t id, const char *text, size_t len)
{
	msgpack_packer pk;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 4);
	pk_str(&pk, "op");
	pk_str(&pk, "tokenize");
	pk_str(&pk, "id");
	msgpack_pack_uint64(&pk, id);
	pk_str(&pk, "model");
	pk_str(&pk, MODEL);
	pk_str(&pk, "text");
	msgpack_pack_str_with_body(&pk, text, len);
}

/* {op: "generate", id, prompt, temperature: 0, max_new_tokens, stream: "socket"} */
static void pack_generate(msgpack_sbuffer *sb, uint64_t id, int max_new_tokens)
{
	msgpack_packer pk;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 6);
	pk_str(&pk, "op");
	pk_str(&pk, "generate");
	pk_str(&pk, "id");
	msgpack_pack_uint64(&pk, id);
	pk_str(&pk, "prompt");
	pk_str(&pk, PROMPT);
	pk_str(&pk, "temperature");
	msgpack_pack_int(&pk, 0);
	pk_str(&pk, "max_new_tokens");
	msgpack_pack_int(&pk, max_new_tokens);
	pk_str(&pk, "stream");
	pk_str(&pk, "socket");
}

static void pack_simple(msgpack_sbuffer *sb, const char *op, uint64_t id, const char *key,
			uint64_t val)
{
	msgpack_packer pk;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, key ? 3 : 2);
	pk_str(&pk, "op");
	pk_str(&pk, op);
	pk_str(&pk, "id");
	msgpack_pack_uint64(&pk, id);
	if (key) {
		pk_str(&pk, key);
		msgpack_pack_uint64(&pk, val);
	}
}

/* `exld tokenize` of text: the ids, malloc'ed; -1 on failure. */
static long cli_tokenize(struct daemon *d, const char *text, size_t len, int32_t **ids)
{
	char path[200], cmd[2600];
	size_t cap = 0, n = 0;
	long v;

	*ids = NULL;
	snprintf(path, sizeof(path), "%s/text", d->dir);
	FILE *f = fopen(path, "w");
	if (!f || fwrite(text, 1, len, f) != len) {
		if (f)
			fclose(f);
		return -1;
	}
	fclose(f);
	snprintf(cmd, sizeof(cmd), "%s tokenize --model %s/%s.gguf < %s", h_exld(), h_models_dir(),
		 MODEL, path);
	FILE *p = popen(cmd, "r");
	if (!p)
		return -1;
	while (fscanf(p, "%ld", &v) == 1) {
		if (n == cap) {
			cap = cap ? cap * 2 : 4096;
			int32_t *q = realloc(*ids, cap * sizeof(*q));
			if (!q)
				break;
			*ids = q;
		}
		(*ids)[n++] = (int32_t)v;
	}
	if (pclose(p) != 0)
		return -1;
	return (long)n;
}

/* Large inputs go through the preparation pool: the same ids as `exld
 * tokenize`, and detokenize gives the text back. */
static int ops_roundtrip(struct daemon *d, struct exl_client *c)
{
	size_t len = 256 << 10;
	char *text = story(len), *back = NULL;
	int32_t *ids = NULL, *want = NULL;
	size_t n = 0;
	int ret = 1;

	REQUIRE(text != NULL, "out of memory");
	REQUIRE(exl_tokenize(c, MODEL, text, len, -1, false, &ids, &n) == 0, "tokenize: %s",
		exl_errmsg(c));
	long nw = cli_tokenize(d, text, len, &want);
	REQUIRE(nw > 0, "exld tokenize failed");
	REQUIRE((size_t)nw == n && !memcmp(ids, want, n * sizeof(*ids)),
		"tokenize of %zu bytes: %zu ids, exld tokenize gives %ld", len, n, nw);
	REQUIRE(exl_detokenize(c, MODEL, ids, n, false, &back) == 0, "detokenize: %s",
		exl_errmsg(c));
	REQUIRE(strlen(back) == len && !memcmp(back, text, len), "detokenize of %zu ids did not "
		"give the text back", n);
	printf("  tokenize of %zu bytes: %zu ids, as exld tokenize; detokenize gives it back\n",
	       len, n);
	ret = 0;
out:
	free(text);
	free(back);
	free(ids);
	free(want);
	return ret;
}

/* On one connection: a 16 MiB tokenize, then a generate (prepared after
 * it), then a cancel of that generate's job while it waits: the cancel is
 * answered at once, the tokenize reply comes, then the generate's
 * accepted reply and a result with reason cancelled. */
static int ops_cancel(struct daemon *d, const char *big)
{
	struct raw r = { .fd = -1 };
	msgpack_sbuffer sb;
	msgpack_unpacked up;
	uint64_t job = 0;
	bool got_cancel = false, got_tok = false, got_gen = false, got_done = false;
	int ret = 1, order = 0, cancel_at = 0, tok_at = 0;

	msgpack_sbuffer_init(&sb);
	msgpack_unpacked_init(&up);
	REQUIRE(raw_open(d, &r) == 0, "connect");
	/* the next job's id: one more than this one's */
	pack_generate(&sb, 1, 1);
	REQUIRE(raw_send_sb(&r, &sb) == 0, "send");
	while (!job) {
		REQUIRE(raw_read(&r, &up, 30000) == 1, "no reply to the first generate");
		if (str_is(get(&up.data, "op"), "generate"))
			job = u64_of(get(&up.data, "job"));
	}
	for (bool done = false; !done;) {
		REQUIRE(raw_read(&r, &up, 30000) == 1, "no result for the first generate");
		done = str_is(get(&up.data, "op"), "done");
	}
	job++;
	pack_tokenize(&sb, 2, big, BIG);
	pack_generate(&sb, 3, 300);
	pack_simple(&sb, "cancel", 4, "job", job);
	REQUIRE(raw_send_sb(&r, &sb) == 0, "send");
	while (!got_done) {
		REQUIRE(raw_read(&r, &up, 120000) == 1, "a reply missing (cancel %d, tokenize %d, "
			"generate %d)", got_cancel, got_tok, got_gen);
		const msgpack_object *op = get(&up.data, "op");
		uint64_t id = u64_of(get(&up.data, "id"));

		order++;
		if (str_is(op, "error")) {
			const msgpack_object *m = get(&up.data, "message");
			REQUIRE(false, "error for request %llu: %.*s", (unsigned long long)id,
				m ? (int)m->via.str.size : 0, m ? m->via.str.ptr : "");
		} else if (str_is(op, "cancel")) {
			got_cancel = true;
			cancel_at = order;
		} else if (str_is(op, "tokenize")) {
			got_tok = true;
			tok_at = order;
		} else if (str_is(op, "generate")) {
			REQUIRE(u64_of(get(&up.data, "job")) == job, "the generate got job %llu, not %llu",
				(unsigned long long)u64_of(get(&up.data, "job")), (unsigned long long)job);
			got_gen = true;
		} else if (str_is(op, "token")) {
			REQUIRE(got_gen, "a token before the generate's accepted reply");
		} else if (str_is(op, "done")) {
			const msgpack_object *why = get(&up.data, "stop_reason");
			REQUIRE(got_gen, "a result before the generate's accepted reply");
			REQUIRE(str_is(why, "cancelled"), "the job cancelled while it was prepared ended "
				"with %.*s", why ? (int)why->via.str.size : 0, why ? why->via.str.ptr : "");
			got_done = true;
		}
	}
	REQUIRE(got_cancel && got_tok, "cancel %d, tokenize %d", got_cancel, got_tok);
	REQUIRE(cancel_at < tok_at, "the cancel was answered only after the tokenize before it");
	printf("  a cancel of a job waiting behind its connection's %zu-byte tokenize: answered "
	       "first; then the tokenize's ids, accepted, done \"cancelled\"\n", BIG);
	ret = 0;
out:
	msgpack_unpacked_destroy(&up);
	msgpack_sbuffer_destroy(&sb);
	raw_close(&r);
	return ret;
}

/* One connection sends 8 tokenizes of 64 KiB (each prepared in the
 * pool) and a status in one write: past 4 in the pool its input waits,
 * and is read again as they finish.  Every reply comes, the tokenizes in
 * the order sent. */
static int ops_pipeline(struct daemon *d)
{
	enum { N = 8 };
	struct raw r = { .fd = -1 };
	msgpack_sbuffer sb;
	msgpack_unpacked up;
	size_t len = 64 << 10;
	char *text = story(len);
	uint64_t next = 1;
	bool status = false;
	int ret = 1;

	msgpack_sbuffer_init(&sb);
	msgpack_unpacked_init(&up);
	REQUIRE(text != NULL, "out of memory");
	REQUIRE(raw_open(d, &r) == 0, "connect");
	for (int i = 1; i <= N; i++)
		pack_tokenize(&sb, (uint64_t)i, text, len);
	pack_simple(&sb, "status", 100, NULL, 0);
	REQUIRE(raw_send_sb(&r, &sb) == 0, "send");
	while (next <= N || !status) {
		REQUIRE(raw_read(&r, &up, 60000) == 1, "a reply missing (tokenize %llu next, status %d)",
			(unsigned long long)next, status);
		const msgpack_object *op = get(&up.data, "op");
		uint64_t id = u64_of(get(&up.data, "id"));

		if (str_is(op, "status")) {
			status = true;
			continue;
		}
		REQUIRE(str_is(op, "tokenize"), "reply %llu is not a tokenize", (unsigned long long)id);
		REQUIRE(id == next, "tokenize reply %llu came before %llu", (unsigned long long)id,
			(unsigned long long)next);
		next++;
	}
	printf("  %d pipelined tokenizes of %zu bytes on one connection (4 at most in the pool): "
	       "every reply, in order\n", N, len);
	ret = 0;
out:
	msgpack_unpacked_destroy(&up);
	msgpack_sbuffer_destroy(&sb);
	raw_close(&r);
	free(text);
	return ret;
}

/* With max_jobs_per_uid = 1: while one connection's generate is being
 * prepared (a large prompt), another generate of the uid is refused. */
static int ops_limit(struct daemon *d, struct exl_client *c, const char *big)
{
	struct raw r = { .fd = -1 };
	msgpack_sbuffer sb;
	msgpack_unpacked up;
	msgpack_packer pk;
	struct exl_gen_params p;
	struct exl_result res;
	int ret = 1, rc;

	msgpack_sbuffer_init(&sb);
	msgpack_unpacked_init(&up);
	REQUIRE(raw_open(d, &r) == 0, "connect");
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 4);
	pk_str(&pk, "op");
	pk_str(&pk, "generate");
	pk_str(&pk, "id");
	msgpack_pack_uint64(&pk, 1);
	pk_str(&pk, "prompt");
	msgpack_pack_str_with_body(&pk, big, BIG);
	pk_str(&pk, "stream");
	pk_str(&pk, "none");
	REQUIRE(raw_send_sb(&r, &sb) == 0, "send");
	h_sleep_ms(300);
	exl_gen_params_init(&p);
	p.temperature = 0;
	p.max_new_tokens = 4;
	rc = exl_generate(c, &p, PROMPT, &res);
	if (!rc)
		exl_result_free(&res);
	REQUIRE(rc == EXL_E_LIMIT, "a second job while the first was prepared: %s (%s)",
		exl_status_name(rc), exl_errmsg(c));
	REQUIRE(raw_read(&r, &up, 300000) == 1, "no reply to the large generate");
	const msgpack_object *code = get(&up.data, "code");
	REQUIRE(str_is(code, "too_large"), "the large generate was not refused as too large");
	rc = exl_generate(c, &p, PROMPT, &res);
	REQUIRE(rc == 0, "a job after the refusal: %s", exl_errmsg(c));
	exl_result_free(&res);
	printf("  max_jobs_per_uid 1: a generate while another is prepared gets limit; after "
	       "that one's refusal, the uid runs again\n");
	ret = 0;
out:
	msgpack_unpacked_destroy(&up);
	msgpack_sbuffer_destroy(&sb);
	raw_close(&r);
	return ret;
}

/* The status "preparing" of the only model, over a raw connection; -1 on
 * failure. */
static int preparing(struct raw *r)
{
	msgpack_sbuffer sb;
	msgpack_unpacked up;
	int n = -1;

	msgpack_sbuffer_init(&sb);
	msgpack_unpacked_init(&up);
	pack_simple(&sb, "status", 99, NULL, 0);
	if (raw_send_sb(r, &sb) == 0 && raw_read(r, &up, 60000) == 1) {
		const msgpack_object *m = get(&up.data, "models");
		if (m && m->type == MSGPACK_OBJECT_ARRAY && m->via.array.size == 1) {
			const msgpack_object *p = get(&m->via.array.ptr[0], "preparing");
			if (p && p->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
				n = (int)p->via.u64;
		}
	}
	msgpack_unpacked_destroy(&up);
	msgpack_sbuffer_destroy(&sb);
	return n;
}

/* A connection that sends a large tokenize and a generate behind it, and
 * closes before the replies: status answers meanwhile, the preparations
 * end (the generate's skipped), and the uid's job count is back to 0. */
static int ops_close(struct daemon *d, struct exl_client *c, const char *big)
{
	struct raw r = { .fd = -1 }, s = { .fd = -1 };
	msgpack_sbuffer sb;
	struct exl_daemon_status st;
	int ret = 1, n = -1, most = 0;

	msgpack_sbuffer_init(&sb);
	REQUIRE(raw_open(d, &r) == 0 && raw_open(d, &s) == 0, "connect");
	pack_tokenize(&sb, 1, big, BIG);
	pack_generate(&sb, 2, 300);
	REQUIRE(raw_send_sb(&r, &sb) == 0, "send");
	h_sleep_ms(300);
	raw_close(&r);
	double t0 = exl_now_s();
	while (exl_now_s() - t0 < 300) {
		n = preparing(&s);
		REQUIRE(n >= 0, "status (preparing) failed");
		if (n > most)
			most = n;
		if (!n)
			break;
		h_sleep_ms(100);
	}
	REQUIRE(n == 0, "still %d requests being prepared after 300 s", n);
	REQUIRE(most >= 1, "status never showed the tokenize being prepared");
	REQUIRE(exl_status(c, &st) == 0, "status: %s", exl_errmsg(c));
	free(st.models);
	REQUIRE(st.uid_jobs == 0, "the closed connection's job still counts (uid_jobs %d)",
		st.uid_jobs);
	printf("  a connection closed while its %zu-byte tokenize was prepared: status showed "
	       "%d preparing, 0 after %.2f s; uid_jobs back to 0\n", BIG, most, exl_now_s() - t0);
	ret = 0;
out:
	msgpack_sbuffer_destroy(&sb);
	raw_close(&r);
	raw_close(&s);
	return ret;
}

/* unload while a tokenize of the model is prepared: the unload waits for
 * it (the tokenizer is not freed under it); the tokenize gets its ids. */
static int ops_unload(struct daemon *d, struct exl_client *c, const char *big)
{
	struct tokenizer_client t = { .d = d, .text = big, .len = BIG };
	pthread_t th;
	int ret = 1;

	REQUIRE(pthread_create(&th, NULL, tokenizer_main, &t) == 0, "pthread_create");
	while (!atomic_load(&t.started))
		h_sleep_ms(1);
	h_sleep_ms(500);
	double u0 = exl_now_s();
	int rc = exl_unload(c, MODEL, false);
	double u1 = exl_now_s();
	pthread_join(th, NULL);
	REQUIRE(rc == 0, "unload: %s", exl_errmsg(c));
	REQUIRE(t.rc == 0 || t.rc == EXL_E_BUSY, "tokenize during unload: %s", t.err);
	printf("  unload while a %zu-byte tokenize was prepared: unloaded in %.2f s; the "
	       "tokenize got %s (%zu ids)\n", BIG, u1 - u0, exl_status_name(t.rc), t.n_ids);
	REQUIRE(exl_load(c, MODEL, NULL, NULL) == 0, "load again: %s", exl_errmsg(c));
	ret = 0;
out:
	return ret;
}

/* SIGTERM while a tokenize is prepared: the client gets its reply or a
 * shutdown error, and exld exits 0. */
static int ops_shutdown(struct daemon *d, const char *big)
{
	struct tokenizer_client t = { .d = d, .text = big, .len = BIG };
	pthread_t th;
	int ret = 1;

	REQUIRE(pthread_create(&th, NULL, tokenizer_main, &t) == 0, "pthread_create");
	while (!atomic_load(&t.started))
		h_sleep_ms(1);
	h_sleep_ms(500);
	kill(d->pid, SIGTERM);
	pthread_join(th, NULL);
	REQUIRE(t.rc == 0 || t.rc == EXL_E_SHUTDOWN, "tokenize during shutdown: %s",
		exl_status_name(t.rc));
	int status = h_stop(d);
	REQUIRE(status == 0, "exld exited with %d", status);
	printf("  SIGTERM while a %zu-byte tokenize was prepared: tokenize %s, exld exited 0\n",
	       BIG, exl_status_name(t.rc));
	ret = 0;
out:
	return ret;
}

static int test_ops(void)
{
	struct daemon d = { .pid = -1, .notify_fd = -1 };
	struct notify_reader nr = { .started = false };
	struct exl_client *c = NULL;
	char *big = NULL, conf[200];
	const char *extra[] = { "--config", conf, NULL };
	int ret = 1;

	big = story(BIG);
	REQUIRE(big != NULL, "out of memory");
	if (h_prepare(&d))
		goto out;
	snprintf(conf, sizeof(conf), "%s/exld.conf", d.dir);
	FILE *f = fopen(conf, "w");
	REQUIRE(f && fputs("max_jobs_per_uid = 1\n", f) >= 0 && fclose(f) == 0, "writing %s", conf);
	if (h_start(&d, MODEL, extra))
		goto out;
	REQUIRE(notify_start(&nr, &d) == 0, "pthread_create");
	REQUIRE(connect_to(&d, &c) == 0);
	if (ops_roundtrip(&d, c) || ops_pipeline(&d) || ops_limit(&d, c, big) ||
	    ops_cancel(&d, big) || ops_close(&d, c, big) || ops_unload(&d, c, big))
		goto out;
	exl_close(c);
	c = NULL;
	if (ops_shutdown(&d, big))
		goto out;
	ret = 0;
out:
	exl_close(c);
	free(big);
	notify_stop(&nr);
	h_cleanup(&d);
	return ret;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 2) {
		fprintf(stderr, "usage: test_loop_stall status|stream|ops\n");
		return 2;
	}
	if (!h_models_dir()) {
		printf("skipped: EXLD_MODELS has no %s.gguf\n", MODEL);
		return SKIP;
	}
	signal(SIGPIPE, SIG_IGN);
	if (!strcmp(argv[1], "status"))
		return test_status();
	if (!strcmp(argv[1], "stream"))
		return test_stream();
	if (!strcmp(argv[1], "ops"))
		return test_ops();
	fprintf(stderr, "unknown case '%s'\n", argv[1]);
	return 2;
}
