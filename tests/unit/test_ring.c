/* The shared-memory ring end to end in one process: the daemon's producer
 * (daemon/server/delivery/ring.c) against libexlclient's consumer, over many wraps, with
 * split records, a full ring, a lying control page, the memfd seals, a
 * futex wait woken by a write, and a reader that spins before it sleeps. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client/lib/client_internal.h"
#include "daemon/server/delivery/ring.h"
#include "tests/common/check.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

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

/* ---- a reader that spins: the record comes without a futex round ---- */

struct writer {
	struct exl_ring *r;
};

/* Writes one record 20 ms on: the reader is asleep by then. */
static void *write_main(void *arg)
{
	struct writer *w = arg;
	bool wake;

	usleep(20000);
	CHECK(put(w->r, 3, 40, &wake) == EXL_RING_WRITTEN && !wake, "write");
	return NULL;
}

/* Writes one record 200 us on, without sleeping: inside a spin. */
static void *write_soon_main(void *arg)
{
	struct writer *w = arg;
	struct timespec t0, t;
	bool wake;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do
		clock_gettime(CLOCK_MONOTONIC, &t);
	while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 200000L);
	CHECK(put(w->r, 3, 40, &wake) == EXL_RING_WRITTEN && !wake, "write");
	return NULL;
}

static void test_spin(void)
{
	char err[256];
	struct exl_ring *r = exl_ring_create(EXL_RING_SIZE_MIN, err, sizeof(err));
	struct exl_client c;
	struct writer w = { r };
	pthread_t th;

	if (!r)
		return;
	memset(&c, 0, sizeof(c));
	c.fd = -1;
	CHECK(exl_cl_ring_map(&c, r->data_fd, r->ctrl_fd) == EXL_OK, "map: %s", c.err);
	CHECK(c.spin_ns == 0, "a new connection spins before it has seen a record");

	/* a spin far longer than the writer's delay: the wait must end in
	 * it, with no FUTEX_WAKE made.  A spin preempted on a loaded machine
	 * gives up and sleeps (by design): up to 100 tries for one that is not. */
	uint64_t wakes = 0;
	int tries = 0;

	do {
		struct exl_rec_hdr h;
		const uint8_t *p;
		size_t len;

		while (exl_cl_ring_peek(&c, &h, &p, &len) == 1)
			;
		exl_cl_ring_release(&c);
		wakes = r->futex_wakes;
		c.spin_ns = 3000000000u; /* 3 s */
		pthread_create(&th, NULL, write_soon_main, &w);
		CHECK(exl_cl_ring_wait(&c, 60000), "the wait ran out of time");
		pthread_join(th, NULL);
		CHECK(exl_cl_ring_nonempty(&c), "the wait ended without the record");
		CHECK(__atomic_load_n(&c.ctrl->sleeping, __ATOMIC_ACQUIRE) == EXL_SLEEP_NONE,
		      "sleeping flag left set");
	} while ((r->futex_wakes != wakes || !c.spin_ns) && ++tries < 100);
	CHECK(r->futex_wakes == wakes, "a reader spinning 3 s slept for a record 200 us away "
	      "in each of %d tries", tries);
	/* a spin that caught its record grows, but never past the bound */
	CHECK(c.spin_ns > 0 && c.spin_ns <= 200000, "spin bound %u ns after a caught record",
	      c.spin_ns);

	/* records 20 ms apart: the reader sleeps, is woken, and stops spinning
	 * after a few such waits (six halvings; more rounds allowed for a
	 * reader preempted past the record in a spin, which counts as caught) */
	for (int i = 0; i < 40 && c.spin_ns; i++) {
		struct exl_rec_hdr h;
		const uint8_t *p;
		size_t len;

		while (exl_cl_ring_peek(&c, &h, &p, &len) == 1)
			;
		exl_cl_ring_release(&c);
		pthread_create(&th, NULL, write_main, &w);
		CHECK(exl_cl_ring_wait(&c, 60000), "the wait ran out of time");
		pthread_join(th, NULL);
	}
	CHECK(c.spin_ns == 0, "still spinning %u ns for records 20 ms apart", c.spin_ns);
	CHECK(r->futex_wakes >= 1, "the sleeping reader was never woken by a FUTEX_WAKE");
	exl_cl_ring_unmap(&c);
	exl_ring_free(r);
}

/* ---- what a daemon hands over: refused unless it cannot change under us ---- */

