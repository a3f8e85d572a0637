/* One local user must not be able to starve, lock out or crash the daemon:
 * a real exld, attacked the way an outside reliability campaign did, and
 * each attack measured as it measured it.
 *
 *   test_hardening lockout   one uid holds 1,100 idle connections; another
 *                            uid is still served (root only: it needs a
 *                            second uid)
 *   test_hardening fdlimit   soft and hard fd limit 1024, 1,100 connections:
 *                            the daemon stays under 0.2 of a core and logs
 *                            under 1 MB in 3 s, refuses with a reason, and
 *                            serves again once connections close
 *   test_hardening pending   64 connections each send all but the last byte
 *                            of a 16 MiB message: RSS grows by at most
 *                            256 MiB and another client is served
 *   test_hardening timeout   a connection that sends nothing, and one that
 *                            stops inside a message, are closed after
 *                            request_timeout_ms with a limit error; one
 *                            idle after its hello is not
 *   test_hardening rewrite   a loaded model's file overwritten in place (as
 *                            cp does): its jobs fail saying so, the other
 *                            model and the daemon go on, a reload serves
 *   test_hardening drain     4 socket-streaming clients that do not read
 *                            for 5 s after SIGTERM each get their done
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exlclient.h"
#include "harness.h"
#include "tests/common/check.h"

#define MODEL "stories260K"
#define PROMPT "Once upon a time"

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* Writes text to d->dir/exld.conf; the path in path. */
static int write_conf(struct daemon *d, const char *text, char *path, size_t len)
{
	snprintf(path, len, "%s/exld.conf", d->dir);
	FILE *f = fopen(path, "w");

	if (!f)
		return -1;
	fputs(text, f);
	return fclose(f);
}

/* This process may hold n descriptors and more. */
static int allow_fds(rlim_t n)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return -1;
	if (rl.rlim_cur >= n)
		return 0;
	if (rl.rlim_max < n)
		rl.rlim_max = n; /* root may raise it */
	rl.rlim_cur = n;
	return setrlimit(RLIMIT_NOFILE, &rl);
}

/* Opens up to n connections to path without blocking and without sending
 * anything; fds[] gets them (-1 where connect did not go through: a full
 * backlog).  Returns how many connected. */
static int open_idle(const char *path, int *fds, int n)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int ok = 0;

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	for (int i = 0; i < n; i++) {
		fds[i] = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fds[i] < 0)
			continue;
		/* a full backlog says EAGAIN: give the daemon a moment */
		int rc, tries = 0;
		while ((rc = connect(fds[i], (struct sockaddr *)&a, sizeof(a))) && errno == EAGAIN &&
		       tries++ < 100)
			h_sleep_ms(2);
		if (rc) {
			close(fds[i]);
			fds[i] = -1;
			continue;
		}
		ok++;
	}
	return ok;
}

static void close_all(int *fds, int n)
{
	for (int i = 0; i < n; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
	}
}

/* Descriptors pid has open. */
static int count_fds(pid_t pid)
{
	char path[64];
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *dir = opendir(path);
	if (!dir)
		return -1;
	for (struct dirent *e; (e = readdir(dir));)
		n += e->d_name[0] != '.';
	closedir(dir);
	return n;
}

/* utime + stime of pid, in clock ticks; -1 on error. */
static long cpu_ticks(pid_t pid)
{
	char path[64], buf[1024];
	long ut, st;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	/* after the command name's closing parenthesis: state is field 3,
	 * utime 14 and stime 15 */
	char *p = strrchr(buf, ')');
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &ut,
			 &st) != 2)
		return -1;
	return ut + st;
}

static long file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) ? -1 : (long)st.st_size;
}

/* Connects and generates 8 greedy tokens of PROMPT on model (NULL: the
 * only one).  0 with the text in text; 1 when the job ran and ended with an
 * error, or the daemon refused it (the message in err); -1 when no daemon
 * answered (why in err). */
