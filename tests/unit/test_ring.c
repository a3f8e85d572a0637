/* The shared-memory ring end to end in one process: the daemon's producer
 * (daemon/ring.c) against libexlclient's consumer, over many wraps, with
 * split records, a full ring, a lying control page, the memfd seals, and a
 * futex wait woken by a write. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client/lib/client_internal.h"
#include "daemon/ring.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

static int failures;

#define CHECK(cond, ...) do { \
	if (!(cond)) { \
		failures++; \
		fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
		fprintf(stderr, __VA_ARGS__); \
		fputc('\n', stderr); \
	} \
} while (0)

static uint8_t pattern(uint64_t job, size_t i)
{
	return (uint8_t)(job * 131 + i * 7 + (i >> 8));
}

static enum exl_ring_result put(struct exl_ring *r, uint64_t job, size_t len, bool *wake)
{
	uint8_t *buf = malloc(len ? len : 1);
	for (size_t i = 0; i < len; i++)
		buf[i] = pattern(job, i);
	/* two pieces, to cover the gather */
	struct iovec iov[2] = { { buf, len / 3 }, { buf + len / 3, len - len / 3 } };
	enum exl_ring_result res = exl_ring_write(r, EXL_REC_TOKENS, job, iov, 2, wake);
	free(buf);
	return res;
}

/* Reads one logical record (joining MORE pieces); returns its length or -1. */
static long take(struct exl_client *c, uint64_t *job, uint8_t *out, size_t cap)
{
	struct exl_rec_hdr h;
	const uint8_t *p;
	size_t len, total = 0;

	for (;;) {
		int r = exl_cl_ring_peek(c, &h, &p, &len);
		if (r != 1)
			return -1;
		if (total && h.job != *job)
			return -1;
		*job = h.job;
		if (total + len > cap)
			return -1;
		memcpy(out + total, p, len);
		total += len;
		if (!(h.flags & EXL_REC_F_MORE))
			return (long)total;
	}
}

static void test_roundtrip(void)
{
	char err[256];
	struct exl_ring *r = exl_ring_create(EXL_RING_SIZE_MIN, err, sizeof(err));
	struct exl_client c;
	uint8_t *got = malloc(1 << 20);
	bool wake;

	CHECK(r != NULL, "create: %s", err);
	if (!r)
		return;
	memset(&c, 0, sizeof(c));
	c.fd = -1;
	CHECK(exl_cl_ring_map(&c, r->data_fd, r->ctrl_fd) == EXL_OK, "map: %s", c.err);

	/* sizes from empty to several max_records: over 200 wraps of a 64 KiB ring */
	uint64_t next_write = 1, next_read = 1, fulls = 0, splits = 0;
	srand(3);
	for (int round = 0; round < 20000; round++) {
		size_t len = (size_t)rand() % 700;
		if (round % 97 == 0)
			len = r->max_record * 2 + (size_t)rand() % 1000; /* split in three */
		enum exl_ring_result res = put(r, next_write, len, &wake);
		if (res == EXL_RING_FULL) {
			fulls++;
			/* drain everything, checking each byte, then write again */
			uint64_t job;
			long n;
			while ((n = take(&c, &job, got, 1 << 20)) >= 0) {
				CHECK(job == next_read, "job %llu, want %llu", (unsigned long long)job,
				      (unsigned long long)next_read);
				for (long i = 0; i < n; i++)
					if (got[i] != pattern(job, (size_t)i)) {
						CHECK(0, "job %llu byte %ld differs", (unsigned long long)job, i);
						break;
					}
				next_read++;
			}
			exl_cl_ring_release(&c);
			res = put(r, next_write, len, &wake);
		}
		CHECK(res == EXL_RING_WRITTEN, "round %d: result %d after a drain", round, res);
		next_write++;
		splits += len > r->max_record - sizeof(struct exl_rec_hdr);
	}
	CHECK(fulls > 100 && splits > 50, "exercised %llu fulls, %llu split records",
	      (unsigned long long)fulls, (unsigned long long)splits);
	CHECK(r->wpos > 200ull * r->size, "only %llu bytes went through", (unsigned long long)r->wpos);

	/* larger than the ring can ever hold */
	CHECK(put(r, 1, r->size, &wake) == EXL_RING_NEVER, "a ring-sized record");

	/* a lying reader: read_pos ahead of write_pos, or far behind */
	__atomic_store_n(&c.ctrl->read_pos, r->wpos + 12345, __ATOMIC_RELEASE);
	CHECK(put(r, 7, 100, &wake) == EXL_RING_WRITTEN, "read_pos ahead of write_pos");
	__atomic_store_n(&c.ctrl->read_pos, 0, __ATOMIC_RELEASE);
	CHECK(put(r, 7, 100, &wake) == EXL_RING_FULL, "read_pos far behind: nothing free");
	CHECK(!exl_ring_has_room(r, 1), "has_room with nothing free");
	__atomic_store_n(&c.ctrl->read_pos, r->wpos, __ATOMIC_RELEASE);
	CHECK(exl_ring_has_room(r, 1000), "has_room once read");

	/* poll mode asks for one socket wake per epoch */
	__atomic_store_n(&c.ctrl->poll_epoch, 5, __ATOMIC_RELEASE);
	__atomic_store_n(&c.ctrl->sleeping, EXL_SLEEP_POLL, __ATOMIC_RELEASE);
	CHECK(put(r, 8, 10, &wake) == EXL_RING_WRITTEN && wake, "first write in poll mode wakes");
	CHECK(put(r, 8, 10, &wake) == EXL_RING_WRITTEN && !wake, "second write, same epoch");
	__atomic_store_n(&c.ctrl->sleeping, EXL_SLEEP_NONE, __ATOMIC_RELEASE);

	/* the seals */
	int seals = fcntl(r->data_fd, F_GET_SEALS);
	CHECK(seals >= 0 && (seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL)) ==
	      (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL), "seals %#x", seals);
	void *w = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, r->data_fd, 0);
	CHECK(w == MAP_FAILED, "the data ring could be mapped writable");
	if (w != MAP_FAILED)
		munmap(w, 4096);
	CHECK(mprotect((void *)c.hdr, 4096, PROT_READ | PROT_WRITE) < 0,
	      "the read-only mapping could be made writable");
	CHECK(ftruncate(r->data_fd, 4096) < 0 && errno == EPERM, "the data ring could shrink");
	CHECK(ftruncate(r->ctrl_fd, 1) < 0 && errno == EPERM, "the control page could shrink");

	exl_cl_ring_unmap(&c);
	exl_ring_free(r);
	free(got);
}

