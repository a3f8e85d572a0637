/* The producer side of a connection's shared-memory rings (layout and
 * protocol in client/include/exl_wire.h and docs/protocol.md).
 *
 * A ring may be written from several engine threads (one per model the
 * connection has jobs on): exl_ring_write() serialises them with the
 * ring's own mutex.  Everything read from the control page is untrusted
 * and clamped.
 */
#ifndef EXL_RING_H
#define EXL_RING_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "exl_wire.h"

struct exl_ring {
	pthread_mutex_t mu;
	struct exl_ring_hdr *hdr;   /* shared, daemon-writable mapping */
	uint8_t *data;              /* hdr + EXL_RING_HDR_SIZE */
	struct exl_ring_ctrl *ctrl; /* shared with the client */
	size_t map_size;
	uint32_t size;              /* data area bytes, power of two */
	uint32_t max_record;        /* bytes of the largest record, header included */
	uint64_t wpos;              /* == hdr->write_pos, the producer's copy */
	uint32_t poll_epoch_woken;  /* last poll_epoch a socket wake was asked for */
	uint64_t futex_wakes;       /* FUTEX_WAKE calls made (tests, statistics) */
	int data_fd;                /* until handed to the client */
	int ctrl_fd;
};

/* Creates a sealed data ring of data_size bytes (a power of two in
 * [EXL_RING_SIZE_MIN, EXL_RING_SIZE_MAX]) and its control page. */
struct exl_ring *exl_ring_create(uint32_t data_size, char *err, size_t errlen);
/* Unmaps and closes everything (any thread, once nothing writes). */
void exl_ring_free(struct exl_ring *r);
/* Closes the two fds once they have been passed to the client. */
void exl_ring_close_fds(struct exl_ring *r);

enum exl_ring_result {
	EXL_RING_WRITTEN = 0,
	EXL_RING_FULL = 1,   /* no room now; nothing was written */
	EXL_RING_NEVER = 2,  /* larger than the ring can ever hold */
};

/* Writes one logical record of type for job, its payload gathered from
 * iov[0..n_iov), split into records flagged EXL_REC_F_MORE when it is over
 * max_record.  All or nothing.  On EXL_RING_WRITTEN the reader was woken if
 * it sleeps on the futex; *want_socket_wake is set when it sleeps in poll
 * mode and has not been sent a wake for its current poll_epoch. */
enum exl_ring_result exl_ring_write(struct exl_ring *r, uint16_t type, uint64_t job,
				    const struct iovec *iov, int n_iov, bool *want_socket_wake);

/* Bytes a payload of len takes in the ring at worst (fragments and a pad). */
uint64_t exl_ring_need(const struct exl_ring *r, uint64_t len);

/* True when a payload of len bytes would fit now. */
bool exl_ring_has_room(struct exl_ring *r, uint64_t len);

/* Marks a job as paused on this ring: bumps pause_epoch so the client
 * knows to send a resume nudge once it has read. */
void exl_ring_note_pause(struct exl_ring *r);

/* Marks the ring closed (no more records) and wakes a sleeping reader. */
void exl_ring_shutdown(struct exl_ring *r);

#endif