static int generate8(const char *sock, const char *model, char *text, size_t textlen,
		     char *err, size_t errlen)
{
	struct exl_connect_opts o = { .timeout_ms = 20000 };
	struct exl_client *c = NULL;
	struct exl_gen_params p;
	struct exl_result r;
	int rc = 1;

	if (exl_connect(&c, sock, &o, err, errlen))
		return -1;
	exl_gen_params_init(&p);
	p.temperature = 0;
	p.max_new_tokens = 8;
	p.model = model;
	memset(&r, 0, sizeof(r));
	/* a job that ended with an error still has its result */
	if (exl_generate(c, &p, PROMPT, &r))
		snprintf(err, errlen, "%s", exl_errmsg(c));
	else if (!strcmp(r.stop_reason, "error"))
		snprintf(err, errlen, "%s", r.error ? r.error : "(no message)");
	else if (r.new_tokens <= 0)
		snprintf(err, errlen, "no tokens (%s)", r.stop_reason);
	else
		rc = 0, snprintf(text, textlen, "%s", r.text);
	exl_result_free(&r);
	exl_close(c);
	return rc;
}

/* 8 greedy tokens equal to `exld run`'s (want); 0, or -1 with why in err. */
static int served(const char *sock, const char *want, char *err, size_t errlen)
{
	char text[256];

	if (generate8(sock, NULL, text, sizeof(text), err, errlen))
		return -1;
	if (strcmp(text, want)) {
		snprintf(err, errlen, "got '%s', want '%s'", text, want);
		return -1;
	}
	return 0;
}

