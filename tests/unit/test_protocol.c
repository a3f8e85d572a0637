/* The daemon's wire layer without sockets: message framing (exl_scan),
 * request decoding into settings (every generate option lands in its
 * exl_gen_settings field), error codes and messages, the ranges of the
 * numeric options (the decoder, the command lines' parser and the sampler
 * take the same values), reply encoding, and the config file parser. */
#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cli/gen_options.h"
#include "daemon/server/wire/config.h"
#include "daemon/server/wire/protocol.h"
#include "daemon/core/sampler/sampler.h"
#include "daemon/core/tokenizer/tokenizer.h"
#include "tests/common/check.h"

/* ---- framing ---- */

static void pack_sample(msgpack_sbuffer *sb)
{
	msgpack_packer pk;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 4);
	msgpack_pack_str_with_body(&pk, "op", 2);
	msgpack_pack_str_with_body(&pk, "generate", 8);
	msgpack_pack_str_with_body(&pk, "prompt", 6);
	msgpack_pack_str_with_body(&pk, "a longer prompt, over thirty-one bytes", 38);
	msgpack_pack_str_with_body(&pk, "stop", 4);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_str_with_body(&pk, "\n", 1);
	msgpack_pack_int(&pk, 70000);
	msgpack_pack_array(&pk, 0);
	msgpack_pack_str_with_body(&pk, "x", 1);
	msgpack_pack_map(&pk, 1);
	msgpack_pack_double(&pk, 1.5);
	msgpack_pack_bin(&pk, 300);
	char zeros[300] = { 0 };
	msgpack_pack_bin_body(&pk, zeros, 300);
}

static void test_scan(void)
{
	msgpack_sbuffer sb;
	struct exl_scan s;
	size_t len = 0;

	msgpack_sbuffer_init(&sb);
	pack_sample(&sb);
	size_t one = sb.size;
	pack_sample(&sb); /* two messages back to back */

	/* whole */
	memset(&s, 0, sizeof(s));
	CHECK(exl_scan(&s, (uint8_t *)sb.data, sb.size, 1 << 20, &len) == EXL_SCAN_DONE &&
	      len == one, "whole buffer: len %zu, want %zu", len, one);

	/* byte by byte: NEED until the last byte of the first message */
	memset(&s, 0, sizeof(s));
	size_t i;
	enum exl_scan_result r = EXL_SCAN_NEED;
	for (i = 1; i <= sb.size && r == EXL_SCAN_NEED; i++)
		r = exl_scan(&s, (uint8_t *)sb.data, i, 1 << 20, &len);
	CHECK(r == EXL_SCAN_DONE && i - 1 == one && len == one,
	      "byte by byte: done at %zu, want %zu", i - 1, one);
	/* the state was reset: the second message scans from its start */
	r = exl_scan(&s, (uint8_t *)sb.data + one, sb.size - one, 1 << 20, &len);
	CHECK(r == EXL_SCAN_DONE && len == one, "second message");

	/* too large for max */
	memset(&s, 0, sizeof(s));
	CHECK(exl_scan(&s, (uint8_t *)sb.data, 10, 200, &len) == EXL_SCAN_TOO_LARGE ||
	      exl_scan(&s, (uint8_t *)sb.data, sb.size, 200, &len) == EXL_SCAN_TOO_LARGE,
	      "a %zu-byte message under max 200", one);
	msgpack_sbuffer_destroy(&sb);

	/* declared sizes are refused before their bytes arrive */
	static const uint8_t str32[] = { 0x81, 0xa2, 'o', 'p', 0xdb, 0x7f, 0xff, 0xff, 0xff };
	memset(&s, 0, sizeof(s));
	CHECK(exl_scan(&s, str32, sizeof(str32), 1 << 24, &len) == EXL_SCAN_TOO_LARGE, "str32 2 GiB");
	static const uint8_t arr32[] = { 0xdd, 0x00, 0x20, 0x00, 0x00 }; /* 2M items */
	memset(&s, 0, sizeof(s));
	CHECK(exl_scan(&s, arr32, sizeof(arr32), 1 << 24, &len) == EXL_SCAN_TOO_LARGE,
	      "array of 2M items (over EXL_MAX_VALUES)");
	static const uint8_t map32[] = { 0xdf, 0x00, 0x08, 0x00, 0x00 }; /* 512K pairs = 1M values */
	memset(&s, 0, sizeof(s));
	CHECK(exl_scan(&s, map32, sizeof(map32), 1 << 20, &len) == EXL_SCAN_TOO_LARGE,
	      "map whose items cannot fit max bytes");
	static const uint8_t ext32[] = { 0xc9, 0xff, 0xff, 0xff, 0xff, 0x01 };
	memset(&s, 0, sizeof(s));
	CHECK(exl_scan(&s, ext32, sizeof(ext32), 1 << 24, &len) == EXL_SCAN_TOO_LARGE, "ext32 4 GiB");

	/* nesting: EXL_MAX_DEPTH levels pass, one more does not */
	uint8_t deep[EXL_MAX_DEPTH + 2];
	for (int d = 0; d < EXL_MAX_DEPTH; d++)
		deep[d] = 0x91;
	deep[EXL_MAX_DEPTH] = 0x01;
	memset(&s, 0, sizeof(s));
	CHECK(exl_scan(&s, deep, EXL_MAX_DEPTH + 1, 1 << 20, &len) == EXL_SCAN_DONE &&
	      len == EXL_MAX_DEPTH + 1, "%d nested arrays", EXL_MAX_DEPTH);
	deep[EXL_MAX_DEPTH] = 0x91;
	deep[EXL_MAX_DEPTH + 1] = 0x01;
	memset(&s, 0, sizeof(s));
	CHECK(exl_scan(&s, deep, EXL_MAX_DEPTH + 2, 1 << 20, &len) == EXL_SCAN_TOO_LARGE,
	      "%d nested arrays", EXL_MAX_DEPTH + 1);

	/* the one byte msgpack never uses */
	static const uint8_t bad[] = { 0x82, 0xa1, 'a', 0xc1 };
	memset(&s, 0, sizeof(s));
	CHECK(exl_scan(&s, bad, sizeof(bad), 1 << 20, &len) == EXL_SCAN_INVALID, "0xc1");
	CHECK(exl_scan(&s, bad, sizeof(bad), 1 << 20, &len) == EXL_SCAN_INVALID, "0xc1 again");

	/* A refusal is final: asking again gives it again.  The scan used to
	 * move one header on per call after refusing too deep a nesting,
	 * until it "completed" a message inside the one it had refused
	 * (found by fuzz_ring: libexlclient went on reading from there). */
	uint8_t deeper[EXL_MAX_DEPTH + 12 + 24];
	memset(deeper, 0x81, EXL_MAX_DEPTH + 12);  /* {k: {k: ... */
	memset(deeper + EXL_MAX_DEPTH + 12, 0x33, 24);
	memset(&s, 0, sizeof(s));
	for (int i = 0; i < 40; i++)
		CHECK(exl_scan(&s, deeper, sizeof(deeper), 1 << 20, &len) == EXL_SCAN_TOO_LARGE,
		      "call %d after refusing %d nested maps", i, EXL_MAX_DEPTH + 12);
	static const uint8_t three[] = { 0x93, 1, 2, 3 };
	memset(&s, 0, sizeof(s));
	CHECK(exl_scan_limits(&s, three, sizeof(three), 1 << 20, 4, &len) == EXL_SCAN_DONE &&
	      len == sizeof(three), "[1, 2, 3] in 4 values");
	for (int i = 0; i < 5; i++)
		CHECK(exl_scan_limits(&s, three, sizeof(three), 1 << 20, 3, &len) ==
		      EXL_SCAN_TOO_LARGE, "call %d: [1, 2, 3] in 3 values", i);

	/* scalars and empty containers are whole messages */
	static const uint8_t scalars[] = { 0x05, 0xc0, 0x80, 0x90, 0xcb, 1, 2, 3, 4, 5, 6, 7, 8 };
	size_t off = 0, n = 0;
	memset(&s, 0, sizeof(s));
	while (off < sizeof(scalars) &&
	       exl_scan(&s, scalars + off, sizeof(scalars) - off, 1 << 20, &len) == EXL_SCAN_DONE) {
		off += len;
		n++;
	}
	CHECK(n == 5 && off == sizeof(scalars), "5 scalar messages, got %zu", n);
}

