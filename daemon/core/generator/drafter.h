/* Proposers for speculative decoding: a draft model, and n-gram lookup in
 * a job's own tokens.
 *
 * A drafter is a second copy of a small model with the target's
 * vocabulary, opened from its GGUF by the engine's owner and then owned by
 * the engine (exl_engine_attach_drafter), which steps it on its own thread
 * between its target passes.  It is a copy and not the loaded model itself
 * because a model's forward pass is not reentrant (its scratch buffers)
 * and a loaded model belongs to its own engine thread; the weights are
 * mapped, so the copy shares them through the page cache and costs only
 * its KV cache and scratch (docs/design-notes.md, "Speculative decoding").
 *
 * Proposals never change a job's output: the engine verifies them with
 * the target (engine.c), so a drafter that errs, runs out of KV pages or
 * goes away only costs speed.
 */
#ifndef EXL_DRAFTER_H
#define EXL_DRAFTER_H

#include <stddef.h>
#include <stdint.h>

struct exl_backend;
struct exl_model;
struct exl_tokenizer;
struct exl_job;
struct exl_drafter;

/* A fingerprint of a vocabulary: its size and every token's bytes and
 * kind.  Two models whose fingerprints agree tokenize and detokenize
 * alike, so one may draft for the other. */
uint64_t exl_vocab_fingerprint(const struct exl_tokenizer *tok, int n_vocab);

/* Opens path on be as the drafter `name` for target: refused, with both
 * sizes or the first token that differs, when the vocabularies differ.
 * Its KV cache holds kv_tokens positions in pages of page_size; a pass
 * takes at most max_batch tokens. */
struct exl_drafter *exl_drafter_open(const char *name, const char *path, struct exl_backend *be,
				     const struct exl_model *target, int kv_tokens, int page_size,
				     int max_batch, char *err, size_t errlen);
void exl_drafter_free(struct exl_drafter *d);
const char *exl_drafter_name(const struct exl_drafter *d);

/* Proposes for jobs[0..n): each job's draft.want tokens after its last
 * one, greedily, into draft.prop / draft.n_prop (fewer when its draft
 * sequence is still catching up on the prompt, when the drafter's cache
 * is full, or after an end-of-generation token).  0, or -1 with a message
 * when a forward pass failed (the proposals are then empty). */
int exl_drafter_propose(struct exl_drafter *d, struct exl_job **jobs, int n, char *err,
			size_t errlen);
/* Gives back the pages of job's draft sequence. */
void exl_drafter_release(struct exl_drafter *d, struct exl_job *job);

/* N-gram lookup: the tokens that followed the latest earlier occurrence of
 * the last m tokens of hist[0..n), for the largest m in max_n..1 that has
 * one; at most want of them into out.  Returns how many. */
int exl_draft_ngram(const int32_t *hist, int n, int max_n, int32_t *out, int want);

#endif