/* served() as uid in a child process. */
static int served_as(uid_t uid, const char *sock, const char *want)
{
	pid_t pid = fork();
	int status;

	if (pid < 0)
		return -1;
	if (pid == 0) {
		char err[512];

		if (setgid(uid) || setuid(uid)) {
			perror("setuid");
			_exit(2);
		}
		if (served(sock, want, err, sizeof(err))) {
			fprintf(stderr, "uid %u: %s\n", (unsigned)uid, err);
			_exit(3);
		}
		_exit(0);
	}
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static char *expected_text(void)
{
	char path[1024];

	snprintf(path, sizeof(path), "%s/%s.gguf", h_models_dir(), MODEL);
	return h_expected(path, PROMPT, 8);
}

/* ---- lockout ---- */

/* One daemon: the hog (root) opens n idle connections, then uid 65534 must
 * be served, and the daemon must hold at most most_fds descriptors. */
static int lockout_round(const char *conf_text, int n, int hog_limit, const char *want)
{
	struct daemon d = { .pid = -1, .notify_fd = -1 }; /* for h_cleanup before h_prepare */
	char conf[256], err[512];
	int *fds = calloc((size_t)n, sizeof(int));
	int ret = 1;

	REQUIRE(fds != NULL, "out of memory");
	for (int i = 0; i < n; i++)
		fds[i] = -1;
	if (h_prepare(&d))
		goto out;
	REQUIRE(write_conf(&d, conf_text, conf, sizeof(conf)) == 0, "writing %s", conf);
	REQUIRE(chmod(d.dir, 0711) == 0, "chmod %s", d.dir);
	const char *extra[] = { "--config", conf, NULL };
	if (h_start(&d, MODEL, extra))
		goto out;
	int base = count_fds(d.pid);
	int opened = open_idle(d.sock, fds, n);
	h_sleep_ms(500); /* the daemon accepts (and refuses) what it can */
	int held = count_fds(d.pid) - base;
	printf("  %s", conf_text);
	printf("  uid 0 opened %d of %d idle connections; the daemon holds %d of them\n", opened,
	       n, held);
	REQUIRE(held <= hog_limit, "the daemon holds %d connections of one uid, over %d", held,
		hog_limit);
	long t0 = now_ms();
	REQUIRE(served_as(65534, d.sock, want) == 0, "uid 65534 was not served");
	printf("  uid 65534 served (8 tokens, exld run's text) in %ld ms\n", now_ms() - t0);
	/* and the hog's own next connection is refused with the reason */
	struct exl_connect_opts o = { .timeout_ms = 10000 };
	struct exl_client *c = NULL;
	int rc = exl_connect(&c, d.sock, &o, err, sizeof(err));
	REQUIRE(rc == EXL_E_LIMIT && strstr(err, "uid 0 already has"),
		"uid 0's next connection: rc %d: %s", rc, err);
	printf("  uid 0's next connection -> %s\n", err);
	ret = 0;
out:
	if (fds)
		close_all(fds, n);
	free(fds);
	h_cleanup(&d);
	return ret;
}

static int test_lockout(void)
{
	char *want = NULL;
	int ret = 1;

	if (getuid() != 0) {
		printf("skipped: connecting as a second uid needs root\n");
		return SKIP;
	}
	REQUIRE(allow_fds(4096) == 0, "raising this process's fd limit: %s", strerror(errno));
	want = expected_text();
	REQUIRE(want != NULL, "exld run failed");
	/* the defaults: 64 connections per uid */
	if (lockout_round("socket_mode = 0666\n", 1100, 64, want))
		goto out;
	/* no per-uid limit: the reserve still keeps 16 of 200 for other uids */
	if (lockout_round("socket_mode = 0666\nmax_connections = 200\n"
			  "max_connections_per_uid = 0\nconnections_reserved = 16\n",
			  300, 184, want))
		goto out;
	ret = 0;
out:
	free(want);
	return ret;
}

/* ---- fdlimit ---- */

static int test_fdlimit(void)
{
	struct daemon d = { .pid = -1, .notify_fd = -1 }; /* for h_cleanup before h_prepare */
	enum { N = 1100 };
	static int fds[N];
	char conf[256], err[512], log[320];
	char *want = NULL;
	int ret = 1;

	for (int i = 0; i < N; i++)
		fds[i] = -1;
	REQUIRE(allow_fds(4096) == 0, "raising this process's fd limit: %s", strerror(errno));
	want = expected_text();
	REQUIRE(want != NULL, "exld run failed");
	if (h_prepare(&d))
		goto out;
	REQUIRE(write_conf(&d, "max_connections = 2000\nmax_connections_per_uid = 0\n"
			 "connections_reserved = 0\nrequest_timeout_ms = 120000\n", conf,
			 sizeof(conf)) == 0, "writing %s", conf);
	snprintf(log, sizeof(log), "%s/daemon.log", d.dir);
	/* systemd's default: soft 1024; here the hard limit too, so raising
	 * the soft one cannot help */
	const char *wrap[] = { "/usr/bin/prlimit", "--nofile=1024:1024", NULL };
	const char *extra[] = { "--config", conf, NULL };
	if (h_start_wrapped(&d, wrap, MODEL, extra))
		goto out;
	int opened = open_idle(d.sock, fds, N);
	h_sleep_ms(1000);
	long log0 = file_size(log), cpu0 = cpu_ticks(d.pid), t0 = now_ms();
	h_sleep_ms(3000);
	long log1 = file_size(log), cpu1 = cpu_ticks(d.pid), t1 = now_ms();
	double cores = (double)(cpu1 - cpu0) / (double)sysconf(_SC_CLK_TCK) /
		       ((double)(t1 - t0) / 1000.0);

	printf("  fd limit 1024, %d of %d connections made; over 3 s the daemon used %.3f of a "
	       "core and logged %ld bytes\n", opened, N, cores, log1 - log0);
	REQUIRE(cpu0 >= 0 && cpu1 >= 0 && log0 >= 0, "reading /proc or the log");
	REQUIRE(cores < 0.2, "%.3f of a core while out of descriptors", cores);
	REQUIRE(log1 - log0 < 1000000, "%ld bytes of log in 3 s", log1 - log0);
	/* out of descriptors: a new client is told so, not left hanging */
	struct exl_connect_opts o = { .timeout_ms = 20000 };
	struct exl_client *c = NULL;
	int rc = exl_connect(&c, d.sock, &o, err, sizeof(err));
	REQUIRE(rc != 0 && strstr(err, "file descriptors"), "a client while out of fds: rc %d: %s",
		rc, rc ? err : "connected");
	printf("  a new client -> %s\n", err);
	/* room again once some close */
	close_all(fds, 200);
	h_sleep_ms(300);
	REQUIRE(served(d.sock, want, err, sizeof(err)) == 0, "after 200 closed: %s", err);
	printf("  after 200 connections closed: served\n");
	ret = 0;
out:
	close_all(fds, N);
	free(want);
	h_cleanup(&d);
	return ret;
}

/* ---- pending ---- */

struct sender {
	int fd;
	uint8_t head[16];
	size_t head_len;
	size_t body, sent; /* body bytes to send, sent so far */
	bool done;
};

static int test_pending(void)
{
	struct daemon d = { .pid = -1, .notify_fd = -1 }; /* for h_cleanup before h_prepare */
	enum { N = 64 };
	static struct sender s[N];
	static uint8_t chunk[1 << 16];
	const size_t msg = (16u << 20) - 4096; /* under max_message */
	char conf[256], err[512];
	char *want = NULL;
	int ret = 1, closed = 0;

	for (int i = 0; i < N; i++)
		s[i].fd = -1;
	want = expected_text();
	REQUIRE(want != NULL, "exld run failed");
	if (h_prepare(&d))
		goto out;
	REQUIRE(write_conf(&d, "max_connections_per_uid = 100\nrequest_timeout_ms = 120000\n",
			 conf, sizeof(conf)) == 0, "writing %s", conf);
	/* ASan keeps freed memory in a quarantine (256 MiB by default), which
	 * is its RSS, not the daemon's buffering */
	const char *asan = getenv("ASAN_OPTIONS");
	char asan_opts[512];
	snprintf(asan_opts, sizeof(asan_opts), "%s%squarantine_size_mb=4", asan ? asan : "",
		 asan ? ":" : "");
	setenv("ASAN_OPTIONS", asan_opts, 1);
	const char *extra[] = { "--config", conf, NULL };
	int started = h_start(&d, MODEL, extra);
	if (asan)
		setenv("ASAN_OPTIONS", asan, 1);
	else
		unsetenv("ASAN_OPTIONS");
	if (started)
		goto out;
	long rss0 = h_rss_kib(d.pid);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", d.sock);
	/* {"op": "generate", "prompt": <str32 of msg - 32 bytes>}, all but
	 * the last byte */
	for (int i = 0; i < N; i++) {
		size_t str = msg - 32;
		uint8_t *h = s[i].head;

		s[i].fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		REQUIRE(s[i].fd >= 0 && !connect(s[i].fd, (struct sockaddr *)&a, sizeof(a)),
			"connect %d: %s", i, strerror(errno));
		h[0] = 0x82;
		h[1] = 0xa2, memcpy(h + 2, "op", 2);
		h[4] = 0xa8, memcpy(h + 5, "generate", 8);
		h[13] = 0xa6;
		s[i].head_len = 14;
		s[i].body = 6 + 5 + str - 1;
	}
	memset(chunk, 'a', sizeof(chunk));
	/* the key "prompt" and the str32 header go first in the body */
	long deadline = now_ms() + 60000;
	int left = N;
	while (left && now_ms() < deadline) {
		struct pollfd pf[N];
		int map[N], np = 0;

		for (int i = 0; i < N; i++) {
			if (s[i].done)
				continue;
			pf[np] = (struct pollfd){ .fd = s[i].fd, .events = POLLOUT };
			map[np++] = i;
		}
		if (poll(pf, (nfds_t)np, 1000) <= 0)
			continue;
		for (int k = 0; k < np; k++) {
			struct sender *x = &s[map[k]];
			uint8_t buf[sizeof(chunk)];
			size_t n = 0;

			if (!(pf[k].revents & (POLLOUT | POLLERR | POLLHUP)))
				continue;
			if (x->head_len) {
				memcpy(buf, x->head, x->head_len);
				n = x->head_len;
				memcpy(buf + n, "prompt", 6);
				n += 6;
				uint32_t be = (uint32_t)(msg - 32);
				buf[n++] = 0xdb;
				buf[n++] = (uint8_t)(be >> 24), buf[n++] = (uint8_t)(be >> 16);
				buf[n++] = (uint8_t)(be >> 8), buf[n++] = (uint8_t)be;
				x->sent = 11;
			} else {
				n = x->body - x->sent < sizeof(chunk) ? x->body - x->sent : sizeof(chunk);
				memcpy(buf, chunk, n);
			}
			ssize_t w = send(x->fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (w < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (w < 0 || (x->head_len && (size_t)w != n)) {
				/* refused: the daemon closed it */
				x->done = true;
				closed++;
				left--;
				continue;
			}
			if (x->head_len)
				x->head_len = 0;
			else
				x->sent += (size_t)w;
			if (x->sent >= x->body) {
				x->done = true;
				left--;
			}
		}
	}
	REQUIRE(!left, "%d senders were still sending after 60 s", left);
	h_sleep_ms(500);
	long rss1 = h_rss_kib(d.pid);
	printf("  64 connections x %zu-byte messages, all but the last byte: %d closed by the "
	       "daemon, RSS %ld -> %ld KiB (+%ld MiB)\n", msg, closed, rss0, rss1,
	       (rss1 - rss0) / 1024);
	REQUIRE(rss0 > 0 && rss1 > 0, "reading RSS");
	REQUIRE(rss1 - rss0 <= 256 * 1024, "RSS grew by %ld MiB", (rss1 - rss0) / 1024);
	long t0 = now_ms();
	REQUIRE(served(d.sock, want, err, sizeof(err)) == 0, "another client: %s", err);
	printf("  another client served in %ld ms\n", now_ms() - t0);
	ret = 0;
out:
	for (int i = 0; i < N; i++)
		if (s[i].fd >= 0)
			close(s[i].fd);
	free(want);
	h_cleanup(&d);
	return ret;
}

/* ---- timeout ---- */

/* Reads fd until the daemon closes it (up to timeout_ms); 1 when an
 * id-less limit error naming request_timeout_ms came first. */
static int closed_with_timeout(int fd, int timeout_ms)
{
	char buf[4096];
	size_t len = 0;
	long end = now_ms() + timeout_ms;

	for (;;) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		long left = end - now_ms();

		if (left <= 0 || poll(&pf, 1, (int)left) <= 0)
			return 0;
		ssize_t n = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	buf[len] = 0;
	/* the msgpack map holds these strings verbatim */
	return memmem(buf, len, "limit", 5) && memmem(buf, len, "request_timeout_ms", 18) &&
	       !memmem(buf, len, "\xa2id", 3);
}

static int test_timeout(void)
{
	struct daemon d = { .pid = -1, .notify_fd = -1 }; /* for h_cleanup before h_prepare */
	char conf[256], err[512];
	char *want = NULL;
	int fds[2] = { -1, -1 }, ret = 1;

	want = expected_text();
	REQUIRE(want != NULL, "exld run failed");
	if (h_prepare(&d))
		goto out;
	REQUIRE(write_conf(&d, "request_timeout_ms = 600\n", conf, sizeof(conf)) == 0, "writing %s",
		conf);
	const char *extra[] = { "--config", conf, NULL };
	if (h_start(&d, MODEL, extra))
		goto out;
	REQUIRE(open_idle(d.sock, fds, 2) == 2, "connect");
	/* the second sends the first bytes of a message and stops */
	REQUIRE(send(fds[1], "\x82\xa2op\xa8gen", 8, MSG_NOSIGNAL) == 8, "send");
	long t0 = now_ms();
	REQUIRE(closed_with_timeout(fds[0], 5000), "a connection that never sent a request was not "
		"closed with a request_timeout_ms error");
	long t_idle = now_ms() - t0;
	REQUIRE(closed_with_timeout(fds[1], 5000), "a half-sent message was not closed with a "
		"request_timeout_ms error");
	long t_half = now_ms() - t0;
	printf("  request_timeout_ms 600: a silent connection closed after %ld ms, a half-sent "
	       "message after %ld ms, each with a limit error\n", t_idle, t_half);
	REQUIRE(t_idle >= 500 && t_half >= 500, "closed too early");
	/* a client that keeps a connection after its requests is not idle */
	struct exl_connect_opts o = { .timeout_ms = 10000 };
	struct exl_client *c = NULL;
	struct exl_model_info *models = NULL;
	size_t n_models = 0;
	REQUIRE(exl_connect(&c, d.sock, &o, err, sizeof(err)) == 0, "connect: %s", err);
	h_sleep_ms(1500);
	REQUIRE(exl_models(c, &models, &n_models) == 0, "a connection idle after hello: %s",
		exl_errmsg(c));
	free(models);
	exl_close(c);
	printf("  a connection idle for 1.5 s after its hello still answers\n");
	ret = 0;
out:
	close_all(fds, 2);
	free(want);
	h_cleanup(&d);
	return ret;
}

/* ---- rewrite ---- */

static int copy_file(const char *from, const char *to, int flags)
{
	char buf[1 << 16];
	int in = open(from, O_RDONLY | O_CLOEXEC), out = open(to, O_WRONLY | O_CLOEXEC | flags, 0644);
	ssize_t n = 0;

	while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)n) != n)
			n = -1;
	if (in >= 0)
		close(in);
	if (out >= 0 && close(out))
		n = -1;
	return in < 0 || out < 0 || n < 0 ? -1 : 0;
}