/* ---- decoding ---- */

struct dec_result {
	int code;
	char err[512];
	struct exl_req req;
	msgpack_unpacked up;
};

static void decode(msgpack_sbuffer *sb, struct dec_result *d)
{
	size_t off = 0;

	msgpack_unpacked_init(&d->up);
	if (msgpack_unpack_next(&d->up, sb->data, sb->size, &off) != MSGPACK_UNPACK_SUCCESS) {
		d->code = -1;
		return;
	}
	d->err[0] = 0;
	d->code = exl_req_decode(&d->up.data, d->up.zone, &d->req, d->err, sizeof(d->err));
}

static void kv_str(msgpack_packer *pk, const char *k, const char *v)
{
	msgpack_pack_str_with_body(pk, k, strlen(k));
	msgpack_pack_str_with_body(pk, v, strlen(v));
}

static void kv_int(msgpack_packer *pk, const char *k, long long v)
{
	msgpack_pack_str_with_body(pk, k, strlen(k));
	msgpack_pack_long_long(pk, v);
}

static void kv_f(msgpack_packer *pk, const char *k, double v)
{
	msgpack_pack_str_with_body(pk, k, strlen(k));
	msgpack_pack_double(pk, v);
}

static void kv_bool(msgpack_packer *pk, const char *k, bool v)
{
	msgpack_pack_str_with_body(pk, k, strlen(k));
	if (v)
		msgpack_pack_true(pk);
	else
		msgpack_pack_false(pk);
}

