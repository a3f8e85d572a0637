/* The ranges of a generate request's numeric options (gen_ranges.h says
 * who uses them and why there is one table). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "exl_wire.h"
#include "common/gen_ranges.h"

#define I(key, min, max) { key, true, min, max, false, 0 }
#define F(key, min, max) { key, false, min, max, false, 0 }
/* (min, max]: a multiplier or a target that zero would break */
#define F_OPEN(key, min, max) { key, false, min, max, true, 0 }

const struct genrange genrange_table[] = {
	I("max_new_tokens", 0, 1 << 24),
	I("min_new_tokens", 0, 1 << 24),   /* and at most max_new_tokens: checked by the job */
	F("temperature", 0, 100),
	I("top_k", 0, INT32_MAX),
	F("top_p", 0, 1),
	F("min_p", 0, 1),
	F("typical", 0, 1),
	F("tfs", 0, 1),
	F("top_a", 0, 1),
	F_OPEN("repetition_penalty", 0, 100),
	I("penalty_range", -1, INT32_MAX),
	I("penalty_decay", 0, 1 << 24),
	F("frequency_penalty", -100, 100),
	F("presence_penalty", -100, 100),
	I("no_repeat_ngram", 0, 64),
	F("dry_multiplier", 0, 100),
	F("dry_base", 1, 100),
	I("dry_allowed_length", 1, 512),   /* the sampler's EXL_DRY_MAX_MATCH */
	I("dry_range", 0, INT32_MAX),
	F("xtc_probability", 0, 1),
	F("xtc_threshold", 0, 1),
	/* 0 off, 2 mirostat v2; v1 is not implemented */
	{ "mirostat", true, 0, 2, false, 1u << 0 | 1u << 2 },
	F_OPEN("mirostat_tau", 0, 100),
	F("mirostat_eta", 0, 1),
	F("cfg_scale", -100, 100),
	I("return_top_k", 0, EXL_MAX_TOP_K_RETURN),
	I("draft_tokens", 1, EXL_MAX_DRAFT_TOKENS),
	I("ngram_draft", 0, EXL_MAX_NGRAM_DRAFT),
	I("num_beams", 0, EXL_MAX_BEAMS),
	F("length_penalty", -10, 10),
	/* each bias value; -inf goes on the wire as -1e29 (finite numbers only) */
	F("token_bias", -1e30, 1e30),
};

const size_t genrange_count = sizeof(genrange_table) / sizeof(genrange_table[0]);

const struct genrange *genrange_find(const char *key)
{
	for (size_t i = 0; i < genrange_count; i++)
		if (!strcmp(genrange_table[i].key, key))
			return &genrange_table[i];
	return NULL;
}

bool genrange_ok(const struct genrange *r, double v)
{
	if (!isfinite(v) || v > r->max || v < r->min || (r->min_open && v == r->min))
		return false;
	/* within the range, so within long long: the cast is defined */
	if (r->integer && v != (double)(long long)v)
		return false;
	if (r->only)
		return v >= 0 && v < 32 && (r->only >> (unsigned)v & 1);
	return true;
}

void genrange_describe(const struct genrange *r, char *buf, size_t size)
{
	size_t n = 0;

	if (!size)
		return;
	buf[0] = 0;
	if (r->only) {
		for (unsigned v = 0; v < 32; v++) {
			if (!(r->only >> v & 1))
				continue;
			bool last = !(r->only >> v >> 1);
			int w = snprintf(buf + n, size - n, "%s%u", n ? (last ? " or " : ", ") : "", v);
			if (w < 0 || (size_t)w >= size - n)
				return;
			n += (size_t)w;
		}
		return;
	}
	snprintf(buf, size, "%s in %c%.10g, %.10g]", r->integer ? "an integer" : "a number",
		 r->min_open ? '(' : '[', r->min, r->max);
}