/* A job on model; 0 when it generated text, 1 when it ended with an error
 * naming the changed file, -1 otherwise (why in err). */
static int gen_on(const char *sock, const char *model, char *err, size_t errlen)
{
	char text[256];
	int rc = generate8(sock, model, text, sizeof(text), err, errlen);

	if (rc == 0)
		snprintf(err, errlen, "generated '%s'", text);
	if (rc == 1)
		return strstr(err, "changed on disk") ? 1 : -1;
	return rc;
}

static int test_rewrite(void)
{
	struct daemon d;
	char models[128], path[256], src[1024], err[512];
	int ret = 1;

	if (h_prepare(&d))
		goto out;
	snprintf(models, sizeof(models), "%s/models", d.dir);
	REQUIRE(mkdir(models, 0755) == 0, "mkdir %s", models);
	const char *names[] = { "stories260K", "aidreams260K" };
	for (int i = 0; i < 2; i++) {
		snprintf(src, sizeof(src), "%s/%s.gguf", h_models_dir(), names[i]);
		snprintf(path, sizeof(path), "%s/%s.gguf", models, names[i]);
		REQUIRE(copy_file(src, path, O_CREAT | O_EXCL) == 0, "copying %s", src);
	}
	const char *extra[] = { "--models", models, "--load", "stories260K,aidreams260K", NULL };
	if (h_start(&d, NULL, extra))
		goto out;
	REQUIRE(gen_on(d.sock, MODEL, err, sizeof(err)) == 0, "before: %s", err);
	/* what `cp aidreams260K.gguf stories260K.gguf` does: truncate, write
	 * a shorter file into the same inode */
	snprintf(path, sizeof(path), "%s/%s.gguf", models, MODEL);
	snprintf(src, sizeof(src), "%s/aidreams260K.gguf", h_models_dir());
	REQUIRE(copy_file(src, path, O_TRUNC) == 0, "overwriting %s", path);
	int rc = gen_on(d.sock, MODEL, err, sizeof(err));
	REQUIRE(rc == 1, "a job on the overwritten model: %s", err);
	printf("  stories260K.gguf overwritten in place while loaded: its job -> %s\n", err);
	REQUIRE(kill(d.pid, 0) == 0, "exld died");
	REQUIRE(gen_on(d.sock, "aidreams260K", err, sizeof(err)) == 0, "the other model: %s", err);
	printf("  the other model still generates (%s)\n", err);
	rc = gen_on(d.sock, MODEL, err, sizeof(err));
	REQUIRE(rc == 1, "a second job on the overwritten model: %s", err);
	/* unload and load again: the new file serves */
	struct exl_connect_opts o = { .timeout_ms = 30000 };
	struct exl_client *c = NULL;
	REQUIRE(exl_connect(&c, d.sock, &o, err, sizeof(err)) == 0, "connect: %s", err);
	rc = exl_unload(c, MODEL, true) || exl_load(c, MODEL, NULL, NULL);
	snprintf(err, sizeof(err), "%s", exl_errmsg(c));
	exl_close(c);
	REQUIRE(rc == 0, "unload and load: %s", err);
	REQUIRE(gen_on(d.sock, MODEL, err, sizeof(err)) == 0, "after reloading: %s", err);
	printf("  after unload and load: generates again (%s); exld never died\n", err);
	REQUIRE(h_stop(&d) == 0, "exld did not stop cleanly");
	ret = 0;
out:
	h_cleanup(&d);
	return ret;
}