static void test_generate_fields(void)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	struct dec_result d;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 54);
	kv_str(&pk, "op", "generate");
	kv_str(&pk, "id", "req-7");
	kv_str(&pk, "model", "stories260K");
	kv_str(&pk, "prompt", "Once");
	kv_str(&pk, "negative_prompt", "Never");
	kv_f(&pk, "cfg_scale", 2.5);
	kv_bool(&pk, "add_bos", false);
	kv_bool(&pk, "encode_special", true);
	kv_bool(&pk, "decode_special", true);
	kv_bool(&pk, "completion_only", true);
	kv_bool(&pk, "token_healing", true);
	kv_int(&pk, "max_new_tokens", 77);
	kv_int(&pk, "min_new_tokens", 5);
	kv_int(&pk, "seed", 1234);
	kv_f(&pk, "temperature", 0.7);
	kv_bool(&pk, "temperature_last", true);
	kv_int(&pk, "top_k", 12);
	kv_f(&pk, "top_p", 0.5);
	kv_f(&pk, "min_p", 0.25);
	kv_f(&pk, "typical", 0.75);
	kv_f(&pk, "tfs", 0.875);
	kv_f(&pk, "top_a", 0.125);
	kv_f(&pk, "repetition_penalty", 1.25);
	kv_int(&pk, "penalty_range", -1);
	kv_int(&pk, "penalty_decay", 9);
	kv_f(&pk, "frequency_penalty", 0.5);
	kv_f(&pk, "presence_penalty", -0.5);
	kv_int(&pk, "no_repeat_ngram", 3);
	msgpack_pack_str_with_body(&pk, "token_bias", 10);
	msgpack_pack_map(&pk, 2);
	msgpack_pack_int(&pk, 10);
	msgpack_pack_double(&pk, -3.0);
	msgpack_pack_int(&pk, 20);
	msgpack_pack_int(&pk, 4);
	kv_int(&pk, "mirostat", 2);
	kv_f(&pk, "mirostat_tau", 4.5);
	kv_f(&pk, "mirostat_eta", 0.2);
	kv_f(&pk, "dry_multiplier", 0.8);
	kv_f(&pk, "dry_base", 2.0);
	kv_int(&pk, "dry_allowed_length", 4);
	kv_int(&pk, "dry_range", 100);
	msgpack_pack_str_with_body(&pk, "dry_sequence_breakers", 21);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_str_with_body(&pk, ".", 1);
	msgpack_pack_str_with_body(&pk, "!?", 2);
	kv_f(&pk, "xtc_probability", 0.5);
	kv_f(&pk, "xtc_threshold", 0.2);
	msgpack_pack_str_with_body(&pk, "stop", 4);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_str_with_body(&pk, "The end", 7);
	msgpack_pack_int(&pk, 13);
	msgpack_pack_str_with_body(&pk, "\n\n", 2);
	kv_bool(&pk, "ignore_eos", true);
	msgpack_pack_str_with_body(&pk, "banned_strings", 14);
	msgpack_pack_array(&pk, 1);
	msgpack_pack_str_with_body(&pk, "dragon", 6);
	kv_bool(&pk, "filter_prefer_eos", true);
	kv_bool(&pk, "return_probs", true);
	kv_int(&pk, "return_top_k", 5);
	kv_bool(&pk, "return_logits", true);
	kv_bool(&pk, "return_text", true);
	kv_str(&pk, "stream", "socket");
	kv_str(&pk, "regex", "[a-z]+");
	kv_str(&pk, "draft_model", "tiny");
	kv_int(&pk, "draft_tokens", 6);
	kv_int(&pk, "num_beams", 3);
	kv_f(&pk, "length_penalty", 0.5);
	kv_str(&pk, "an_unknown_key", "is ignored");
	decode(&sb, &d);
	CHECK(d.code == EXL_OK, "decode: %d %s", d.code, d.err);
	if (d.code == EXL_OK) {
		const struct exl_req_generate *g = &d.req.u.gen;
		const struct exl_gen_settings *s = &g->s;
		const struct exl_sampler_params *p = &s->sampling;
		CHECK(d.req.op == EXL_OPC_GENERATE && !strcmp(d.req.model, "stories260K"), "op/model");
		CHECK(d.req.id && d.req.id->type == MSGPACK_OBJECT_STR, "id");
		CHECK(g->prompt.len == 4 && !memcmp(g->prompt.text, "Once", 4), "prompt");
		CHECK(g->has_negative && g->negative.len == 5, "negative prompt");
		CHECK(s->cfg_scale == 2.5f, "cfg_scale %g", s->cfg_scale);
		CHECK(s->add_bos == 0 && s->encode_special_tokens && s->decode_special_tokens &&
		      s->completion_only && s->token_healing, "prompt flags");
		CHECK(s->max_new_tokens == 77 && s->min_new_tokens == 5, "lengths");
		CHECK(s->has_seed && s->seed == 1234, "seed");
		CHECK(p->temperature == 0.7f && p->temperature_last && p->top_k == 12, "temperature/top_k");
		CHECK(p->top_p == 0.5f && p->min_p == 0.25f && p->typical == 0.75f &&
		      p->tfs == 0.875f && p->top_a == 0.125f, "truncation samplers");
		CHECK(p->rep_pen == 1.25f && p->rep_range == -1 && p->rep_decay == 9 &&
		      p->freq_pen == 0.5f && p->pres_pen == -0.5f && p->no_repeat_ngram == 3,
		      "penalties");
		CHECK(p->n_bias == 2 && p->bias[0].id == 10 && p->bias[0].bias == -3.0f &&
		      p->bias[1].id == 20 && p->bias[1].bias == 4.0f, "token_bias");
		CHECK(p->mirostat == 2 && p->mirostat_tau == 4.5f && p->mirostat_eta == 0.2f,
		      "mirostat");
		CHECK(p->dry_mult == 0.8f && p->dry_base == 2.0f && p->dry_allowed_len == 4 &&
		      p->dry_range == 100 && p->n_dry_breakers == 2 &&
		      !strcmp(p->dry_breakers[1], "!?"), "DRY");
		CHECK(p->xtc_prob == 0.5f && p->xtc_thresh == 0.2f, "XTC");
		CHECK(s->n_stop_strings == 2 && !strcmp(s->stop_strings[0], "The end") &&
		      !strcmp(s->stop_strings[1], "\n\n") && s->n_stop_tokens == 1 &&
		      s->stop_tokens[0] == 13, "stop");
		CHECK(s->ignore_eos && s->n_banned_strings == 1 &&
		      !strcmp(s->banned_strings[0], "dragon"), "eos/banned");
		CHECK(s->return_probs && s->return_top_k == 5 && s->return_logits, "return_*");
		CHECK(g->return_text == 1 && g->stream == EXL_STREAM_SOCKET, "stream/return_text");
		CHECK(g->regex && !strcmp(g->regex, "[a-z]+") && g->filter_prefer_eos, "regex");
		CHECK(s->draft_model && !strcmp(s->draft_model, "tiny") && s->draft_tokens == 6 &&
		      !s->ngram_draft && s->num_beams == 3 && s->length_penalty == 0.5f,
		      "speculative decoding, beams");
	}
	msgpack_unpacked_destroy(&d.up);

	/* defaults are the generator's */
	struct exl_gen_settings dflt;
	exl_gen_settings_init(&dflt);
	msgpack_sbuffer_clear(&sb);
	msgpack_pack_map(&pk, 2);
	kv_str(&pk, "op", "generate");
	msgpack_pack_str_with_body(&pk, "prompt_ids", 10);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_int(&pk, 1);
	msgpack_pack_int(&pk, 403);
	decode(&sb, &d);
	CHECK(d.code == EXL_OK, "ids prompt: %s", d.err);
	if (d.code == EXL_OK) {
		const struct exl_req_generate *g = &d.req.u.gen;
		CHECK(g->prompt.n_ids == 2 && g->prompt.ids[1] == 403 && !g->prompt.text, "prompt_ids");
		CHECK(g->s.max_new_tokens == dflt.max_new_tokens &&
		      g->s.sampling.temperature == dflt.sampling.temperature &&
		      g->s.add_bos == dflt.add_bos && !g->s.has_seed, "defaults");
		CHECK(g->stream == EXL_STREAM_DEFAULT && g->return_text == -1 && !d.req.id &&
		      !d.req.model[0], "stream default, no id, no model");
	}
	msgpack_unpacked_destroy(&d.up);
	msgpack_sbuffer_destroy(&sb);
}

/* One map {op, key: value}; the value packed by fn. */
static int decode_one(const char *op, const char *key, void (*fn)(msgpack_packer *), char *err,
		      size_t errlen)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	struct dec_result d;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, key ? 3 : 2);
	kv_str(&pk, "op", op);
	kv_str(&pk, "prompt", "x");
	if (key) {
		msgpack_pack_str_with_body(&pk, key, strlen(key));
		fn(&pk);
	}
	decode(&sb, &d);
	snprintf(err, errlen, "%s", d.err);
	msgpack_unpacked_destroy(&d.up);
	msgpack_sbuffer_destroy(&sb);
	return d.code;
}

