/* Fuzz target for the shared-memory rings: every reader of memory the
 * other party writes (see docs/fuzzing.md; fuzz_target.h says how it runs
 * under libFuzzer and under `meson test`).  The first byte picks a mode;
 * the rest is a script of commands, each an opcode byte and its operands
 * (an input that runs out reads zeros, so every input is a script).
 *
 * Stream mode (first byte % 4 is 0 or 1): a hostile or buggy daemon
 * against libexlclient's consumer.  The data ring and its header live in
 * a mapping fenced by PROT_NONE pages, so a read outside it faults in any
 * build.  The script writes records as the daemon does (TOKENS and DONE
 * built right, split over MORE records when large), records with any
 * header and payload, bytes anywhere in the data area and the header,
 * lies about write_pos, scribbles on the control page, and sends socket
 * messages (token, done, error, wake, or any bytes); between them the
 * client takes events with exl_next() (and sets some aside with
 * exl_cl_hold, as a blocking generate does).  Every byte of every event is
 * read.  It aborts when an event points outside the ring or its own
 * buffers, when the client hands out more events than there were records
 * and messages, and, while the script has only written what an honest
 * daemon writes, when an event is not exactly the record written, or the
 * client calls the stream broken.
 *
 * Producer mode (2): a hostile client's control page against the daemon's
 * producer (daemon/server/delivery/ring.c): read_pos anywhere (behind, ahead, far off),
 * sleeping and poll_epoch any value, between writes of every size.  It
 * aborts when a write lands outside the data area or over bytes the
 * (clamped) read position has not passed, when what was written does not
 * read back through the client's own exl_cl_ring_peek, when
 * exl_ring_has_room promises room a write then lacks, or when a socket
 * wake is asked for other than once per poll_epoch of a poll-mode reader.
 *
 * Map mode (3): exl_cl_ring_map on memfds the daemon hands over with any
 * header, size and seals, control page included.  A mapping it accepts
 * must stay readable (and the control page writable) whatever the daemon
 * does to the files next: it then tries to shrink both.  A SIGBUS is a
 * crash like any other.
 */
#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client/lib/client_internal.h"
#include "daemon/server/delivery/ring.h"
#include "tests/fuzz/fuzz_target.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

#define SIZE EXL_RING_SIZE_MIN           /* data area bytes */
#define MASK (SIZE - 1)
#define MAX_RECORD (SIZE / 4)            /* as exl_ring_create sets it */
#define FRAG (MAX_RECORD - (uint32_t)sizeof(struct exl_rec_hdr))
#define PAGE 4096u
#define MAX_COMMANDS 512
#define MAX_NEXT 1024                    /* exl_next calls per input */
#define MAX_EXPECT 512

static volatile uint64_t sink;

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 1, 2), noreturn))
#endif
static void broken(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "fuzz_ring: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

/* ---- reading the script ---- */

struct in {
	const uint8_t *p;
	size_t n, at;
};

static uint8_t u8(struct in *in)
{
	return in->at < in->n ? in->p[in->at++] : 0;
}

static uint16_t u16(struct in *in)
{
	uint16_t lo = u8(in);
	return (uint16_t)(lo | (uint16_t)u8(in) << 8);
}

static uint64_t u64(struct in *in)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)u8(in) << (8 * i);
	return v;
}

/* Bytes that do not repeat soon, for payloads: a payload of job j is
 * noise + j, so it needs no filling and compares with one memcmp. */
static uint8_t noise[4 * EXL_RING_SIZE_MIN + 256];

static void noise_init(void)
{
	uint32_t x = 0x9e3779b9u;

	if (noise[0] || noise[1])
		return;
	for (size_t i = 0; i < sizeof(noise); i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		noise[i] = (uint8_t)(x >> 24);
	}
}

/* Up to want bytes: from_input of them from the script, the rest noise. */
static void fill(struct in *in, uint8_t *dst, size_t want, size_t from_input, uint8_t salt)
{
	size_t k = 0;

	for (; k < want && k < from_input && in->at < in->n; k++)
		dst[k] = in->p[in->at++];
	memcpy(dst + k, noise + salt, want - k);
}

/* A position to start at: anywhere in the first two laps, now and then
 * far along (positions are 64-bit byte counts). */
static uint64_t start_pos(struct in *in)
{
	uint64_t p = (uint64_t)(u16(in) & 0x1fff) * 16;
	uint8_t hi = u8(in);

	if (hi & 0x80)
		p += (uint64_t)(hi & 0x7f) << 32;
	return p;
}

static void *fenced(size_t bytes)
{
	uint8_t *p = mmap(NULL, bytes + 2 * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED || mprotect(p + PAGE, bytes, PROT_READ | PROT_WRITE))
		broken("mapping %zu fenced bytes: %s", bytes, strerror(errno));
	return p + PAGE;
}

/* ======================================================================
 * Stream mode: the client's consumer against a hostile daemon
 * ====================================================================== */

enum {
	S_TOKENS, S_DONE, S_NEXT, S_RAWREC, S_SCRIBBLE, S_WPOS, S_CTRL, S_HDR, S_WAIT,
	S_SOCKMSG, S_SOCK_EOF, S_N
};

struct expect {
	uint16_t type;
	uint64_t job;
	uint8_t *payload;    /* TOKENS: the payload; DONE: the text */
	size_t len;
	uint32_t n_ids;      /* DONE */
	bool error;          /* DONE */
};

struct stream {
	struct exl_ring_hdr *hdr;
	uint8_t *data;
	struct exl_ring_ctrl *ctrl;
	struct exl_client *c;
	int peer;                 /* the daemon's end of the socket */
	uint64_t wpos, start;
	uint64_t max_pub;         /* the furthest write_pos the client was shown */
	bool honest;              /* only what a correct daemon writes, so far */
	uint64_t records;         /* records written (any kind) */
	uint64_t messages;        /* socket messages sent (upper bound) */
	uint64_t held;            /* events set aside */
	int nexts;
	struct expect q[MAX_EXPECT];
	int q_head, q_len;
};

static struct exl_ring_hdr *s_hdr;
static uint8_t *s_data;
static struct exl_ring_ctrl *s_ctrl;
static uint8_t scratch[4 * SIZE];

static uint64_t clamped_used(const struct stream *s)
{
	uint64_t rp = __atomic_load_n(&s->ctrl->read_pos, __ATOMIC_ACQUIRE);

	if (rp > s->wpos)
		return 0;
	return s->wpos - rp > SIZE ? SIZE : s->wpos - rp;
}

/* Bytes the fragments of len take from pos, a pad included (ring.c). */
static uint64_t exact_need(uint64_t pos, uint64_t len)
{
	uint64_t total = 0;

	do {
		uint64_t piece = len < FRAG ? len : FRAG;
		uint64_t sz = exl_rec_size((uint32_t)piece);
		uint64_t at = (pos + total) & MASK;
		if (at + sz > SIZE)
			total += SIZE - at;
		total += sz;
		len -= piece;
	} while (len);
	return total;
}

static void put_rec(struct stream *s, uint16_t type, uint16_t flags, uint64_t job,
		    const uint8_t *p, uint32_t len)
{
	uint32_t at = (uint32_t)(s->wpos & MASK);
	uint64_t sz = exl_rec_size(len);

	if (at + sz > SIZE) {
		struct exl_rec_hdr pad = { .len = SIZE - at - (uint32_t)sizeof(pad),
					   .type = EXL_REC_PAD };
		memcpy(s->data + at, &pad, sizeof(pad));
		s->wpos += SIZE - at;
		at = 0;
	}
	struct exl_rec_hdr h = { .len = len, .type = type, .flags = flags, .job = job };
	memcpy(s->data + at, &h, sizeof(h));
	memcpy(s->data + at + sizeof(h), p, len);
	memset(s->data + at + sizeof(h) + len, 0, sz - sizeof(h) - len);
	s->wpos += sz;
	s->records++;
}

