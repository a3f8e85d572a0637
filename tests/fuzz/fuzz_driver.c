/* The deterministic mutation driver of a fuzz target (fuzz_target.h), for
 * builds without libFuzzer: `meson test` runs it for a fixed number of
 * executions in the release and the ASan/UBSan builds.  Execution i
 * mutates one of the target's seeds with a generator seeded from (seed, i)
 * alone, so any execution can be rebuilt on its own (--dump) without
 * running the ones before it.
 *
 *   DRIVER [EXECUTIONS [SEED]]   seeds as they are, then mutations
 *   DRIVER --dump I FILE [SEED]  writes execution I's input to FILE
 *   DRIVER --run FILE...         runs files (a libFuzzer crash-* input)
 *   DRIVER --corpus DIR          writes the seeds, one file each
 *   DRIVER --dict FILE           writes the dictionary for libFuzzer -dict=
 *
 * A broken invariant aborts inside fuzz_one(); the driver then names the
 * execution that did it (from a signal handler, or the sanitizers' death
 * callback) so that --dump can recover the input. */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tests/fuzz/fuzz_target.h"

#if defined(__SANITIZE_ADDRESS__)
#define HAVE_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define HAVE_SANITIZER 1
#endif
#endif

#ifdef HAVE_SANITIZER
void __sanitizer_set_death_callback(void (*callback)(void));
#endif

static const char *prog = "fuzz_driver";
static volatile uint64_t cur_exec = UINT64_MAX;
static uint64_t run_seed;
/* SIGINT or SIGTERM: end after the current execution and say how many ran,
 * so that a long campaign stopped by hand (or by timeout(1)) still has its
 * count. */
static volatile sig_atomic_t stop_asked;

static void on_stop(int sig)
{
	(void)sig;
	stop_asked = 1;
}

/* Async-signal-safe: write(2) and a hand-made number. */
static void put(const char *s)
{
	ssize_t r = write(2, s, strlen(s));
	(void)r;
}