/* ---- a futex wait ended by a write ---- */

struct waiter {
	struct exl_client *c;
	bool woken;
	int got;
};

/* One wait, long enough that only the writer's FUTEX_WAKE ends it in a
 * passing run. */
static void *wait_main(void *arg)
{
	struct waiter *w = arg;

	w->woken = exl_cl_ring_wait(w->c, 60000);
	w->got = exl_cl_ring_nonempty(w->c);
	return NULL;
}

static void test_futex(void)
{
	char err[256];
	struct exl_ring *r = exl_ring_create(EXL_RING_SIZE_MIN, err, sizeof(err));
	struct exl_client c;
	struct waiter w = { &c, false, 0 };
	pthread_t th;
	bool wake;

	if (!r)
		return;
	memset(&c, 0, sizeof(c));
	c.fd = -1;
	CHECK(exl_cl_ring_map(&c, r->data_fd, r->ctrl_fd) == EXL_OK, "map: %s", c.err);

	/* nobody asleep: a write makes no syscall */
	CHECK(put(r, 1, 40, &wake) == EXL_RING_WRITTEN && !wake, "write");
	CHECK(r->futex_wakes == 0, "%llu FUTEX_WAKEs with no reader asleep",
	      (unsigned long long)r->futex_wakes);
	struct exl_rec_hdr h;
	const uint8_t *p;
	size_t len;
	CHECK(exl_cl_ring_peek(&c, &h, &p, &len) == 1, "the record");
	exl_cl_ring_release(&c);

	pthread_create(&th, NULL, wait_main, &w);
	/* until it is asleep (correct either way: the write rechecks) */
	for (int i = 0; i < 5000 && !__atomic_load_n(&c.ctrl->sleeping, __ATOMIC_ACQUIRE); i++)
		usleep(1000);
	CHECK(put(r, 2, 40, &wake) == EXL_RING_WRITTEN, "write");
	pthread_join(th, NULL);
	CHECK(w.got, "the waiter never saw the record");
	CHECK(w.woken, "the wait ran out of time: the write did not wake it");
	CHECK(r->futex_wakes == 1, "%llu FUTEX_WAKEs for one sleeping reader",
	      (unsigned long long)r->futex_wakes);
	CHECK(__atomic_load_n(&c.ctrl->sleeping, __ATOMIC_ACQUIRE) == EXL_SLEEP_NONE,
	      "sleeping flag left set");
	exl_cl_ring_unmap(&c);
	exl_ring_free(r);
}

int main(void)
{
	test_roundtrip();
	test_futex();
	if (failures) {
		fprintf(stderr, "%d checks failed\n", failures);
		return 1;
	}
	printf("ring: all checks passed\n");
	return 0;
}
