/* Integration test harness: a real exld process and its notify socket. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

const char *h_models_dir(void)
{
	static char path[1024];
	const char *dir = getenv("EXLD_MODELS");
	struct stat st;

	if (!dir)
		return NULL;
	snprintf(path, sizeof(path), "%s/stories260K.gguf", dir);
	if (stat(path, &st) < 0)
		return NULL;
	return dir;
}

const char *h_exld(void)
{
	static char path[1024];
	const char *b = getenv("EXLD_BUILDDIR");

	snprintf(path, sizeof(path), "%s/daemon/exld", b ? b : ".");
	return path;
}

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

int h_prepare(struct daemon *d)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };

	memset(d, 0, sizeof(*d));
	d->pid = -1;
	d->notify_fd = -1;
	pthread_mutex_init(&d->notes_mu, NULL);
	atomic_init(&d->notify_th_stop, false);
	snprintf(d->dir, sizeof(d->dir), "/tmp/exld-test-XXXXXX");
	if (!mkdtemp(d->dir)) {
		perror("mkdtemp");
		return -1;
	}
	snprintf(d->sock, sizeof(d->sock), "%s/exld.sock", d->dir);
	snprintf(d->notify, sizeof(d->notify), "%s/notify.sock", d->dir);
	d->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", d->notify);
	if (d->notify_fd < 0 || bind(d->notify_fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("notify socket");
		return -1;
	}
	return 0;
}

/* Appends one datagram, if one came, to d->notes; false when none came
 * within timeout_ms. */
