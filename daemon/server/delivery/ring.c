/* Shared-memory ring, producer side. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "daemon/server/delivery/ring.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

static int make_memfd(const char *name, size_t size, char *err, size_t errlen)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0) {
		snprintf(err, errlen, "memfd_create: %s", strerror(errno));
		return -1;
	}
	if (ftruncate(fd, (off_t)size) < 0) {
		snprintf(err, errlen, "ftruncate memfd to %zu bytes: %s", size, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

static int seal(int fd, unsigned seals, char *err, size_t errlen)
{
	if (fcntl(fd, F_ADD_SEALS, seals) < 0) {
		snprintf(err, errlen, "sealing memfd: %s", strerror(errno));
		return -1;
	}
	return 0;
}

struct exl_ring *exl_ring_create(uint32_t data_size, char *err, size_t errlen)
{
	struct exl_ring *r;
	void *p;

	if (data_size < EXL_RING_SIZE_MIN || data_size > EXL_RING_SIZE_MAX ||
	    (data_size & (data_size - 1))) {
		snprintf(err, errlen, "ring size %u is not a power of two in [%u, %u]", data_size,
			 EXL_RING_SIZE_MIN, EXL_RING_SIZE_MAX);
		return NULL;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	r->data_fd = -1;
	r->ctrl_fd = -1;
	pthread_mutex_init(&r->mu, NULL);
	r->size = data_size;
	r->max_record = data_size / 4;
	r->map_size = (size_t)EXL_RING_HDR_SIZE + data_size;

	r->data_fd = make_memfd("exld-ring", r->map_size, err, errlen);
	if (r->data_fd < 0)
		goto fail;
	p = mmap(NULL, r->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, r->data_fd, 0);
	if (p == MAP_FAILED) {
		snprintf(err, errlen, "mmap ring: %s", strerror(errno));
		goto fail;
	}
	r->hdr = p;
	r->data = (uint8_t *)p + EXL_RING_HDR_SIZE;
	r->hdr->magic = EXL_RING_MAGIC;
	r->hdr->version = EXL_PROTOCOL_VERSION;
	r->hdr->hdr_size = EXL_RING_HDR_SIZE;
	r->hdr->data_size = data_size;
	r->hdr->max_record = r->max_record;
	/* Our writable mapping exists; from here on nobody can make another
	 * one, nor resize the file under our mapping (which would SIGBUS). */
	if (seal(r->data_fd, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL,
		 err, errlen))
		goto fail;

	r->ctrl_fd = make_memfd("exld-ctrl", EXL_CTRL_SIZE, err, errlen);
	if (r->ctrl_fd < 0)
		goto fail;
	p = mmap(NULL, EXL_CTRL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, r->ctrl_fd, 0);
	if (p == MAP_FAILED) {
		snprintf(err, errlen, "mmap control page: %s", strerror(errno));
		goto fail;
	}
	r->ctrl = p;
	if (seal(r->ctrl_fd, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL, err, errlen))
		goto fail;
	return r;
fail:
	exl_ring_free(r);
	return NULL;
}

void exl_ring_close_fds(struct exl_ring *r)
{
	if (r->data_fd >= 0)
		close(r->data_fd);
	if (r->ctrl_fd >= 0)
		close(r->ctrl_fd);
	r->data_fd = -1;
	r->ctrl_fd = -1;
}

void exl_ring_free(struct exl_ring *r)
{
	if (!r)
		return;
	exl_ring_close_fds(r);
	if (r->hdr)
		munmap(r->hdr, r->map_size);
	if (r->ctrl)
		munmap(r->ctrl, EXL_CTRL_SIZE);
	pthread_mutex_destroy(&r->mu);
	free(r);
}

/* Bytes the reader has not consumed, from its untrusted read_pos. */
static uint64_t used_bytes(const struct exl_ring *r)
{
	uint64_t rp = __atomic_load_n(&r->ctrl->read_pos, __ATOMIC_ACQUIRE);

	if (rp > r->wpos)
		return 0; /* claims to have read ahead: its own loss */
	if (r->wpos - rp > r->size)
		return r->size;
	return r->wpos - rp;
}

uint64_t exl_ring_need(const struct exl_ring *r, uint64_t len)
{
	uint64_t frag = r->max_record - sizeof(struct exl_rec_hdr);
	uint64_t n = len ? (len + frag - 1) / frag : 1;

	/* full fragments, the last one, and at most one pad before the end */
	return n * exl_rec_size((uint32_t)(len < frag ? len : frag)) + r->max_record;
}

bool exl_ring_has_room(struct exl_ring *r, uint64_t len)
{
	pthread_mutex_lock(&r->mu);
	bool ok = exl_ring_need(r, len) <= r->size - used_bytes(r);
	pthread_mutex_unlock(&r->mu);
	return ok;
}

/* Copies n bytes from the iovec cursor (*iov, *off) to dst. */
static void iov_copy(uint8_t *dst, const struct iovec **iov, size_t *off, size_t n)
{
	while (n) {
		size_t avail = (*iov)->iov_len - *off;
		if (!avail) {
			(*iov)++;
			*off = 0;
			continue;
		}
		size_t k = avail < n ? avail : n;
		memcpy(dst, (const uint8_t *)(*iov)->iov_base + *off, k);
		dst += k;
		*off += k;
		n -= k;
	}
}

