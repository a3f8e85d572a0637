/* The allowed values of a generate request's numeric options, in one
 * table that both sides use: the daemon's request decoder
 * (daemon/server/wire/protocol.c) refuses a value outside them, and the command lines
 * (common/cli/gen_options.c: exl generate / chat / bench and exld run) refuse
 * it before anything is sent.  A value one side takes and the other
 * refuses would turn a usage error (exit 2) into a failed request (exit 1)
 * or the reverse, so there is no second copy of these numbers.
 *
 * They are exactly what the generator and the sampler accept
 * (daemon/core/generator/generator.c check_settings, daemon/core/sampler/sampler.c
 * exl_sampler_params_check); tests/unit/test_protocol.c holds the three to
 * each other.  Values only the model can judge (token ids below its
 * vocabulary size) are not here.
 */
#ifndef EXL_GEN_RANGES_H
#define EXL_GEN_RANGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct genrange {
	const char *key;          /* the generate request's key (docs/protocol.md) */
	bool integer;             /* an integer, else a finite number */
	double min, max;          /* inclusive, unless min_open */
	bool min_open;            /* min itself is refused: (min, max] */
	uint32_t only;            /* integers: when nonzero, only the values v < 32 with bit v set */
};

/* The range of key, or NULL for a key without one. */
const struct genrange *genrange_find(const char *key);

/* Whether v is allowed.  v is the value as it goes on the wire: a float
 * option's value after rounding to float, as libexlclient sends it. */
bool genrange_ok(const struct genrange *r, double v);

/* What r allows, for messages: "an integer in [0, 64]", "0 or 2",
 * "a number in (0, 100]". */
void genrange_describe(const struct genrange *r, char *buf, size_t size);

/* Every range, for tests. */
extern const struct genrange genrange_table[];
extern const size_t genrange_count;

#endif