/* Shows the client write_pos w (true or not). */
static void show_wpos(struct stream *s, uint64_t w)
{
	__atomic_store_n(&s->hdr->write_pos, w, __ATOMIC_RELEASE);
	__atomic_fetch_add(&s->hdr->seq, 1, __ATOMIC_RELEASE);
	if (w > s->max_pub)
		s->max_pub = w;
}

static void publish(struct stream *s)
{
	show_wpos(s, s->wpos);
}

/* One logical record, split as the daemon splits it; false when the
 * client has not read enough for it (the daemon would pause the job). */
static bool write_logical(struct stream *s, uint16_t type, uint64_t job, const uint8_t *p,
			  uint64_t len)
{
	if (exact_need(s->wpos, len) > SIZE - clamped_used(s))
		return false;
	do {
		uint32_t piece = (uint32_t)(len < FRAG ? len : FRAG);
		len -= piece;
		put_rec(s, type, len ? EXL_REC_F_MORE : 0, job, p, piece);
		p += piece;
	} while (len);
	publish(s);
	return true;
}

static void expect_push(struct stream *s, const struct expect *e)
{
	if (s->q_len == MAX_EXPECT) {
		s->honest = false; /* too many to follow: stop checking contents */
		free(e->payload);
		return;
	}
	s->q[(s->q_head + s->q_len++) % MAX_EXPECT] = *e;
}

static void cmd_tokens(struct stream *s, struct in *in)
{
	uint8_t job = u8(in), n = u8(in) % 65, k = u8(in) % 65, flags = u8(in);
	uint32_t text_len = u8(in) * ((flags & 2) ? 64u : 1u);
	struct exl_rec_tokens t = { .n_tokens = n, .text_len = text_len, .n_top = k,
				    .flags = (flags & 1) ? EXL_TOK_F_PROBS : 0, .t_us = 12345 };
	uint64_t len = exl_rec_tokens_size(n, k, flags & 1, text_len);
	uint8_t *p = malloc(len);
	uint8_t *q = p;

	if (!p)
		broken("out of memory");
	memcpy(q, &t, sizeof(t));
	q += sizeof(t);
	for (uint32_t i = 0; i < n; i++, q += 4) {
		int32_t id = (int32_t)(job * 1000u + i);
		memcpy(q, &id, 4);
	}
	if (flags & 1)
		for (uint32_t i = 0; i < n; i++, q += 4) {
			float f = 1.0f / (float)(i + 1);
			memcpy(q, &f, 4);
		}
	for (uint32_t i = 0; i < n * k; i++, q += 4) {
		int32_t id = (int32_t)i;
		memcpy(q, &id, 4);
	}
	for (uint32_t i = 0; i < n * k; i++, q += 4) {
		float f = 0.25f;
		memcpy(q, &f, 4);
	}
	fill(in, q, text_len, 8, job);
	if (!write_logical(s, EXL_REC_TOKENS, job, p, len)) {
		free(p);
		return;
	}
	struct expect e = { .type = EXL_REC_TOKENS, .job = job, .payload = p, .len = len };
	expect_push(s, &e);
}

static void cmd_done(struct stream *s, struct in *in)
{
	uint8_t job = u8(in), flags = u8(in);
	uint32_t text_len = u8(in) * ((flags & 4) ? 128u : 1u);
	uint32_t n_ids = u8(in) % 32;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	uint8_t *text = malloc(text_len + 1);

	if (!text)
		broken("out of memory");
	fill(in, text, text_len, 8, job);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 9 + ((flags & 1) ? 1 : 0) + ((flags & 2) ? 1 : 0) +
			 ((flags & 8) ? 1 : 0));
	msgpack_pack_str_with_body(&pk, "op", 2);
	msgpack_pack_str_with_body(&pk, "done", 4);
	msgpack_pack_str_with_body(&pk, "job", 3);
	msgpack_pack_uint64(&pk, job);
	msgpack_pack_str_with_body(&pk, "stop_reason", 11);
	msgpack_pack_str_with_body(&pk, (flags & 1) ? "error" : "max_new_tokens",
				   (flags & 1) ? 5 : 14);
	msgpack_pack_str_with_body(&pk, "prompt_tokens", 13);
	msgpack_pack_int(&pk, 5);
	msgpack_pack_str_with_body(&pk, "new_tokens", 10);
	msgpack_pack_int(&pk, (int)n_ids);
	msgpack_pack_str_with_body(&pk, "seed", 4);
	msgpack_pack_uint64(&pk, 42);
	msgpack_pack_str_with_body(&pk, "time_total", 10);
	msgpack_pack_double(&pk, 0.5);
	msgpack_pack_str_with_body(&pk, "text", 4);
	msgpack_pack_str_with_body(&pk, text, text_len);
	msgpack_pack_str_with_body(&pk, "ids", 3);
	msgpack_pack_array(&pk, n_ids);
	for (uint32_t i = 0; i < n_ids; i++)
		msgpack_pack_int(&pk, (int)i * 7);
	if (flags & 2) {
		msgpack_pack_str_with_body(&pk, "probs", 5);
		msgpack_pack_array(&pk, n_ids);
		for (uint32_t i = 0; i < n_ids; i++)
			msgpack_pack_float(&pk, 0.5f);
	}
	if (flags & 1) {
		msgpack_pack_str_with_body(&pk, "error", 5);
		msgpack_pack_map(&pk, 2);
		msgpack_pack_str_with_body(&pk, "code", 4);
		msgpack_pack_str_with_body(&pk, "internal", 8);
		msgpack_pack_str_with_body(&pk, "message", 7);
		msgpack_pack_str_with_body(&pk, "the model failed", 16);
	}
	if (flags & 8) {
		msgpack_pack_str_with_body(&pk, "stop_string", 11);
		msgpack_pack_str_with_body(&pk, "The end", 7);
	}
	if (write_logical(s, EXL_REC_DONE, job, (const uint8_t *)sb.data, sb.size)) {
		struct expect e = { .type = EXL_REC_DONE, .job = job, .payload = text,
				    .len = text_len, .n_ids = n_ids, .error = flags & 1 };
		expect_push(s, &e);
		text = NULL;
	}
	free(text);
	msgpack_sbuffer_destroy(&sb);
}

/* Any record header and payload, framed right. */
static void cmd_rawrec(struct stream *s, struct in *in)
{
	uint16_t type = u8(in), flags = u8(in);
	uint8_t job = u8(in);
	uint32_t len = u16(in) % MAX_RECORD;

	if (type > 8)
		type = (uint16_t)(type | u8(in) << 8);
	if (exact_need(s->wpos, len) > SIZE - clamped_used(s))
		return;
	fill(in, scratch, len, len, 0);
	put_rec(s, type, flags, job, scratch, len);
	publish(s);
	s->honest = false;
}

static void cmd_scribble(struct stream *s, struct in *in)
{
	uint8_t where = u8(in);
	uint16_t off = u16(in);
	uint8_t n = 1 + u8(in) % 16;
	uint8_t b[16];

	fill(in, b, n, n, 0);
	if (where & 1) {
		/* the producer's fields of the header: write_pos, seq, pause_epoch, closed */
		uint8_t *h = (uint8_t *)s->hdr + 64;
		for (uint8_t i = 0; i < n; i++)
			h[(off + i) % 24] = b[i];
		uint64_t w = __atomic_load_n(&s->hdr->write_pos, __ATOMIC_ACQUIRE);
		if (w > s->max_pub)
			s->max_pub = w;
	} else {
		for (uint8_t i = 0; i < n; i++)
			s->data[(off + i) & MASK] = b[i];
	}
	s->honest = false;
}

