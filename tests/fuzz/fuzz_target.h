/* What a fuzz target that runs two ways provides.  The same file is linked
 * into its libFuzzer program (tests/fuzz/libfuzzer_main.c, clang only,
 * instrumented, open-ended runs by hand) and into its deterministic
 * mutation driver (tests/fuzz/fuzz_driver.c, any compiler, a fixed number
 * of executions under `meson test`), so both test exactly the same thing.
 * See docs/fuzzing.md.
 */
#ifndef EXL_FUZZ_TARGET_H
#define EXL_FUZZ_TARGET_H

#include <stddef.h>
#include <stdint.h>

/* A named byte string: a seed input, or a dictionary entry. */
struct fuzz_blob {
	const char *name;
	const uint8_t *data;
	size_t size;
};

/* Runs one input.  Returns 0; a broken invariant prints what broke on
 * stderr and aborts, as libFuzzer expects.  Must be deterministic: the
 * same input always does the same thing. */
int fuzz_one(const uint8_t *data, size_t size);

/* Valid inputs to start mutating from (the libFuzzer seed corpus is these,
 * written out by the driver's --corpus).  Built on the first call; they
 * live until exit. */
size_t fuzz_seeds(const struct fuzz_blob **out);

/* Byte strings worth splicing into an input (msgpack keys and values,
 * record headers): the driver's insertions, and a libFuzzer -dict file
 * through the driver's --dict. */
size_t fuzz_dict(const struct fuzz_blob **out);

/* The largest input worth making (libFuzzer's -max_len). */
size_t fuzz_max_len(void);

#endif
