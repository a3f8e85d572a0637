/* libFuzzer target for the daemon's request path without sockets: the
 * input is a byte stream as a client would send it; every message exl_scan
 * frames is unpacked and decoded with exl_req_decode, as conn.c does.  An
 * input must end in refusals with a code and a message, or requests whose
 * pointers stay inside the message.  See docs/fuzzing.md. */
#include <msgpack.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/protocol.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

static void touch(const struct exl_req *req)
{
	const struct exl_req_generate *g = &req->u.gen;

	sink += strlen(req->model);
	switch (req->op) {
	case EXL_OPC_GENERATE:
		if (g->prompt.text && g->prompt.len)
			sink += (uint8_t)g->prompt.text[g->prompt.len - 1];
		for (int i = 0; i < g->prompt.n_ids; i++)
			sink += (uint32_t)g->prompt.ids[i];
		for (int i = 0; i < g->s.n_stop_strings; i++)
			sink += strlen(g->s.stop_strings[i]);
		for (int i = 0; i < g->s.n_stop_tokens; i++)
			sink += (uint32_t)g->s.stop_tokens[i];
		for (int i = 0; i < g->s.n_banned_strings; i++)
			sink += strlen(g->s.banned_strings[i]);
		for (int i = 0; i < g->s.sampling.n_bias; i++)
			sink += (uint32_t)g->s.sampling.bias[i].id;
		for (int i = 0; i < g->s.sampling.n_dry_breakers; i++)
			sink += strlen(g->s.sampling.dry_breakers[i]);
		if (g->grammar)
			sink += strlen(g->grammar);
		break;
	case EXL_OPC_TOKENIZE:
		if (req->u.tokenize.len)
			sink += (uint8_t)req->u.tokenize.text[req->u.tokenize.len - 1];
		break;
	case EXL_OPC_DETOKENIZE:
		for (size_t i = 0; i < req->u.detokenize.n; i++)
			sink += (uint32_t)req->u.detokenize.ids[i];
		break;
	default:
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct exl_scan scan;
	size_t off = 0;

	memset(&scan, 0, sizeof(scan));
	while (off < size) {
		size_t len = 0;
		enum exl_scan_result r = exl_scan(&scan, data + off, size - off, 1 << 20, &len);
		if (r != EXL_SCAN_DONE)
			break; /* need more, not msgpack, or too large: the connection ends */
		if (len == 0 || len > size - off)
			abort();
		/* an exact-size copy, so a read past the message is caught */
		uint8_t *msg = malloc(len);
		memcpy(msg, data + off, len);
		msgpack_unpacked up;
		size_t used = 0;
		msgpack_unpacked_init(&up);
		if (msgpack_unpack_next(&up, (const char *)msg, len, &used) == MSGPACK_UNPACK_SUCCESS) {
			struct exl_req req;
			struct exl_packed_id id;
			char err[512] = "";
			if (used != len)
				abort(); /* the scanner and msgpack-c disagree on the extent */
			int code = exl_req_decode(&up.data, up.zone, &req, err, sizeof(err));
			if (code != EXL_OK && (!err[0] || code > EXL_CODE_WIRE_MAX))
				abort(); /* a refusal without a message */
			exl_packed_id_set(&id, req.id);
			if (code == EXL_OK)
				touch(&req);
		}
		msgpack_unpacked_destroy(&up);
		free(msg);
		off += len;
	}
	return 0;
}