static void v_str(msgpack_packer *pk) { msgpack_pack_str_with_body(pk, "abc", 3); }
static void v_neg(msgpack_packer *pk) { msgpack_pack_int(pk, -5); }
static void v_float(msgpack_packer *pk) { msgpack_pack_double(pk, 0.5); }
static void v_nan(msgpack_packer *pk) { msgpack_pack_double(pk, NAN); }
static void v_big(msgpack_packer *pk) { msgpack_pack_uint64(pk, 1ull << 40); }
static void v_inf(msgpack_packer *pk) { msgpack_pack_double(pk, -INFINITY); }
static void v_nan32(msgpack_packer *pk) { msgpack_pack_float(pk, NAN); }
static void v_2p63(msgpack_packer *pk) { msgpack_pack_uint64(pk, 1ull << 63); }
static void v_u64max(msgpack_packer *pk) { msgpack_pack_uint64(pk, UINT64_MAX); }
static void v_bias_nan(msgpack_packer *pk)
{
	msgpack_pack_map(pk, 1);
	msgpack_pack_int(pk, 5);
	msgpack_pack_double(pk, NAN);
}
static void v_bias_2p63(msgpack_packer *pk)
{
	msgpack_pack_array(pk, 1);
	msgpack_pack_array(pk, 2);
	msgpack_pack_int(pk, 5);
	msgpack_pack_uint64(pk, 1ull << 63);
}
static void v_bad_stream(msgpack_packer *pk) { msgpack_pack_str_with_body(pk, "pigeon", 6); }
static void v_nul(msgpack_packer *pk) { msgpack_pack_array(pk, 1); msgpack_pack_str_with_body(pk, "a\0b", 3); }
static void v_empty_str(msgpack_packer *pk) { msgpack_pack_array(pk, 1); msgpack_pack_str_with_body(pk, "", 0); }
static void v_many_banned(msgpack_packer *pk)
{
	msgpack_pack_array(pk, EXL_MAX_BANNED + 1);
	for (int i = 0; i <= EXL_MAX_BANNED; i++)
		msgpack_pack_str_with_body(pk, "z", 1);
}
static void v_long_stop(msgpack_packer *pk)
{
	static char s[EXL_MAX_STRING_ITEM + 1];
	memset(s, 'a', sizeof(s));
	msgpack_pack_array(pk, 1);
	msgpack_pack_str_with_body(pk, s, sizeof(s));
}
static void v_pair_bad(msgpack_packer *pk)
{
	msgpack_pack_array(pk, 1);
	msgpack_pack_array(pk, 3);
	msgpack_pack_int(pk, 1);
	msgpack_pack_int(pk, 2);
	msgpack_pack_int(pk, 3);
}
static void v_map(msgpack_packer *pk) { msgpack_pack_map(pk, 0); }

static void test_errors(void)
{
	char err[512];
	struct {
		const char *op, *key;
		void (*fn)(msgpack_packer *);
		int code;
		const char *in_msg;
	} cases[] = {
		{ "generate", "top_k", v_str, EXL_E_BAD_REQUEST, "top_k: wants an integer" },
		{ "generate", "top_k", v_float, EXL_E_BAD_REQUEST, "got a float" },
		{ "generate", "max_new_tokens", v_neg, EXL_E_BAD_REQUEST, "got -5" },
		/* NaN and infinities are named as such, with the field */
		{ "generate", "temperature", v_nan, EXL_E_BAD_REQUEST,
		  "generate: temperature: wants a number in [0, 100], got NaN" },
		{ "generate", "top_p", v_nan32, EXL_E_BAD_REQUEST, "top_p: wants a number in [0, 1], got NaN" },
		{ "generate", "min_p", v_inf, EXL_E_BAD_REQUEST, "min_p: wants a number in [0, 1], got -inf" },
		{ "generate", "token_bias", v_bias_nan, EXL_E_BAD_REQUEST,
		  "token_bias: item 0: wants a number in [-1e+30, 1e+30] as bias, got NaN" },
		/* any integer is a number: 2^63 and up are range-checked, not
		 * refused as the wrong type */
		{ "generate", "top_p", v_2p63, EXL_E_BAD_REQUEST,
		  "top_p: wants a number in [0, 1], got 9.22337e+18" },
		{ "generate", "temperature", v_u64max, EXL_E_BAD_REQUEST,
		  "temperature: wants a number in [0, 100], got 1.84467e+19" },
		{ "generate", "token_bias", v_bias_2p63, EXL_OK, "" },
		{ "generate", "temperature", v_str, EXL_E_BAD_REQUEST, "wants a number" },
		{ "generate", "top_p", v_big, EXL_E_BAD_REQUEST, "top_p: wants a number in [0, 1]" },
		{ "generate", "stream", v_bad_stream, EXL_E_BAD_REQUEST, "\"pigeon\"" },
		{ "generate", "stop", v_nul, EXL_E_BAD_REQUEST, "NUL" },
		{ "generate", "stop", v_empty_str, EXL_E_BAD_REQUEST, "1 to 1024 bytes" },
		{ "generate", "stop", v_long_stop, EXL_E_BAD_REQUEST, "1 to 1024 bytes" },
		{ "generate", "banned_strings", v_many_banned, EXL_E_TOO_LARGE, "over the limit" },
		{ "generate", "token_bias", v_pair_bad, EXL_E_BAD_REQUEST, "[id, bias]" },
		{ "generate", "seed", v_map, EXL_E_BAD_REQUEST, "seed: wants an integer, got a map" },
		{ "generate", "prompt_ids", v_str, EXL_E_BAD_REQUEST, "prompt_ids: wants an array of token ids" },
		{ "hello", "ring", v_str, EXL_E_BAD_REQUEST, "hello: ring: wants a boolean" },
		{ "cancel", NULL, NULL, EXL_E_BAD_REQUEST, "cancel: job: missing" },
		{ "load", NULL, NULL, EXL_E_BAD_REQUEST, "load: model: missing" },
		{ "paint", NULL, NULL, EXL_E_UNKNOWN_OP, "unknown op \"paint\"" },
		{ "status", NULL, NULL, EXL_OK, "" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int code = decode_one(cases[i].op, cases[i].key, cases[i].fn, err, sizeof(err));
		CHECK(code == cases[i].code && strstr(err, cases[i].in_msg),
		      "%s %s: code %d (%s), message '%s'", cases[i].op, cases[i].key ? cases[i].key : "",
		      code, exl_code_name(code), err);
	}

	/* names that are paths are refused */
	const char *names[] = { "../x", "a/b", ".hidden", "a..b", "", "x y" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		CHECK(!exl_model_name_valid(names[i], strlen(names[i])), "'%s' accepted", names[i]);
	CHECK(exl_model_name_valid("stories260K", 11) && exl_model_name_valid("llama-3.1_8b", 12),
	      "good names refused");
}

/* ---- ranges ---- */

/* Each numeric generate option's allowed values, written out here from the
 * generator's and the sampler's own checks (not from common/gen_ranges.c,
 * which is what is tested): the decoder, the command lines' parser
 * (exl and exld run share it) and the sampler must all agree. */
static const struct {
	const char *key, *flag;
	bool integer;
	double lo, hi;
	bool lo_open;
	bool sampler;             /* a sampler field: exl_sampler_params_check judges it too */
} ranges[] = {
	{ "max_new_tokens", "-n", true, 0, 1 << 24, false, false },
	{ "min_new_tokens", "--min-new", true, 0, 1 << 24, false, false },
	{ "temperature", "--temperature", false, 0, 100, false, true },
	{ "top_k", "--top-k", true, 0, INT32_MAX, false, true },
	{ "top_p", "--top-p", false, 0, 1, false, true },
	{ "min_p", "--min-p", false, 0, 1, false, true },
	{ "typical", "--typical", false, 0, 1, false, true },
	{ "tfs", "--tfs", false, 0, 1, false, true },
	{ "top_a", "--top-a", false, 0, 1, false, true },
	{ "repetition_penalty", "--rep-pen", false, 0, 100, true, true },
	{ "penalty_range", "--rep-range", true, -1, INT32_MAX, false, true },
	{ "penalty_decay", "--rep-decay", true, 0, 1 << 24, false, true },
	{ "frequency_penalty", "--freq-pen", false, -100, 100, false, true },
	{ "presence_penalty", "--pres-pen", false, -100, 100, false, true },
	{ "no_repeat_ngram", "--no-repeat-ngram", true, 0, 64, false, true },
	{ "dry_multiplier", "--dry-mult", false, 0, 100, false, true },
	{ "dry_base", "--dry-base", false, 1, 100, false, true },
	{ "dry_allowed_length", "--dry-allowed-len", true, 1, EXL_DRY_MAX_MATCH, false, true },
	{ "dry_range", "--dry-range", true, 0, INT32_MAX, false, true },
	{ "xtc_probability", "--xtc-prob", false, 0, 1, false, true },
	{ "xtc_threshold", "--xtc-thresh", false, 0, 1, false, true },
	{ "mirostat", "--mirostat", true, 0, 2, false, true },
	{ "mirostat_tau", "--mirostat-tau", false, 0, 100, true, true },
	{ "mirostat_eta", "--mirostat-eta", false, 0, 1, false, true },
	{ "cfg_scale", "--cfg-scale", false, -100, 100, false, false },
	{ "return_top_k", "--top-probs", true, 0, EXL_MAX_TOP_K_RETURN, false, false },
	{ "draft_tokens", "--draft-tokens", true, 1, EXL_GEN_MAX_DRAFT_TOKENS, false, false },
	{ "ngram_draft", "--ngram-draft", true, 0, EXL_GEN_MAX_NGRAM_DRAFT, false, false },
	{ "num_beams", "--beams", true, 0, EXL_GEN_MAX_BEAMS, false, false },
	{ "length_penalty", "--length-penalty", false, -10, 10, false, false },
};

/* A generate request {op, prompt, key: v}: its code, and the settings. */
static int decode_value(const char *key, bool integer, double v, struct dec_result *d)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 3);
	kv_str(&pk, "op", "generate");
	kv_str(&pk, "prompt", "x");
	if (integer)
		kv_int(&pk, key, (long long)v);
	else
		kv_f(&pk, key, v);
	decode(&sb, d);
	msgpack_sbuffer_destroy(&sb);
	return d->code;
}

