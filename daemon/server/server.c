/* The event loop: listening socket (own or systemd's), connections, the
 * mailbox from the other threads, signals, sd_notify and the watchdog. */
#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "common/clock.h"
#include "daemon/core/util/log.h"
#include "daemon/server/conn.h"
#include "daemon/server/delivery/mailbox.h"
#include "daemon/server/delivery/ring.h"
#include "daemon/server/delivery/sink.h"
#include "daemon/server/engine/models_registry.h"
#include "daemon/server/engine/prep.h"
#include "daemon/server/http/http.h"
#include "daemon/server/loop.h"
#include "daemon/server/server.h"

#define STATUS_MS 2000        /* STATUS= line refresh */
#define DRAIN_POLL_MS 20
#define ACCEPT_PAUSE_MS 100   /* out of fds: accepts wait this long, or for a close */
#define REFUSAL_LOG_MS 10000  /* refused connections are logged once per this */

struct exl_server {
	struct exl_loop lp;           /* what conn.c shares (loop.h) */

	int listen_fd;
	bool own_socket;              /* bound by us: unlink at exit */
	struct event *listen_ev;
	struct exl_http *http;        /* the HTTP front, when configured */
	struct event *accept_resume_ev;
	bool accept_paused;           /* out of fds: listen_ev is off */
	int spare_fd;                 /* given up to accept and refuse when out of fds */
	uint64_t refused;             /* connections refused since the last log line */
	uint64_t refused_log_ns;
	char refused_why[256];
	struct event *sweep_ev;
	uint64_t next_conn_id;

	struct event *mail_ev;
	struct event *sigterm_ev, *sigint_ev;
	struct event *status_ev, *watchdog_ev, *drain_ev;
	uint64_t watchdog_usec;

	bool ready;
	uint64_t drain_flush_start;   /* 0 until the engines are gone */
	int exit_code;
	char last_status[256];
};

static void resume_accepting(struct exl_server *s);

static void on_conn_closed(evutil_socket_t fd, short what, void *arg)
{
	struct exl_server *s = arg;

	(void)fd;
	(void)what;
	if (s->accept_paused)
		resume_accepting(s);
}

static void want_retry(struct exl_server *s)
{
	struct timeval tv = { 0, EXL_LOOP_RETRY_MS * 1000 };

	if (!s->lp.retry_armed) {
		evtimer_add(s->lp.retry_ev, &tv);
		s->lp.retry_armed = true;
	}
}

static void notify_status(struct exl_server *s, const char *status)
{
	if (!strcmp(status, s->last_status))
		return;
	snprintf(s->last_status, sizeof(s->last_status), "%s", status);
	sd_notifyf(0, "STATUS=%s", status);
}

static void check_startup(struct exl_server *s)
{
	char err[600];

	if (s->ready || s->lp.draining)
		return;
	if (exl_registry_startup_failed(s->lp.reg, err, sizeof(err))) {
		exl_log(EXL_LOG_ERR, "start-up model failed; exiting: %s", err);
		sd_notifyf(0, "STATUS=failed: %s", err);
		s->exit_code = 1;
		s->lp.draining = true;
		exl_registry_shutdown(s->lp.reg);
		event_active(s->drain_ev, EV_TIMEOUT, 0);
		return;
	}
	if (exl_registry_startup_pending(s->lp.reg))
		return;
	s->ready = true;
	sd_notify(0, "READY=1");
	exl_log(EXL_LOG_INFO, "ready");
	event_active(s->status_ev, EV_TIMEOUT, 0);
}

