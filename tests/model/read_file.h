/* Tests that read their vectors from files. */
#ifndef EXL_TEST_READ_FILE_H
#define EXL_TEST_READ_FILE_H

#include <stddef.h>

/* The whole file, NUL-terminated (the NUL not counted in *len); malloc'ed,
 * NULL when it cannot be read. */
char *test_read_file(const char *path, size_t *len);

#endif
