/* Fuzz targets that start from small random-weight models run
 * exld-mkmodel once at start-up: $EXLD_MKMODEL (meson's tests set it), or
 * the tool beside the build's tests/fuzz/ (tests/tools/exld-mkmodel). */
#ifndef EXL_FUZZ_MKMODEL_H
#define EXL_FUZZ_MKMODEL_H

/* Runs exld-mkmodel with the args of a (NULL-terminated), then those of b
 * (NULL or NULL-terminated), then "-o out"; its output goes to /dev/null.
 * Aborts, naming who (the target) and out, when the tool cannot be found
 * or fails. */
void fuzz_mkmodel(const char *who, const char *const *a, const char *const *b, const char *out);

#endif
