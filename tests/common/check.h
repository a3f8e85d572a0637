/* The checks of every test program.
 *
 *   CHECK(cond[, fmt, ...])    a failure is reported and counted, and the
 *                              test goes on (main() turns check_failures
 *                              into its exit status)
 *   REQUIRE(cond[, fmt, ...])  a failure is reported and counted, and the
 *                              caller jumps to its "out" label: for steps
 *                              that later ones depend on
 *   FAIL(fmt, ...)             a failure found without a condition
 *
 * Each report is one line on stderr, "FILE:LINE: check failed: COND: MSG".
 * The counters are per translation unit, which is per program: every test
 * program checks in one file. */
#ifndef EXL_TESTS_CHECK_H
#define EXL_TESTS_CHECK_H

#include <stdarg.h>
#include <stdio.h>

static int check_count __attribute__((unused));
static int check_failures __attribute__((unused));

/* fmt is ": " followed by the caller's message, so that a check without a
 * message still passes a format (C11 has no way to drop a comma before an
 * empty __VA_ARGS__) and a message of its own keeps printf checking. */
__attribute__((format(printf, 4, 5)))
static inline void check_failed(const char *file, int line, const char *cond, const char *fmt,
				...)
{
	va_list ap;

	check_failures++;
	fprintf(stderr, "%s:%d: check failed", file, line);
	if (cond)
		fprintf(stderr, ": %s", cond);
	if (fmt[2]) {
		va_start(ap, fmt);
		vfprintf(stderr, fmt, ap);
		va_end(ap);
	}
	fputc('\n', stderr);
}

#define CHECK(cond, ...)                                                                   \
	do {                                                                               \
		check_count++;                                                             \
		if (!(cond))                                                               \
			check_failed(__FILE__, __LINE__, #cond, ": " __VA_ARGS__);         \
	} while (0)

#define REQUIRE(cond, ...)                                                                 \
	do {                                                                               \
		check_count++;                                                             \
		if (!(cond)) {                                                             \
			check_failed(__FILE__, __LINE__, #cond, ": " __VA_ARGS__);         \
			goto out;                                                          \
		}                                                                          \
	} while (0)

#define FAIL(...) check_failed(__FILE__, __LINE__, NULL, ": " __VA_ARGS__)

#endif
