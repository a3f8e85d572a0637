/* Fuzz target for the daemon's request path without sockets (see
 * docs/fuzzing.md; fuzz_target.h says how it runs under libFuzzer and
 * under `meson test`).
 *
 * The input is a byte stream as a client would write it to the socket.
 * Every message exl_scan frames (with the daemon's limits, max_message
 * 1 MiB) is unpacked with msgpack-c and decoded with exl_req_decode, then
 * answered the way daemon/server/conn.c answers a refusal (exl_pack_error).  The
 * stream stops where the daemon would close the connection.  It aborts
 * when
 *   - exl_scan fed the stream in pieces (as reads deliver it) does not
 *     frame it exactly as it does whole, frames a message msgpack-c does
 *     not read as one value of that length, or, asked again after
 *     refusing, does not refuse again;
 *   - a refusal has no message or a code that is not on the wire, or its
 *     error reply does not unpack to {op: "error", id, code, message} with
 *     the request's id echoed and a message of valid UTF-8;
 *   - an accepted request holds something the decoder promises it does not:
 *     a string that is not UTF-8, a count over its limit, a sampler setting
 *     the sampler refuses, an id it cannot echo.  Every string and array it
 *     points at is read, so a pointer outside the message is an ASan report.
 *
 * An input whose first byte is 0xc1 (the byte msgpack never uses, so a
 * stream that starts with it is closed at once and tests nothing) is a
 * config file instead: the rest goes through exl_config_load and
 * exl_config_check, which must refuse with a message or give settings
 * within their limits.
 */
#include <math.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon/server/wire/config.h"
#include "daemon/server/wire/protocol.h"
#include "daemon/core/sampler/sampler.h"
#include "daemon/core/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_target.h"

#define MAX_MESSAGE (1u << 20)

static volatile uint64_t sink;

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 1, 2), noreturn))
#endif
static void broken(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "fuzz_request: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

static void utf8_or_abort(const char *what, const char *s, size_t n)
{
	size_t bad = exl_utf8_bad_at(s, n);

	if (bad != n)
		broken("%s: accepted, but not valid UTF-8 at byte %zu of %zu", what, bad, n);
	for (size_t i = 0; i < n; i++)
		sink += (uint8_t)s[i];
}

/* A NUL-terminated string the decoder made: 1..max bytes of UTF-8. */
static void cstr_or_abort(const char *what, const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n == 0 || n > max)
		broken("%s: accepted a string of %zu bytes (wants 1..%zu)", what, n, max);
	utf8_or_abort(what, s, n);
}

