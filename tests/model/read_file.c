#include <stdio.h>
#include <stdlib.h>

#include "read_file.h"

char *test_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long size;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
		goto out;
	buf = malloc((size_t)size + 1);
	if (buf && fread(buf, 1, (size_t)size, f) != (size_t)size) {
		free(buf);
		buf = NULL;
		goto out;
	}
	if (buf) {
		buf[size] = '\0';
		*len = (size_t)size;
	}
out:
	fclose(f);
	return buf;
}