/* The command lines' parser on "FLAG VALUE": 0 taken, -1 refused. */
static int parse_value(FILE *msg, const char *flag, const char *value)
{
	struct genopt_parser ps;
	struct genopt_value v;
	char *argv[] = { (char *)flag, (char *)value, NULL };
	int i = 0;

	genopt_parser_init(&ps, "test", msg);
	const struct genopt *p = genopt_find(&ps, flag);
	if (!p)
		return -2;
	return genopt_take(&ps, p, 2, argv, &i, &v);
}

static void check_value(FILE *msg, size_t k, double v, bool want)
{
	char text[64], err[512];
	struct dec_result d;

	if (ranges[k].integer)
		snprintf(text, sizeof(text), "%lld", (long long)v);
	else
		snprintf(text, sizeof(text), "%.17g", v);
	int code = decode_value(ranges[k].key, ranges[k].integer, v, &d);
	snprintf(err, sizeof(err), "%s", d.err);
	CHECK((code == EXL_OK) == want, "decoder: %s = %s: code %d '%s' (want %s)", ranges[k].key,
	      text, code, err, want ? "taken" : "refused");
	if (code == EXL_OK && ranges[k].sampler) {
		CHECK(exl_sampler_params_check(&d.req.u.gen.s.sampling, 512, err, sizeof(err)) == 0,
		      "the decoder took %s = %s, the sampler refuses it: %s", ranges[k].key, text, err);
	}
	if (code != EXL_OK && !want)
		CHECK(strstr(err, ranges[k].key) && strstr(err, "wants ") && strstr(err, ", got "),
		      "decoder: %s = %s: message '%s'", ranges[k].key, text, err);
	msgpack_unpacked_destroy(&d.up);
	/* --mirostat alone means 2: "-1" after it is not its value */
	if (!strcmp(ranges[k].flag, "--mirostat") && v < 0)
		return;
	int r = parse_value(msg, ranges[k].flag, text);
	CHECK(r != -2, "no option %s", ranges[k].flag);
	CHECK((r == 0) == want, "parser: %s %s: %s (want %s)", ranges[k].flag, text,
	      r ? "refused" : "taken", want ? "taken" : "refused");
}

static void test_ranges(void)
{
	FILE *msg = fopen("/dev/null", "w");

	CHECK(msg, "/dev/null");
	if (!msg)
		return;
	for (size_t k = 0; k < sizeof(ranges) / sizeof(ranges[0]); k++) {
		double lo = ranges[k].lo, hi = ranges[k].hi;
		double step = ranges[k].integer ? 1 : 1e-3;

		check_value(msg, k, lo, !ranges[k].lo_open);
		check_value(msg, k, hi, true);
		check_value(msg, k, lo - step * (fabs(lo) > 1 ? fabs(lo) : 1), false);
		check_value(msg, k, hi + step * (fabs(hi) > 1 ? fabs(hi) : 1), false);
		if (ranges[k].lo_open) {
			check_value(msg, k, lo + 1e-30, true);
			/* no float between 0 and 1e-50: it would go on the wire as 0 */
			check_value(msg, k, lo + 1e-50, false);
		}
		if (!ranges[k].integer)
			check_value(msg, k, (lo + hi) / 2, true);
	}
	/* mirostat: 0 off, 2 v2, nothing between */
	for (size_t k = 0; k < sizeof(ranges) / sizeof(ranges[0]); k++)
		if (!strcmp(ranges[k].key, "mirostat"))
			check_value(msg, k, 1, false);
	/* every range of the shared table is one of the above */
	for (size_t t = 0; t < genrange_count; t++) {
		bool found = !strcmp(genrange_table[t].key, "token_bias");
		for (size_t k = 0; k < sizeof(ranges) / sizeof(ranges[0]); k++)
			found |= !strcmp(genrange_table[t].key, ranges[k].key);
		CHECK(found, "range %s is not tested", genrange_table[t].key);
	}
	fclose(msg);
}