static void check_generate(const struct exl_req_generate *g)
{
	const struct exl_gen_settings *s = &g->s;
	struct exl_sampler_params sp = s->sampling;
	char err[512];

	if (g->prompt.ids) {
		if (g->prompt.n_ids <= 0)
			broken("generate: accepted an empty prompt_ids");
		for (int i = 0; i < g->prompt.n_ids; i++)
			if (g->prompt.ids[i] < 0)
				broken("generate: prompt_ids: accepted id %d", g->prompt.ids[i]);
	} else if (g->prompt.text) {
		utf8_or_abort("generate: prompt", g->prompt.text, g->prompt.len);
	} else {
		broken("generate: accepted without a prompt");
	}
	if (s->fim) {
		if (s->fim_suffix_len && !s->fim_suffix)
			broken("generate: suffix: a length without text");
		utf8_or_abort("generate: suffix", s->fim_suffix ? s->fim_suffix : "",
			      s->fim_suffix_len);
	}
	if (g->has_negative) {
		if (g->negative.text)
			utf8_or_abort("generate: negative_prompt", g->negative.text, g->negative.len);
		for (int i = 0; i < g->negative.n_ids; i++)
			if (g->negative.ids[i] < 0)
				broken("generate: negative_prompt_ids: accepted id %d",
				       g->negative.ids[i]);
	}
	if (s->n_stop_strings < 0 || s->n_stop_strings > EXL_MAX_STOP_STRINGS ||
	    s->n_stop_tokens < 0 || s->n_stop_tokens > EXL_MAX_STOP_TOKENS ||
	    s->n_banned_strings < 0 || s->n_banned_strings > EXL_MAX_BANNED ||
	    sp.n_bias < 0 || sp.n_bias > EXL_MAX_BIAS ||
	    sp.n_dry_breakers < 0 || sp.n_dry_breakers > EXL_SAMPLER_MAX_BREAKERS)
		broken("generate: accepted counts over their limits: %d stop strings, %d stop tokens, "
		       "%d banned, %d biases, %d breakers", s->n_stop_strings, s->n_stop_tokens,
		       s->n_banned_strings, sp.n_bias, sp.n_dry_breakers);
	for (int i = 0; i < s->n_stop_strings; i++)
		cstr_or_abort("generate: stop", s->stop_strings[i], EXL_MAX_STRING_ITEM);
	for (int i = 0; i < s->n_stop_tokens; i++)
		if (s->stop_tokens[i] < 0)
			broken("generate: stop: accepted token %d", s->stop_tokens[i]);
	for (int i = 0; i < s->n_banned_strings; i++)
		cstr_or_abort("generate: banned_strings", s->banned_strings[i], EXL_MAX_STRING_ITEM);
	for (int i = 0; i < sp.n_dry_breakers; i++)
		cstr_or_abort("generate: dry_sequence_breakers", sp.dry_breakers[i],
			      EXL_SAMPLER_MAX_BREAKER_LEN - 1);
	for (int i = 0; i < sp.n_bias; i++)
		if (sp.bias[i].id < 0 || !isfinite(sp.bias[i].bias))
			broken("generate: token_bias: accepted %d -> %g", sp.bias[i].id,
			       (double)sp.bias[i].bias);
	/* Every setting the decoder lets through, the sampler takes (the
	 * bias ids are judged against the model's vocabulary by the job). */
	sp.n_bias = 0;
	if (exl_sampler_params_check(&sp, INT32_MAX, err, sizeof(err)))
		broken("generate: accepted sampler settings the sampler refuses: %s", err);
	if (s->max_new_tokens < 0 || s->min_new_tokens < 0 || s->return_top_k < 0 ||
	    s->return_top_k > EXL_MAX_TOP_K_RETURN || !isfinite(s->cfg_scale))
		broken("generate: accepted max_new_tokens %d, min_new_tokens %d, return_top_k %d, "
		       "cfg_scale %g", s->max_new_tokens, s->min_new_tokens, s->return_top_k,
		       (double)s->cfg_scale);
	const char *const constraint[3] = { g->grammar, g->json_schema, g->regex };
	int constraints = 0;
	for (int i = 0; i < 3; i++) {
		if (!constraint[i])
			continue;
		constraints++;
		utf8_or_abort("generate: constraint", constraint[i], strlen(constraint[i]));
	}
	if (constraints > 1)
		broken("generate: accepted %d constraints", constraints);
}

static void check_accepted(const struct exl_req *req)
{
	size_t n = strnlen(req->model, sizeof(req->model));

	if (n == sizeof(req->model) || (n && !exl_model_name_valid(req->model, n)))
		broken("accepted model name '%.*s'", (int)n, req->model);
	switch (req->op) {
	case EXL_OPC_HELLO: {
		uint32_t rs = req->u.hello.ring_size;
		if (rs && (rs < EXL_RING_SIZE_MIN || rs > EXL_RING_SIZE_MAX || (rs & (rs - 1))))
			broken("hello: accepted ring_size %u", rs);
		break;
	}
	case EXL_OPC_LOAD:
	case EXL_OPC_UNLOAD:
		if (!n)
			broken("load/unload accepted without a model");
		break;
	case EXL_OPC_TOKENIZE:
		if (!req->u.tokenize.text)
			broken("tokenize: accepted without text");
		utf8_or_abort("tokenize: text", req->u.tokenize.text, req->u.tokenize.len);
		break;
	case EXL_OPC_DETOKENIZE:
		if (!req->u.detokenize.ids || req->u.detokenize.n > EXL_MAX_DETOKENIZE_IDS)
			broken("detokenize: accepted %zu ids", req->u.detokenize.n);
		for (size_t i = 0; i < req->u.detokenize.n; i++)
			if (req->u.detokenize.ids[i] < 0)
				broken("detokenize: accepted id %d", req->u.detokenize.ids[i]);
		break;
	case EXL_OPC_GENERATE:
		check_generate(&req->u.gen);
		break;
	case EXL_OPC_EMBED:
		if (!req->u.gen.prompt.text)
			broken("embed: accepted without input");
		utf8_or_abort("embed: input", req->u.gen.prompt.text, req->u.gen.prompt.len);
		if (req->u.gen.s.pooling < EXL_POOL_NONE || req->u.gen.s.pooling > EXL_POOL_LAST ||
		    req->u.gen.s.max_new_tokens != 0)
			broken("embed: accepted pooling %d", (int)req->u.gen.s.pooling);
		break;
	case EXL_OPC_CANCEL:
		if (req->u.cancel.job < 1 || req->u.cancel.job > INT64_MAX)
			broken("cancel: accepted job %llu", (unsigned long long)req->u.cancel.job);
		break;
	case EXL_OPC_MODELS:
	case EXL_OPC_STATUS:
	case EXL_OPC_RESUME:
		break;
	}
}