static void on_mail(evutil_socket_t fd, short what, void *arg)
{
	struct exl_server *s = arg;
	struct exl_mail *m = exl_mailbox_take(&s->lp.mail);

	(void)fd;
	(void)what;
	while (m) {
		struct exl_mail *next = m->next;
		struct exl_conn *c;
		char st[160];

		switch (m->kind) {
		case EXL_MAIL_SINK_OUT:
			c = m->u.sink->conn;
			if (c) {
				exl_conn_flush_sink(c);
			} else if (m->u.sink->http) {
				exl_http_flush_sink(m->u.sink->http);
			} else {
				/* the connection is gone: drop what it was sent */
				struct exl_outmsg *o = exl_sink_take_out(m->u.sink, NULL);
				while (o) {
					struct exl_outmsg *n = o->next;
					free(o);
					o = n;
				}
			}
			exl_sink_unref(m->u.sink);
			break;
		case EXL_MAIL_SINK_PENDING:
			c = m->u.sink->conn;
			if (c && exl_conn_retry_pending(c)) {
				c->retry_wanted = true;
				want_retry(s);
			}
			exl_sink_unref(m->u.sink);
			break;
		case EXL_MAIL_LOAD_PROGRESS:
			exl_registry_on_progress(s->lp.reg, m->u.load.entry, m->u.load.done,
						 m->u.load.total);
			if (!s->ready && m->u.load.total) {
				snprintf(st, sizeof(st), "loading %s: %llu%%", m->u.load.entry->name,
					 (unsigned long long)(m->u.load.done * 100 / m->u.load.total));
				notify_status(s, st);
			}
			break;
		case EXL_MAIL_LOAD_DONE:
			exl_registry_on_load_done(s->lp.reg, m->u.load.entry);
			check_startup(s);
			break;
		case EXL_MAIL_ENGINE_EXITED:
			exl_registry_on_engine_exited(s->lp.reg, m->u.engine);
			break;
		case EXL_MAIL_PREP_DONE:
			/* A request of the HTTP front's, unless it ended (then
			 * conn.c drops it as it does a closed connection's). */
			if (m->u.prep->sink->http) {
				exl_http_prep_done(s->http, m->u.prep);
				exl_conn_prep_room(&s->lp);
			} else {
				exl_conn_prep_done(&s->lp, m->u.prep);
			}
			exl_http_prep_room(s->http);
			break;
		}
		free(m);
		m = next;
	}
}

/* ---- timers ---- */

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
	struct exl_server *s = arg;
	bool again = false;

	(void)fd;
	(void)what;
	s->lp.retry_armed = false;
	for (struct exl_conn *c = s->lp.conns; c; c = c->next) {
		if (!c->retry_wanted)
			continue;
		c->retry_wanted = exl_conn_retry_pending(c);
		again |= c->retry_wanted;
	}
	if (again)
		want_retry(s);
}

static void on_status(evutil_socket_t fd, short what, void *arg)
{
	struct exl_server *s = arg;
	int n_models, jobs;
	double tok_s;
	char st[256];

	(void)fd;
	(void)what;
	if (!s->ready || s->lp.draining)
		return;
	exl_registry_check_files(s->lp.reg);
	exl_registry_totals(s->lp.reg, &n_models, &jobs, &tok_s);
	snprintf(st, sizeof(st), "%d model%s, %d job%s, %.1f tok/s, %d connection%s", n_models,
		 n_models == 1 ? "" : "s", jobs, jobs == 1 ? "" : "s", tok_s, s->lp.n_conns,
		 s->lp.n_conns == 1 ? "" : "s");
	notify_status(s, st);
}

static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
	struct exl_server *s = arg;

	(void)fd;
	(void)what;
	/* Pinged only while every engine thread turns its loop: a stuck
	 * forward pass lets systemd restart us. */
	if (exl_registry_heartbeats_ok(s->lp.reg, s->watchdog_usec * 1000 / 2))
		sd_notify(0, "WATCHDOG=1");
	else
		exl_log(EXL_LOG_WARN, "an engine thread has not turned its loop for %.1f s",
			(double)s->watchdog_usec / 2e6);
}

/* ---- connections ---- */

/* Refused connections are logged once per REFUSAL_LOG_MS with a count: a
 * client that reconnects in a loop must not fill the journal. */
static void note_refusal(struct exl_server *s, const char *why)
{
	uint64_t now = exl_now_ns();

	s->refused++;
	snprintf(s->refused_why, sizeof(s->refused_why), "%s", why);
	if (s->refused_log_ns && now - s->refused_log_ns < REFUSAL_LOG_MS * 1000000ull)
		return;
	exl_log(EXL_LOG_WARN, "refused %llu connection%s (last: %s)", (unsigned long long)s->refused,
		s->refused == 1 ? "" : "s", s->refused_why);
	s->refused = 0;
	s->refused_log_ns = now;
}

static void resume_accepting(struct exl_server *s)
{
	s->accept_paused = false;
	evtimer_del(s->accept_resume_ev);
	if (s->listen_ev && event_add(s->listen_ev, NULL))
		exl_log(EXL_LOG_ERR, "re-enabling the listener failed");
}

static void on_accept_resume(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	resume_accepting(arg);
}