static void cmd_wpos(struct stream *s, struct in *in)
{
	uint8_t kind = u8(in);
	uint64_t v = u64(in), w;

	switch (kind % 5) {
	case 0: w = s->wpos + (uint64_t)(int64_t)(int16_t)v; break;
	case 1: w = v; break;
	case 2: w = s->wpos - SIZE - 16; break;
	case 3: w = s->wpos + SIZE + 16; break;
	default: w = s->wpos + 16 * (v & 0xff); break; /* past what was written */
	}
	show_wpos(s, w);
	if (kind & 0x80)
		s->wpos = w & ~(uint64_t)15; /* and go on writing from there */
	s->honest = false;
}

static void cmd_ctrl(struct stream *s, struct in *in)
{
	uint8_t field = u8(in);
	uint64_t v = u64(in);

	if (field & 1)
		__atomic_store_n(&s->ctrl->read_pos, v, __ATOMIC_RELEASE);
	else
		__atomic_store_n(&s->ctrl->sleeping, (uint32_t)v, __ATOMIC_RELEASE);
	s->honest = false;
}

static void cmd_hdr(struct stream *s, struct in *in)
{
	switch (u8(in) % 4) {
	case 0: __atomic_fetch_add(&s->hdr->pause_epoch, 1, __ATOMIC_RELEASE); break;
	case 1: __atomic_store_n(&s->hdr->closed, 1, __ATOMIC_RELEASE); break;
	case 2: __atomic_fetch_add(&s->hdr->seq, 1, __ATOMIC_RELEASE); break;
	default: __atomic_store_n(&s->hdr->closed, 0, __ATOMIC_RELEASE); break;
	}
}

static void cmd_wait(struct stream *s, struct in *in)
{
	switch (u8(in) % 3) {
	case 0: sink += exl_cl_ring_wait(s->c, 0); break; /* a zero timeout: no sleep */
	case 1: exl_cl_ring_arm_poll(s->c); break;
	default: exl_cl_ring_disarm(s->c); break;
	}
}