/* ---- drain ---- */

static int test_drain(void)
{
	struct daemon d;
	enum { N = 4 };
	struct exl_client *c[N] = { NULL };
	struct exl_connect_opts o = { .no_ring = true, .timeout_ms = 30000 };
	struct exl_gen_params p;
	struct exl_event ev;
	char err[512];
	int ret = 1, got_done = 0;

	if (h_prepare(&d) || h_start(&d, MODEL, NULL))
		goto out;
	exl_gen_params_init(&p);
	p.temperature = 0;
	p.max_new_tokens = 2000;
	p.ignore_eos = 1;
	p.return_logits = 1; /* 2 KiB a token: a backlog the socket cannot hold */
	for (int i = 0; i < N; i++) {
		uint64_t job;

		REQUIRE(exl_connect(&c[i], d.sock, &o, err, sizeof(err)) == 0, "connect: %s", err);
		REQUIRE(exl_submit(c[i], &p, PROMPT, &job) == 0, "submit: %s", exl_errmsg(c[i]));
	}
	h_sleep_ms(500);
	kill(d.pid, SIGTERM);
	/* nobody reads for 5 s, more than the fixed 3 s the drain used to wait */
	h_sleep_ms(5000);
	for (int i = 0; i < N; i++) {
		long tokens = 0;
		const char *reason = NULL;

		for (;;) {
			int rc = exl_next(c[i], &ev, 30000);
			REQUIRE(rc == 0, "client %d after %ld tokens: %s", i, tokens, exl_errmsg(c[i]));
			if (ev.type == EXL_EVENT_DONE) {
				reason = ev.result->stop_reason;
				break;
			}
			tokens++;
		}
		printf("  client %d: %ld tokens, then done (%s)\n", i, tokens, reason);
		got_done++;
	}
	int status;
	REQUIRE(waitpid(d.pid, &status, 0) == d.pid, "waitpid");
	d.pid = -1;
	REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exld exited with status %d", status);
	printf("  %d of %d slow readers got their done; exld exited 0\n", got_done, N);
	ret = 0;
out:
	for (int i = 0; i < N; i++)
		exl_close(c[i]);
	h_cleanup(&d);
	return ret;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 2) {
		fprintf(stderr, "usage: test_hardening lockout|fdlimit|pending|timeout|rewrite|drain\n");
		return 2;
	}
	if (!h_models_dir()) {
		printf("skipped: EXLD_MODELS has no %s.gguf\n", MODEL);
		return SKIP;
	}
	signal(SIGPIPE, SIG_IGN);
	if (!strcmp(argv[1], "lockout"))
		return test_lockout();
	if (!strcmp(argv[1], "fdlimit"))
		return test_fdlimit();
	if (!strcmp(argv[1], "pending"))
		return test_pending();
	if (!strcmp(argv[1], "drain"))
		return test_drain();
	if (!strcmp(argv[1], "timeout"))
		return test_timeout();
	if (!strcmp(argv[1], "rewrite"))
		return test_rewrite();
	fprintf(stderr, "unknown case '%s'\n", argv[1]);
	return 2;
}
