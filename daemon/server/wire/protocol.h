/* The wire protocol, daemon side: finding message boundaries in the byte
 * stream, decoding and validating requests into plain structs, and the
 * msgpack encoding helpers replies use.  The spec is docs/protocol.md.
 *
 * Pure functions over buffers: no sockets, no threads, so the fuzz target
 * (tests/fuzz/fuzz_request.c) drives exactly this code.  Framing (exl_scan)
 * is client/msgscan.h, which libexlclient uses too.
 */
#ifndef EXL_PROTOCOL_H
#define EXL_PROTOCOL_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exl_wire.h"
#include "common/msgscan.h"
#include "daemon/core/generator/generator.h"

/* ---- requests ---- */

enum exl_op {
	EXL_OPC_HELLO,
	EXL_OPC_MODELS,
	EXL_OPC_LOAD,
	EXL_OPC_UNLOAD,
	EXL_OPC_TOKENIZE,
	EXL_OPC_DETOKENIZE,
	EXL_OPC_GENERATE,
	EXL_OPC_CANCEL,
	EXL_OPC_STATUS,
	EXL_OPC_RESUME,
	EXL_OPC_EMBED,       /* a generate request's job that pools instead (dec_embed) */
};

enum exl_stream { EXL_STREAM_DEFAULT, EXL_STREAM_RING, EXL_STREAM_SOCKET, EXL_STREAM_NONE };

#define EXL_MAX_DETOKENIZE_IDS 4194304

struct exl_req_generate {
	struct exl_gen_settings s;       /* arrays point into the request's zone */
	struct exl_prompt prompt;
	struct exl_prompt negative;
	bool has_negative;
	bool max_new_tokens_set;         /* the request named max_new_tokens */
	enum exl_stream stream;
	int return_text;                 /* -1: by stream mode */
	const char *grammar;             /* NUL-terminated, in the zone; NULL if absent */
	const char *json_schema;
	const char *regex;
	bool filter_prefer_eos;
	struct exl_token_bias *bias;     /* s.sampling.bias points here */
	/* Input embeddings: each block's rows as sent (float32, 4-aligned
	 * in the zone); the prep makes s.embeddings of them once the
	 * model's n_embd is known. */
	struct exl_wire_embd {
		const char *alias;       /* NUL-terminated */
		const float *data;
		size_t bytes;            /* a multiple of 4 */
	} *embd;
	int n_embd;
};

struct exl_req {
	enum exl_op op;
	const msgpack_object *id;        /* NULL when absent */
	char model[EXL_MAX_NAME + 1];    /* "" when absent */
	union {
		struct {
			bool ring;
			uint32_t ring_size;      /* 0: the default */
		} hello;
		struct {
			bool cancel;
		} unload;
		struct {
			const char *text;
			size_t len;
			int add_bos;             /* -1: the model's */
			bool special;
		} tokenize;
		struct {
			const int32_t *ids;
			size_t n;
			bool special;
			bool strip_leading_space;
		} detokenize;
		struct exl_req_generate gen;
		struct {
			uint64_t job;
		} cancel;
	} u;
};

/* The optional features (exl_wire.h EXL_FEAT_*) this daemon implements,
 * which the hello reply lists: all of them. */
extern const char *const exl_daemon_features[];
extern const size_t exl_daemon_n_features;

/* Decodes the request root (a msgpack value from one message); arrays and
 * strings it makes are allocated in zone, which must outlive req.  Returns
 * EXL_OK, or an enum exl_code with a message in err ("generate: top_k:
 * wants an integer, got a string").  req->id is set whenever the message
 * had a valid id, also on errors, so the error reply can echo it. */
int exl_req_decode(const msgpack_object *root, msgpack_zone *zone, struct exl_req *req,
		   char *err, size_t errlen);

/* ---- encoding ---- */

/* A request id re-encoded as msgpack bytes, to echo it later from another
 * thread. */
struct exl_packed_id {
	uint16_t len;                    /* 0: no id */
	uint8_t bytes[EXL_MAX_ID_BYTES + 8];
};

void exl_packed_id_set(struct exl_packed_id *p, const msgpack_object *id);

/* Starts a reply map of n_fields entries besides op and id: writes the map
 * header, "op" and, when the id is present, "id". */
void exl_pack_reply(msgpack_packer *pk, msgpack_sbuffer *sb, const char *op,
		    const struct exl_packed_id *id, uint32_t n_fields);
void exl_pack_key(msgpack_packer *pk, const char *key);
void exl_pack_cstr(msgpack_packer *pk, const char *s);
/* s must be valid UTF-8 (msgpack str): text the daemon made itself. */
void exl_pack_strn(msgpack_packer *pk, const char *s, size_t n);
/* Text that may not be valid UTF-8 (messages quoting input or model
 * files): each byte that starts no valid character is sent as U+FFFD. */
void exl_pack_text(msgpack_packer *pk, const char *s, size_t n);

/* A complete error message. */
void exl_pack_error(msgpack_packer *pk, msgpack_sbuffer *sb, const struct exl_packed_id *id,
		    int code, const char *message);

#endif
