/* Repairing text that is not UTF-8, for the tokenizer (the codec itself is
 * common/utf8.c). */
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "daemon/core/tokenizer/tokenizer_internal.h"

int exl_tok_utf8_sanitize(const char *text, uint32_t len, char **out, uint32_t *out_len)
{
	const uint8_t *s = (const uint8_t *)text;
	uint32_t bad = 0, i = 0, o = 0;
	char *buf;

	while (i < len) {
		int l = exl_utf8_len(s + i, len - i);

		if (!l) {
			bad++;
			l = 1;
		}
		i += (uint32_t)l;
	}
	/* Each bad byte grows by 2; len is bounded by TOK_MAX_TEXT. */
	buf = malloc((size_t)len + 2 * (size_t)bad + 1);
	if (!buf)
		return -1;
	if (!bad) {
		memcpy(buf, text, len);
		o = len;
	} else {
		for (i = 0; i < len;) {
			int l = exl_utf8_len(s + i, len - i);

			if (!l) {
				memcpy(buf + o, "\xef\xbf\xbd", 3);
				o += 3;
				i++;
				continue;
			}
			memcpy(buf + o, s + i, (size_t)l);
			o += (uint32_t)l;
			i += (uint32_t)l;
		}
	}
	buf[o] = '\0';
	*out = buf;
	*out_len = o;
	return 0;
}