static bool str_is(const msgpack_object *o, const char *s)
{
	return o && o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
	       !memcmp(o->via.str.ptr, s, o->via.str.size);
}

static const msgpack_object *get(const msgpack_object *map, const char *key)
{
	for (uint32_t i = 0; i < map->via.map.size; i++)
		if (str_is(&map->via.map.ptr[i].key, key))
			return &map->via.map.ptr[i].val;
	return NULL;
}

/* The reply's buffer and the zone it is unpacked into are kept from one
 * input to the next: no allocation per input (under ASan each one costs
 * a fill of its first 4 KiB). */
static msgpack_sbuffer reply_sb;
static msgpack_zone reply_zone;
static bool reply_ready;

/* The error reply conn.c would send, unpacked again. */
static void check_error_reply(const struct exl_packed_id *id, const msgpack_object *req_id,
			      int code, const char *err)
{
	msgpack_packer pk;
	msgpack_object root;
	size_t used = 0;

	if (!reply_ready) {
		msgpack_sbuffer_init(&reply_sb);
		if (!msgpack_zone_init(&reply_zone, 8192))
			broken("out of memory");
		reply_ready = true;
	}
	msgpack_sbuffer_clear(&reply_sb);
	msgpack_zone_clear(&reply_zone);
	msgpack_packer_init(&pk, &reply_sb, msgpack_sbuffer_write);
	exl_pack_error(&pk, &reply_sb, id, code, err);
	if (msgpack_unpack(reply_sb.data, reply_sb.size, &used, &reply_zone, &root) !=
	    MSGPACK_UNPACK_SUCCESS || used != reply_sb.size || root.type != MSGPACK_OBJECT_MAP)
		broken("the error reply to '%s' is not one msgpack map", err);
	const msgpack_object *m = &root, *msg = get(m, "message"), *rid = get(m, "id");
	if (!str_is(get(m, "op"), EXL_OP_ERROR) || !str_is(get(m, "code"), exl_code_name(code)) ||
	    !msg || msg->type != MSGPACK_OBJECT_STR)
		broken("the error reply to '%s' lacks op, code or message", err);
	if (exl_utf8_bad_at(msg->via.str.ptr, msg->via.str.size) != msg->via.str.size)
		broken("the error message '%s' goes out as invalid UTF-8", err);
	if (!req_id != !rid || (rid && !msgpack_object_equal(*rid, *req_id)))
		broken("the error reply to '%s' does not echo the request's id", err);
}

static void one_message(const uint8_t *data, size_t len)
{
	/* an exact-size copy, so a read past the message is caught */
	uint8_t *msg = malloc(len);
	msgpack_unpacked up;
	size_t used = 0;

	if (!msg)
		broken("out of memory");
	memcpy(msg, data, len);
	msgpack_unpacked_init(&up);
	msgpack_unpack_return ur = msgpack_unpack_next(&up, (const char *)msg, len, &used);
	if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
		goto out; /* conn.c answers internal; nothing to check */
	if (ur != MSGPACK_UNPACK_SUCCESS || used != len)
		broken("exl_scan framed %zu bytes that msgpack-c reads as %s (%zu bytes)", len,
		       ur == MSGPACK_UNPACK_SUCCESS ? "a value of another length" :
		       ur == MSGPACK_UNPACK_CONTINUE ? "unfinished" : "invalid", used);

	struct exl_req req;
	struct exl_packed_id id;
	char err[512] = "";
	int code = exl_req_decode(&up.data, up.zone, &req, err, sizeof(err));
	exl_packed_id_set(&id, req.id);
	if (req.id && !id.len)
		broken("accepted an id it cannot echo");
	if (code != EXL_OK) {
		if (!err[0] || code < 1 || code > EXL_CODE_WIRE_MAX)
			broken("refused with code %d and message '%s'", code, err);
		check_error_reply(&id, req.id, code, err);
	} else {
		check_accepted(&req);
	}
out:
	msgpack_unpacked_destroy(&up);
	free(msg);
}

/* Chunk sizes for the piecewise scan: from a cheap hash of the input, so
 * a given input always splits the same way. */