static void send_peer(struct stream *s, const void *p, size_t len)
{
	/* what does not fit in the socket buffer is lost, as if the daemon died */
	ssize_t r = send(s->peer, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	(void)r;
	s->messages += len; /* at most one message per byte */
}

static void pack_kv_u(msgpack_packer *pk, const char *k, uint64_t v)
{
	msgpack_pack_str_with_body(pk, k, strlen(k));
	msgpack_pack_uint64(pk, v);
}

static void cmd_sockmsg(struct stream *s, struct in *in)
{
	uint8_t kind = u8(in), job = u8(in), n = u8(in) % 16, k = u8(in) % 8, flags = u8(in);
	uint8_t len = u8(in);
	msgpack_sbuffer sb;
	msgpack_packer pk;

	s->honest = false;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	switch (kind % 5) {
	case 0: { /* token, with counts that may not agree */
		uint32_t n2 = (flags & 1) ? n + 1 : n, k2 = (flags & 2) ? k + 1 : k;
		msgpack_pack_map(&pk, 8);
		msgpack_pack_str_with_body(&pk, "op", 2);
		msgpack_pack_str_with_body(&pk, "token", 5);
		pack_kv_u(&pk, "job", job);
		pack_kv_u(&pk, "t_us", 77);
		msgpack_pack_str_with_body(&pk, "ids", 3);
		msgpack_pack_array(&pk, n);
		for (uint32_t i = 0; i < n; i++)
			msgpack_pack_int(&pk, (int)i);
		msgpack_pack_str_with_body(&pk, "probs", 5);
		msgpack_pack_array(&pk, n2);
		for (uint32_t i = 0; i < n2; i++)
			msgpack_pack_float(&pk, 0.5f);
		msgpack_pack_str_with_body(&pk, "top_ids", 7);
		msgpack_pack_array(&pk, n);
		for (uint32_t i = 0; i < n; i++) {
			msgpack_pack_array(&pk, (flags & 4) && i == n / 2 ? k2 : k);
			for (uint32_t j = 0; j < ((flags & 4) && i == n / 2 ? k2 : k); j++)
				msgpack_pack_int(&pk, (int)j);
		}
		msgpack_pack_str_with_body(&pk, "top_probs", 9);
		msgpack_pack_array(&pk, n);
		for (uint32_t i = 0; i < n; i++) {
			msgpack_pack_array(&pk, k);
			for (uint32_t j = 0; j < k; j++)
				msgpack_pack_double(&pk, 0.125);
		}
		msgpack_pack_str_with_body(&pk, "logits", 6);
		msgpack_pack_array(&pk, (flags & 8) ? n2 : n);
		for (uint32_t i = 0; i < ((flags & 8) ? n2 : n); i++) {
			uint32_t row = (flags & 16) && i ? len % 5 : len;
			msgpack_pack_bin_with_body(&pk, scratch, row);
		}
		fill(in, scratch, len, len, 0);
		msgpack_pack_str_with_body(&pk, "text", 4);
		msgpack_pack_str_with_body(&pk, scratch, len);
		break;
	}
	case 1: /* done */
		msgpack_pack_map(&pk, 6);
		msgpack_pack_str_with_body(&pk, "op", 2);
		msgpack_pack_str_with_body(&pk, "done", 4);
		pack_kv_u(&pk, "job", job);
		msgpack_pack_str_with_body(&pk, "ids", 3);
		msgpack_pack_array(&pk, n);
		for (uint32_t i = 0; i < n; i++) {
			if (flags & 1)
				msgpack_pack_str_with_body(&pk, "x", 1); /* not an integer */
			else
				msgpack_pack_int(&pk, (int)i);
		}
		msgpack_pack_str_with_body(&pk, "probs", 5);
		msgpack_pack_array(&pk, n);
		for (uint32_t i = 0; i < n; i++)
			msgpack_pack_double(&pk, (flags & 2) ? 1e300 : 0.5);
		msgpack_pack_str_with_body(&pk, "error", 5);
		if (flags & 4) {
			msgpack_pack_map(&pk, 2);
			msgpack_pack_str_with_body(&pk, "code", 4);
			msgpack_pack_str_with_body(&pk, "limit", 5);
			msgpack_pack_str_with_body(&pk, "message", 7);
			msgpack_pack_nil(&pk); /* not a string */
		} else {
			msgpack_pack_nil(&pk);
		}
		fill(in, scratch, len, len, 0);
		msgpack_pack_str_with_body(&pk, "text", 4);
		msgpack_pack_str_with_body(&pk, scratch, len);
		break;
	case 2: /* a job's error */
		msgpack_pack_map(&pk, 4);
		msgpack_pack_str_with_body(&pk, "op", 2);
		msgpack_pack_str_with_body(&pk, "error", 5);
		pack_kv_u(&pk, "job", job);
		msgpack_pack_str_with_body(&pk, "code", 4);
		msgpack_pack_str_with_body(&pk, "internal", 8);
		msgpack_pack_str_with_body(&pk, "message", 7);
		msgpack_pack_str_with_body(&pk, "it broke", 8);
		break;
	case 3: /* wake */
		msgpack_pack_map(&pk, 1);
		msgpack_pack_str_with_body(&pk, "op", 2);
		msgpack_pack_str_with_body(&pk, "wake", 4);
		break;
	default: /* any bytes */
		fill(in, scratch, len, len, 0);
		if (len) /* msgpack-c's empty sbuffer has no data to add 0 to */
			msgpack_sbuffer_write(&sb, (const char *)scratch, len);
		break;
	}
	if (sb.size)
		send_peer(s, sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
}

static bool in_ring(const void *p)
{
	const uint8_t *b = p;
	return b >= (const uint8_t *)s_hdr && b < s_data + SIZE + PAGE;
}

/* Reads n bytes at p; a pointer into the ring must lie in the data area. */
static void touch(const char *what, const void *p, size_t n)
{
	const uint8_t *b = p;

	if (!n)
		return;
	if (!p)
		broken("%s: NULL for %zu bytes", what, n);
	if (in_ring(b) && (b < s_data || n > SIZE || b + n > s_data + SIZE))
		broken("%s: %zu bytes at ring offset %td: outside the data area", what, n,
		       b - s_data);
	/* memcpy: ASan checks the whole range at once, a fence faults */
	while (n) {
		size_t k = n < sizeof(scratch) ? n : sizeof(scratch);
		memcpy(scratch, b, k);
		sink += scratch[k - 1];
		b += k;
		n -= k;
	}
}

static void touch_event(const struct exl_event *ev)
{
	if (ev->type == EXL_EVENT_TOKENS) {
		if (ev->n_top < 0 || ev->n_top > EXL_MAX_TOP_K_RETURN * 1024)
			broken("tokens event with n_top %d", ev->n_top);
		touch("ids", ev->ids, ev->n_ids * 4);
		if (ev->probs)
			touch("probs", ev->probs, ev->n_ids * 4);
		if (ev->top_ids || ev->top_probs) {
			touch("top_ids", ev->top_ids, ev->n_ids * (size_t)ev->n_top * 4);
			touch("top_probs", ev->top_probs, ev->n_ids * (size_t)ev->n_top * 4);
		}
		touch("text", ev->text, ev->text_len);
		if (ev->logits)
			touch("logits", ev->logits, ev->n_ids * ev->n_vocab * 4);
	} else if (ev->type == EXL_EVENT_DONE) {
		const struct exl_result *r = ev->result;
		if (!r)
			broken("done event without a result");
		if (r->job != ev->job)
			broken("done event of job %llu, result of job %llu",
			       (unsigned long long)ev->job, (unsigned long long)r->job);
		if (!memchr(r->stop_reason, 0, sizeof(r->stop_reason)))
			broken("stop_reason not terminated");
		if (r->stop_string)
			touch("stop_string", r->stop_string, strlen(r->stop_string));
		if (r->text) {
			touch("result text", r->text, r->text_len + 1);
			if (r->text[r->text_len])
				broken("result text not terminated");
		}
		if (r->ids)
			touch("result ids", r->ids, r->n_ids * 4);
		if (r->probs)
			touch("result probs", r->probs, r->n_ids * 4);
		if (r->error)
			touch("result error", r->error, strlen(r->error));
	} else {
		broken("event of type %d", (int)ev->type);
	}
}

/* An honest stream: the event must be the oldest record not yet taken. */
static void match_event(struct stream *s, const struct exl_event *ev, bool held)
{
	if (!s->q_len)
		broken("an event (type %d, job %llu) with nothing written", (int)ev->type,
		       (unsigned long long)ev->job);
	struct expect *e = &s->q[s->q_head];
	if (ev->job != e->job || (ev->type == EXL_EVENT_TOKENS) != (e->type == EXL_REC_TOKENS))
		broken("event type %d of job %llu, written: type %u of job %llu", (int)ev->type,
		       (unsigned long long)ev->job, e->type, (unsigned long long)e->job);
	if (e->type == EXL_REC_TOKENS) {
		struct exl_rec_tokens t;
		memcpy(&t, e->payload, sizeof(t));
		const uint8_t *p = e->payload + sizeof(t);
		bool probs = t.flags & EXL_TOK_F_PROBS;
		const char *what = NULL;
		if (ev->n_ids != t.n_tokens || memcmp(ev->ids, p, 4ull * t.n_tokens))
			what = "ids";
		else if (ev->t_us != t.t_us)
			what = "t_us";
		else if (!ev->probs != !probs ||
			 (probs && memcmp(ev->probs, p + 4ull * t.n_tokens, 4ull * t.n_tokens)))
			what = "probs";
		else if (ev->text_len != t.text_len ||
			 memcmp(ev->text, e->payload + e->len - t.text_len, t.text_len))
			what = "text";
		else if (t.n_top && t.n_tokens &&
			 (ev->n_top != t.n_top || !ev->top_ids || !ev->top_probs ||
			  memcmp(ev->top_ids, p + 4ull * t.n_tokens * (probs ? 2 : 1),
				 4ull * t.n_tokens * t.n_top)))
			what = "top";
		if (what)
			broken("tokens event of job %llu: its %s differ from the record written",
			       (unsigned long long)e->job, what);
	} else {
		const struct exl_result *r = ev->result;
		if (r->text_len != e->len || (e->len && memcmp(r->text, e->payload, e->len)) ||
		    r->n_ids != e->n_ids || !r->error != !e->error)
			broken("done event of job %llu differs from the record written",
			       (unsigned long long)e->job);
	}
	if (held)
		return; /* it comes again, set aside */
	free(e->payload);
	s->q_head = (s->q_head + 1) % MAX_EXPECT;
	s->q_len--;
}

/* exl_next; false when it failed or had nothing. */
static bool next(struct stream *s, bool hold)
{
	struct exl_event ev;

	if (s->nexts >= MAX_NEXT)
		return false;
	s->nexts++;
	int rc = exl_next(s->c, &ev, 0);
	if (rc) {
		if (s->honest && (rc != EXL_E_TIMEOUT || s->q_len))
			broken("an honest stream failed (%d: %s) with %d records unread", rc,
			       exl_errmsg(s->c), s->q_len);
		return false;
	}
	touch_event(&ev);
	if (s->honest)
		match_event(s, &ev, hold);
	if (hold) {
		if (exl_cl_hold(s->c, &ev))
			broken("exl_cl_hold failed: %s", exl_errmsg(s->c));
		s->held++;
	}
	return true;
}

static void stream_init_once(void)
{
	if (s_hdr)
		return;
	s_hdr = fenced(EXL_RING_HDR_SIZE + SIZE);
	s_data = (uint8_t *)s_hdr + EXL_RING_HDR_SIZE;
	s_ctrl = fenced(EXL_CTRL_SIZE);
}

static void run_stream(struct in *in)
{
	static struct stream s;
	int sv[2];

	stream_init_once();
	memset(&s, 0, sizeof(s));
	s.hdr = s_hdr;
	s.data = s_data;
	s.ctrl = s_ctrl;
	s.honest = true;
	memset(s_hdr, 0, EXL_RING_HDR_SIZE + SIZE);
	memset(s_ctrl, 0, EXL_CTRL_SIZE);
	s.hdr->magic = EXL_RING_MAGIC;
	s.hdr->version = EXL_PROTOCOL_VERSION;
	s.hdr->hdr_size = EXL_RING_HDR_SIZE;
	s.hdr->data_size = SIZE;
	s.hdr->max_record = MAX_RECORD;
	s.start = s.wpos = s.max_pub = start_pos(in);
	s.hdr->write_pos = s.wpos;
	s.ctrl->read_pos = s.wpos;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		broken("socketpair: %s", strerror(errno));
	s.peer = sv[1];
	/* the client as exl_connect and exl_cl_ring_map leave it (map mode
	 * tests exl_cl_ring_map itself) */
	struct exl_client *c = calloc(1, sizeof(*c));
	if (!c || !msgpack_unpacker_init(&c->unp, 4096))
		broken("out of memory");
	c->fd = sv[0];
	c->timeout_ms = 0;
	c->hdr = s.hdr;
	c->data = s.data;
	c->size = SIZE;
	c->ctrl = s.ctrl;
	c->rp = s.wpos;
	s.c = c;

	for (int n = 0; n < MAX_COMMANDS && in->at < in->n; n++) {
		switch (u8(in) % S_N) {
		case S_TOKENS: cmd_tokens(&s, in); break;
		case S_DONE: cmd_done(&s, in); break;
		case S_NEXT: {
			int k = 1 + u8(in) % 4;
			bool hold = u8(in) & 1;
			for (int i = 0; i < k; i++)
				next(&s, hold && i == k - 1);
			break;
		}
		case S_RAWREC: cmd_rawrec(&s, in); break;
		case S_SCRIBBLE: cmd_scribble(&s, in); break;
		case S_WPOS: cmd_wpos(&s, in); break;
		case S_CTRL: cmd_ctrl(&s, in); break;
		case S_HDR: cmd_hdr(&s, in); break;
		case S_WAIT: cmd_wait(&s, in); break;
		case S_SOCKMSG: cmd_sockmsg(&s, in); break;
		case S_SOCK_EOF: shutdown(s.peer, SHUT_WR); s.honest = false; break;
		}
	}
	/* Take what is left.  Every event uses up a record (16 bytes at
	 * least, of those the client was shown) or a socket message, or is
	 * one set aside: more than that is a client making events up, or
	 * going round in circles. */
	uint64_t shown = s.max_pub > s.wpos ? s.max_pub : s.wpos;
	uint64_t bound = (shown - s.start) / 16 + s.messages + s.held + 4;
	uint64_t got = 0;
	s.nexts = 0;
	while (next(&s, false))
		if (++got > bound)
			broken("%llu events from %llu bytes of records and %llu of messages",
			       (unsigned long long)got, (unsigned long long)(s.wpos - s.start),
			       (unsigned long long)s.messages);
	if (s.honest && s.nexts < MAX_NEXT && s.q_len)
		broken("%d records written were never handed out", s.q_len);
	while (s.q_len) {
		free(s.q[s.q_head].payload);
		s.q_head = (s.q_head + 1) % MAX_EXPECT;
		s.q_len--;
	}
	/* the mapping is ours, not the client's */
	c->ring_map = NULL;
	c->hdr = NULL;
	c->ctrl = NULL;
	exl_close(c);
	close(s.peer);
}

/* ======================================================================
 * Producer mode: the daemon's producer against a hostile control page
 * ====================================================================== */

enum { P_WRITE, P_CTRL, P_CONSUME, P_HAS_ROOM, P_PAUSE, P_SHUTDOWN, P_N };

static struct exl_ring *ring;
static uint8_t shadow[SIZE];

struct producer {
	struct exl_ring *r;
	uint64_t honest_rp;      /* where a reader that reads everything is */
	uint32_t woken_epoch;    /* the poll_epoch a wake was last asked for (0 at first) */
};


/* Bytes in [lo, hi) (positions) of data equal those of shadow. */
static bool same_range(const uint8_t *data, uint64_t lo, uint64_t hi)
{
	while (lo < hi) {
		uint64_t at = lo & MASK, n = hi - lo < SIZE - at ? hi - lo : SIZE - at;
		if (memcmp(data + at, shadow + at, n))
			return false;
		lo += n;
	}
	return true;
}

static void shadow_copy(const uint8_t *data, uint64_t lo, uint64_t hi)
{
	while (lo < hi) {
		uint64_t at = lo & MASK, n = hi - lo < SIZE - at ? hi - lo : SIZE - at;
		memcpy(shadow + at, data + at, n);
		lo += n;
	}
}

/* The records from pos on, through the client's own reader: one logical
 * record of type and job whose payload is noise + job. */
static void read_back(struct exl_ring *r, uint64_t pos, uint16_t type, uint64_t job,
		      uint64_t len)
{
	static struct exl_client c;
	struct exl_rec_hdr h;
	const uint8_t *p;
	size_t n, got = 0;

	memset(&c, 0, sizeof(c));
	c.fd = -1;
	c.hdr = r->hdr;
	c.data = r->data;
	c.size = r->size;
	c.rp = pos;
	for (;;) {
		int rc = exl_cl_ring_peek(&c, &h, &p, &n);
		if (rc != 1)
			broken("write of %llu bytes at %llu: the reader gets %d (%s) after %zu bytes",
			       (unsigned long long)len, (unsigned long long)pos, rc, c.err, got);
		if (h.type != type || h.job != job || n > len - got)
			broken("write of %llu bytes: a record of type %u, job %llu, %zu bytes",
			       (unsigned long long)len, h.type, (unsigned long long)h.job, n);
		if (memcmp(p, noise + job + got, n))
			broken("write of %llu bytes: a piece at byte %zu differs",
			       (unsigned long long)len, got);
		got += n;
		if (!(h.flags & EXL_REC_F_MORE))
			break;
	}
	if (got != len || c.rp != r->wpos)
		broken("write of %llu bytes: %zu read back, ending at %llu, write_pos %llu",
		       (unsigned long long)len, got, (unsigned long long)c.rp,
		       (unsigned long long)r->wpos);
}

static uint64_t p_used(const struct exl_ring *r, uint64_t rp)
{
	if (rp > r->wpos)
		return 0;
	return r->wpos - rp > r->size ? r->size : r->wpos - rp;
}

static void p_write(struct producer *pr, struct in *in)
{
	struct exl_ring *r = pr->r;
	uint16_t type = 1 + u8(in) % 3; /* what exld writes: TOKENS, DONE, DONE_SOCKET */
	uint8_t job = u8(in), sel = u8(in);
	uint16_t v = u16(in);
	uint8_t cuts = u8(in);
	uint64_t len;

	switch (sel % 5) {
	case 0: len = sel / 5; break;
	case 1: len = v; break;
	case 2: len = v % (3 * MAX_RECORD); break;                   /* split in up to 4 */
	case 3: len = FRAG - 2 + (v % 5); break;                      /* around a fragment */
	default: len = (uint64_t)v * (1 + (sel >> 6)); break;         /* beyond the ring */
	}
	if (len > sizeof(noise) - 256)
		len = sizeof(noise) - 256;
	const uint8_t *payload = noise + job;
	/* one to three pieces, cut where the script says */
	struct iovec iov[3];
	int n_iov = 1 + cuts % 3;
	uint64_t a = n_iov > 1 ? (len * ((cuts >> 2) & 7)) / 8 : len;
	uint64_t b = n_iov > 2 ? a + (len - a) * (cuts >> 5) / 8 : len;
	iov[0] = (struct iovec){ (void *)payload, a };
	iov[1] = (struct iovec){ (void *)(payload + a), b - a };
	iov[2] = (struct iovec){ (void *)(payload + b), len - b };

	uint64_t rp = __atomic_load_n(&r->ctrl->read_pos, __ATOMIC_ACQUIRE);
	uint32_t sleeping = r->ctrl->sleeping, epoch = r->ctrl->poll_epoch;
	uint64_t old_w = r->wpos, old_seq = r->hdr->seq;
	uint64_t used = p_used(r, rp);
	uint64_t need = exl_ring_need(r, len);
	bool has = exl_ring_has_room(r, len);
	bool wake = true;
	enum exl_ring_result res = exl_ring_write(r, type, job, iov, n_iov, &wake);

	if (need > r->size) {
		if (res != EXL_RING_NEVER || has)
			broken("%llu bytes need %llu of %u: result %d, has_room %d",
			       (unsigned long long)len, (unsigned long long)need, r->size, res, has);
	} else if (has && res != EXL_RING_WRITTEN) {
		broken("has_room promised %llu bytes, the write got %d", (unsigned long long)len, res);
	}
	if (res != EXL_RING_WRITTEN) {
		if (wake || r->wpos != old_w || r->hdr->write_pos != old_w || r->hdr->seq != old_seq ||
		    memcmp(r->data, shadow, SIZE))
			broken("a write that did not happen (%d) changed the ring", res);
		return;
	}
	if (r->hdr->write_pos != r->wpos || r->hdr->seq != old_seq + 1 ||
	    r->wpos - old_w > r->size - used)
		broken("write of %llu bytes from %llu: write_pos %llu, seq %u, %llu bytes used",
		       (unsigned long long)len, (unsigned long long)old_w,
		       (unsigned long long)r->wpos, r->hdr->seq, (unsigned long long)used);
	/* what the reader has not passed is untouched */
	if (!same_range(r->data, old_w - used, old_w))
		broken("write of %llu bytes at %llu overwrote unread bytes (read_pos %llu)",
		       (unsigned long long)len, (unsigned long long)old_w, (unsigned long long)rp);
	read_back(r, old_w, type, job, len);
	shadow_copy(r->data, old_w, r->wpos);
	/* a socket wake once per poll_epoch, and only in poll mode */
	bool want = sleeping == EXL_SLEEP_POLL && epoch != pr->woken_epoch;
	if (wake != want)
		broken("socket wake %d (sleeping %u, epoch %u, last woken %u)", wake, sleeping, epoch,
		       pr->woken_epoch);
	if (wake)
		pr->woken_epoch = epoch;
}

static void p_ctrl(struct producer *pr, struct in *in)
{
	struct exl_ring_ctrl *ctrl = pr->r->ctrl;
	uint8_t sub = u8(in);
	uint64_t v = u64(in), w = pr->r->wpos;

	switch (sub % 6) {
	case 0: /* where an honest reader is */
		__atomic_store_n(&ctrl->read_pos, pr->honest_rp, __ATOMIC_RELEASE);
		break;
	case 1: /* behind, up to a bit more than a ring */
		__atomic_store_n(&ctrl->read_pos, w - 16 * (v % (SIZE / 16 + 3)), __ATOMIC_RELEASE);
		break;
	case 2: /* anywhere */
		__atomic_store_n(&ctrl->read_pos, v, __ATOMIC_RELEASE);
		break;
	case 3: /* ahead of what was written */
		__atomic_store_n(&ctrl->read_pos, w + (v & 0xff), __ATOMIC_RELEASE);
		break;
	case 4: /* asleep, or not, or nonsense */
		__atomic_store_n(&ctrl->sleeping, (uint32_t)(v % 4), __ATOMIC_RELEASE);
		break;
	default: /* a few epochs that repeat, or any */
		__atomic_store_n(&ctrl->poll_epoch, (uint32_t)((v & 0x100) ? v : v % 4),
				 __ATOMIC_RELEASE);
		break;
	}
}

/* A reader that reads everything takes k records and says so. */
static void p_consume(struct producer *pr, struct in *in)
{
	static struct exl_client c;
	struct exl_ring *r = pr->r;
	struct exl_rec_hdr h;
	const uint8_t *p;
	size_t n;
	int k = 1 + u8(in) % 8;

	if (r->wpos - pr->honest_rp > r->size)
		pr->honest_rp = r->wpos; /* a lying read_pos let it be overwritten */
	memset(&c, 0, sizeof(c));
	c.fd = -1;
	c.hdr = r->hdr;
	c.data = r->data;
	c.size = r->size;
	c.rp = pr->honest_rp;
	while (k-- > 0) {
		int rc = exl_cl_ring_peek(&c, &h, &p, &n);
		if (rc < 0) {
			c.rp = r->wpos;
			break;
		}
		if (rc == 0)
			break;
	}
	pr->honest_rp = c.rp;
	__atomic_store_n(&r->ctrl->read_pos, c.rp, __ATOMIC_RELEASE);
}

static void p_has_room(struct producer *pr, struct in *in)
{
	struct exl_ring *r = pr->r;
	uint64_t len = (uint64_t)u16(in) * (1 + u8(in) % 4);
	uint64_t rp = __atomic_load_n(&r->ctrl->read_pos, __ATOMIC_ACQUIRE);
	bool want = exl_ring_need(r, len) <= r->size - p_used(r, rp);

	if (exl_ring_has_room(r, len) != want)
		broken("has_room(%llu) with read_pos %llu, write_pos %llu",
		       (unsigned long long)len, (unsigned long long)rp, (unsigned long long)r->wpos);
}

static void run_producer(struct in *in)
{
	struct producer pr = { 0 };
	char err[256];

	if (!ring) {
		ring = exl_ring_create(SIZE, err, sizeof(err));
		if (!ring)
			broken("exl_ring_create: %s", err);
		exl_ring_close_fds(ring);
	}
	struct exl_ring *r = ring;
	pr.r = r;
	r->wpos = pr.honest_rp = start_pos(in);
	r->poll_epoch_woken = 0;
	memset(r->hdr, 0, EXL_RING_HDR_SIZE);
	r->hdr->magic = EXL_RING_MAGIC;
	r->hdr->version = EXL_PROTOCOL_VERSION;
	r->hdr->hdr_size = EXL_RING_HDR_SIZE;
	r->hdr->data_size = r->size;
	r->hdr->max_record = r->max_record;
	r->hdr->write_pos = r->wpos;
	memset(r->ctrl, 0, EXL_CTRL_SIZE);
	r->ctrl->read_pos = r->wpos;
	memset(r->data, 0, r->size);
	memset(shadow, 0, sizeof(shadow));

	for (int n = 0; n < MAX_COMMANDS && in->at < in->n; n++) {
		switch (u8(in) % P_N) {
		case P_WRITE: p_write(&pr, in); break;
		case P_CTRL: p_ctrl(&pr, in); break;
		case P_CONSUME: p_consume(&pr, in); break;
		case P_HAS_ROOM: p_has_room(&pr, in); break;
		case P_PAUSE: {
			uint32_t e = r->hdr->pause_epoch;
			exl_ring_note_pause(r);
			if (r->hdr->pause_epoch != e + 1)
				broken("note_pause: pause_epoch %u after %u", r->hdr->pause_epoch, e);
			break;
		}
		case P_SHUTDOWN: {
			uint32_t seq = r->hdr->seq;
			exl_ring_shutdown(r);
			if (r->hdr->closed != 1 || r->hdr->seq != seq + 1)
				broken("shutdown: closed %u, seq %u after %u", r->hdr->closed,
				       r->hdr->seq, seq);
			break;
		}
		}
	}
}

/* ======================================================================
 * Map mode: exl_cl_ring_map on what the daemon hands over
 * ====================================================================== */

static int make_memfd(const char *name, uint64_t size, const void *head, size_t head_len,
		      unsigned seals)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		broken("memfd_create: %s", strerror(errno));
	if (ftruncate(fd, (off_t)size))
		broken("ftruncate: %s", strerror(errno));
	if (head_len && size && pwrite(fd, head, head_len < size ? head_len : size, 0) < 0)
		broken("pwrite: %s", strerror(errno));
	if (seals && fcntl(fd, F_ADD_SEALS, seals))
		broken("F_ADD_SEALS %#x: %s", seals, strerror(errno));
	return fd;
}

static const unsigned seal_bits[] = { F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_FUTURE_WRITE,
				      F_SEAL_SEAL };

static unsigned seals_from(uint8_t b, bool data)
{
	unsigned s = 0;

	/* mostly what the daemon seals with; otherwise any subset */
	if (!(b & 0x80))
		return data ? F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL :
			      F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
	for (int i = 0; i < 4; i++)
		if (b & (1u << i))
			s |= seal_bits[i];
	return s;
}

static void run_map(struct in *in)
{
	static const uint32_t data_sizes[] = { SIZE, 2 * SIZE, SIZE / 2, SIZE + 16, 0, 1u << 26,
					       (1u << 26) * 2u };
	static const uint32_t ctrl_sizes[] = { EXL_CTRL_SIZE, 0, 100, EXL_CTRL_SIZE - 1,
					       2 * EXL_CTRL_SIZE };
	struct exl_ring_hdr h = { .magic = EXL_RING_MAGIC, .version = EXL_PROTOCOL_VERSION,
				  .hdr_size = EXL_RING_HDR_SIZE };
	struct exl_client c;
	uint8_t fl = u8(in);

	/* the header's fields: right, or from the script */
	uint8_t ds = u8(in);
	h.data_size = ds < 0xf0 ? data_sizes[ds % 7] : (uint32_t)u64(in);
	uint8_t mr = u8(in);
	h.max_record = mr % 6 == 0 ? (uint32_t)u64(in) :
		       mr % 6 == 1 ? 63 : mr % 6 == 2 ? 64 : mr % 6 == 3 ? h.data_size / 2 :
		       mr % 6 == 4 ? h.data_size / 2 + 1 : h.data_size / 4;
	if (fl & 1)
		h.magic = (uint32_t)u64(in);
	if (fl & 2)
		h.version = (uint32_t)u64(in);
	if (fl & 4)
		h.hdr_size = (uint32_t)u64(in);
	h.write_pos = (uint64_t)(u16(in) & 0x0fff) * 16;
	h.pause_epoch = u8(in);
	/* the file sizes: as the header says, or not */
	uint8_t fs = u8(in);
	uint64_t data_file = (uint64_t)EXL_RING_HDR_SIZE + h.data_size;
	switch (fs % 5) {
	case 0: case 1: break;
	case 2: data_file = (uint64_t)u16(in) * 16; break;
	case 3: data_file = EXL_RING_HDR_SIZE + SIZE; break;
	default: data_file += PAGE; break;
	}
	if (data_file > (uint64_t)EXL_RING_HDR_SIZE + 2 * EXL_RING_SIZE_MAX)
		data_file = EXL_RING_HDR_SIZE + SIZE;
	uint8_t cs = u8(in);
	uint64_t ctrl_file = ctrl_sizes[cs % 5];
	unsigned data_seals = seals_from(u8(in), true), ctrl_seals = seals_from(u8(in), false);
	/* where the client starts reading: near the start, or anywhere */
	struct exl_ring_ctrl ctl = { .read_pos = (uint64_t)(u16(in) & 0x0fff) * 16 };
	if (fl & 8)
		ctl.read_pos = u64(in);

	int dfd = make_memfd("fuzz-ring", data_file, &h, sizeof(h), data_seals);
	int cfd = make_memfd("fuzz-ctrl", ctrl_file, &ctl, sizeof(ctl), ctrl_seals);
	memset(&c, 0, sizeof(c));
	c.fd = -1;
	int rc = exl_cl_ring_map(&c, dfd, cfd);
	if (rc) {
		if (!c.err[0] || c.hdr || c.ctrl)
			broken("exl_cl_ring_map refused (%d) with '%s' and a mapping left", rc, c.err);
	} else {
		if (c.size != h.data_size || c.ring_map_size != data_file ||
		    c.ring_map_size != (uint64_t)EXL_RING_HDR_SIZE + c.size ||
		    c.size < EXL_RING_SIZE_MIN || (c.size & (c.size - 1)))
			broken("exl_cl_ring_map took data_size %u in a file of %llu bytes", h.data_size,
			       (unsigned long long)data_file);
		/* the daemon now shrinks what it handed over, if it can */
		int r1 = ftruncate(dfd, 0), r2 = ftruncate(cfd, 0);
		(void)r1;
		(void)r2;
		/* and the client goes on using it: reads of the header and the
		 * data, writes to the control page */
		struct exl_rec_hdr rh;
		const uint8_t *p;
		size_t n;
		sink += exl_cl_ring_nonempty(&c);
		exl_cl_ring_arm_poll(&c);
		for (int i = 0; i < 4 && exl_cl_ring_peek(&c, &rh, &p, &n) == 1; i++)
			for (size_t k = 0; k < n; k++)
				sink += p[k];
		exl_cl_ring_release(&c);
		exl_cl_ring_disarm(&c);
		sink += c.hdr->closed + c.hdr->seq;
		exl_cl_ring_unmap(&c);
	}
	close(dfd);
	close(cfd);
}

int fuzz_one(const uint8_t *data, size_t size)
{
	struct in in = { data, size, 0 };

	noise_init();

	switch (u8(&in) % 4) {
	case 0:
	case 1: run_stream(&in); break;
	case 2: run_producer(&in); break;
	default: run_map(&in); break;
	}
	return 0;
}

/* ---- seeds ---- */

struct script {
	uint8_t b[4096];
	size_t n;
};

static void e8(struct script *s, unsigned v)
{
	if (s->n < sizeof(s->b))
		s->b[s->n++] = (uint8_t)v;
}

static void e16(struct script *s, unsigned v)
{
	e8(s, v & 0xff);
	e8(s, v >> 8);
}

static void e64(struct script *s, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		e8(s, (unsigned)(v >> (8 * i)));
}

static void tokens(struct script *s, unsigned job, unsigned n, unsigned k, unsigned flags,
		   unsigned text_len)
{
	e8(s, S_TOKENS);
	e8(s, job);
	e8(s, n);
	e8(s, k);
	e8(s, flags);
	e8(s, text_len);
	for (unsigned i = 0; i < text_len && i < 8; i++)
		e8(s, "h\xc3\xa9llo, w"[i]);
}

static void done(struct script *s, unsigned job, unsigned flags, unsigned text_len, unsigned n)
{
	e8(s, S_DONE);
	e8(s, job);
	e8(s, flags);
	e8(s, text_len);
	e8(s, n);
	for (unsigned i = 0; i < text_len && i < 8; i++)
		e8(s, 'T');
}

static void nexts(struct script *s, unsigned k, bool hold)
{
	e8(s, S_NEXT);
	e8(s, k - 1);
	e8(s, hold);
}

static void rawrec(struct script *s, unsigned type, unsigned flags, unsigned job, unsigned len,
		   const void *p)
{
	e8(s, S_RAWREC);
	e8(s, type);
	e8(s, flags);
	e8(s, job);
	e16(s, len);
	for (unsigned i = 0; i < len; i++)
		e8(s, ((const uint8_t *)p)[i]);
}

static void sockmsg(struct script *s, unsigned kind, unsigned job, unsigned n, unsigned k,
		    unsigned flags, unsigned len)
{
	e8(s, S_SOCKMSG);
	e8(s, kind);
	e8(s, job);
	e8(s, n);
	e8(s, k);
	e8(s, flags);
	e8(s, len);
	/* token, done and raw bytes take len bytes of the script */
	for (unsigned i = 0; i < len && kind % 5 != 2 && kind % 5 != 3; i++)
		e8(s, kind % 5 == 4 ? 0x90 + i % 3 : 'x');
}

static void p_write_cmd(struct script *s, unsigned type, unsigned job, unsigned sel, unsigned v,
			unsigned cuts)
{
	e8(s, P_WRITE);
	e8(s, type);
	e8(s, job);
	e8(s, sel);
	e16(s, v);
	e8(s, cuts);
}

static void p_ctrl_cmd(struct script *s, unsigned sub, uint64_t v)
{
	e8(s, P_CTRL);
	e8(s, sub);
	e64(s, v);
}

static struct fuzz_blob seeds[16];
static size_t n_seeds;
static struct script scripts[16];

static struct script *new_seed(const char *name, unsigned mode, unsigned start16, unsigned hi)
{
	struct script *s = &scripts[n_seeds];

	seeds[n_seeds].name = name;
	seeds[n_seeds].data = s->b;
	n_seeds++;
	s->n = 0;
	e8(s, mode);
	if (mode % 4 != 3) {
		e16(s, start16);
		e8(s, hi);
	}
	return s;
}

static void end_seed(struct script *s)
{
	seeds[s - scripts].size = s->n;
}

size_t fuzz_seeds(const struct fuzz_blob **out)
{
	struct script *s;

	if (n_seeds) {
		*out = seeds;
		return n_seeds;
	}
	/* an honest stream: chunks and results, taken as they come */
	s = new_seed("stream-honest", 0, 0, 0);
	for (unsigned j = 1; j <= 6; j++) {
		tokens(s, j, 3, 0, 0, 5);
		tokens(s, j, 2, 2, 1, 7);
		nexts(s, 2, false);
		done(s, j, j & 2, 10, 3);
		nexts(s, 1, j == 3);
	}
	end_seed(s);
	/* near the end of the data area: pads, then a full ring */
	s = new_seed("stream-wrap", 1, SIZE / 16 - 3, 0);
	for (unsigned i = 0; i < 40; i++)
		tokens(s, 9, 64, 8, 3, 40);
	nexts(s, 4, false);
	for (unsigned i = 0; i < 10; i++) {
		tokens(s, 9, 64, 8, 3, 40);
		nexts(s, 2, i == 5);
	}
	end_seed(s);
	/* records over max_record, split with MORE, far along */
	s = new_seed("stream-split", 0, 100, 0x85);
	tokens(s, 1, 64, 64, 3, 200);  /* 45 KiB: three records */
	nexts(s, 1, true);
	nexts(s, 1, false);
	done(s, 1, 4 | 2 | 8, 255, 31); /* 32 KiB of text: two */
	nexts(s, 2, true);
	nexts(s, 2, false);
	end_seed(s);
	/* results on the socket, announced in the ring; socket streams */
	s = new_seed("stream-socket", 0, 7, 0);
	rawrec(s, EXL_REC_DONE_SOCKET, 0, 4, 0, NULL);
	sockmsg(s, 1, 4, 3, 0, 0, 5);
	sockmsg(s, 3, 0, 0, 0, 0, 0);
	sockmsg(s, 0, 5, 4, 3, 0, 8);
	sockmsg(s, 2, 6, 0, 0, 0, 0);
	nexts(s, 4, true);
	nexts(s, 4, false);
	e8(s, S_SOCK_EOF);
	nexts(s, 2, false);
	end_seed(s);
	/* a hostile daemon: lies and scribbles between honest records */
	s = new_seed("stream-hostile", 1, 5, 0);
	tokens(s, 2, 4, 1, 1, 3);
	e8(s, S_SCRIBBLE); e8(s, 0); e16(s, 5 * 16); e8(s, 3);
	e8(s, 0xff); e8(s, 0xff); e8(s, 0x7f); e8(s, 0);
	nexts(s, 1, false);
	e8(s, S_WPOS); e8(s, 3); e64(s, 0);
	nexts(s, 1, false);
	e8(s, S_WPOS); e8(s, 0x80); e64(s, 0);
	static const uint8_t bad_tokens[16] = { 0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0, 65, 0 };
	rawrec(s, EXL_REC_TOKENS, 0, 3, 16, bad_tokens);
	static const uint8_t not_map[3] = { 0x93, 1, 2 };
	rawrec(s, EXL_REC_DONE, 1, 3, 3, not_map);
	rawrec(s, 7, 0, 3, 0, NULL);
	e8(s, S_HDR); e8(s, 0);
	e8(s, S_CTRL); e8(s, 0); e64(s, 2);
	e8(s, S_WAIT); e8(s, 0);
	e8(s, S_WAIT); e8(s, 1);
	nexts(s, 4, false);
	e8(s, S_HDR); e8(s, 1);
	nexts(s, 2, false);
	end_seed(s);

	/* producer: writes of every size against a reader that keeps up, then
	 * lies about where it is; poll and futex sleepers */
	s = new_seed("producer", 2, 0, 0);
	for (unsigned i = 0; i < 12; i++) {
		p_write_cmd(s, 1, i, (i * 3 + 1) % 5, 1000 + 997 * i, i * 37);
		e8(s, P_CONSUME); e8(s, 3);
	}
	p_ctrl_cmd(s, 5, 7);
	p_ctrl_cmd(s, 4, 2);
	p_write_cmd(s, 1, 1, 0, 0, 0);
	p_write_cmd(s, 1, 1, 0, 0, 0);
	p_ctrl_cmd(s, 5, 0x123);
	p_write_cmd(s, 2, 1, 1, 100, 0);
	p_ctrl_cmd(s, 4, 1);
	p_write_cmd(s, 2, 1, 1, 100, 0);
	p_ctrl_cmd(s, 2, 0);
	p_write_cmd(s, 1, 3, 1, 500, 5);
	e8(s, P_HAS_ROOM); e16(s, 100); e8(s, 0);
	p_ctrl_cmd(s, 3, 50);
	p_write_cmd(s, 1, 3, 2, 40000, 0x25);
	p_ctrl_cmd(s, 1, 4000);
	p_write_cmd(s, 1, 3, 3, 1, 0);
	p_ctrl_cmd(s, 0, 0);
	p_write_cmd(s, 3, 3, 4, 30000, 0);
	e8(s, P_PAUSE);
	e8(s, P_SHUTDOWN);
	end_seed(s);
	s = new_seed("producer-full", 2, SIZE / 16 - 1, 0x81);
	for (unsigned i = 0; i < 20; i++) {
		p_write_cmd(s, 1, i, 1, 7000 + 13 * i, 0);
		e8(s, P_HAS_ROOM); e16(s, 7000); e8(s, 1);
		if (i % 3 == 2) {
			e8(s, P_CONSUME); e8(s, 1);
		}
	}
	end_seed(s);

	/* map: what the daemon hands over, then what it must not */
	s = new_seed("map-valid", 3, 0, 0);
	e8(s, 0); e8(s, 0); e8(s, 5); e16(s, 2); e8(s, 1); e8(s, 0); e8(s, 0); e8(s, 0); e8(s, 0);
	e16(s, 0);
	end_seed(s);
	s = new_seed("map-small-ctrl", 3, 0, 0);
	e8(s, 0); e8(s, 0); e8(s, 5); e16(s, 2); e8(s, 0); e8(s, 0); e8(s, 1); e8(s, 0); e8(s, 0);
	e16(s, 0);
	end_seed(s);
	s = new_seed("map-unsealed", 3, 0, 0);
	e8(s, 0); e8(s, 0); e8(s, 5); e16(s, 2); e8(s, 0); e8(s, 0); e8(s, 0); e8(s, 0x80);
	e8(s, 0x80); e16(s, 0);
	end_seed(s);
	*out = seeds;
	return n_seeds;
}

size_t fuzz_dict(const struct fuzz_blob **out)
{
	*out = NULL;
	return 0;
}

size_t fuzz_max_len(void)
{
	return 8192;
}
