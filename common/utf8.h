/* The one UTF-8 codec of the tree (daemon, libexlclient's tools, exl).
 * Valid means what RFC 3629 says: shortest form, no surrogates, at most
 * U+10FFFF; a sequence cut short by the end of the input is invalid. */
#ifndef EXL_COMMON_UTF8_H
#define EXL_COMMON_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* The length (1-4) of the valid character at s[0..n), or 0. */
int exl_utf8_len(const uint8_t *s, size_t n);

/* exl_utf8_len, and the code point in *cp when valid. */
int exl_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

/* Writes cp (at most U+10FFFF) to out, which has room for its length:
 * 1 below U+0080, 2 below U+0800, 3 below U+10000, else 4.  Returns the
 * length. */
int exl_utf8_encode(uint32_t cp, uint8_t *out);

/* The offset of the first byte of s[0..n) that is not part of a valid
 * character, or n when all of it is valid. */
size_t exl_utf8_bad_at(const char *s, size_t n);

/* Replaces each byte of the NUL-terminated s that starts no valid
 * character with '?': a message that quotes input cut at a byte count, or
 * that a buffer cut short, stays valid UTF-8. */
void exl_utf8_scrub(char *s);

#endif