static size_t next_step(uint32_t *h)
{
	*h = *h * 1103515245u + 12345u;
	uint32_t r = *h >> 16;
	return (r & 3) == 0 ? 1 : 1 + r % ((r & 4) ? 7 : 300);
}

/* ---- config mode ---- */

static int cfg_fd = -1;
static char cfg_path[64];

static void check_config(const uint8_t *data, size_t size)
{
	struct exl_config c;
	char err[1024] = "";

	if (cfg_fd < 0) {
		cfg_fd = memfd_create("fuzz-config", MFD_CLOEXEC);
		if (cfg_fd < 0)
			broken("memfd_create failed");
		snprintf(cfg_path, sizeof(cfg_path), "/proc/self/fd/%d", cfg_fd);
	}
	if (ftruncate(cfg_fd, 0) || (size && pwrite(cfg_fd, data, size, 0) != (ssize_t)size))
		broken("writing the config memfd failed");
	exl_config_defaults(&c);
	if (exl_config_load(&c, cfg_path, true, err, sizeof(err))) {
		if (!err[0])
			broken("config refused without a message");
		return;
	}
	if (exl_config_check(&c, err, sizeof(err))) {
		if (!err[0])
			broken("config check failed without a message");
		return;
	}
	if (c.n_load < 0 || c.n_load > EXL_CONFIG_MAX_LOAD || c.n_admin_uids < 0 ||
	    c.n_admin_uids > EXL_CONFIG_MAX_ADMINS || c.n_uid_limits < 0 ||
	    c.n_uid_limits > EXL_CONFIG_MAX_UID_LIMITS)
		broken("config: %d loads, %d admins, %d uid limits", c.n_load, c.n_admin_uids,
		       c.n_uid_limits);
	for (int i = 0; i < c.n_load; i++)
		if (!exl_model_name_valid(c.load[i], strnlen(c.load[i], sizeof(c.load[i]))))
			broken("config: load '%.*s' is not a model name", (int)sizeof(c.load[i]),
			       c.load[i]);
	if (c.socket_path[0] != '/' || !memchr(c.socket_path, 0, sizeof(c.socket_path)) ||
	    !memchr(c.models_dir, 0, sizeof(c.models_dir)) ||
	    !memchr(c.device, 0, sizeof(c.device)))
		broken("config: a path or the device is not a terminated string");
	if (c.max_message < EXL_MAX_MESSAGE_MIN || c.max_message > EXL_MAX_MESSAGE_MAX ||
	    c.ring_size < EXL_RING_SIZE_MIN || c.ring_size > EXL_RING_SIZE_MAX ||
	    (c.ring_size & (c.ring_size - 1)) || c.kv_page_size < 1 || c.max_batch_tokens < 2 ||
	    c.socket_mode > 0777)
		broken("config: max_message %u, ring_size %u, kv_page_size %d, max_batch_tokens %d, "
		       "socket_mode %o", c.max_message, c.ring_size, c.kv_page_size,
		       c.max_batch_tokens, c.socket_mode);
}

int fuzz_one(const uint8_t *data, size_t size)
{
	struct exl_scan whole, piece;
	uint32_t h = (uint32_t)size * 2654435761u;
	size_t off = 0;

	if (size && data[0] == 0xc1) {
		check_config(data + 1, size - 1);
		return 0;
	}
	for (size_t i = 0; i < size && i < 8; i++)
		h = h * 31 + data[i];
	memset(&whole, 0, sizeof(whole));
	memset(&piece, 0, sizeof(piece));
	while (off < size) {
		size_t len = 0, plen = 0, avail = 0, left = size - off;
		enum exl_scan_result r = exl_scan(&whole, data + off, left, MAX_MESSAGE, &len);
		enum exl_scan_result pr;

		/* The same bytes as a connection reads them: a few at a time,
		 * the scan resumed each time (conn.c process_input). */
		do {
			size_t step = next_step(&h);
			avail = step < left - avail ? avail + step : left;
			pr = exl_scan(&piece, data + off, avail, MAX_MESSAGE, &plen);
		} while (pr == EXL_SCAN_NEED && avail < left);
		if (pr != r || (r == EXL_SCAN_DONE && plen != len))
			broken("exl_scan read %zu bytes at %zu: %d (%zu bytes) whole, %d (%zu bytes) in "
			       "pieces", left, off, (int)r, len, (int)pr, plen);
		if (r == EXL_SCAN_INVALID || r == EXL_SCAN_TOO_LARGE) {
			/* a refusal is final: asked again, the scan says it again */
			enum exl_scan_result again = exl_scan(&whole, data + off, left, MAX_MESSAGE, &len);
			if (again != r)
				broken("exl_scan refused (%d) at %zu, then said %d", (int)r, off,
				       (int)again);
		}
		if (r != EXL_SCAN_DONE)
			break; /* need more, not msgpack, or too large: the connection ends */
		if (len == 0 || len > left)
			broken("exl_scan framed %zu bytes of %zu", len, left);
		one_message(data + off, len);
		off += len;
	}
	return 0;
}

