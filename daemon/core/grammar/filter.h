/* Constrained decoding: the hook a grammar, JSON schema or regex engine
 * plugs into so a job only samples tokens it allows.
 *
 * A filter follows one job's generated tokens.  Before each sampling step
 * the generator asks it which tokens may come next (a bitmap over the
 * model's vocabulary); every other token's logit becomes -inf.  After the
 * token is chosen the generator tells the filter with accept().
 *
 * End of generation: when is_complete() says the tokens so far form a
 * complete match, the job's end-of-generation ids are allowed as well (a
 * sampled EOG ends the job with reason stop_token).  If the filter also
 * prefers to end there (prefer_eos) or allows no further token, the job
 * ends at once with reason end_filter.
 *
 * Banned strings rewind a job: the generator then calls reset() and
 * accept()s the kept tokens again, so a filter need not keep history.
 *
 * A filter is used by the job's engine thread only; ops need not be
 * thread-safe.  The job owns its filter after exl_job_create() and calls
 * ops->free() when the job is freed.
 */
#ifndef EXL_FILTER_H
#define EXL_FILTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct exl_filter;

struct exl_filter_ops {
	/* Sets bit t (mask[t / 32] >> (t % 32) & 1) of mask for every token t
	 * that may come next.  mask holds (n_vocab + 31) / 32 words and is
	 * zeroed by the caller.  Returns 0, or -1 with a message (the job then
	 * ends with reason error). */
	int (*allowed)(struct exl_filter *f, uint32_t *mask, int n_vocab,
		       char *err, size_t errlen);
	/* Advances past token; a token allowed() did not allow is an error.
	 * Returns 0, or -1 with a message. */
	int (*accept)(struct exl_filter *f, int32_t token, char *err, size_t errlen);
	/* True when the tokens accepted so far form a complete match. */
	bool (*is_complete)(const struct exl_filter *f);
	/* True when, being complete, the filter wants generation to end rather
	 * than continue (e.g. a JSON value that is closed).  May be NULL
	 * (never prefers). */
	bool (*prefer_eos)(const struct exl_filter *f);
	/* Forgets every accepted token (back to the state at creation). */
	int (*reset)(struct exl_filter *f, char *err, size_t errlen);
	void (*free)(struct exl_filter *f);
};

/* Implementations embed this as their first member (or point priv at
 * their state). */
struct exl_filter {
	const struct exl_filter_ops *ops;
	void *priv;
};

#endif
