/* libexlclient: the shared-memory ring, consumer side (the protocol is in
 * exl_wire.h and docs/protocol.md). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "client/lib/client_internal.h"
#include "common/clock.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* A reader whose records come less than RING_SPIN_MAX_NS apart waits for
 * the next one on the CPU before it sleeps: a futex wake costs the writer
 * a system call and the reader a trip through the scheduler (5-30 us on a
 * VM, more when its core went idle).  The bound adapts per connection: a
 * record that comes while spinning doubles it (to at most the maximum); a
 * wait that ended asleep sets it to twice that wait when the wait was
 * short, and halves it otherwise, down to zero (no spin) for a stream
 * whose records are far apart or a core that others hold (a spin that was
 * preempted halves it too). */
#define RING_SPIN_MAX_NS 200000u
#define RING_SPIN_MIN_NS 4000u
#define RING_SPIN_PREEMPTED_NS 50000u

/* A file the daemon could still shrink under our mapping would turn a later
 * read or write of it into SIGBUS instead of an error: both memfds must be
 * sealed against shrinking (exld seals them before it hands them over).
 * Checked before their sizes, which the seal then keeps. */
static int sealed(struct exl_client *c, int fd, const char *what)
{
	int seals = fcntl(fd, F_GET_SEALS);

	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return exl_cl_fail(c, EXL_E_PROTOCOL, "the %s memfd is not sealed against shrinking",
				   what);
	return EXL_OK;
}