/* ---- seeds ---- */

struct pk {
	msgpack_sbuffer sb;
	msgpack_packer p;
};

static void pk_init(struct pk *k)
{
	msgpack_sbuffer_init(&k->sb);
	msgpack_packer_init(&k->p, &k->sb, msgpack_sbuffer_write);
}

static void s_(struct pk *k, const char *s)
{
	msgpack_pack_str_with_body(&k->p, s, strlen(s));
}

static void kv_s(struct pk *k, const char *key, const char *v)
{
	s_(k, key);
	s_(k, v);
}

static void kv_i(struct pk *k, const char *key, int64_t v)
{
	s_(k, key);
	msgpack_pack_int64(&k->p, v);
}

static void kv_d(struct pk *k, const char *key, double v)
{
	s_(k, key);
	msgpack_pack_double(&k->p, v);
}

static void kv_b(struct pk *k, const char *key, bool v)
{
	s_(k, key);
	if (v)
		msgpack_pack_true(&k->p);
	else
		msgpack_pack_false(&k->p);
}

static void kv_ids(struct pk *k, const char *key, const int32_t *ids, size_t n)
{
	s_(k, key);
	msgpack_pack_array(&k->p, n);
	for (size_t i = 0; i < n; i++)
		msgpack_pack_int32(&k->p, ids[i]);
}

static void seed_generate_all(struct pk *k)
{
	static const int32_t neg[] = { 5, 6 };

	msgpack_pack_map(&k->p, 44);
	kv_s(k, "op", "generate");
	kv_i(k, "id", 7);
	kv_s(k, "model", "stories260K");
	kv_s(k, "prompt", "Once upon a time, \xc3\xa9t\xc3\xa9 \xe2\x98\x83");
	kv_ids(k, "negative_prompt_ids", neg, 2);
	kv_d(k, "cfg_scale", 1.5);
	kv_b(k, "add_bos", true);
	kv_b(k, "encode_special", false);
	kv_b(k, "decode_special", true);
	kv_b(k, "completion_only", true);
	kv_b(k, "token_healing", true);
	kv_i(k, "max_new_tokens", 64);
	kv_i(k, "min_new_tokens", 2);
	kv_i(k, "seed", 42);
	kv_d(k, "temperature", 0.7);
	kv_b(k, "temperature_last", true);
	kv_i(k, "top_k", 40);
	kv_d(k, "top_p", 0.9);
	kv_d(k, "min_p", 0.05);
	kv_d(k, "typical", 0.95);
	kv_d(k, "tfs", 0.99);
	kv_d(k, "top_a", 0.1);
	kv_d(k, "repetition_penalty", 1.1);
	kv_i(k, "penalty_range", -1);
	kv_i(k, "penalty_decay", 16);
	kv_d(k, "frequency_penalty", 0.5);
	kv_d(k, "presence_penalty", -0.5);
	kv_i(k, "no_repeat_ngram", 3);
	s_(k, "token_bias");
	msgpack_pack_map(&k->p, 2);
	msgpack_pack_int(&k->p, 11);
	msgpack_pack_float(&k->p, -2.5f);
	msgpack_pack_int(&k->p, 12);
	msgpack_pack_int(&k->p, 3);
	kv_d(k, "dry_multiplier", 0.8);
	kv_d(k, "dry_base", 1.75);
	kv_i(k, "dry_allowed_length", 2);
	kv_i(k, "dry_range", 512);
	s_(k, "dry_sequence_breakers");
	msgpack_pack_array(&k->p, 3);
	s_(k, "\n");
	s_(k, ":");
	s_(k, "\xe2\x80\x9c");
	kv_d(k, "xtc_probability", 0.5);
	kv_d(k, "xtc_threshold", 0.1);
	s_(k, "stop");
	msgpack_pack_array(&k->p, 3);
	s_(k, ".");
	msgpack_pack_int(&k->p, 13);
	s_(k, "The end");
	kv_b(k, "ignore_eos", false);
	s_(k, "banned_strings");
	msgpack_pack_array(&k->p, 2);
	s_(k, "dragon");
	s_(k, "\xc3\xa9");
	kv_s(k, "grammar", "root ::= [a-z ]+ \".\"");
	kv_b(k, "filter_prefer_eos", true);
	kv_b(k, "return_probs", true);
	kv_i(k, "return_top_k", 5);
	kv_s(k, "stream", "ring");
}

