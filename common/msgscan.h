/* Where a msgpack message ends in a byte stream, without unpacking it.
 * Both sides read their peer through it before msgpack-c sees a byte: the
 * daemon frames requests with exl_scan (its size, value-count and depth
 * limits, docs/protocol.md), libexlclient frames what the daemon sends with
 * exl_scan_limits, so that msgpack-c, which allocates for a container the
 * moment it reads the container's declared count, only ever unpacks a
 * message whose bytes have all arrived: five bytes claiming 2^32 entries
 * can then not make it ask for hundreds of GiB.
 */
#ifndef EXL_MSGSCAN_H
#define EXL_MSGSCAN_H

#include <stddef.h>
#include <stdint.h>

#include "exl_wire.h"

/* Where a scan of one message stands; zero it to start. */
struct exl_scan {
	size_t pos;        /* bytes of the message accounted for */
	uint32_t values;
	int depth;
	uint32_t remain[EXL_MAX_DEPTH];
};

enum exl_scan_result {
	EXL_SCAN_NEED = 0,      /* the message is not complete yet */
	EXL_SCAN_DONE = 1,      /* *msg_len bytes form one msgpack value */
	EXL_SCAN_INVALID = 2,   /* not msgpack */
	EXL_SCAN_TOO_LARGE = 3, /* over max bytes, the values allowed or EXL_MAX_DEPTH */
};

/* Continues scanning the message at the start of buf (len bytes buffered so
 * far).  Resumable: call again with the same state and more bytes.  After
 * EXL_SCAN_DONE the state is reset for the next message; after
 * EXL_SCAN_INVALID or EXL_SCAN_TOO_LARGE it is left as it was, so every
 * later call says the same.  At most max bytes and max_values values
 * (every value at every level). */
enum exl_scan_result exl_scan_limits(struct exl_scan *s, const uint8_t *buf, size_t len,
				     size_t max, uint32_t max_values, size_t *msg_len);

/* exl_scan_limits with the request limit: EXL_MAX_VALUES values. */
enum exl_scan_result exl_scan(struct exl_scan *s, const uint8_t *buf, size_t len, size_t max,
			      size_t *msg_len);

#endif