/* ---- UTF-8: every str the daemon reads or sends ---- */

/* The message decode_str built: the request points into it. */
static msgpack_sbuffer str_sb;

/* {op, key: str} with explicit lengths (a generate gets a prompt too; list:
 * the str is the second item of an array); key "" packs no field. */
static int decode_str(const char *op, size_t op_len, const char *key, const char *v, size_t v_len,
		      bool list, struct dec_result *d)
{
	msgpack_sbuffer *sb = &str_sb;
	msgpack_packer pk;
	bool gen = op_len == 8 && !memcmp(op, "generate", 8);
	bool prompt_field = !strcmp(key, "prompt");

	msgpack_sbuffer_clear(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 1 + (*key ? 1 : 0) + (gen && !prompt_field ? 1 : 0));
	msgpack_pack_str_with_body(&pk, "op", 2);
	msgpack_pack_str_with_body(&pk, op, op_len);
	if (gen && !prompt_field)
		kv_str(&pk, "prompt", "x");
	if (*key) {
		msgpack_pack_str_with_body(&pk, key, strlen(key));
		if (list)
			msgpack_pack_array(&pk, 2), msgpack_pack_str_with_body(&pk, "ok", 2);
		msgpack_pack_str_with_body(&pk, v, v_len);
	}
	decode(sb, d);
	return d->code;
}

static bool valid_utf8(const char *s)
{
	return exl_utf8_bad_at(s, strlen(s)) == strlen(s);
}

/* Float fields take integers of every msgpack width (docs/protocol.md). */
static void test_int_floats(void)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	struct dec_result d;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 6);
	kv_str(&pk, "op", "generate");
	kv_str(&pk, "prompt", "x");
	msgpack_pack_str_with_body(&pk, "temperature", 11);
	msgpack_pack_uint64(&pk, 2);                   /* positive fixint */
	msgpack_pack_str_with_body(&pk, "presence_penalty", 16);
	msgpack_pack_int64(&pk, -3);                   /* negative fixint */
	msgpack_pack_str_with_body(&pk, "mirostat_tau", 12);
	msgpack_pack_uint64(&pk, 100);                 /* positive fixint, at the limit */
	msgpack_pack_str_with_body(&pk, "token_bias", 10);
	msgpack_pack_map(&pk, 1);
	msgpack_pack_int(&pk, 7);
	msgpack_pack_int64(&pk, -(1ll << 40));         /* int64 */
	decode(&sb, &d);
	CHECK(d.code == EXL_OK, "integers in float fields: %s", d.err);
	if (d.code == EXL_OK) {
		const struct exl_sampler_params *sp = &d.req.u.gen.s.sampling;

		CHECK(sp->temperature == 2.0f && sp->pres_pen == -3.0f && sp->mirostat_tau == 100.0f &&
		      sp->n_bias == 1 && sp->bias[0].id == 7 && sp->bias[0].bias == -0x1p40f,
		      "values %g %g %g %g", (double)sp->temperature, (double)sp->pres_pen,
		      (double)sp->mirostat_tau, (double)sp->bias[0].bias);
	}
	msgpack_unpacked_destroy(&d.up);
	msgpack_sbuffer_destroy(&sb);
}

static void test_utf8(void)
{
	static const struct {
		const char *op, *key;
		const char *v;
		size_t len;
		bool list;
		const char *in_msg;
	} bad[] = {
		{ "generate", "prompt", "h\xc3\xa9llo\xc3", 7, false,
		  "generate: prompt: not valid UTF-8 (byte 0xc3 at offset 6)" },
		{ "generate", "prompt", "ab\xff", 3, false, "prompt: not valid UTF-8 (byte 0xff at offset 2)" },
		{ "generate", "prompt", "\xed\xa0\x80", 3, false, "(byte 0xed at offset 0)" }, /* surrogate */
		{ "generate", "prompt", "x\xc0\xaf", 3, false, "(byte 0xc0 at offset 1)" },   /* overlong */
		{ "generate", "prompt", "\xf4\x90\x80\x80", 4, false, "(byte 0xf4 at offset 0)" }, /* > U+10FFFF */
		{ "generate", "negative_prompt", "\x80", 1, false, "negative_prompt: not valid UTF-8" },
		{ "generate", "stop", "a\xff", 2, true,
		  "stop: item 1: not valid UTF-8 (byte 0xff at offset 1)" },
		{ "generate", "banned_strings", "\xfe", 1, true, "banned_strings: item 1: not valid UTF-8" },
		{ "generate", "dry_sequence_breakers", "\xe2\x82", 2, true,
		  "dry_sequence_breakers: item 1: not valid UTF-8" },
		{ "generate", "grammar", "root ::= \"\xff\"", 12, false, "grammar: not valid UTF-8" },
		{ "generate", "json_schema", "{\"const\": \"\xff\"}", 14, false, "json_schema: not valid UTF-8" },
		{ "generate", "regex", "a\xffz", 3, false, "regex: not valid UTF-8" },
		{ "tokenize", "text", "Once\xa0", 5, false, "tokenize: text: not valid UTF-8 (byte 0xa0 at offset 4)" },
		{ "generate", "id", "\xff", 1, false, "id: not valid UTF-8" },
	};
	struct dec_result d;

	msgpack_sbuffer_init(&str_sb);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int code = decode_str(bad[i].op, strlen(bad[i].op), bad[i].key, bad[i].v, bad[i].len,
				      bad[i].list, &d);
		CHECK(code == EXL_E_BAD_REQUEST && strstr(d.err, bad[i].in_msg) && !d.req.id,
		      "%s %s: code %d, message '%s'", bad[i].op, bad[i].key, code, d.err);
		msgpack_unpacked_destroy(&d.up);
	}

	/* an op that is not UTF-8; an unknown one quoted without cutting a character */
	CHECK(decode_str("gen\xff", 4, "", NULL, 0, false, &d) == EXL_E_BAD_REQUEST &&
	      strstr(d.err, "op: not valid UTF-8 (byte 0xff at offset 3)"), "op: '%s'", d.err);
	msgpack_unpacked_destroy(&d.up);
	char op[80] = "";
	for (int i = 0; i < 31; i++)
		strcat(op, "\xc3\xa9");          /* 62 bytes */
	strcat(op, "\xe6\x97\xa5");              /* bytes 62..64 straddle the 64-byte cut */
	CHECK(decode_str(op, strlen(op), "", NULL, 0, false, &d) == EXL_E_UNKNOWN_OP &&
	      valid_utf8(d.err) && strstr(d.err, "\xc3\xa9\""), "long op: '%s'", d.err);
	msgpack_unpacked_destroy(&d.up);

	/* valid text of every length passes untouched */
	const char *good = "h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80";
	CHECK(decode_str("generate", 8, "prompt", good, strlen(good), false, &d) == EXL_OK &&
	      d.req.u.gen.prompt.len == strlen(good) &&
	      !memcmp(d.req.u.gen.prompt.text, good, strlen(good)), "good prompt: '%s'", d.err);
	msgpack_unpacked_destroy(&d.up);
	CHECK(decode_str("generate", 8, "stop", good, strlen(good), true, &d) == EXL_OK &&
	      d.req.u.gen.s.n_stop_strings == 2, "good stop: '%s'", d.err);
	msgpack_unpacked_destroy(&d.up);

	/* error messages quote input and model files: what is sent is UTF-8 */
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_unpacked up;
	size_t off = 0;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	exl_pack_error(&pk, &sb, NULL, EXL_E_BAD_REQUEST, "at 'ab\xe6\x97' \xff!");
	msgpack_unpacked_init(&up);
	CHECK(msgpack_unpack_next(&up, sb.data, sb.size, &off) == MSGPACK_UNPACK_SUCCESS &&
	      up.data.type == MSGPACK_OBJECT_MAP && up.data.via.map.size == 3, "error reply");
	if (up.data.type == MSGPACK_OBJECT_MAP && up.data.via.map.size == 3) {
		const msgpack_object *m = &up.data.via.map.ptr[2].val;
		static const char want[] = "at 'ab\xef\xbf\xbd\xef\xbf\xbd' \xef\xbf\xbd!";

		CHECK(m->type == MSGPACK_OBJECT_STR && m->via.str.size == sizeof(want) - 1 &&
		      !memcmp(m->via.str.ptr, want, sizeof(want) - 1), "message '%.*s'",
		      (int)m->via.str.size, m->via.str.ptr);
	}
	msgpack_unpacked_destroy(&up);
	msgpack_sbuffer_destroy(&sb);
	msgpack_sbuffer_destroy(&str_sb);
}