static void seed_generate_ids(struct pk *k)
{
	static const int32_t ids[] = { 1, 403, 407, 261, 378 };

	msgpack_pack_map(&k->p, 12);
	kv_s(k, "op", "generate");
	kv_s(k, "id", "job-\xc3\xa9");
	kv_ids(k, "prompt_ids", ids, 5);
	kv_s(k, "negative_prompt", "boring");
	kv_i(k, "mirostat", 2);
	kv_d(k, "mirostat_tau", 5.0);
	kv_d(k, "mirostat_eta", 0.1);
	s_(k, "token_bias");
	msgpack_pack_array(&k->p, 2);
	msgpack_pack_array(&k->p, 2);
	msgpack_pack_int(&k->p, 7);
	msgpack_pack_double(&k->p, 1e30);
	msgpack_pack_array(&k->p, 2);
	msgpack_pack_uint64(&k->p, 8);
	msgpack_pack_int(&k->p, -100);
	kv_s(k, "json_schema", "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}}}");
	kv_b(k, "return_text", true);
	kv_b(k, "return_logits", true);
	kv_s(k, "stream", "socket");
}

static void seed_generate_regex(struct pk *k)
{
	msgpack_pack_map(&k->p, 7);
	kv_s(k, "op", "generate");
	kv_i(k, "id", -3);
	kv_s(k, "prompt", "x");
	kv_s(k, "regex", "[a-z]+@\\d{2,3}(x|y)*");
	kv_i(k, "seed", -1);
	kv_s(k, "stream", "none");
	s_(k, "stop");
	msgpack_pack_array(&k->p, 0);
}

static void seed_generate_search(struct pk *k)
{
	msgpack_pack_map(&k->p, 7);
	kv_s(k, "op", "generate");
	kv_i(k, "id", 5);
	kv_s(k, "prompt", "x");
	kv_s(k, "draft_model", "tiny");
	kv_i(k, "draft_tokens", 6);
	kv_i(k, "num_beams", 4);
	kv_d(k, "length_penalty", 0.5);
}

/* Every msgpack type, under a key the decoder ignores: the scanner and
 * msgpack-c must agree on each one's extent. */
static void seed_exotic(struct pk *k)
{
	static const char zeros[300];

	msgpack_pack_map(&k->p, 3);
	kv_s(k, "op", "status");
	s_(k, "x-extra");
	msgpack_pack_array(&k->p, 24);
	msgpack_pack_nil(&k->p);
	msgpack_pack_uint8(&k->p, 200);
	msgpack_pack_uint16(&k->p, 60000);
	msgpack_pack_uint32(&k->p, 4000000000u);
	msgpack_pack_uint64(&k->p, UINT64_MAX);
	msgpack_pack_int8(&k->p, -100);
	msgpack_pack_int16(&k->p, -30000);
	msgpack_pack_int32(&k->p, -2000000000);
	msgpack_pack_int64(&k->p, INT64_MIN);
	msgpack_pack_float(&k->p, 1.5f);
	msgpack_pack_double(&k->p, NAN);
	msgpack_pack_str_with_body(&k->p, zeros, 40);   /* str8 */
	msgpack_pack_str_with_body(&k->p, zeros, 300);  /* str16 */
	msgpack_pack_bin_with_body(&k->p, zeros, 3);    /* bin8 */
	msgpack_pack_bin_with_body(&k->p, zeros, 260);  /* bin16 */
	msgpack_pack_ext_with_body(&k->p, zeros, 1, 1); /* fixext 1 */
	msgpack_pack_ext_with_body(&k->p, zeros, 2, 2);
	msgpack_pack_ext_with_body(&k->p, zeros, 4, 3);
	msgpack_pack_ext_with_body(&k->p, zeros, 8, 4);
	msgpack_pack_ext_with_body(&k->p, zeros, 16, 5);
	msgpack_pack_ext_with_body(&k->p, zeros, 5, 6);   /* ext8 */
	msgpack_pack_ext_with_body(&k->p, zeros, 270, 7); /* ext16 */
	msgpack_pack_array(&k->p, 17);                    /* array16 */
	for (int i = 0; i < 17; i++)
		msgpack_pack_array(&k->p, 0);
	msgpack_pack_map(&k->p, 16);                      /* map16 */
	for (int i = 0; i < 16; i++) {
		msgpack_pack_int(&k->p, i);
		msgpack_pack_map(&k->p, 1);
		msgpack_pack_true(&k->p);
		msgpack_pack_false(&k->p);
	}
	kv_i(k, "id", 99);
}

