/* Integration test harness: runs a real exld (from the build directory)
 * on a socket in a private temporary directory, with NOTIFY_SOCKET pointed
 * at a datagram socket the test reads, and computes expected outputs with
 * `exld run`. */
#ifndef EXL_TEST_HARNESS_H
#define EXL_TEST_HARNESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

/* 1 in a build with AddressSanitizer (gcc's macro, clang's feature test):
 * tests scale their sizes and time bounds by it. */
#if defined(__SANITIZE_ADDRESS__)
#define H_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define H_ASAN 1
#endif
#endif
#ifndef H_ASAN
#define H_ASAN 0
#endif

/* Sleeps ms milliseconds, through signals. */
void h_sleep_ms(long ms);

#define SKIP 77

struct daemon {
	pid_t pid;
	char dir[64];         /* private temporary directory */
	char sock[100];       /* the daemon's socket */
	char notify[100];     /* NOTIFY_SOCKET path */
	int notify_fd;
	/* Every notify datagram received, '\n'-separated.  A thread reads the
	 * socket from h_spawn to h_cleanup and appends here: exld sends a
	 * STATUS= line whenever its figures change (every 2 s while it
	 * works), and once the socket's queue (net.unix.max_dgram_qlen, 10)
	 * is full, sd_notify blocks the daemon's event loop. */
	char notes[8192];
	pthread_mutex_t notes_mu;
	pthread_t notify_th;
	bool notify_th_started;
	atomic_bool notify_th_stop;
};

/* Paths from the environment meson sets; NULL when the models are absent. */
const char *h_models_dir(void);
const char *h_exld(void);

/* Makes the directory and the notify socket. */
int h_prepare(struct daemon *d);
/* Starts argv (argv[0] a program path) with NOTIFY_SOCKET set. */
int h_spawn(struct daemon *d, char *const argv[]);
/* Starts exld on d->sock with the test models dir, loading model, plus
 * extra flags (NULL-terminated). */
int h_start(struct daemon *d, const char *model, const char *const *extra);
/* The same under a wrapper that execs its arguments (e.g. prlimit ...),
 * NULL-terminated, at most 8 words. */
int h_start_wrapped(struct daemon *d, const char *const *wrapper, const char *model,
		    const char *const *extra);
/* Waits up to timeout_ms for a notify datagram containing what. */
bool h_wait_notify(struct daemon *d, const char *what, int timeout_ms);
/* SIGTERM and wait: the exit status (or -1 on a signal / timeout). */
int h_stop(struct daemon *d);
void h_cleanup(struct daemon *d);

/* VmRSS of pid in KiB. */
long h_rss_kib(pid_t pid);

/* The completion `exld run` prints for prompt (greedy, n tokens), without
 * the echoed prompt and the final newline.  malloc'ed, NULL on failure. */
char *h_expected(const char *model_path, const char *prompt, int n);

/* Runs argv (argv[0] a path) to its end with stdout in out (at most cap - 1
 * bytes, NUL-terminated; stderr stays the test's): its exit status, or -1
 * when it could not run or was killed. */
int h_run_capture(char *const argv[], char *out, size_t cap);

/* The ids of `exld run --json`'s "token_ids" into ids (at most cap): how
 * many, or -1 when json has none. */
int h_parse_ids(const char *json, int32_t *ids, int cap);

#endif