static bool read_note(struct daemon *d, int timeout_ms)
{
	struct pollfd p = { .fd = d->notify_fd, .events = POLLIN };
	char buf[1024];

	if (poll(&p, 1, timeout_ms) <= 0)
		return false;
	ssize_t n = recv(d->notify_fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
	if (n <= 0)
		return true;
	buf[n] = 0;
	pthread_mutex_lock(&d->notes_mu);
	size_t used = strlen(d->notes);
	snprintf(d->notes + used, sizeof(d->notes) - used, "%s\n", buf);
	pthread_mutex_unlock(&d->notes_mu);
	return true;
}

static void *notify_main(void *arg)
{
	struct daemon *d = arg;

	while (!atomic_load(&d->notify_th_stop))
		read_note(d, 100);
	return NULL;
}

int h_spawn(struct daemon *d, char *const argv[])
{
	char log[320];

	snprintf(log, sizeof(log), "%s/daemon.log", d->dir);
	d->pid = fork();
	if (d->pid < 0) {
		perror("fork");
		return -1;
	}
	if (d->pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
		if (fd >= 0) {
			dup2(fd, 2);
			close(fd);
		}
		setenv("NOTIFY_SOCKET", d->notify, 1);
		execv(argv[0], argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	if (!d->notify_th_started && d->notify_fd >= 0) {
		int rc = pthread_create(&d->notify_th, NULL, notify_main, d);

		if (rc) {
			fprintf(stderr, "starting the notify reader: %s\n", strerror(rc));
			return -1;
		}
		d->notify_th_started = true;
	}
	return 0;
}

int h_start(struct daemon *d, const char *model, const char *const *extra)
{
	return h_start_wrapped(d, NULL, model, extra);
}

int h_start_wrapped(struct daemon *d, const char *const *wrapper, const char *model,
		    const char *const *extra)
{
	char *argv[64];
	int n = 0;

	for (int i = 0; wrapper && wrapper[i] && n < 8; i++)
		argv[n++] = (char *)wrapper[i];
	argv[n++] = (char *)h_exld();
	argv[n++] = "--config";
	argv[n++] = "/dev/null";
	argv[n++] = "--socket";
	argv[n++] = d->sock;
	argv[n++] = "--models";
	argv[n++] = (char *)h_models_dir();
	argv[n++] = "--threads";
	argv[n++] = "1";
	if (model) {
		argv[n++] = "--load";
		argv[n++] = (char *)model;
	}
	for (int i = 0; extra && extra[i] && n < 62; i++)
		argv[n++] = (char *)extra[i];
	argv[n] = NULL;
	if (h_spawn(d, argv))
		return -1;
	if (!h_wait_notify(d, "READY=1", 30000)) {
		fprintf(stderr, "exld did not report READY=1 within 30 s\n");
		return -1;
	}
	return 0;
}

bool h_wait_notify(struct daemon *d, const char *what, int timeout_ms)
{
	long end = now_ms() + timeout_ms;

	for (;;) {
		pthread_mutex_lock(&d->notes_mu);
		bool found = strstr(d->notes, what) != NULL;
		pthread_mutex_unlock(&d->notes_mu);
		long left = end - now_ms();

		if (found)
			return true;
		if (left <= 0)
			return false;
		if (d->notify_th_started)
			usleep(5000);
		else
			read_note(d, (int)left);
	}
}

/* A sanitizer build's daemon reports into its log and (UBSan) may still
 * exit 0: any report fails the test. */
static int sanitizer_report(struct daemon *d)
{
	char path[320], line[1024];
	int found = 0;

	snprintf(path, sizeof(path), "%s/daemon.log", d->dir);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (strstr(line, "runtime error:") || strstr(line, "Sanitizer")) {
			if (!found)
				fprintf(stderr, "sanitizer report in the daemon's log:\n");
			fputs(line, stderr);
			found = 1;
		}
	}
	fclose(f);
	return found;
}

int h_stop(struct daemon *d)
{
	int status;
	long end = now_ms() + 30000;

	if (d->pid <= 0)
		return -1;
	kill(d->pid, SIGTERM);
	for (;;) {
		pid_t r = waitpid(d->pid, &status, WNOHANG);
		if (r == d->pid)
			break;
		if (now_ms() > end) {
			fprintf(stderr, "exld did not exit within 30 s of SIGTERM\n");
			kill(d->pid, SIGKILL);
			waitpid(d->pid, &status, 0);
			d->pid = -1;
			return -1;
		}
		usleep(10000);
	}
	d->pid = -1;
	if (sanitizer_report(d))
		return -1;
	if (!WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status);
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (type == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

void h_cleanup(struct daemon *d)
{
	char path[400];

	if (d->pid > 0) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, NULL, 0);
	}
	if (d->notify_th_started) {
		atomic_store(&d->notify_th_stop, true);
		pthread_join(d->notify_th, NULL);
		d->notify_th_started = false;
	}
	if (d->notify_fd >= 0)
		close(d->notify_fd);
	snprintf(path, sizeof(path), "%s/daemon.log", d->dir);
	if (getenv("EXLD_TEST_KEEP_LOG")) {
		fprintf(stderr, "daemon log kept in %s\n", path);
		return;
	}
	/* Everything the test put in its private directory (models, configs,
	 * schemas), not a list of names that falls behind the tests. */
	if (!strncmp(d->dir, "/tmp/exld-test-", 15) && !strstr(d->dir, "XXXXXX"))
		nftw(d->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

long h_rss_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

char *h_expected(const char *model_path, const char *prompt, int n)
{
	char nbuf[16];
	int pipefd[2];
	size_t len = 0, cap = 4096;
	char *out = malloc(cap);

	if (!out || pipe(pipefd) < 0) {
		free(out);
		return NULL;
	}
	snprintf(nbuf, sizeof(nbuf), "%d", n);
	pid_t pid = fork();
	if (pid == 0) {
		char *argv[] = { (char *)h_exld(), "run", "--model", (char *)model_path, "--prompt",
				 (char *)prompt, "-n", nbuf, "--temperature", "0", "--threads", "1",
				 NULL };
		dup2(pipefd[1], 1);
		close(pipefd[0]);
		close(pipefd[1]);
		int null = open("/dev/null", O_WRONLY);
		if (null >= 0)
			dup2(null, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	close(pipefd[1]);
	for (;;) {
		if (len + 1024 > cap) {
			char *p = realloc(out, cap *= 2);
			if (!p)
				break;
			out = p;
		}
		ssize_t r = read(pipefd[0], out + len, cap - len - 1);
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	close(pipefd[0]);
	int status;
	waitpid(pid, &status, 0);
	out[len] = 0;
	size_t pl = strlen(prompt);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || len < pl + 1 ||
	    memcmp(out, prompt, pl) || out[len - 1] != '\n') {
		fprintf(stderr, "exld run failed or printed something unexpected: '%s'\n", out);
		free(out);
		return NULL;
	}
	out[len - 1] = 0;
	memmove(out, out + pl, len - pl);
	return out;
}

int h_run_capture(char *const argv[], char *out, size_t cap)
{
	int fd[2], status;
	size_t len = 0;

	if (cap == 0 || pipe(fd))
		return -1;
	pid_t pid = fork();
	if (pid < 0) {
		close(fd[0]);
		close(fd[1]);
		return -1;
	}
	if (pid == 0) {
		dup2(fd[1], 1);
		close(fd[0]);
		close(fd[1]);
		execv(argv[0], argv);
		_exit(127);
	}
	close(fd[1]);
	/* Read to the end even past cap, so the child never blocks on a full
	 * pipe; what does not fit is dropped. */
	for (;;) {
		char sink[4096];
		char *dst = len < cap - 1 ? out + len : sink;
		size_t room = len < cap - 1 ? cap - 1 - len : sizeof(sink);
		ssize_t r = read(fd[0], dst, room);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		if (dst != sink)
			len += (size_t)r;
	}
	close(fd[0]);
	out[len] = 0;
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status);
}

int h_parse_ids(const char *json, int32_t *ids, int cap)
{
	static const char key[] = "\"token_ids\":[";
	const char *p = strstr(json, key);
	int n = 0;

	if (!p)
		return -1;
	p += strlen(key);
	while (*p && *p != ']' && n < cap) {
		char *end;
		long v = strtol(p, &end, 10);

		if (end == p)
			return -1;
		ids[n++] = (int32_t)v;
		p = *end == ',' ? end + 1 : end;
	}
	return n;
}

void h_sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}
