/* The event loop: listening socket (own or systemd's), connections, the
 * mailbox from the other threads, signals, sd_notify and the watchdog. */
#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "daemon/server/conn.h"
#include "daemon/server/engine_thread.h"
#include "daemon/core/util/log.h"
#include "daemon/server/models_registry.h"
#include "daemon/server/prep.h"
#include "daemon/server/ring.h"
#include "daemon/server/server.h"
#include "daemon/server/sink.h"

#define RETRY_MS 2            /* ring records waiting for room are retried this often */
#define STATUS_MS 2000        /* STATUS= line refresh */
#define DRAIN_POLL_MS 20
#define ACCEPT_PAUSE_MS 100   /* out of fds: accepts wait this long, or for a close */
#define REFUSAL_LOG_MS 10000  /* refused connections are logged once per this */

struct exl_server {
	struct exl_config cfg;
	struct event_base *base;
	struct exl_registry *reg;
	struct exl_prep_pool *prep;

	int listen_fd;
	bool own_socket;              /* bound by us: unlink at exit */
	struct event *listen_ev;
	struct event *accept_resume_ev;
	bool accept_paused;           /* out of fds: listen_ev is off */
	int spare_fd;                 /* given up to accept and refuse when out of fds */
	uint64_t refused;             /* connections refused since the last log line */
	uint64_t refused_log_ns;
	char refused_why[256];
	uint64_t pending_bytes;       /* see exl_server_pending_fits */
	struct event *sweep_ev;

	struct exl_conn *conns;
	int n_conns;
	uint64_t next_conn_id;
	uint64_t next_job_id;
	struct exl_uid_stats *uids;

	pthread_mutex_t mail_mu;
	struct exl_mail *mail_head, *mail_tail;
	int mail_fd;
	struct event *mail_ev;

	struct event *sigterm_ev, *sigint_ev;
	struct event *retry_ev, *status_ev, *watchdog_ev, *drain_ev;
	bool retry_armed;
	uint64_t watchdog_usec;

	bool ready;
	bool draining;
	uint64_t drain_flush_start;   /* 0 until the engines are gone */
	int exit_code;
	uint64_t start_ns;
	char last_status[256];
};

/* ---- accessors ---- */

const struct exl_config *exl_server_config(const struct exl_server *s) { return &s->cfg; }
struct exl_registry *exl_server_registry(struct exl_server *s) { return s->reg; }
struct event_base *exl_server_base(struct exl_server *s) { return s->base; }
bool exl_server_draining(const struct exl_server *s) { return s->draining; }
int exl_server_n_connections(const struct exl_server *s) { return s->n_conns; }
uint64_t exl_server_next_job_id(struct exl_server *s) { return ++s->next_job_id; }
struct exl_prep_pool *exl_server_prep_pool(struct exl_server *s) { return s->prep; }

void exl_server_prep_room(struct exl_server *s)
{
	for (struct exl_conn *c = s->conns; c; c = c->next)
		if (c->prep_blocked)
			exl_conn_prep_unblock(c);
}

double exl_server_uptime(const struct exl_server *s)
{
	return (double)(exl_now_ns() - s->start_ns) / 1e9;
}

struct exl_uid_stats *exl_server_uid_stats(struct exl_server *s, uid_t uid)
{
	for (struct exl_uid_stats *u = s->uids; u; u = u->next)
		if (u->uid == uid)
			return u;
	struct exl_uid_stats *u = calloc(1, sizeof(*u));
	if (!u)
		return NULL;
	u->uid = uid;
	atomic_init(&u->jobs, 0);
	u->next = s->uids;
	s->uids = u;
	return u;
}

void exl_server_nudge_engines(struct exl_server *s)
{
	exl_registry_wake_all(s->reg);
}

void exl_server_cancel_sink(struct exl_server *s, struct exl_sink *sink)
{
	exl_registry_cancel_sink(s->reg, sink);
}

bool exl_server_pending_fits(const struct exl_server *s, size_t bytes)
{
	return bytes <= s->cfg.max_pending_bytes &&
	       s->pending_bytes <= s->cfg.max_pending_bytes - bytes;
}

void exl_server_pending_add(struct exl_server *s, int64_t bytes)
{
	s->pending_bytes += (uint64_t)bytes;
}

static void resume_accepting(struct exl_server *s);

void exl_server_conn_closed(struct exl_server *s, struct exl_conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	s->n_conns--;
	/* a descriptor is free again */
	if (s->accept_paused)
		resume_accepting(s);
}

void exl_server_want_retry(struct exl_server *s)
{
	struct timeval tv = { 0, RETRY_MS * 1000 };

	if (!s->retry_armed) {
		evtimer_add(s->retry_ev, &tv);
		s->retry_armed = true;
	}
}

