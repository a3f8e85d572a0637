/* Reading a whole stream or file into memory, with a size limit, for the
 * command-line tools (stdin of exld tokenize and chat-template, template
 * files). */
#ifndef EXL_READ_ALL_H
#define EXL_READ_ALL_H

#include <stddef.h>
#include <stdio.h>

/* All of f (named `what` in messages), NUL-terminated, *len bytes: a
 * malloc'ed buffer the caller frees.  More than max bytes, a read error or
 * no memory: NULL with a message. */
char *exl_read_all(FILE *f, const char *what, size_t max, size_t *len, char *err, size_t errlen);
/* The same for the file at path. */
char *exl_read_file(const char *path, size_t max, size_t *len, char *err, size_t errlen);

#endif