static struct fuzz_blob seeds[32];
static size_t n_seeds;

static void add_seed(const char *name, struct pk *k)
{
	seeds[n_seeds].name = name;
	seeds[n_seeds].data = (const uint8_t *)k->sb.data;
	seeds[n_seeds].size = k->sb.size;
	n_seeds++;
	/* the buffer now belongs to seeds[] until exit */
}

static void add_raw(const char *name, const char *s)
{
	seeds[n_seeds].name = name;
	seeds[n_seeds].data = (const uint8_t *)s;
	seeds[n_seeds].size = strlen(s);
	n_seeds++;
}

size_t fuzz_seeds(const struct fuzz_blob **out)
{
	static const int32_t ids[] = { 1, 2, 300, 0, 2147483647 };
	struct pk k;

	if (n_seeds) {
		*out = seeds;
		return n_seeds;
	}
	pk_init(&k);
	msgpack_pack_map(&k.p, 5);
	kv_s(&k, "op", "hello");
	kv_i(&k, "id", 1);
	kv_s(&k, "client", "fuzz");
	kv_b(&k, "ring", true);
	kv_i(&k, "ring_size", 100000);
	msgpack_pack_map(&k.p, 2);
	kv_s(&k, "op", "hello");
	kv_b(&k, "ring", false);
	add_seed("hello", &k);

	pk_init(&k);
	msgpack_pack_map(&k.p, 2);
	kv_s(&k, "op", "models");
	kv_s(&k, "id", "a string id");
	msgpack_pack_map(&k.p, 1);
	kv_s(&k, "op", "status");
	msgpack_pack_map(&k.p, 1);
	kv_s(&k, "op", "resume");
	add_seed("models-status-resume", &k);

	pk_init(&k);
	msgpack_pack_map(&k.p, 3);
	kv_s(&k, "op", "load");
	kv_i(&k, "id", -5);
	kv_s(&k, "model", "stories260K");
	msgpack_pack_map(&k.p, 3);
	kv_s(&k, "op", "unload");
	kv_s(&k, "model", "aidreams260K.q8_0-v2");
	kv_b(&k, "cancel", true);
	add_seed("load-unload", &k);

	pk_init(&k);
	msgpack_pack_map(&k.p, 6);
	kv_s(&k, "op", "tokenize");
	kv_i(&k, "id", 3);
	kv_s(&k, "model", "stories260K");
	kv_s(&k, "text", "Once upon a time \xc3\xa9\xf0\x9f\x98\x80");
	kv_b(&k, "add_bos", true);
	kv_b(&k, "special", false);
	add_seed("tokenize", &k);

	pk_init(&k);
	msgpack_pack_map(&k.p, 5);
	kv_s(&k, "op", "detokenize");
	kv_i(&k, "id", 4);
	kv_ids(&k, "ids", ids, 5);
	kv_b(&k, "special", true);
	kv_b(&k, "strip_leading_space", false);
	add_seed("detokenize", &k);

	pk_init(&k);
	seed_generate_all(&k);
	add_seed("generate-all", &k);
	pk_init(&k);
	seed_generate_ids(&k);
	add_seed("generate-ids", &k);
	pk_init(&k);
	seed_generate_regex(&k);
	add_seed("generate-regex", &k);
	pk_init(&k);
	seed_generate_search(&k);
	add_seed("generate-search", &k);

	pk_init(&k);
	msgpack_pack_map(&k.p, 3);
	kv_s(&k, "op", "cancel");
	kv_i(&k, "id", 9);
	kv_i(&k, "job", 17);
	msgpack_pack_map(&k.p, 2);
	kv_s(&k, "op", "frobnicate");
	kv_i(&k, "id", 10);
	add_seed("cancel-unknown", &k);

	pk_init(&k);
	seed_exotic(&k);
	add_seed("exotic-types", &k);

	add_raw("config",
		"\xc1# a config file\n"
		"socket = /run/exld/exld.sock\nsocket_mode = 0660\nmodels_dir = /var/lib/exld\n"
		"load = stories260K, aidreams260K\nthreads = 2\nkv_tokens = auto\n"
		"kv_page_size = 32\nmax_batch_tokens = 512\nprefill_chunk = 256\n"
		"max_running_jobs = 64\nstep_target_ms = 1000\nsuspend_after_ms = 1000\n"
		"max_jobs_per_uid = 64\nmax_new_tokens = 4096\nuid_limit = 1000 4 2048\n"
		"admin_uids = 1000, 1001\nmax_message = 16M\nring_size = 1M\n"
		"max_connections = 1024\nmax_connections_per_uid = 0\nconnections_reserved = 8\n"
		"request_timeout_ms = 10000\nmax_pending_bytes = 1G\ndrain_timeout_ms = 20000\n"
		"device = cuda:1\n");
	*out = seeds;
	return n_seeds;
}