/* A memfd of size bytes starting with head, with seals added. */
static int memfd_with(uint64_t size, const void *head, size_t head_len, unsigned seals)
{
	int fd = memfd_create("test-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0 || ftruncate(fd, (off_t)size) ||
	    (head_len && pwrite(fd, head, head_len, 0) != (ssize_t)head_len) ||
	    (seals && fcntl(fd, F_ADD_SEALS, seals))) {
		fprintf(stderr, "making a memfd: %s\n", strerror(errno));
		exit(1);
	}
	return fd;
}

/* Maps a hand-made ring: data_seals / ctrl_seals on its memfds and a
 * control page of ctrl_size bytes.  Returns exl_cl_ring_map's status. */
static int map_handmade(unsigned data_seals, unsigned ctrl_seals, uint64_t ctrl_size, char *err,
			size_t errlen)
{
	struct exl_ring_hdr h = { .magic = EXL_RING_MAGIC, .version = EXL_PROTOCOL_VERSION,
				  .hdr_size = EXL_RING_HDR_SIZE, .data_size = EXL_RING_SIZE_MIN,
				  .max_record = EXL_RING_SIZE_MIN / 4 };
	int dfd = memfd_with(EXL_RING_HDR_SIZE + EXL_RING_SIZE_MIN, &h, sizeof(h), data_seals);
	int cfd = memfd_with(ctrl_size, NULL, 0, ctrl_seals);
	struct exl_client c;

	memset(&c, 0, sizeof(c));
	c.fd = -1;
	int rc = exl_cl_ring_map(&c, dfd, cfd);
	snprintf(err, errlen, "%s", c.err);
	if (rc == EXL_OK) {
		/* what exld does next cannot hurt: it cannot shrink either file */
		CHECK(ftruncate(dfd, 0) < 0 && ftruncate(cfd, 0) < 0, "a mapped ring could shrink");
		exl_cl_ring_arm_poll(&c);
		CHECK(!exl_cl_ring_nonempty(&c), "a new ring with records");
		exl_cl_ring_disarm(&c);
		exl_cl_ring_unmap(&c);
	} else {
		CHECK(c.hdr == NULL && c.ctrl == NULL, "a refused ring left mapped");
	}
	close(dfd);
	close(cfd);
	return rc;
}

/* Found by fuzz_ring: a daemon could hand over a control page shorter than
 * the page the client maps, or memfds it can still shrink; the client's
 * next write to the control page, or read of the ring, was then SIGBUS. */
static void test_map_refusals(void)
{
	const unsigned data_seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL;
	const unsigned ctrl_seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
	char err[512];
	int rc;

	rc = map_handmade(data_seals, ctrl_seals, EXL_CTRL_SIZE, err, sizeof(err));
	CHECK(rc == EXL_OK, "exld's own seals and sizes refused: %s", err);
	rc = map_handmade(data_seals, ctrl_seals, 0, err, sizeof(err));
	CHECK(rc == EXL_E_PROTOCOL && strstr(err, "control page is 0 bytes"),
	      "an empty control page: %d '%s'", rc, err);
	rc = map_handmade(data_seals, ctrl_seals, EXL_CTRL_SIZE - 1, err, sizeof(err));
	CHECK(rc == EXL_E_PROTOCOL && strstr(err, "control page is 4095 bytes"),
	      "a short control page: %d '%s'", rc, err);
	rc = map_handmade(0, ctrl_seals, EXL_CTRL_SIZE, err, sizeof(err));
	CHECK(rc == EXL_E_PROTOCOL && strstr(err, "ring memfd is not sealed against shrinking"),
	      "an unsealed ring: %d '%s'", rc, err);
	rc = map_handmade(data_seals & ~(unsigned)F_SEAL_SHRINK, ctrl_seals, EXL_CTRL_SIZE, err,
			  sizeof(err));
	CHECK(rc == EXL_E_PROTOCOL, "a ring that can shrink: %d '%s'", rc, err);
	rc = map_handmade(data_seals, F_SEAL_GROW, EXL_CTRL_SIZE, err, sizeof(err));
	CHECK(rc == EXL_E_PROTOCOL && strstr(err, "control page memfd is not sealed"),
	      "a control page that can shrink: %d '%s'", rc, err);
	/* only shrinking matters: a ring sealed against that alone is taken */
	rc = map_handmade(F_SEAL_SHRINK, F_SEAL_SHRINK, EXL_CTRL_SIZE, err, sizeof(err));
	CHECK(rc == EXL_OK, "sealed against shrinking only: %s", err);
}