static void test_encode(void)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_unpacked up;
	struct exl_packed_id id;
	msgpack_object o = { .type = MSGPACK_OBJECT_POSITIVE_INTEGER, .via.u64 = 99 };
	size_t off = 0;

	exl_packed_id_set(&id, &o);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	exl_pack_error(&pk, &sb, &id, EXL_E_LIMIT, "too many jobs");
	msgpack_unpacked_init(&up);
	CHECK(msgpack_unpack_next(&up, sb.data, sb.size, &off) == MSGPACK_UNPACK_SUCCESS &&
	      off == sb.size && up.data.type == MSGPACK_OBJECT_MAP && up.data.via.map.size == 4,
	      "error reply is a 4-entry map");
	char buf[256];
	FILE *f = fmemopen(buf, sizeof(buf), "w");
	msgpack_object_print(f, up.data);
	fclose(f);
	CHECK(strstr(buf, "\"op\"=>\"error\"") && strstr(buf, "\"id\"=>99") &&
	      strstr(buf, "\"code\"=>\"limit\"") && strstr(buf, "too many jobs"), "got %s", buf);
	msgpack_unpacked_destroy(&up);
	msgpack_sbuffer_destroy(&sb);

	for (int c = 0; c <= EXL_CODE_WIRE_MAX; c++) {
		const char *n = exl_code_name(c);
		CHECK(c == 0 || exl_code_from_name(n, strlen(n)) == c, "code %d round trip", c);
	}
}

/* ---- config ---- */

static int write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	fputs(text, f);
	return fclose(f);
}