/* accept4 failed for want of descriptors.  The listening socket stays
 * readable, so accepting again at once would spin a core: the spare
 * descriptor is given up to take one waiting client and tell it why, and
 * accepting pauses until a connection closes or ACCEPT_PAUSE_MS pass
 * (as Redis and libuv do). */
static void out_of_fds(struct exl_server *s, int lfd, int err)
{
	struct timeval tv = { 0, ACCEPT_PAUSE_MS * 1000 };
	char why[160];

	snprintf(why, sizeof(why), "accept: %s with %d connections open; raise LimitNOFILE "
		 "or lower max_connections", strerror(err), s->lp.n_conns);
	/* the clients waiting in the backlog, a few at a time */
	for (int i = 0; i < 64 && s->spare_fd >= 0; i++) {
		close(s->spare_fd);
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0)
			exl_conn_refuse(fd, EXL_E_LIMIT, "exld is out of file descriptors; try again");
		s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			break;
	}
	note_refusal(s, why);
	if (!s->accept_paused) {
		s->accept_paused = true;
		event_del(s->listen_ev);
	}
	evtimer_add(s->accept_resume_ev, &tv);
}

/* The most connections one uid may hold: max_connections_per_uid, and never
 * the connections_reserved that other uids keep (at most half of
 * max_connections, so a small max_connections needs no second setting). */
static int uid_connection_limit(const struct exl_config *cfg)
{
	int reserved = cfg->connections_reserved < cfg->max_connections / 2 ?
			       cfg->connections_reserved : cfg->max_connections / 2;
	int most = cfg->max_connections - reserved;

	if (cfg->max_connections_per_uid && cfg->max_connections_per_uid < most)
		return cfg->max_connections_per_uid;
	return most;
}

/* Whether a new connection of uid may stay; why not in why. */
static bool admit_connection(struct exl_server *s, uid_t uid, char *why, size_t whylen)
{
	struct exl_uid_stats *u;
	int limit = uid_connection_limit(&s->lp.cfg);

	if (s->lp.draining) {
		snprintf(why, whylen, "exld is shutting down");
		return false;
	}
	if (s->lp.n_conns >= s->lp.cfg.max_connections) {
		snprintf(why, whylen, "exld has max_connections (%d) open", s->lp.cfg.max_connections);
		return false;
	}
	if (uid == (uid_t)-1) {
		snprintf(why, whylen, "SO_PEERCRED: %s", strerror(errno));
		return false;
	}
	u = exl_uid_stats_get(&s->lp.uids, uid);
	if (!u) {
		snprintf(why, whylen, "out of memory");
		return false;
	}
	if (u->conns >= limit) {
		snprintf(why, whylen, "uid %u already has %d connections (max_connections_per_uid %d, "
			 "max_connections %d less connections_reserved)", (unsigned)uid, u->conns,
			 s->lp.cfg.max_connections_per_uid, s->lp.cfg.max_connections);
		return false;
	}
	return true;
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
	struct exl_server *s = arg;
	char err[256];

	(void)what;
	for (int i = 0; i < 64; i++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE) {
				out_of_fds(s, lfd, errno);
				return;
			}
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				exl_log(EXL_LOG_WARN, "accept: %s", strerror(errno));
			return;
		}
		uid_t uid;
		pid_t pid;

		/* The uid is known at accept (SO_PEERCRED), so a uid over its
		 * limit is refused before it holds anything. */
		exl_conn_peer_cred(fd, &uid, &pid);
		if (!admit_connection(s, uid, err, sizeof(err))) {
			exl_conn_refuse(fd, EXL_E_LIMIT, err);
			note_refusal(s, err);
			continue;
		}
		struct exl_conn *c = exl_conn_create(&s->lp, fd, ++s->next_conn_id, err, sizeof(err));
		if (!c) {
			exl_conn_refuse(fd, EXL_E_INTERNAL, err);
			note_refusal(s, err);
			continue;
		}
		exl_log(EXL_LOG_DEBUG, "conn %llu: uid %u pid %d", (unsigned long long)c->id,
			(unsigned)c->uid, (int)c->pid);
	}
}

/* Connections whose first request, or the rest of a started message, is
 * overdue (request_timeout_ms) are closed: an idle socket holds no memory,
 * but a half-sent message holds up to max_message. */
static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
	struct exl_server *s = arg;
	uint64_t now = exl_now_ns(), timeout = (uint64_t)s->lp.cfg.request_timeout_ms * 1000000ull;
	struct exl_conn *c = s->lp.conns;

	(void)fd;
	(void)what;
	while (c) {
		struct exl_conn *next = c->next;

		exl_conn_timed_out(c, now, timeout);
		c = next;
	}
}