static void put_record(struct exl_ring *r, uint64_t *pos, uint16_t type, uint16_t flags,
		       uint64_t job, uint32_t len, const struct iovec **iov, size_t *off)
{
	uint32_t at = (uint32_t)(*pos & (r->size - 1));
	uint64_t sz = exl_rec_size(len);

	if (at + sz > r->size) {
		struct exl_rec_hdr pad = { .len = r->size - at - (uint32_t)sizeof(pad),
					   .type = EXL_REC_PAD };
		memcpy(r->data + at, &pad, sizeof(pad));
		*pos += r->size - at;
		at = 0;
	}
	struct exl_rec_hdr h = { .len = len, .type = type, .flags = flags, .job = job };
	memcpy(r->data + at, &h, sizeof(h));
	iov_copy(r->data + at + sizeof(h), iov, off, len);
	memset(r->data + at + sizeof(h) + len, 0, sz - sizeof(h) - len);
	*pos += sz;
}

/* The exact bytes the fragments of len take from pos, pads included. */
static uint64_t exact_need(const struct exl_ring *r, uint64_t pos, uint64_t len)
{
	uint64_t frag = r->max_record - sizeof(struct exl_rec_hdr);
	uint64_t total = 0;

	do {
		uint64_t piece = len < frag ? len : frag;
		uint64_t sz = exl_rec_size((uint32_t)piece);
		uint64_t at = (pos + total) & (r->size - 1);
		if (at + sz > r->size)
			total += r->size - at;
		total += sz;
		len -= piece;
	} while (len);
	return total;
}

enum exl_ring_result exl_ring_write(struct exl_ring *r, uint16_t type, uint64_t job,
				    const struct iovec *iov, int n_iov, bool *want_socket_wake)
{
	uint64_t len = 0;
	uint64_t frag = r->max_record - sizeof(struct exl_rec_hdr);

	*want_socket_wake = false;
	for (int i = 0; i < n_iov; i++)
		len += iov[i].iov_len;
	if (exl_ring_need(r, len) > r->size)
		return EXL_RING_NEVER;

	pthread_mutex_lock(&r->mu);
	if (exact_need(r, r->wpos, len) > r->size - used_bytes(r)) {
		pthread_mutex_unlock(&r->mu);
		return EXL_RING_FULL;
	}
	/* the reader had not caught up when this record came */
	const bool behind = used_bytes(r) > 0;
	uint64_t pos = r->wpos;
	const struct iovec *cur = iov;
	size_t off = 0;
	do {
		uint64_t piece = len < frag ? len : frag;
		len -= piece;
		put_record(r, &pos, type, len ? EXL_REC_F_MORE : 0, job, (uint32_t)piece, &cur, &off);
	} while (len);
	r->wpos = pos;
	__atomic_store_n(&r->hdr->write_pos, pos, __ATOMIC_RELEASE);
	__atomic_fetch_add(&r->hdr->seq, 1, __ATOMIC_RELEASE);
	/* Pairs with the reader's fence between storing sleeping and
	 * re-reading write_pos: one of us sees the other's store. */
	atomic_thread_fence(memory_order_seq_cst);
	uint32_t sleeping = __atomic_load_n(&r->ctrl->sleeping, __ATOMIC_RELAXED);
	bool woke = false;
	if (sleeping == EXL_SLEEP_FUTEX) {
		syscall(SYS_futex, &r->hdr->seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
		r->futex_wakes++;
		woke = true;
	} else if (sleeping == EXL_SLEEP_POLL) {
		uint32_t epoch = __atomic_load_n(&r->ctrl->poll_epoch, __ATOMIC_RELAXED);
		if (epoch != r->poll_epoch_woken) {
			r->poll_epoch_woken = epoch;
			*want_socket_wake = true;
		}
	}
	pthread_mutex_unlock(&r->mu);
	/* The scheduler may queue the woken reader on this core (the waker's)
	 * even with another one idle, and so may it the thread the reader
	 * waits on (at a job's start, the loop thread that sends the accepted
	 * reply, before which the client reads nothing).  The writer, an
	 * engine thread that goes straight into its next step, would then hold
	 * them off for the rest of its time slice, milliseconds, and every
	 * token made meanwhile would reach the client late (bench_delivery
	 * --threads 1 on 2 cores: p99 2-6 ms in most runs).  So the writer
	 * yields when it woke a sleeping reader or when the reader is behind;
	 * with nobody queued on this core that returns at once.  A reader that
	 * keeps up (spinning, or reading each record before the next) costs
	 * nothing. */
	if (woke || behind)
		sched_yield();
	return EXL_RING_WRITTEN;
}

void exl_ring_note_pause(struct exl_ring *r)
{
	__atomic_fetch_add(&r->hdr->pause_epoch, 1, __ATOMIC_RELEASE);
}

void exl_ring_shutdown(struct exl_ring *r)
{
	pthread_mutex_lock(&r->mu);
	__atomic_store_n(&r->hdr->closed, 1, __ATOMIC_RELEASE);
	__atomic_fetch_add(&r->hdr->seq, 1, __ATOMIC_RELEASE);
	syscall(SYS_futex, &r->hdr->seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	pthread_mutex_unlock(&r->mu);
}