/* ---- records a daemon got wrong ---- */

/* Found by fuzz_ring: exl_cl_ring_peek reported a broken ring with a
 * positive status, which its callers took for "a record": exl_next then
 * read the payload pointer and length it never set (a split record whose
 * next piece overran the ring crashed it).  Broken is -1 now, and
 * exl_next's EXL_E_PROTOCOL. */
static void test_broken_records(void)
{
	char err[256];
	struct exl_ring *r = exl_ring_create(EXL_RING_SIZE_MIN, err, sizeof(err));
	struct exl_client c;
	struct exl_event ev;
	struct exl_rec_hdr h;
	const uint8_t *p;
	size_t len;

	CHECK(r != NULL, "create: %s", err);
	if (!r)
		return;
	memset(&c, 0, sizeof(c));
	c.fd = -1;
	CHECK(exl_cl_ring_map(&c, r->data_fd, r->ctrl_fd) == EXL_OK, "map: %s", c.err);

	/* write_pos more than a ring ahead */
	__atomic_store_n(&r->hdr->write_pos, EXL_RING_SIZE_MIN + 16, __ATOMIC_RELEASE);
	CHECK(exl_cl_ring_peek(&c, &h, &p, &len) == -1 && strstr(c.err, "inconsistent"),
	      "write_pos a ring ahead: '%s'", c.err);
	CHECK(exl_next(&c, &ev, 0) == EXL_E_PROTOCOL, "exl_next on it: '%s'", c.err);

	/* a record split with MORE whose next piece claims 8 MiB */
	struct exl_rec_hdr first = { .len = 16, .type = EXL_REC_TOKENS, .flags = EXL_REC_F_MORE,
				     .job = 2 };
	struct exl_rec_hdr second = { .len = 0x7fffff, .type = EXL_REC_TOKENS, .job = 2 };
	memset(r->data, 0, 64);
	memcpy(r->data, &first, sizeof(first));
	memcpy(r->data + 32, &second, sizeof(second));
	__atomic_store_n(&r->hdr->write_pos, 64, __ATOMIC_RELEASE);
	c.rp = 0;
	CHECK(exl_next(&c, &ev, 0) == EXL_E_PROTOCOL && strstr(c.err, "8388607 bytes overruns"),
	      "a split record that overruns: '%s'", c.err);

	/* Found by fuzz_ring: a split record whose pieces are all empty
	 * joined them with a NULL buffer (UB: NULL + 0, memcpy from NULL). */
	struct exl_rec_hdr empty_more = { .type = EXL_REC_TOKENS, .flags = EXL_REC_F_MORE,
					  .job = 3 };
	struct exl_rec_hdr empty_last = { .type = EXL_REC_TOKENS, .job = 3 };
	free(c.frag); /* as a client that has joined nothing yet */
	c.frag = NULL;
	c.frag_cap = 0;
	memcpy(r->data + 64, &empty_more, sizeof(empty_more));
	memcpy(r->data + 80, &empty_last, sizeof(empty_last));
	__atomic_store_n(&r->hdr->write_pos, 96, __ATOMIC_RELEASE);
	c.rp = 64;
	CHECK(exl_next(&c, &ev, 0) == EXL_E_PROTOCOL && strstr(c.err, "a tokens record of 0 bytes"),
	      "a split record of empty pieces: '%s'", c.err);
	free(c.frag);
	exl_cl_ring_unmap(&c);
	exl_ring_free(r);
}

/* ---- counts that claim more than the bytes that came ---- */

/* A client without a ring on one end of a socket pair; *peer is the
 * daemon's end. */
static struct exl_client *socket_client(int *peer)
{
	struct exl_client *c = calloc(1, sizeof(*c));
	int sv[2];

	if (!c || !msgpack_unpacker_init(&c->unp, 4096) ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		fprintf(stderr, "client setup: %s\n", strerror(errno));
		exit(1);
	}
	c->fd = sv[0];
	*peer = sv[1];
	return c;
}

/* Found by fuzz_ring: msgpack-c allocates for a container when it reads
 * the count the container claims, so five bytes of a daemon (a map32
 * header of 2^32 - 1 entries) made the client ask malloc for 256 GiB, on
 * the socket and in a DONE record alike (under ASan: an abort).  Now a
 * message is unpacked only once all of its bytes are there. */