static struct fuzz_blob dict[128];
static size_t n_dict;

size_t fuzz_dict(const struct fuzz_blob **out)
{
	static const char *const words[] = {
		"op", "id", "model", "hello", "models", "load", "unload", "tokenize", "detokenize",
		"generate", "cancel", "status", "resume", "ring", "ring_size", "client", "text",
		"add_bos", "special", "ids", "strip_leading_space", "job", "prompt", "prompt_ids",
		"negative_prompt", "negative_prompt_ids", "cfg_scale", "encode_special",
		"decode_special", "completion_only", "token_healing", "max_new_tokens",
		"min_new_tokens", "seed", "temperature", "temperature_last", "top_k", "top_p",
		"min_p", "typical", "tfs", "top_a", "repetition_penalty", "penalty_range",
		"penalty_decay", "frequency_penalty", "presence_penalty", "no_repeat_ngram",
		"token_bias", "mirostat", "mirostat_tau", "mirostat_eta", "dry_multiplier",
		"dry_base", "dry_allowed_length", "dry_range", "dry_sequence_breakers",
		"xtc_probability", "xtc_threshold", "stop", "ignore_eos", "banned_strings",
		"grammar", "json_schema", "regex", "filter_prefer_eos", "return_probs",
		"return_top_k", "return_logits", "return_text", "stream", "socket", "none",
		"draft_model", "draft_tokens", "ngram_draft", "num_beams", "length_penalty",
		"suffix",
	};
	static uint8_t bytes[4096];
	size_t used = 0;

	if (n_dict) {
		*out = dict;
		return n_dict;
	}
	/* each word as a fixstr: a key or a value, ready to splice */
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
		size_t n = strlen(words[i]);
		dict[n_dict].name = words[i];
		dict[n_dict].data = bytes + used;
		dict[n_dict].size = n + 1;
		bytes[used++] = (uint8_t)(0xa0 | n);
		memcpy(bytes + used, words[i], n);
		used += n;
		n_dict++;
	}
	/* headers whose sizes make the scanner and the decoder count */
	static const uint8_t headers[][5] = {
		{ 0xdc, 0xff, 0xff }, { 0xdd, 0x00, 0x10, 0x00, 0x00 }, { 0xde, 0x00, 0x20 },
		{ 0xdf, 0xff, 0xff, 0xff, 0xff }, { 0xda, 0x04, 0x01 },
		{ 0xdb, 0x00, 0x10, 0x00, 0x01 },
		{ 0xc6, 0x7f, 0xff, 0xff, 0xff }, { 0xcb, 0x7f, 0xf8, 0x00, 0x00 },
		{ 0xca, 0x7f, 0x80, 0x00, 0x00 }, { 0xcf, 0xff, 0xff, 0xff, 0xff },
		{ 0xd3, 0x80, 0x00, 0x00, 0x00 }, { 0xce, 0x80, 0x00, 0x00, 0x00 },
		{ 0xed, 0xa0, 0x80 }, { 0xf4, 0x90, 0x80, 0x80 }, { 0xc0, 0x80, 0xe0, 0x80, 0x80 },
	};
	static const uint8_t header_len[] = { 3, 5, 3, 5, 3, 5, 5, 5, 5, 5, 5, 5, 3, 4, 5 };
	for (size_t i = 0; i < sizeof(headers) / sizeof(headers[0]); i++) {
		dict[n_dict].name = "header";
		dict[n_dict].data = headers[i];
		dict[n_dict].size = header_len[i];
		n_dict++;
	}
	*out = dict;
	return n_dict;
}

size_t fuzz_max_len(void)
{
	return 65536;
}
