/* JSON string literals (common/json_string.h). */
#include <stdint.h>

#include "common/json_string.h"
#include "common/utf8.h"

void json_string(FILE *out, const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;

	fputc('"', out);
	while (i < n) {
		unsigned char c = u[i];
		size_t k;

		switch (c) {
		case '"': fputs("\\\"", out); i++; continue;
		case '\\': fputs("\\\\", out); i++; continue;
		case '\n': fputs("\\n", out); i++; continue;
		case '\r': fputs("\\r", out); i++; continue;
		case '\t': fputs("\\t", out); i++; continue;
		default: break;
		}
		if (c < 0x20 || c == 0x7f) {
			fprintf(out, "\\u%04x", c);
			i++;
		} else if ((k = (size_t)exl_utf8_len(u + i, n - i)) != 0) {
			fwrite(u + i, 1, k, out);
			i += k;
		} else {
			fputs("\\ufffd", out);
			i++;
		}
	}
	fputc('"', out);
}
