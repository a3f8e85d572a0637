/* Whole streams and files into memory (read_all.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/read_all.h"

char *exl_read_all(FILE *f, const char *what, size_t max, size_t *len, char *err, size_t errlen)
{
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap);

	if (!buf)
		goto oom;
	for (;;) {
		if (n + 1 == cap) {
			if (cap > max) {
				snprintf(err, errlen, "%s is longer than %zu bytes", what, max);
				free(buf);
				return NULL;
			}
			char *nb = realloc(buf, cap * 2);
			if (!nb)
				goto oom;
			buf = nb;
			cap *= 2;
		}
		size_t got = fread(buf + n, 1, cap - 1 - n, f);
		n += got;
		if (got == 0) {
			if (ferror(f)) {
				snprintf(err, errlen, "cannot read %s: %s", what, strerror(errno));
				free(buf);
				return NULL;
			}
			break;
		}
	}
	if (n > max) {
		snprintf(err, errlen, "%s is longer than %zu bytes", what, max);
		free(buf);
		return NULL;
	}
	buf[n] = '\0';
	*len = n;
	return buf;
oom:
	free(buf);
	snprintf(err, errlen, "out of memory reading %s", what);
	return NULL;
}

char *exl_read_file(const char *path, size_t max, size_t *len, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");

	if (!f) {
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
		return NULL;
	}
	char *s = exl_read_all(f, path, max, len, err, errlen);
	fclose(f);
	return s;
}
