/* Finding where a msgpack message ends (client/msgscan.h). */
#include <string.h>

#include "common/msgscan.h"

static uint64_t be_read(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

/* Header of the value at p (avail bytes there): its header length, the
 * payload bytes after the header, and the number of child values for
 * containers.  0 when more bytes are needed, -1 for the invalid byte. */
static int value_header(const uint8_t *p, size_t avail, size_t *hdr, uint64_t *payload,
			uint64_t *children)
{
	uint8_t b = p[0];
	int n = 0; /* length-field bytes */

	*payload = 0;
	*children = 0;
	*hdr = 1;
	if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
		return 1;
	if ((b & 0xf0) == 0x80) {
		*children = 2u * (b & 0x0f);
		return 1;
	}
	if ((b & 0xf0) == 0x90) {
		*children = b & 0x0f;
		return 1;
	}
	if ((b & 0xe0) == 0xa0) {
		*payload = b & 0x1f;
		return 1;
	}
	switch (b) {
	case 0xc1:
		return -1;
	case 0xcc: case 0xd0: *payload = 1; return 1;
	case 0xcd: case 0xd1: *payload = 2; return 1;
	case 0xca: case 0xce: case 0xd2: *payload = 4; return 1;
	case 0xcb: case 0xcf: case 0xd3: *payload = 8; return 1;
	case 0xd4: *payload = 2; return 1;
	case 0xd5: *payload = 3; return 1;
	case 0xd6: *payload = 5; return 1;
	case 0xd7: *payload = 9; return 1;
	case 0xd8: *payload = 17; return 1;
	case 0xc4: case 0xd9: n = 1; break;
	case 0xc5: case 0xda: n = 2; break;
	case 0xc6: case 0xdb: n = 4; break;
	case 0xc7: n = 1; break;
	case 0xc8: n = 2; break;
	case 0xc9: n = 4; break;
	case 0xdc: case 0xde: n = 2; break;
	case 0xdd: case 0xdf: n = 4; break;
	default:
		return -1;
	}
	if (avail < 1 + (size_t)n)
		return 0;
	uint64_t v = be_read(p + 1, n);
	*hdr = 1 + (size_t)n;
	if (b >= 0xc7 && b <= 0xc9) {
		*hdr += 1; /* ext type byte */
		if (avail < *hdr)
			return 0;
		*payload = v;
	} else if (b == 0xdc || b == 0xdd) {
		*children = v;
	} else if (b == 0xde || b == 0xdf) {
		*children = 2 * v;
	} else {
		*payload = v;
	}
	return 1;
}

enum exl_scan_result exl_scan_limits(struct exl_scan *s, const uint8_t *buf, size_t len,
				     size_t max, uint32_t max_values, size_t *msg_len)
{
	for (;;) {
		size_t hdr;
		uint64_t payload, children;

		if (s->pos >= len)
			return EXL_SCAN_NEED;
		int r = value_header(buf + s->pos, len - s->pos, &hdr, &payload, &children);
		if (r < 0)
			return EXL_SCAN_INVALID;
		if (r == 0)
			return EXL_SCAN_NEED;
		/* Sizes are checked against max before any addition can wrap. */
		if (payload > max || s->pos + hdr + payload > max)
			return EXL_SCAN_TOO_LARGE;
		if (children > max_values || s->values + children > max_values ||
		    s->pos + hdr + children > max)
			return EXL_SCAN_TOO_LARGE;
		if (s->pos + hdr + payload > len)
			return EXL_SCAN_NEED;
		/* Every refusal comes before the state moves, so that asking
		 * again gives the same answer.  It used to count the value
		 * first: each call after a refusal went one header further,
		 * until it "completed" a message in the middle of another one
		 * (libexlclient, reading on after a refusal, then had
		 * msgpack-c unpack from there: found by fuzz_ring). */
		if ((uint64_t)s->values + 1 > max_values || (children && s->depth >= EXL_MAX_DEPTH))
			return EXL_SCAN_TOO_LARGE;
		s->pos += hdr + (size_t)payload;
		s->values++;
		if (children) {
			s->remain[s->depth++] = (uint32_t)children;
			continue;
		}
		while (s->depth > 0 && --s->remain[s->depth - 1] == 0)
			s->depth--;
		if (s->depth == 0) {
			*msg_len = s->pos;
			memset(s, 0, sizeof(*s));
			return EXL_SCAN_DONE;
		}
	}
}

enum exl_scan_result exl_scan(struct exl_scan *s, const uint8_t *buf, size_t len, size_t max,
			      size_t *msg_len)
{
	return exl_scan_limits(s, buf, len, max, EXL_MAX_VALUES, msg_len);
}