/* Soft RLIMIT_NOFILE up to the hard one: systemd's default soft limit is
 * 1024, as is max_connections, and each connection takes a descriptor. */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		rlim_t old = rl.rlim_cur;

		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl))
			exl_log(EXL_LOG_WARN, "raising the open file limit from %llu: %s",
				(unsigned long long)old, strerror(errno));
	}
	if (!getrlimit(RLIMIT_NOFILE, &rl))
		exl_log(EXL_LOG_INFO, "open file limit %llu", (unsigned long long)rl.rlim_cur);
}

static int bind_socket(struct exl_server *s, char *err, size_t errlen)
{
	const char *path = s->lp.cfg.socket_path;
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct stat st;

	if (strlen(path) >= sizeof(addr.sun_path)) {
		snprintf(err, errlen, "socket path %s is too long", path);
		return -1;
	}
	memcpy(addr.sun_path, path, strlen(path) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(err, errlen, "socket: %s", strerror(errno));
		return -1;
	}
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "%s exists and is not a socket", path);
			goto fail;
		}
		int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe >= 0 && connect(probe, (struct sockaddr *)&addr, sizeof(addr)) == 0) {
			close(probe);
			snprintf(err, errlen, "%s: another daemon is listening there", path);
			goto fail;
		}
		if (probe >= 0)
			close(probe);
		unlink(path); /* stale: nobody listens */
	}
	mode_t old = umask(0777 & ~s->lp.cfg.socket_mode);
	int rc = bind(fd, (struct sockaddr *)&addr, sizeof(addr));
	umask(old);
	if (rc < 0) {
		snprintf(err, errlen, "bind %s: %s", path, strerror(errno));
		goto fail;
	}
	s->own_socket = true;
	if (chmod(path, s->lp.cfg.socket_mode) < 0 || listen(fd, 128) < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return -1;
}

static int open_listener(struct exl_server *s, char *err, size_t errlen)
{
	int n = sd_listen_fds(1);

	if (n < 0) {
		snprintf(err, errlen, "sd_listen_fds: %s", strerror(-n));
		return -1;
	}
	if (n > 1) {
		snprintf(err, errlen, "systemd passed %d sockets; exld takes one", n);
		return -1;
	}
	if (n == 1) {
		int fd = SD_LISTEN_FDS_START;
		if (sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0) <= 0) {
			snprintf(err, errlen, "the socket systemd passed is not a listening Unix stream socket");
			return -1;
		}
		if (evutil_make_socket_nonblocking(fd) < 0 || evutil_make_socket_closeonexec(fd) < 0) {
			snprintf(err, errlen, "setting up the passed socket: %s", strerror(errno));
			return -1;
		}
		exl_log(EXL_LOG_INFO, "listening on the socket systemd passed");
		return fd;
	}
	int fd = bind_socket(s, err, errlen);
	if (fd >= 0)
		exl_log(EXL_LOG_INFO, "listening on %s (mode %04o)", s->lp.cfg.socket_path,
			s->lp.cfg.socket_mode);
	return fd;
}

static void close_listener(struct exl_server *s)
{
	if (s->listen_ev) {
		event_free(s->listen_ev);
		s->listen_ev = NULL;
	}
	if (s->listen_fd >= 0) {
		close(s->listen_fd);
		s->listen_fd = -1;
		if (s->own_socket)
			unlink(s->lp.cfg.socket_path);
	}
}

/* ---- drain ---- */

static void on_drain(evutil_socket_t fd, short what, void *arg)
{
	struct exl_server *s = arg;
	struct timeval tv = { 0, DRAIN_POLL_MS * 1000 };

	(void)fd;
	(void)what;
	if (!exl_registry_empty(s->lp.reg)) {
		evtimer_add(s->drain_ev, &tv);
		return;
	}
	/* Every job has ended and its result is queued: clients get up to
	 * drain_timeout_ms to take them. */
	if (!s->drain_flush_start)
		s->drain_flush_start = exl_now_ns();
	int busy = 0;
	for (struct exl_conn *c = s->lp.conns; c; c = c->next) {
		if (c->retry_wanted)
			c->retry_wanted = exl_conn_retry_pending(c);
		busy += c->retry_wanted || !exl_conn_output_empty(c);
	}
	busy += exl_http_busy(s->http);
	if (busy && exl_now_ns() - s->drain_flush_start <
			    (uint64_t)s->lp.cfg.drain_timeout_ms * 1000000ull) {
		evtimer_add(s->drain_ev, &tv);
		return;
	}
	if (busy)
		exl_log(EXL_LOG_WARN, "%d client%s had not taken %s results within "
			"drain_timeout_ms (%d); they are lost", busy, busy == 1 ? "" : "s",
			busy == 1 ? "its" : "their", s->lp.cfg.drain_timeout_ms);
	else
		exl_log(EXL_LOG_INFO, "every result was delivered");
	event_base_loopbreak(s->lp.base);
}