static void put_u64(uint64_t v)
{
	char b[24];
	int i = (int)sizeof(b) - 1;

	b[i] = 0;
	do {
		b[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	put(b + i);
}

static void say_where(void)
{
	uint64_t e = cur_exec;

	if (e == UINT64_MAX)
		return;
	put(prog);
	put(": died in execution ");
	put_u64(e);
	put(" (seed ");
	put_u64(run_seed);
	put("); its input: ");
	put(prog);
	put(" --dump ");
	put_u64(e);
	put(" crash.bin ");
	put_u64(run_seed);
	put("\n");
}

static void on_signal(int sig)
{
	say_where();
	signal(sig, SIG_DFL);
	raise(sig);
}

/* ---- generator: splitmix64 ---- */

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static size_t below(uint64_t *s, size_t n)
{
	return n ? (size_t)(rng_next(s) % n) : 0;
}

/* ---- mutations ---- */

struct buf {
	uint8_t *p;
	size_t len, cap;
};

static const uint8_t interesting8[] = {
	0x00, 0x01, 0x0f, 0x10, 0x1f, 0x20, 0x7f, 0x80, 0x81, 0x8f, 0x90, 0x9f, 0xa0, 0xbf,
	0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc7, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd3,
	0xd4, 0xd8, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xfe, 0xff,
};

static const uint64_t interesting_wide[] = {
	0, 1, 2, 15, 16, 17, 64, 255, 256, 4095, 4096, 4097, 16368, 16384, 32768, 65535, 65536,
	65537, 0x7fffffff, 0x80000000, 0xffffffff, 0x100000000ull, 0x7fffffffffffffffull,
	0x8000000000000000ull, 0xffffffffffffffffull, 0xfffffffffffffff0ull,
};

/* Inserts n bytes at at (or as many as fit). */
static void insert(struct buf *b, size_t at, const uint8_t *src, size_t n)
{
	if (n > b->cap - b->len)
		n = b->cap - b->len;
	if (!n)
		return;
	memmove(b->p + at + n, b->p + at, b->len - at);
	if (src)
		memcpy(b->p + at, src, n);
	else
		memset(b->p + at, 0, n);
	b->len += n;
}

static void erase(struct buf *b, size_t at, size_t n)
{
	if (n > b->len - at)
		n = b->len - at;
	memmove(b->p + at, b->p + at + n, b->len - at - n);
	b->len -= n;
}

static void mutate_once(struct buf *b, uint64_t *s, const struct fuzz_blob *seeds, size_t n_seeds,
			const struct fuzz_blob *dict, size_t n_dict)
{
	size_t at = below(s, b->len + 1);
	size_t n;
	uint8_t tmp[8];

	switch (below(s, 13)) {
	case 0: /* flip a bit */
		if (b->len)
			b->p[below(s, b->len)] ^= (uint8_t)(1u << below(s, 8));
		break;
	case 1: /* a random byte */
		if (b->len)
			b->p[below(s, b->len)] = (uint8_t)rng_next(s);
		break;
	case 2: /* a byte with a meaning in msgpack or as a size */
		if (b->len)
			b->p[below(s, b->len)] = interesting8[below(s, sizeof(interesting8))];
		break;
	case 3: /* a byte nudged */
		if (b->len)
			b->p[below(s, b->len)] += (uint8_t)(below(s, 33) - 16);
		break;
	case 4: { /* a 2-, 4- or 8-byte value, little- or big-endian */
		static const size_t widths[] = { 2, 4, 8 };
		size_t w = widths[below(s, 3)];
		uint64_t v = interesting_wide[below(s, sizeof(interesting_wide) / 8)];
		if (below(s, 4) == 0)
			v += below(s, 33) - 16;
		bool be = below(s, 2);
		if (b->len < w)
			break;
		at = below(s, b->len - w + 1);
		for (size_t i = 0; i < w; i++)
			tmp[i] = (uint8_t)(v >> (8 * (be ? w - 1 - i : i)));
		memcpy(b->p + at, tmp, w);
		break;
	}
	case 5: /* random bytes inserted */
		n = 1 + below(s, 8);
		for (size_t i = 0; i < n; i++)
			tmp[i] = (uint8_t)rng_next(s);
		insert(b, at, tmp, n);
		break;
	case 6: /* a range deleted */
		if (at < b->len)
			erase(b, at, 1 + below(s, below(s, 2) ? 4 : 64));
		break;
	case 7: { /* a range duplicated in place */
		if (!b->len)
			break;
		size_t from = below(s, b->len);
		n = 1 + below(s, b->len - from < 64 ? b->len - from : 64);
		uint8_t *copy = malloc(n);
		if (!copy)
			break;
		memcpy(copy, b->p + from, n);
		insert(b, from, copy, n);
		free(copy);
		break;
	}
	case 8: { /* a range copied over another place */
		if (b->len < 2)
			break;
		size_t from = below(s, b->len), to = below(s, b->len);
		n = 1 + below(s, 32);
		if (n > b->len - from)
			n = b->len - from;
		if (n > b->len - to)
			n = b->len - to;
		memmove(b->p + to, b->p + from, n);
		break;
	}
	case 9: case 10: /* a dictionary entry inserted or written over */
		if (!n_dict)
			break;
		{
			const struct fuzz_blob *d = &dict[below(s, n_dict)];
			if (below(s, 2) || at + d->size > b->len)
				insert(b, at, d->data, d->size);
			else
				memcpy(b->p + at, d->data, d->size);
		}
		break;
	case 11: { /* the tail replaced by another seed's tail */
		const struct fuzz_blob *o = &seeds[below(s, n_seeds)];
		size_t from = below(s, o->size + 1);
		b->len = at;
		insert(b, at, o->data + from, o->size - from);
		break;
	}
	case 12: /* cut short */
		b->len = at;
		break;
	}
}

/* Execution i's input into b.  Executions below n_seeds are the seeds. */
static void make_input(struct buf *b, uint64_t seed, uint64_t i, const struct fuzz_blob *seeds,
		       size_t n_seeds, const struct fuzz_blob *dict, size_t n_dict)
{
	uint64_t s = seed ^ (i * 0xD1B54A32D192ED03ull);

	rng_next(&s);
	const struct fuzz_blob *base = &seeds[i < n_seeds ? i : below(&s, n_seeds)];
	b->len = 0;
	insert(b, 0, base->data, base->size);
	if (i < n_seeds)
		return;
	/* mostly a few edits, now and then a pile of them */
	size_t n = below(&s, 8) ? 1 + below(&s, 4) : 1 + below(&s, 32);
	for (size_t k = 0; k < n; k++)
		mutate_once(b, &s, seeds, n_seeds, dict, n_dict);
}

/* Runs a copy of exactly len bytes, so a read past the end is caught. */
static void run_exact(const uint8_t *p, size_t len)
{
	uint8_t *copy = malloc(len ? len : 1);

	if (!copy) {
		fprintf(stderr, "%s: out of memory\n", prog);
		exit(1);
	}
	if (len)
		memcpy(copy, p, len);
	fuzz_one(copy, len);
	free(copy);
}

static int write_file(const char *path, const uint8_t *p, size_t len)
{
	FILE *f = fopen(path, "wb");

	if (!f || fwrite(p, 1, len, f) != len || fclose(f)) {
		fprintf(stderr, "%s: writing %s: %s\n", prog, path, strerror(errno));
		if (f)
			fclose(f);
		return -1;
	}
	return 0;
}

static int run_files(int argc, char **argv)
{
	for (int i = 0; i < argc; i++) {
		FILE *f = fopen(argv[i], "rb");
		struct buf b = { 0 };
		if (!f) {
			fprintf(stderr, "%s: %s: %s\n", prog, argv[i], strerror(errno));
			return 1;
		}
		for (;;) {
			if (b.len == b.cap) {
				b.cap = b.cap ? 2 * b.cap : 4096;
				uint8_t *q = realloc(b.p, b.cap);
				if (!q) {
					fprintf(stderr, "%s: out of memory\n", prog);
					return 1;
				}
				b.p = q;
			}
			size_t n = fread(b.p + b.len, 1, b.cap - b.len, f);
			if (!n)
				break;
			b.len += n;
		}
		fclose(f);
		printf("%s: %s (%zu bytes)\n", prog, argv[i], b.len);
		fflush(stdout);
		run_exact(b.p, b.len);
		free(b.p);
	}
	printf("%s: %d inputs ran\n", prog, argc);
	return 0;
}

static int write_corpus(const char *dir, const struct fuzz_blob *seeds, size_t n)
{
	char path[4096];

	if (mkdir(dir, 0777) < 0 && errno != EEXIST) {
		fprintf(stderr, "%s: mkdir %s: %s\n", prog, dir, strerror(errno));
		return 1;
	}
	for (size_t i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/seed-%03zu-%s", dir, i, seeds[i].name);
		if (write_file(path, seeds[i].data, seeds[i].size))
			return 1;
	}
	printf("%s: %zu seeds written to %s\n", prog, n, dir);
	return 0;
}

static int write_dict(const char *path, const struct fuzz_blob *dict, size_t n)
{
	FILE *f = fopen(path, "w");

	if (!f) {
		fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(errno));
		return 1;
	}
	for (size_t i = 0; i < n; i++) {
		fprintf(f, "d%zu=\"", i);
		for (size_t k = 0; k < dict[i].size; k++)
			fprintf(f, "\\x%02x", dict[i].data[k]);
		fprintf(f, "\"\n");
	}
	if (fclose(f)) {
		fprintf(stderr, "%s: writing %s: %s\n", prog, path, strerror(errno));
		return 1;
	}
	printf("%s: %zu dictionary entries written to %s\n", prog, n, path);
	return 0;
}

static int usage(void)
{
	fprintf(stderr, "usage: %s [EXECUTIONS [SEED]] | --dump I FILE [SEED] | --run FILE... | "
		"--corpus DIR | --dict FILE\n", prog);
	return 2;
}

static bool parse_u64(const char *s, uint64_t *out)
{
	char *end;

	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || end == s || *end || *s == '-')
		return false;
	*out = v;
	return true;
}