static void test_claimed_counts(void)
{
	static const uint8_t map32[] = { 0xdf, 0xff, 0xff, 0xff, 0xff };
	static const uint8_t arr32[] = { 0xdd, 0xff, 0xff, 0xff, 0xff };
	/* {op: "done", job: 5} */
	static const uint8_t done[] = { 0x82, 0xa2, 'o', 'p', 0xa4, 'd', 'o', 'n', 'e',
					0xa3, 'j', 'o', 'b', 0x05 };
	struct exl_event ev;
	int peer;

	/* a message that arrives in two parts is handed out once whole */
	struct exl_client *c = socket_client(&peer);
	CHECK(write(peer, done, 6) == 6, "write");
	CHECK(exl_next(c, &ev, 0) == EXL_E_TIMEOUT, "half a message: '%s'", exl_errmsg(c));
	CHECK(write(peer, done + 6, sizeof(done) - 6) == (ssize_t)sizeof(done) - 6, "write");
	CHECK(exl_next(c, &ev, 0) == EXL_OK && ev.type == EXL_EVENT_DONE && ev.job == 5,
	      "the whole message: '%s'", exl_errmsg(c));
	/* an array claiming 2^32 - 1 items, then the end of the stream */
	CHECK(write(peer, arr32, sizeof(arr32)) == (ssize_t)sizeof(arr32), "write");
	shutdown(peer, SHUT_WR);
	CHECK(exl_next(c, &ev, 0) == EXL_E_CLOSED, "a claimed 2^32 - 1 items: '%s'", exl_errmsg(c));
	close(peer);
	exl_close(c);
	/* Nesting over the limit, refused; then bytes that would complete a
	 * message in its middle, and a claim of 2^32 - 1 items.  The client
	 * used to go on after the refusal, let msgpack-c unpack from inside
	 * the refused message (msgpack-c nests to 32) and reach the claim:
	 * every later read must be refused as well (found by fuzz_ring). */
	c = socket_client(&peer);
	uint8_t deep[EXL_MAX_DEPTH + 12 + 24 + sizeof(arr32)];
	memset(deep, 0x81, EXL_MAX_DEPTH + 12);
	memset(deep + EXL_MAX_DEPTH + 12, 0x33, 24);
	memcpy(deep + EXL_MAX_DEPTH + 12 + 24, arr32, sizeof(arr32));
	CHECK(write(peer, deep, sizeof(deep)) == (ssize_t)sizeof(deep), "write");
	for (int i = 0; i < 40; i++)
		CHECK(exl_next(c, &ev, 0) == EXL_E_PROTOCOL && strstr(exl_errmsg(c), "nested deeper"),
		      "read %d after a message nested too deep: '%s'", i, exl_errmsg(c));
	close(peer);
	exl_close(c);
	/* a map claiming 2^32 - 1 entries: over 2^32 values, refused at once */
	c = socket_client(&peer);
	CHECK(write(peer, map32, sizeof(map32)) == (ssize_t)sizeof(map32), "write");
	CHECK(exl_next(c, &ev, 0) == EXL_E_PROTOCOL && strstr(exl_errmsg(c), "2^32 values"),
	      "a claimed 2^32 - 1 entries: '%s'", exl_errmsg(c));
	close(peer);
	exl_close(c);

	/* the same claim as a DONE record in the ring */
	char err[256];
	struct exl_ring *r = exl_ring_create(EXL_RING_SIZE_MIN, err, sizeof(err));
	struct exl_client rc;
	bool wake;
	CHECK(r != NULL, "create: %s", err);
	if (!r)
		return;
	memset(&rc, 0, sizeof(rc));
	rc.fd = -1;
	CHECK(exl_cl_ring_map(&rc, r->data_fd, r->ctrl_fd) == EXL_OK, "map: %s", rc.err);
	struct iovec iov = { (void *)arr32, sizeof(arr32) };
	CHECK(exl_ring_write(r, EXL_REC_DONE, 6, &iov, 1, &wake) == EXL_RING_WRITTEN, "write");
	CHECK(exl_next(&rc, &ev, 0) == EXL_E_PROTOCOL && strstr(rc.err, "not a msgpack map"),
	      "a DONE record claiming 2^32 items: '%s'", rc.err);
	exl_cl_ring_unmap(&rc);
	exl_ring_free(r);
}

int main(void)
{
	test_roundtrip();
	test_futex();
	test_spin();
	test_map_refusals();
	test_broken_records();
	test_claimed_counts();
	if (check_failures) {
		fprintf(stderr, "%d checks failed\n", check_failures);
		return 1;
	}
	printf("ring: all checks passed\n");
	return 0;
}