/* ---- mailbox ---- */

void exl_server_post(struct exl_server *s, struct exl_mail *m)
{
	uint64_t one = 1;

	m->next = NULL;
	pthread_mutex_lock(&s->mail_mu);
	if (s->mail_tail)
		s->mail_tail->next = m;
	else
		s->mail_head = m;
	s->mail_tail = m;
	pthread_mutex_unlock(&s->mail_mu);
	if (write(s->mail_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		exl_log(EXL_LOG_ERR, "mailbox eventfd: %s", strerror(errno));
}

bool exl_server_post_sink(struct exl_server *s, enum exl_mail_kind kind, struct exl_sink *sink)
{
	struct exl_mail *m = calloc(1, sizeof(*m));

	if (!m)
		return false;
	m->kind = kind;
	m->sink = sink;
	exl_sink_ref(sink);
	exl_server_post(s, m);
	return true;
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

	if (s->ready || s->draining)
		return;
	if (exl_registry_startup_failed(s->reg, err, sizeof(err))) {
		exl_log(EXL_LOG_ERR, "start-up model failed; exiting: %s", err);
		sd_notifyf(0, "STATUS=failed: %s", err);
		s->exit_code = 1;
		s->draining = true;
		exl_registry_shutdown(s->reg);
		event_active(s->drain_ev, EV_TIMEOUT, 0);
		return;
	}
	if (exl_registry_startup_pending(s->reg))
		return;
	s->ready = true;
	sd_notify(0, "READY=1");
	exl_log(EXL_LOG_INFO, "ready");
	event_active(s->status_ev, EV_TIMEOUT, 0);
}

static void on_mail(evutil_socket_t fd, short what, void *arg)
{
	struct exl_server *s = arg;
	uint64_t v;

	(void)what;
	if (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		exl_log(EXL_LOG_ERR, "mailbox eventfd: %s", strerror(errno));
	pthread_mutex_lock(&s->mail_mu);
	struct exl_mail *m = s->mail_head;
	s->mail_head = s->mail_tail = NULL;
	pthread_mutex_unlock(&s->mail_mu);

	while (m) {
		struct exl_mail *next = m->next;
		struct exl_conn *c = m->sink ? m->sink->conn : NULL;
		char st[160];

		switch (m->kind) {
		case EXL_MAIL_SINK_OUT:
			if (c) {
				exl_conn_flush_sink(c);
			} else {
				/* the connection is gone: drop what it was sent */
				struct exl_outmsg *o = exl_sink_take_out(m->sink, NULL);
				while (o) {
					struct exl_outmsg *n = o->next;
					free(o);
					o = n;
				}
			}
			break;
		case EXL_MAIL_SINK_PENDING:
			if (c && exl_conn_retry_pending(c)) {
				c->retry_wanted = true;
				exl_server_want_retry(s);
			}
			break;
		case EXL_MAIL_LOAD_PROGRESS:
			exl_registry_on_progress(s->reg, m->entry, m->a, m->b);
			if (!s->ready && m->b) {
				snprintf(st, sizeof(st), "loading %s: %llu%%", m->entry->name,
					 (unsigned long long)(m->a * 100 / m->b));
				notify_status(s, st);
			}
			break;
		case EXL_MAIL_LOAD_DONE:
			exl_registry_on_load_done(s->reg, m->entry);
			check_startup(s);
			break;
		case EXL_MAIL_ENGINE_EXITED:
			exl_registry_on_engine_exited(s->reg, (struct exl_engine_thread *)(uintptr_t)m->a);
			break;
		case EXL_MAIL_PREP_DONE:
			exl_conn_prep_done(s, m->prep);
			break;
		}
		if (m->sink)
			exl_sink_unref(m->sink);
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
	s->retry_armed = false;
	for (struct exl_conn *c = s->conns; c; c = c->next) {
		if (!c->retry_wanted)
			continue;
		c->retry_wanted = exl_conn_retry_pending(c);
		again |= c->retry_wanted;
	}
	if (again)
		exl_server_want_retry(s);
}

static void on_status(evutil_socket_t fd, short what, void *arg)
{
	struct exl_server *s = arg;
	int n_models, jobs;
	double tok_s;
	char st[256];

	(void)fd;
	(void)what;
	if (!s->ready || s->draining)
		return;
	exl_registry_check_files(s->reg);
	exl_registry_totals(s->reg, &n_models, &jobs, &tok_s);
	snprintf(st, sizeof(st), "%d model%s, %d job%s, %.1f tok/s, %d connection%s", n_models,
		 n_models == 1 ? "" : "s", jobs, jobs == 1 ? "" : "s", tok_s, s->n_conns,
		 s->n_conns == 1 ? "" : "s");
	notify_status(s, st);
}

static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
	struct exl_server *s = arg;

	(void)fd;
	(void)what;
	/* Pinged only while every engine thread turns its loop: a stuck
	 * forward pass lets systemd restart us. */
	if (exl_registry_heartbeats_ok(s->reg, s->watchdog_usec * 1000 / 2))
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
		 "or lower max_connections", strerror(err), s->n_conns);
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
	int limit = uid_connection_limit(&s->cfg);

	if (s->draining) {
		snprintf(why, whylen, "exld is shutting down");
		return false;
	}
	if (s->n_conns >= s->cfg.max_connections) {
		snprintf(why, whylen, "exld has max_connections (%d) open", s->cfg.max_connections);
		return false;
	}
	if (uid == (uid_t)-1) {
		snprintf(why, whylen, "SO_PEERCRED: %s", strerror(errno));
		return false;
	}
	u = exl_server_uid_stats(s, uid);
	if (!u) {
		snprintf(why, whylen, "out of memory");
		return false;
	}
	if (u->conns >= limit) {
		snprintf(why, whylen, "uid %u already has %d connections (max_connections_per_uid %d, "
			 "max_connections %d less connections_reserved)", (unsigned)uid, u->conns,
			 s->cfg.max_connections_per_uid, s->cfg.max_connections);
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
		struct exl_conn *c = exl_conn_create(s, fd, ++s->next_conn_id, err, sizeof(err));
		if (!c) {
			exl_conn_refuse(fd, EXL_E_INTERNAL, err);
			note_refusal(s, err);
			continue;
		}
		c->next = s->conns;
		if (s->conns)
			s->conns->prev = c;
		s->conns = c;
		s->n_conns++;
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
	uint64_t now = exl_now_ns(), timeout = (uint64_t)s->cfg.request_timeout_ms * 1000000ull;
	struct exl_conn *c = s->conns;

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
	const char *path = s->cfg.socket_path;
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
	mode_t old = umask(0777 & ~s->cfg.socket_mode);
	int rc = bind(fd, (struct sockaddr *)&addr, sizeof(addr));
	umask(old);
	if (rc < 0) {
		snprintf(err, errlen, "bind %s: %s", path, strerror(errno));
		goto fail;
	}
	s->own_socket = true;
	if (chmod(path, s->cfg.socket_mode) < 0 || listen(fd, 128) < 0) {
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
		exl_log(EXL_LOG_INFO, "listening on %s (mode %04o)", s->cfg.socket_path,
			s->cfg.socket_mode);
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
			unlink(s->cfg.socket_path);
	}
}

/* ---- drain ---- */

static void on_drain(evutil_socket_t fd, short what, void *arg)
{
	struct exl_server *s = arg;
	struct timeval tv = { 0, DRAIN_POLL_MS * 1000 };

	(void)fd;
	(void)what;
	if (!exl_registry_empty(s->reg)) {
		evtimer_add(s->drain_ev, &tv);
		return;
	}
	/* Every job has ended and its result is queued: clients get up to
	 * drain_timeout_ms to take them. */
	if (!s->drain_flush_start)
		s->drain_flush_start = exl_now_ns();
	int busy = 0;
	for (struct exl_conn *c = s->conns; c; c = c->next) {
		if (c->retry_wanted)
			c->retry_wanted = exl_conn_retry_pending(c);
		busy += c->retry_wanted || !exl_conn_output_empty(c);
	}
	if (busy && exl_now_ns() - s->drain_flush_start <
			    (uint64_t)s->cfg.drain_timeout_ms * 1000000ull) {
		evtimer_add(s->drain_ev, &tv);
		return;
	}
	if (busy)
		exl_log(EXL_LOG_WARN, "%d client%s had not taken %s results within "
			"drain_timeout_ms (%d); they are lost", busy, busy == 1 ? "" : "s",
			busy == 1 ? "its" : "their", s->cfg.drain_timeout_ms);
	else
		exl_log(EXL_LOG_INFO, "every result was delivered");
	event_base_loopbreak(s->base);
}

static void start_drain(struct exl_server *s, const char *why)
{
	if (s->draining) {
		exl_log(EXL_LOG_INFO, "%s while draining; still waiting for jobs to end", why);
		return;
	}
	exl_log(EXL_LOG_INFO, "%s: draining", why);
	s->draining = true;
	sd_notify(0, "STOPPING=1\nSTATUS=draining: ending jobs");
	close_listener(s);
	exl_registry_shutdown(s->reg);
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
	while (s->conns)
		exl_conn_close(s->conns);
	close_listener(s);
	/* Before the models go: the pool's threads may use them.  Idle by
	 * now (each engine waited for its model's preparations). */
	exl_prep_pool_free(s->prep);
	/* The engines are gone (drained) or never started. */
	exl_registry_free(s->reg);
	/* Mail posted last (results of the drain) holds sink references. */
	struct exl_mail *m = s->mail_head;
	while (m) {
		struct exl_mail *next = m->next;
		if (m->sink)
			exl_sink_unref(m->sink);
		if (m->prep)
			exl_prep_free(m->prep);
		free(m);
		m = next;
	}
	struct event *evs[] = { s->mail_ev, s->sigterm_ev, s->sigint_ev, s->retry_ev,
				s->status_ev, s->watchdog_ev, s->drain_ev, s->accept_resume_ev,
				s->sweep_ev };
	for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
		if (evs[i])
			event_free(evs[i]);
	if (s->mail_fd >= 0)
		close(s->mail_fd);
	if (s->spare_fd >= 0)
		close(s->spare_fd);
	while (s->uids) {
		struct exl_uid_stats *u = s->uids;
		s->uids = u->next;
		free(u);
	}
	if (s->base)
		event_base_free(s->base);
	pthread_mutex_destroy(&s->mail_mu);
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
	s->cfg = *cfg;
	s->listen_fd = -1;
	s->mail_fd = -1;
	s->start_ns = exl_now_ns();
	raise_fd_limit();
	s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	pthread_mutex_init(&s->mail_mu, NULL);
	signal(SIGPIPE, SIG_IGN);

	s->base = event_base_new();
	s->mail_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->reg = exl_registry_create(s, &s->cfg);
	if (!s->base || s->mail_fd < 0 || !s->reg) {
		exl_log(EXL_LOG_ERR, "setting up the event loop failed");
		goto out;
	}
	s->prep = exl_prep_pool_create(s, err, sizeof(err));
	if (!s->prep) {
		exl_log(EXL_LOG_ERR, "%s", err);
		goto out;
	}
	s->mail_ev = event_new(s->base, s->mail_fd, EV_READ | EV_PERSIST, on_mail, s);
	s->sigterm_ev = evsignal_new(s->base, SIGTERM, on_signal, s);
	s->sigint_ev = evsignal_new(s->base, SIGINT, on_signal, s);
	s->retry_ev = evtimer_new(s->base, on_retry, s);
	s->status_ev = event_new(s->base, -1, EV_PERSIST, on_status, s);
	s->drain_ev = evtimer_new(s->base, on_drain, s);
	s->accept_resume_ev = evtimer_new(s->base, on_accept_resume, s);
	s->sweep_ev = event_new(s->base, -1, EV_PERSIST, on_sweep, s);
	int sweep_ms = s->cfg.request_timeout_ms / 4;
	struct timeval sweep_tv = { sweep_ms / 1000, (sweep_ms % 1000) * 1000 };
	if (!s->mail_ev || !s->sigterm_ev || !s->sigint_ev || !s->retry_ev || !s->status_ev ||
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
	s->listen_ev = event_new(s->base, s->listen_fd, EV_READ | EV_PERSIST, on_accept, s);
	if (!s->listen_ev || event_add(s->listen_ev, NULL)) {
		exl_log(EXL_LOG_ERR, "setting up the listener failed");
		goto out;
	}

	uint64_t usec = 0;
	if (sd_watchdog_enabled(0, &usec) > 0 && usec) {
		struct timeval tv = { (time_t)(usec / 2 / 1000000), (suseconds_t)(usec / 2 % 1000000) };
		s->watchdog_usec = usec;
		s->watchdog_ev = event_new(s->base, -1, EV_PERSIST, on_watchdog, s);
		if (!s->watchdog_ev || event_add(s->watchdog_ev, &tv)) {
			exl_log(EXL_LOG_ERR, "setting up the watchdog timer failed");
			goto out;
		}
		exl_log(EXL_LOG_INFO, "watchdog: pinging every %.1f s", (double)usec / 2e6);
	}

	for (int i = 0; i < cfg->n_load; i++) {
		if (exl_registry_load(s->reg, cfg->load[i], NULL, NULL, true, err, sizeof(err))) {
			exl_log(EXL_LOG_ERR, "start-up model: %s", err);
			sd_notifyf(0, "STATUS=failed: %s", err);
			s->draining = true;
			exl_registry_shutdown(s->reg);
			/* Loads already started finish first; then out. */
			while (!exl_registry_empty(s->reg))
				event_base_loop(s->base, EVLOOP_ONCE);
			goto out;
		}
	}
	check_startup(s);
	event_base_dispatch(s->base);
	rc = s->exit_code;
	exl_log(EXL_LOG_INFO, rc ? "stopped after an error" : "stopped");
out:
	for (struct exl_conn *c = s->conns; c; c = c->next)
		if (c->sink->ring)
			exl_ring_shutdown(c->sink->ring);
	free_server(s);
	return rc;
}
