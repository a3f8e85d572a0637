/* A server job's replies, stream and result, written to its connection's
 * sink: TOKENS and DONE records in the shared ring, or token / done
 * messages on the socket (deliver.c).  Engine thread, except where said.
 */
#ifndef EXL_DELIVER_H
#define EXL_DELIVER_H

#include <stdbool.h>

struct exl_srv_job;
struct exl_chunk;
struct exl_gen_result;

/* Queues the generate reply for j (accepted). */
void exl_deliver_accepted(struct exl_srv_job *j);
/* Sends an error reply for j's request (not accepted), the job retired
 * first (exl_srv_job_retire); any thread.  j is to be freed after. */
void exl_deliver_refused(struct exl_srv_job *j, int code, const char *message);
/* A chunk of j's stream: EXL_CHUNK_OK, or EXL_CHUNK_PAUSE when its consumer
 * has no room (j->paused set; exl_deliver_has_room says when to resume).
 * A chunk that can never fit the ring ends the job with a message. */
int exl_deliver_chunk(struct exl_srv_job *j, const struct exl_chunk *c);
/* Whether a paused job's consumer has room again. */
bool exl_deliver_has_room(struct exl_srv_job *j);
/* j's result: retires j (exl_srv_job_retire), then sends it.  j stays
 * the caller's to free. */
void exl_deliver_result(struct exl_srv_job *j, const struct exl_gen_result *r);

#endif
