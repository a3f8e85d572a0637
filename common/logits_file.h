/* --dump-logits FILE, of exl generate and exld run: raw little-endian
 * float32, [new tokens][vocabulary], row i the logits that chose token i,
 * nothing else in the file (no header).  The layout of the peer harness's
 * --dump-logits (shared/tools/peer), so the two compare byte for byte or
 * with numpy.fromfile(F, "<f4").reshape(-1, n_vocab). */
#ifndef EXL_LOGITS_FILE_H
#define EXL_LOGITS_FILE_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Appends n floats to f as little-endian float32.  0, or -1 when the
 * write failed (errno set by stdio). */
static inline int logits_write(FILE *f, const float *v, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	for (size_t i = 0; i < n; i++) {
		uint32_t u;
		unsigned char b[4];

		memcpy(&u, &v[i], 4);
		b[0] = (unsigned char)u;
		b[1] = (unsigned char)(u >> 8);
		b[2] = (unsigned char)(u >> 16);
		b[3] = (unsigned char)(u >> 24);
		if (fwrite(b, 1, 4, f) != 4)
			return -1;
	}
	return 0;
#else
	return fwrite(v, sizeof(float), n, f) == n ? 0 : -1;
#endif
}

#endif