static void start_drain(struct exl_server *s, const char *why)
{
	if (s->lp.draining) {
		exl_log(EXL_LOG_INFO, "%s while draining; still waiting for jobs to end", why);
		return;
	}
	exl_log(EXL_LOG_INFO, "%s: draining", why);
	s->lp.draining = true;
	sd_notify(0, "STOPPING=1\nSTATUS=draining: ending jobs");
	close_listener(s);
	exl_http_stop_listening(s->http);
	exl_registry_shutdown(s->lp.reg);
	event_active(s->drain_ev, EV_TIMEOUT, 0);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	(void)what;
	start_drain(arg, sig == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* ---- run ---- */

static void free_server(struct exl_server *s)
{
	/* its requests cancel their jobs through the registry */
	exl_http_free(s->http);
	while (s->lp.conns)
		exl_conn_close(s->lp.conns);
	close_listener(s);
	/* Before the models go: the pool's threads may use them.  Idle by
	 * now (each engine waited for its model's preparations). */
	exl_prep_pool_free(s->lp.prep);
	/* The engines are gone (drained) or never started. */
	exl_registry_free(s->lp.reg);
	/* Mail posted last (results of the drain) holds sink references. */
	struct exl_mail *m = s->lp.mail.fd >= 0 ? exl_mailbox_take(&s->lp.mail) : NULL;
	while (m) {
		struct exl_mail *next = m->next;
		if (m->kind == EXL_MAIL_SINK_OUT || m->kind == EXL_MAIL_SINK_PENDING)
			exl_sink_unref(m->u.sink);
		else if (m->kind == EXL_MAIL_PREP_DONE)
			exl_prep_free(m->u.prep);
		free(m);
		m = next;
	}
	/* Freeing a signal event puts back the default action, and a second
	 * SIGTERM (a user's, a supervisor's) in the time left before exit
	 * would then kill a daemon that is ending cleanly.  Every other thread
	 * is joined by now, so blocking them here and ignoring them after
	 * covers the whole process; a pending one is dropped by SIG_IGN. */
	sigset_t stop_sigs;
	sigemptyset(&stop_sigs);
	sigaddset(&stop_sigs, SIGTERM);
	sigaddset(&stop_sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stop_sigs, NULL);
	struct event *evs[] = { s->mail_ev, s->sigterm_ev, s->sigint_ev, s->lp.retry_ev,
				s->lp.closed_ev, s->status_ev, s->watchdog_ev, s->drain_ev,
				s->accept_resume_ev, s->sweep_ev };
	for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
		if (evs[i])
			event_free(evs[i]);
	signal(SIGTERM, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	exl_mailbox_destroy(&s->lp.mail);
	if (s->spare_fd >= 0)
		close(s->spare_fd);
	exl_uid_table_free(&s->lp.uids);
	if (s->lp.base)
		event_base_free(s->lp.base);
	free(s);
}

int exl_server_run(const struct exl_config *cfg)
{
	struct exl_server *s = calloc(1, sizeof(*s));
	char err[600];
	int rc = 1;

	if (!s) {
		exl_log(EXL_LOG_ERR, "out of memory");
		return 1;
	}
	s->lp.cfg = *cfg;
	s->listen_fd = -1;
	s->lp.mail.fd = -1;
	s->lp.start_ns = exl_now_ns();
	raise_fd_limit();
	s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	signal(SIGPIPE, SIG_IGN);

	if (exl_mailbox_init(&s->lp.mail, err, sizeof(err))) {
		exl_log(EXL_LOG_ERR, "%s", err);
		goto out;
	}
	s->lp.base = event_base_new();
	s->lp.reg = exl_registry_create(&s->lp.mail, &s->lp.cfg);
	if (!s->lp.base || !s->lp.reg) {
		exl_log(EXL_LOG_ERR, "setting up the event loop failed");
		goto out;
	}
	s->lp.prep = exl_prep_pool_create(&s->lp.mail, err, sizeof(err));
	if (!s->lp.prep) {
		exl_log(EXL_LOG_ERR, "%s", err);
		goto out;
	}
	s->mail_ev = event_new(s->lp.base, s->lp.mail.fd, EV_READ | EV_PERSIST, on_mail, s);
	s->sigterm_ev = evsignal_new(s->lp.base, SIGTERM, on_signal, s);
	s->sigint_ev = evsignal_new(s->lp.base, SIGINT, on_signal, s);
	s->lp.retry_ev = evtimer_new(s->lp.base, on_retry, s);
	s->lp.closed_ev = event_new(s->lp.base, -1, 0, on_conn_closed, s);
	s->status_ev = event_new(s->lp.base, -1, EV_PERSIST, on_status, s);
	s->drain_ev = evtimer_new(s->lp.base, on_drain, s);
	s->accept_resume_ev = evtimer_new(s->lp.base, on_accept_resume, s);
	s->sweep_ev = event_new(s->lp.base, -1, EV_PERSIST, on_sweep, s);
	int sweep_ms = s->lp.cfg.request_timeout_ms / 4;
	struct timeval sweep_tv = { sweep_ms / 1000, (sweep_ms % 1000) * 1000 };
	if (!s->mail_ev || !s->sigterm_ev || !s->sigint_ev || !s->lp.retry_ev || !s->lp.closed_ev ||
	    !s->status_ev ||
	    !s->drain_ev || !s->accept_resume_ev || !s->sweep_ev || event_add(s->mail_ev, NULL) ||
	    event_add(s->sigterm_ev, NULL) || event_add(s->sigint_ev, NULL) ||
	    event_add(s->sweep_ev, &sweep_tv)) {
		exl_log(EXL_LOG_ERR, "setting up the event loop failed");
		goto out;
	}
	struct timeval status_tv = { STATUS_MS / 1000, (STATUS_MS % 1000) * 1000 };
	event_add(s->status_ev, &status_tv);

	s->listen_fd = open_listener(s, err, sizeof(err));
	if (s->listen_fd < 0) {
		exl_log(EXL_LOG_ERR, "%s", err);
		goto out;
	}
	s->listen_ev = event_new(s->lp.base, s->listen_fd, EV_READ | EV_PERSIST, on_accept, s);
	if (!s->listen_ev || event_add(s->listen_ev, NULL)) {
		exl_log(EXL_LOG_ERR, "setting up the listener failed");
		goto out;
	}
	if (exl_http_start(&s->lp, &s->http, err, sizeof(err))) {
		exl_log(EXL_LOG_ERR, "%s", err);
		goto out;
	}

	uint64_t usec = 0;
	if (sd_watchdog_enabled(0, &usec) > 0 && usec) {
		struct timeval tv = { (time_t)(usec / 2 / 1000000), (suseconds_t)(usec / 2 % 1000000) };
		s->watchdog_usec = usec;
		s->watchdog_ev = event_new(s->lp.base, -1, EV_PERSIST, on_watchdog, s);
		if (!s->watchdog_ev || event_add(s->watchdog_ev, &tv)) {
			exl_log(EXL_LOG_ERR, "setting up the watchdog timer failed");
			goto out;
		}
		exl_log(EXL_LOG_INFO, "watchdog: pinging every %.1f s", (double)usec / 2e6);
	}

	for (int i = 0; i < cfg->n_load; i++) {
		if (exl_registry_load(s->lp.reg, cfg->load[i], NULL, NULL, true, err, sizeof(err))) {
			exl_log(EXL_LOG_ERR, "start-up model: %s", err);
			sd_notifyf(0, "STATUS=failed: %s", err);
			s->lp.draining = true;
			exl_registry_shutdown(s->lp.reg);
			/* Loads already started finish first; then out. */
			while (!exl_registry_empty(s->lp.reg))
				event_base_loop(s->lp.base, EVLOOP_ONCE);
			goto out;
		}
	}
	check_startup(s);
	event_base_dispatch(s->lp.base);
	rc = s->exit_code;
	exl_log(EXL_LOG_INFO, rc ? "stopped after an error" : "stopped");
out:
	for (struct exl_conn *c = s->lp.conns; c; c = c->next)
		if (c->sink->ring)
			exl_ring_shutdown(c->sink->ring);
	free_server(s);
	return rc;
}