static void test_config(void)
{
	struct exl_config c;
	char err[600];
	char path[] = "/tmp/exld-conf-XXXXXX";
	int fd = mkstemp(path);

	CHECK(fd >= 0, "mkstemp");
	close(fd);
	exl_config_defaults(&c);
	CHECK(!strcmp(c.socket_path, EXL_DEFAULT_SOCKET) && c.max_message == EXL_MAX_MESSAGE_DEFAULT,
	      "defaults");
	write_file(path,
		   "# comment\n"
		   "socket = /run/x/exld.sock\n"
		   "socket_mode = 0600\n"
		   "  models_dir   =   /srv/models   # trailing comment\n"
		   "load = a, b c\n"
		   "threads = 3\n"
		   "kv_tokens = 4096\n"
		   "kv_page_size = 64\n"
		   "max_batch_tokens = 256\n"
		   "prefill_chunk = 128\n"
		   "max_running_jobs = 8\n"
		   "suspend_after_ms = 250\n"
		   "resume_yield_ms = 0\n"
		   "max_jobs_per_uid = 2\n"
		   "max_new_tokens = 100\n"
		   "uid_limit = 1000 5 50\n"
		   "admin_uids = 1000, 1001\n"
		   "max_message = 1M\n"
		   "ring_size = 256K\n"
		   "max_connections = 10\n"
		   "device = cuda:1\n");
	CHECK(exl_config_load(&c, path, true, err, sizeof(err)) == 0, "load: %s", err);
	CHECK(!strcmp(c.socket_path, "/run/x/exld.sock") && c.socket_mode == 0600, "socket");
	CHECK(!strcmp(c.models_dir, "/srv/models"), "models_dir '%s'", c.models_dir);
	CHECK(c.n_load == 3 && !strcmp(c.load[2], "c"), "load list");
	CHECK(c.threads == 3 && c.kv_tokens == 4096 && c.kv_page_size == 64, "numbers");
	CHECK(c.max_batch_tokens == 256 && c.prefill_chunk == 128 && c.max_running_jobs == 8, "engine");
	CHECK(c.suspend_after_ms == 250 && c.resume_yield_ms == 0, "suspend_after_ms %d, "
	      "resume_yield_ms %d", c.suspend_after_ms, c.resume_yield_ms);
	CHECK(c.max_message == 1u << 20 && c.ring_size == 256u << 10 && c.max_connections == 10, "sizes");
	CHECK(!strcmp(c.device, "cuda:1"), "device");
	int jobs, toks;
	exl_config_uid_limits(&c, 1000, &jobs, &toks);
	CHECK(jobs == 5 && toks == 50, "uid 1000 limits %d %d", jobs, toks);
	exl_config_uid_limits(&c, 1002, &jobs, &toks);
	CHECK(jobs == 2 && toks == 100, "uid 1002 limits %d %d", jobs, toks);
	CHECK(exl_config_is_admin(&c, 1001) && exl_config_is_admin(&c, 0) &&
	      exl_config_is_admin(&c, getuid()), "admins");
	CHECK(getuid() == 4242 || !exl_config_is_admin(&c, 4242), "uid 4242 is no admin");
	CHECK(exl_config_check(&c, err, sizeof(err)) == 0, "check: %s", err);

	/* errors carry file and line */
	const struct {
		const char *text, *msg;
	} bad[] = {
		{ "threads = 2\nthreads = lots\n", ":2: threads: wants an integer" },
		{ "colour = blue\n", ":1: unknown setting 'colour'" },
		{ "\n\njust words\n", ":3: expected 'key = value'" },
		{ "ring_size = 100K\n", ":1: ring_size: wants a power of two" },
		{ "max_message = 1T\n", ":1: max_message: wants a size" },
		{ "load = ../etc\n", ":1: load: '../etc' is not a model name" },
		{ "device = tpu\n", ":1: device: wants 'cpu'" },
		{ "uid_limit = 1000 5\n", ":1: uid_limit: wants 'UID MAX_JOBS MAX_NEW_TOKENS'" },
		{ "socket = relative.sock\n", ":1: socket: wants an absolute path" },
		{ " = 5\n", ":1: missing key" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		exl_config_defaults(&c);
		write_file(path, bad[i].text);
		int rc = exl_config_load(&c, path, true, err, sizeof(err));
		CHECK(rc == -1 && strstr(err, bad[i].msg) && strstr(err, path),
		      "case %zu: rc %d, message '%s', want '%s'", i, rc, err, bad[i].msg);
	}
	unlink(path);
	exl_config_defaults(&c);
	CHECK(exl_config_load(&c, path, false, err, sizeof(err)) == 0, "absent default file is fine");
	CHECK(exl_config_load(&c, path, true, err, sizeof(err)) == -1 && strstr(err, "No such file"),
	      "an explicit missing file is an error: '%s'", err);
	c.prefill_chunk = 1000;
	c.max_batch_tokens = 10;
	c.max_running_jobs = 5;
	CHECK(exl_config_check(&c, err, sizeof(err)) == -1 && strstr(err, "prefill_chunk"),
	      "cross check: '%s'", err);
	c.prefill_chunk = 10;
	c.max_running_jobs = 6;
	CHECK(exl_config_check(&c, err, sizeof(err)) == -1 && strstr(err, "max_running_jobs"),
	      "running jobs over half the batch: '%s'", err);
	c.max_running_jobs = 5;
	CHECK(exl_config_check(&c, err, sizeof(err)) == 0, "a consistent config: '%s'", err);
	c.max_batch_tokens = 1;
	c.prefill_chunk = 1;
	c.max_running_jobs = 1;
	CHECK(exl_config_check(&c, err, sizeof(err)) == -1 && strstr(err, "max_batch_tokens"),
	      "a batch of one token: '%s'", err);
}

/* embed, truncate and input embeddings (issue 18) */
static void v_embd_ok(msgpack_packer *pk)
{
	static const float rows[4] = { 1, 2, 3, 4 };

	msgpack_pack_array(pk, 1);
	msgpack_pack_map(pk, 2);
	kv_str(pk, "alias", "<img>");
	msgpack_pack_str_with_body(pk, "data", 4);
	msgpack_pack_bin_with_body(pk, rows, sizeof(rows));
}

static void v_embd_odd(msgpack_packer *pk)
{
	msgpack_pack_array(pk, 1);
	msgpack_pack_map(pk, 2);
	kv_str(pk, "alias", "<img>");
	msgpack_pack_str_with_body(pk, "data", 4);
	msgpack_pack_bin_with_body(pk, "abcdef", 6);
}

static void v_embd_noalias(msgpack_packer *pk)
{
	msgpack_pack_array(pk, 1);
	msgpack_pack_map(pk, 1);
	msgpack_pack_str_with_body(pk, "data", 4);
	msgpack_pack_bin_with_body(pk, "abcd", 4);
}

static void v_true(msgpack_packer *pk) { msgpack_pack_true(pk); }

static int decode_embed(const char *pooling, struct dec_result *d)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, pooling ? 4 : 3);
	kv_str(&pk, "op", "embed");
	kv_str(&pk, "input", "Once upon a time");
	kv_bool(&pk, "normalize", true);
	if (pooling)
		kv_str(&pk, "pooling", pooling);
	decode(&sb, d);
	msgpack_sbuffer_destroy(&sb);
	return d->code;
}

static void test_embed(void)
{
	struct dec_result d;
	char err[512];

	CHECK(decode_embed("last", &d) == EXL_OK && d.req.op == EXL_OPC_EMBED &&
	      d.req.u.gen.s.pooling == EXL_POOL_LAST && d.req.u.gen.s.normalize &&
	      d.req.u.gen.s.max_new_tokens == 0 && d.req.u.gen.prompt.len == 16 &&
	      d.req.u.gen.stream == EXL_STREAM_NONE, "embed: %d %s", d.code, d.err);
	msgpack_unpacked_destroy(&d.up);
	CHECK(decode_embed(NULL, &d) == EXL_OK && d.req.u.gen.s.pooling == EXL_POOL_NONE,
	      "embed without pooling (the model's): %d %s", d.code, d.err);
	msgpack_unpacked_destroy(&d.up);
	CHECK(decode_embed("max", &d) == EXL_E_BAD_REQUEST && strstr(d.err, "embed: pooling: "),
	      "embed pooling max: %d %s", d.code, d.err);
	msgpack_unpacked_destroy(&d.up);
	CHECK(decode_one("embed", NULL, NULL, err, sizeof(err)) == EXL_E_BAD_REQUEST &&
	      strstr(err, "embed: input: missing"), "embed without input: %s", err);
	CHECK(decode_one("generate", "truncate", v_true, err, sizeof(err)) == EXL_OK,
	      "generate truncate: %s", err);
	CHECK(decode_one("generate", "embeddings", v_embd_ok, err, sizeof(err)) == EXL_OK,
	      "generate embeddings: %s", err);
	CHECK(decode_one("generate", "embeddings", v_embd_odd, err, sizeof(err)) ==
	      EXL_E_BAD_REQUEST && strstr(err, "multiple of 4"), "6-byte embedding: %s", err);
	CHECK(decode_one("generate", "embeddings", v_embd_noalias, err, sizeof(err)) ==
	      EXL_E_BAD_REQUEST && strstr(err, "alias"), "embedding without alias: %s", err);
	CHECK(decode_one("generate", "embeddings", v_str, err, sizeof(err)) == EXL_E_BAD_REQUEST,
	      "embeddings a string: %s", err);
}

int main(void)
{
	test_scan();
	test_generate_fields();
	test_errors();
	test_ranges();
	test_int_floats();
	test_utf8();
	test_encode();
	test_config();
	test_embed();
	if (check_failures) {
		fprintf(stderr, "%d checks failed\n", check_failures);
		return 1;
	}
	printf("protocol and config: all checks passed\n");
	return 0;
}