int exl_cl_ring_map(struct exl_client *c, int data_fd, int ctrl_fd)
{
	struct stat st, cst;
	struct exl_ring_hdr h;

	if (sealed(c, data_fd, "ring") || sealed(c, ctrl_fd, "control page"))
		return EXL_E_PROTOCOL;
	/* the control page is written: all of the page mapped must be file */
	if (fstat(ctrl_fd, &cst) < 0)
		return exl_cl_fail(c, EXL_E_IO, "the ring's control page: %s", strerror(errno));
	if (cst.st_size < (off_t)EXL_CTRL_SIZE)
		return exl_cl_fail(c, EXL_E_PROTOCOL, "the ring's control page is %lld bytes, not %u",
				   (long long)cst.st_size, EXL_CTRL_SIZE);
	if (fstat(data_fd, &st) < 0 || st.st_size < (off_t)EXL_RING_HDR_SIZE)
		return exl_cl_fail(c, EXL_E_PROTOCOL, "the ring fd is not a ring");
	if (pread(data_fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
		return exl_cl_fail(c, EXL_E_IO, "reading the ring header: %s", strerror(errno));
	if (h.magic != EXL_RING_MAGIC || h.version != EXL_PROTOCOL_VERSION ||
	    h.hdr_size != EXL_RING_HDR_SIZE || h.data_size < EXL_RING_SIZE_MIN ||
	    h.data_size > EXL_RING_SIZE_MAX || (h.data_size & (h.data_size - 1)) ||
	    (uint64_t)st.st_size != (uint64_t)h.hdr_size + h.data_size ||
	    h.max_record < 64 || h.max_record > h.data_size / 2)
		return exl_cl_fail(c, EXL_E_PROTOCOL, "the ring header is not valid");
	void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, data_fd, 0);
	if (p == MAP_FAILED)
		return exl_cl_fail(c, EXL_E_IO, "mapping the ring: %s", strerror(errno));
	void *q = mmap(NULL, EXL_CTRL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, ctrl_fd, 0);
	if (q == MAP_FAILED) {
		munmap(p, (size_t)st.st_size);
		return exl_cl_fail(c, EXL_E_IO, "mapping the ring's control page: %s", strerror(errno));
	}
	c->ring_map = p;
	c->ring_map_size = (size_t)st.st_size;
	c->hdr = p;
	c->data = (const uint8_t *)p + EXL_RING_HDR_SIZE;
	c->size = h.data_size;
	c->ctrl = q;
	c->rp = __atomic_load_n(&c->ctrl->read_pos, __ATOMIC_ACQUIRE);
	c->pause_epoch_seen = __atomic_load_n(&c->hdr->pause_epoch, __ATOMIC_ACQUIRE);
	return EXL_OK;
}

void exl_cl_ring_unmap(struct exl_client *c)
{
	if (c->ring_map)
		munmap(c->ring_map, c->ring_map_size);
	if (c->ctrl)
		munmap(c->ctrl, EXL_CTRL_SIZE);
	c->ring_map = NULL;
	c->hdr = NULL;
	c->ctrl = NULL;
}

bool exl_cl_ring_nonempty(const struct exl_client *c)
{
	return c->hdr && __atomic_load_n(&c->hdr->write_pos, __ATOMIC_ACQUIRE) != c->rp;
}

/* Publishes the read position and, when a job paused for room since the
 * last look, nudges the daemon. */
void exl_cl_ring_release(struct exl_client *c)
{
	if (!c->hdr || !c->release_pending)
		return;
	c->release_pending = false;
	__atomic_store_n(&c->ctrl->read_pos, c->rp, __ATOMIC_RELEASE);
	uint32_t pe = __atomic_load_n(&c->hdr->pause_epoch, __ATOMIC_ACQUIRE);
	if (pe != c->pause_epoch_seen) {
		/* {op: "resume"} */
		static const uint8_t resume[] = { 0x81, 0xa2, 'o', 'p', 0xa6,
						  'r', 'e', 's', 'u', 'm', 'e' };
		c->pause_epoch_seen = pe;
		exl_cl_send(c, resume, sizeof(resume));
	}
}

/* A ring that cannot be read: -1, and why in c->err.  (A status code would
 * be positive, which callers would take for a record.) */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static int ring_broken(struct exl_client *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	return -1;
}

int exl_cl_ring_peek(struct exl_client *c, struct exl_rec_hdr *h, const uint8_t **payload,
		     size_t *len)
{
	for (;;) {
		uint64_t wp = __atomic_load_n(&c->hdr->write_pos, __ATOMIC_ACQUIRE);
		if (wp == c->rp)
			return 0;
		if (wp - c->rp > c->size || (c->rp & (EXL_REC_ALIGN - 1)))
			return ring_broken(c, "ring positions are inconsistent");
		uint32_t off = (uint32_t)(c->rp & (c->size - 1));
		if (off + sizeof(*h) > c->size)
			return ring_broken(c, "ring record header crosses the end");
		memcpy(h, c->data + off, sizeof(*h));
		uint64_t sz = exl_rec_size(h->len);
		if (off + sz > c->size || sz > wp - c->rp)
			return ring_broken(c, "ring record of %u bytes overruns", h->len);
		if (h->type == EXL_REC_PAD) {
			c->rp += sz;
			c->release_pending = true;
			continue;
		}
		*payload = c->data + off + sizeof(*h);
		*len = h->len;
		c->rp += sz;
		c->release_pending = true;
		return 1;
	}
}

static bool ring_ready(const struct exl_client *c)
{
	return exl_cl_ring_nonempty(c) || __atomic_load_n(&c->hdr->closed, __ATOMIC_ACQUIRE);
}

/* Spins up to c->spin_ns from t0; true when a record (or the close) came.
 * A spin that finds it lost its core (the clock jumped between two looks)
 * stops and halves the bound: on a machine with more runnable threads than
 * cores a spinner only burns its share and then waits to be scheduled,
 * where a sleeper woken by the futex is run soon, and a few such spins in
 * a row end spinning.  One preemption alone (a VM's host taking the vCPU
 * for a moment) leaves the next wait spinning: setting the bound to zero
 * at once, as this did until 2026-11-27, made every such moment cost the
 * next record a futex wake as well (bench_delivery --threads 1 on the
 * 2-core VM: p99 within 50 us in 11 of 24 runs against 20 of 24 halving,
 * alternating). */
static bool spin_for_record(struct exl_client *c, uint64_t t0)
{
	uint64_t last = t0;

	if (!c->spin_ns)
		return false;
	for (;;) {
		for (int i = 0; i < 16; i++) {
			if (ring_ready(c))
				return true;
			cpu_relax();
		}
		uint64_t now = exl_now_ns();
		if (now - last > RING_SPIN_PREEMPTED_NS) {
			c->spin_ns = c->spin_ns / 2 < RING_SPIN_MIN_NS ? 0 : c->spin_ns / 2;
			return ring_ready(c);
		}
		last = now;
		if (now - t0 >= c->spin_ns)
			return ring_ready(c);
	}
}

static void spin_adapt(struct exl_client *c, uint64_t waited_ns)
{
	if (waited_ns < RING_SPIN_MAX_NS / 2) {
		uint64_t s = 2 * waited_ns;
		c->spin_ns = (uint32_t)(s < RING_SPIN_MIN_NS ? RING_SPIN_MIN_NS : s);
	} else {
		c->spin_ns = c->spin_ns / 2 < RING_SPIN_MIN_NS ? 0 : c->spin_ns / 2;
	}
}

bool exl_cl_ring_wait(struct exl_client *c, int timeout_ms)
{
	uint64_t t0 = exl_now_ns();
	bool timed_out = false;

	if (spin_for_record(c, t0)) {
		c->spin_ns = c->spin_ns < RING_SPIN_MAX_NS / 2 ? 2 * c->spin_ns : RING_SPIN_MAX_NS;
		return true;
	}
	uint32_t seq = __atomic_load_n(&c->hdr->seq, __ATOMIC_ACQUIRE);
	__atomic_store_n(&c->ctrl->sleeping, EXL_SLEEP_FUTEX, __ATOMIC_RELAXED);
	atomic_thread_fence(memory_order_seq_cst);
	if (!ring_ready(c)) {
		struct timespec ts = { timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L };
		timed_out = syscall(SYS_futex, &c->hdr->seq, FUTEX_WAIT, seq,
				    timeout_ms < 0 ? NULL : &ts, NULL, 0) < 0 &&
			    errno == ETIMEDOUT;
	}
	__atomic_store_n(&c->ctrl->sleeping, EXL_SLEEP_NONE, __ATOMIC_RELAXED);
	bool got = exl_cl_ring_nonempty(c);
	if (got)
		spin_adapt(c, exl_now_ns() - t0);
	return !(timed_out && !got);
}

void exl_cl_ring_arm_poll(struct exl_client *c)
{
	__atomic_store_n(&c->ctrl->poll_epoch, ++c->poll_epoch, __ATOMIC_RELAXED);
	__atomic_store_n(&c->ctrl->sleeping, EXL_SLEEP_POLL, __ATOMIC_RELAXED);
	atomic_thread_fence(memory_order_seq_cst);
}

void exl_cl_ring_disarm(struct exl_client *c)
{
	if (c->ctrl && __atomic_load_n(&c->ctrl->sleeping, __ATOMIC_RELAXED))
		__atomic_store_n(&c->ctrl->sleeping, EXL_SLEEP_NONE, __ATOMIC_RELAXED);
}