int main(int argc, char **argv)
{
	const struct fuzz_blob *seeds, *dict;
	uint64_t execs = 10000, seed = 1;

	if (argc > 0) {
		const char *slash = strrchr(argv[0], '/');
		prog = slash ? slash + 1 : argv[0];
	}
	size_t n_seeds = fuzz_seeds(&seeds);
	size_t n_dict = fuzz_dict(&dict);
	size_t max_len = fuzz_max_len();
	if (!n_seeds) {
		fprintf(stderr, "%s: the target has no seeds\n", prog);
		return 1;
	}

	if (argc >= 2 && !strcmp(argv[1], "--run"))
		return run_files(argc - 2, argv + 2);
	if (argc == 3 && !strcmp(argv[1], "--corpus"))
		return write_corpus(argv[2], seeds, n_seeds);
	if (argc == 3 && !strcmp(argv[1], "--dict"))
		return write_dict(argv[2], dict, n_dict);

	struct buf b = { .p = malloc(max_len), .cap = max_len };
	if (!b.p) {
		fprintf(stderr, "%s: out of memory\n", prog);
		return 1;
	}
	if (argc >= 2 && !strcmp(argv[1], "--dump")) {
		uint64_t i;
		if ((argc != 4 && argc != 5) || !parse_u64(argv[2], &i) ||
		    (argc == 5 && !parse_u64(argv[4], &seed)))
			return usage();
		make_input(&b, seed, i, seeds, n_seeds, dict, n_dict);
		int rc = write_file(argv[3], b.p, b.len) ? 1 : 0;
		if (!rc)
			printf("%s: execution %llu (seed %llu): %zu bytes written to %s\n", prog,
			       (unsigned long long)i, (unsigned long long)seed, b.len, argv[3]);
		free(b.p);
		return rc;
	}
	if (argc > 3 || (argc >= 2 && !parse_u64(argv[1], &execs)) ||
	    (argc == 3 && !parse_u64(argv[2], &seed)))
		return usage();

	run_seed = seed;
#ifdef HAVE_SANITIZER
	__sanitizer_set_death_callback(say_where);
	signal(SIGABRT, on_signal); /* the sanitizers leave SIGABRT alone */
#else
	signal(SIGABRT, on_signal);
	signal(SIGSEGV, on_signal);
	signal(SIGBUS, on_signal);
	signal(SIGFPE, on_signal);
	signal(SIGILL, on_signal);
#endif
	signal(SIGINT, on_stop);
	signal(SIGTERM, on_stop);
	struct timespec t0, t1;
	uint64_t done = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (; done < execs && !stop_asked; done++) {
		make_input(&b, seed, done, seeds, n_seeds, dict, n_dict);
		cur_exec = done;
		run_exact(b.p, b.len);
	}
	cur_exec = UINT64_MAX;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("%s: %llu executions (%zu seeds, then mutations; seed %llu) in %.1f s%s\n", prog,
	       (unsigned long long)done, n_seeds, (unsigned long long)seed,
	       (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
	       done < execs ? ", stopped by a signal before the count asked for" : "");
	free(b.p);
	return 0;
}
