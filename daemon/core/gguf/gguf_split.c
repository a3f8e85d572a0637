/* Models split by llama.cpp's gguf-split (gguf_split.h): the first part
 * holds the metadata and split.count; every part is a GGUF of its own
 * with split.no and its share of the tensors. */
#include "daemon/core/gguf/gguf_split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUFFIX_LEN 16 /* "-00001-of-00003" is 15, ".gguf" after it */

bool exl_gguf_split_name(const char *name, size_t len, int *k, int *n)
{
	char buf[SUFFIX_LEN + 1];
	int a, b, used = 0;

	if (len >= 5 && !memcmp(name + len - 5, ".gguf", 5))
		len -= 5;
	if (len < 15)
		return false;
	memcpy(buf, name + len - 15, 15);
	buf[15] = 0;
	if (sscanf(buf, "-%5d-of-%5d%n", &a, &b, &used) != 2 || used != 15 || buf[1] == '-' ||
	    buf[10] == '-' || a < 1 || b < 2 || a > b)
		return false;
	for (int i = 1; i < 6; i++)
		if (buf[i] < '0' || buf[i] > '9' || buf[i + 9] < '0' || buf[i + 9] > '9')
			return false;
	*k = a;
	*n = b;
	return true;
}

int exl_gguf_split_path(const char *first, int k, int n, char *out, size_t outlen)
{
	size_t len = strlen(first);
	int a, b;

	if (!exl_gguf_split_name(first, len, &a, &b) || a != 1 || b != n || k < 1 || k > n ||
	    len < 5 + 15 || strcmp(first + len - 5, ".gguf"))
		return -1;
	return snprintf(out, outlen, "%.*s-%05d-of-%05d.gguf", (int)(len - 20), first, k, n) <
			       (int)outlen ? 0 : -1;
}

/* split.no / split.count are u16 in gguf-split's files, split.tensors.count
 * i32: any integer type is taken. */
static bool get_count(const struct gguf_file *f, const char *key, uint64_t *v)
{
	return exl_gguf_get_u64(f, key, v);
}

int exl_gguf_join_split(struct gguf_file *f, const char *path, char *err, size_t errlen)
{
	uint64_t count = 0, no = 0, total = 0, want = 0;
	char part[4096];
	struct gguf_tensor *t;

	if (!get_count(f, "split.count", &count) || count <= 1)
		return 0;
	if (count > EXL_GGUF_MAX_SPLITS) {
		snprintf(err, errlen, "gguf: %s: split.count %llu is over the limit of %d", path,
			 (unsigned long long)count, EXL_GGUF_MAX_SPLITS);
		return -1;
	}
	if (!get_count(f, "split.no", &no) || no != 0) {
		snprintf(err, errlen, "gguf: %s is part %llu of %llu of a split model: open its "
			 "first part (...-00001-of-%05llu.gguf)", path, (unsigned long long)no + 1,
			 (unsigned long long)count, (unsigned long long)count);
		return -1;
	}
	if (exl_gguf_split_path(path, 1, (int)count, part, sizeof(part))) {
		snprintf(err, errlen, "gguf: %s is the first of %llu parts but is not named "
			 "PREFIX-00001-of-%05llu.gguf, so its other parts cannot be found", path,
			 (unsigned long long)count, (unsigned long long)count);
		return -1;
	}
	f->parts = calloc((size_t)count - 1, sizeof(*f->parts));
	if (!f->parts) {
		snprintf(err, errlen, "gguf: out of memory");
		return -1;
	}
	total = f->n_tensors;
	for (int k = 2; k <= (int)count; k++) {
		struct gguf_file *p;
		uint64_t pno = 0, pcount = 0;
		char msg[512];

		exl_gguf_split_path(path, k, (int)count, part, sizeof(part));
		p = exl_gguf_open_part(part, msg, sizeof(msg));
		if (!p) {
			snprintf(err, errlen, "gguf: part %d of %llu of a split model: %s", k,
				 (unsigned long long)count, msg);
			return -1;
		}
		f->parts[f->n_parts++] = p;
		if (!get_count(p, "split.count", &pcount) || pcount != count ||
		    !get_count(p, "split.no", &pno) || pno != (uint64_t)k - 1) {
			snprintf(err, errlen, "gguf: %s does not say it is part %d of %llu "
				 "(split.no %llu, split.count %llu)", part, k,
				 (unsigned long long)count, (unsigned long long)pno + 1,
				 (unsigned long long)pcount);
			return -1;
		}
		total += p->n_tensors;
	}
	if (get_count(f, "split.tensors.count", &want) && want != total) {
		snprintf(err, errlen, "gguf: the %llu parts of %s hold %llu tensors, "
			 "split.tensors.count says %llu", (unsigned long long)count, path,
			 (unsigned long long)total, (unsigned long long)want);
		return -1;
	}
	t = realloc(f->tensors, (size_t)total * sizeof(*t));
	if (!t) {
		snprintf(err, errlen, "gguf: out of memory");
		return -1;
	}
	f->tensors = t;
	for (uint32_t i = 0; i < f->n_parts; i++) {
		const struct gguf_file *p = f->parts[i];

		for (uint64_t j = 0; j < p->n_tensors; j++) {
			const struct gguf_str *nm = &p->tensors[j].name;

			/* each part's names were checked among themselves */
			for (uint64_t e = 0; e < f->n_tensors; e++) {
				if (f->tensors[e].name.len == nm->len &&
				    !memcmp(f->tensors[e].name.ptr, nm->ptr, nm->len)) {
					snprintf(err, errlen, "gguf: tensor '%.*s' is in two parts "
						 "of %s", (int)(nm->len > 200 ? 200 : nm->len),
						 nm->ptr, path);
					return -1;
				}
			}
			f->tensors[f->n_tensors++] = p->tensors[j];
		}
	}
	return 0;
}
