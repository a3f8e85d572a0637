/* The wire definitions that exld and its clients share: protocol limits,
 * op names and message keys, error codes, and the layout of the shared
 * memory rings.  docs/protocol.md is the spec; this header is its C form.
 *
 * Plain C (C11 or C++11), no dependencies: clients in other languages can
 * mirror it.  Every multi-byte field in the rings is in host byte order
 * (both ends run on one machine).
 */
#ifndef EXL_WIRE_H
#define EXL_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define EXL_PROTOCOL_VERSION 1

/* Default socket path; clients honour $EXLD_SOCKET first. */
#define EXL_DEFAULT_SOCKET "/run/exld/exld.sock"
#define EXL_SOCKET_ENV "EXLD_SOCKET"

/* ---- limits ---------------------------------------------------------- */

#define EXL_MAX_MESSAGE_DEFAULT (16u << 20) /* bytes in one msgpack message */
#define EXL_MAX_MESSAGE_MIN (64u << 10)
#define EXL_MAX_MESSAGE_MAX (256u << 20)
#define EXL_MAX_VALUES 1048576u  /* msgpack values (all levels) in one message */
#define EXL_MAX_DEPTH 16         /* nesting of arrays / maps in one message */
#define EXL_MAX_ID_BYTES 256     /* a string request id */
#define EXL_MAX_NAME 128         /* model names */
#define EXL_MAX_STOP_STRINGS 64  /* stop strings per job */
#define EXL_MAX_STOP_TOKENS 256  /* stop token ids per job */
#define EXL_MAX_STRING_ITEM 1024 /* bytes of one stop / banned string */
#define EXL_MAX_BANNED 256       /* banned strings per job */
#define EXL_MAX_BIAS 4096        /* token_bias entries per job */
#define EXL_MAX_TOP_K_RETURN 64  /* return_top_k */
#define EXL_MAX_LORAS 8          /* adapters one job applies */
#define EXL_LORA_SCALE_MAX 1000.0 /* |scale| of one adapter in a job */
#define EXL_MAX_CHAT_TEMPLATE 65536 /* bytes of a model's chat template in a models reply */
#define EXL_MAX_DRAFT_TOKENS 16  /* draft_tokens */
#define EXL_MAX_NGRAM_DRAFT 16   /* ngram_draft */
#define EXL_MAX_BEAMS 16         /* num_beams */

/* ---- ops and keys ------------------------------------------------------ */

/* Requests (client -> daemon) */
#define EXL_OP_HELLO "hello"
#define EXL_OP_MODELS "models"
#define EXL_OP_LOAD "load"
#define EXL_OP_UNLOAD "unload"
#define EXL_OP_TOKENIZE "tokenize"
#define EXL_OP_DETOKENIZE "detokenize"
#define EXL_OP_GENERATE "generate"
#define EXL_OP_CANCEL "cancel"
#define EXL_OP_STATUS "status"
#define EXL_OP_RESUME "resume"   /* nudge: no reply */
#define EXL_OP_EMBED "embed"     /* one text's embedding (docs/protocol.md) */

/* Daemon -> client only */
#define EXL_OP_ERROR "error"
#define EXL_OP_TOKEN "token"     /* stream: "socket" token chunks */
#define EXL_OP_DONE "done"       /* a job's result */
#define EXL_OP_WAKE "wake"       /* the ring has data (reader armed poll mode) */
#define EXL_OP_PROGRESS "progress" /* load progress */

/* ---- optional features (the hello reply's "features") ------------------ */

/* The daemon ignores keys it does not know (so newer clients can talk to
 * older daemons), which would make a job asked for with, say, a grammar
 * run without one.  So the generate options beyond the core come in
 * groups, and the hello reply lists the groups the daemon implements; a
 * client sends a key of a group only when the list names it (a hello
 * without the list names none).  docs/protocol.md lists each group's keys. */
#define EXL_FEAT_PENALTIES "penalties"            /* repetition_penalty, penalty_range,
						     penalty_decay, frequency_penalty,
						     presence_penalty */
#define EXL_FEAT_NO_REPEAT_NGRAM "no_repeat_ngram"
#define EXL_FEAT_TYPICAL "typical"
#define EXL_FEAT_TFS "tfs"
#define EXL_FEAT_TOP_A "top_a"
#define EXL_FEAT_TOKEN_BIAS "token_bias"
#define EXL_FEAT_DRY "dry"                        /* dry_* */
#define EXL_FEAT_XTC "xtc"                        /* xtc_* */
#define EXL_FEAT_MIROSTAT "mirostat"              /* mirostat, mirostat_tau, _eta */
#define EXL_FEAT_BANNED_STRINGS "banned_strings"
#define EXL_FEAT_TOKEN_HEALING "token_healing"
#define EXL_FEAT_CFG "cfg"                        /* negative_prompt(_ids), cfg_scale */
#define EXL_FEAT_GRAMMAR "grammar"
#define EXL_FEAT_JSON_SCHEMA "json_schema"
#define EXL_FEAT_REGEX "regex"
#define EXL_FEAT_RETURN_LOGITS "return_logits"
#define EXL_FEAT_SPECULATIVE "speculative"        /* draft_model, ngram_draft, draft_tokens */
#define EXL_FEAT_BEAM_SEARCH "beam_search"        /* num_beams, length_penalty */
#define EXL_FEAT_TRUNCATE "truncate"              /* truncate, truncated_tokens */
#define EXL_FEAT_EMBEDDINGS "embeddings"          /* generate's embeddings; op embed */
#define EXL_FEAT_LORA "lora"      /* generate's lora; load / unload of adapters */
#define EXL_FEAT_FIM "fim"        /* generate's suffix (fill-in-the-middle) */

/* ---- error codes ------------------------------------------------------ */

/* Stable: the wire carries the name, the C API the number. */
enum exl_code {
	EXL_OK = 0,
	EXL_E_BAD_REQUEST = 1,  /* a field is missing, of the wrong type or out of range */
	EXL_E_UNKNOWN_OP = 2,
	EXL_E_UNKNOWN_MODEL = 3,
	EXL_E_UNKNOWN_JOB = 4,
	EXL_E_TOO_LARGE = 5,    /* message or value over its limit; a prompt that fills the context */
	EXL_E_LIMIT = 6,        /* a per-uid limit (jobs, tokens) */
	EXL_E_BUSY = 7,         /* the model is loading / unloading, or a load runs */
	EXL_E_FORBIDDEN = 8,    /* admin op from a non-admin uid */
	EXL_E_INTERNAL = 9,     /* the daemon failed (allocation, model error ...) */
	EXL_E_SHUTDOWN = 10,    /* the daemon is draining */
	EXL_E_NOT_FOUND = 11,   /* load: no such model file */
	EXL_E_EXISTS = 12,      /* load: already loaded */
	EXL_E_LOAD_FAILED = 13, /* load: the file was refused (message says why) */
	EXL_CODE_WIRE_MAX = 13,
};

static inline const char *exl_code_name(int code)
{
	static const char *const names[] = {
		"ok", "bad_request", "unknown_op", "unknown_model", "unknown_job",
		"too_large", "limit", "busy", "forbidden", "internal", "shutdown",
		"not_found", "exists", "load_failed",
	};
	if (code < 0 || code > EXL_CODE_WIRE_MAX)
		return "unknown";
	return names[code];
}

/* The code named by the len bytes at s; EXL_E_INTERNAL for a name this
 * side does not know (a newer daemon). */
static inline int exl_code_from_name(const char *s, size_t len)
{
	for (int c = 1; c <= EXL_CODE_WIRE_MAX; c++) {
		const char *n = exl_code_name(c);
		if (strlen(n) == len && !memcmp(n, s, len))
			return c;
	}
	return EXL_E_INTERNAL;
}

/* ---- stop reasons (the "stop_reason" of a done result) ------------------ */

#define EXL_REASON_STOP_TOKEN "stop_token"   /* an end-of-generation id or a stop token id */
#define EXL_REASON_STOP_STRING "stop_string" /* one of the job's stop strings */
#define EXL_REASON_MAX_NEW_TOKENS "max_new_tokens"
#define EXL_REASON_MAX_CONTEXT "max_context" /* the model's context is full */
#define EXL_REASON_END_FILTER "end_filter"   /* the grammar / schema / regex is complete */
#define EXL_REASON_CANCELLED "cancelled"     /* cancel op, or the client went away */
#define EXL_REASON_UNLOADED "unloaded"       /* unload with cancel */
#define EXL_REASON_SHUTDOWN "shutdown"       /* the daemon is stopping */
#define EXL_REASON_ERROR "error"             /* the job failed; "error" holds why */

/* ---- shared-memory rings ---------------------------------------------- */

/*
 * hello passes two memfds with SCM_RIGHTS, in this order:
 *
 *  1. the data ring: EXL_RING_HDR_SIZE bytes of struct exl_ring_hdr, then
 *     data_size bytes of records (data_size a power of two).  Sealed with
 *     F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL: map it
 *     PROT_READ, MAP_SHARED.
 *  2. the control page: EXL_CTRL_SIZE bytes of struct exl_ring_ctrl that the
 *     client writes (sealed against resizing).  Map it PROT_READ|PROT_WRITE,
 *     MAP_SHARED.
 *
 * Positions are byte counts since the ring was created (they never wrap in
 * practice); a position's offset in the data area is pos & (data_size - 1).
 * Records start at multiples of EXL_REC_ALIGN and never straddle the end of
 * the data area: when a record does not fit before the end, the producer
 * fills the rest with one EXL_REC_PAD record and starts again at offset 0.
 *
 * Producer (the daemon): writes a record at write_pos, then stores
 * write_pos + size with release order, increments seq, and, when the
 * control page says sleeping != 0, wakes the reader: FUTEX_WAKE on seq for
 * sleeping == EXL_SLEEP_FUTEX, a "wake" message on the socket for
 * sleeping == EXL_SLEEP_POLL (once per value of poll_epoch, and only when
 * the client has read everything sent to it: an unread message already
 * makes its socket readable, so at most one wake ever waits unread).
 * It never overwrites bytes at or after the client's read_pos (clamped
 * into [write_pos - data_size, write_pos]); when a job's record does not
 * fit, that job pauses until read_pos moves.
 *
 * Consumer (the client): loads write_pos with acquire order; while
 * read_pos != write_pos it reads the record at read_pos and then stores
 * read_pos + the record's size (release).  To wait: load seq, store
 * sleeping, full fence, load write_pos again; still empty -> FUTEX_WAIT on
 * seq with the value loaded first (not FUTEX_PRIVATE: the word is shared);
 * then store sleeping = 0.  After advancing read_pos, a client that sees
 * pause_epoch differ from the last value it answered sends {op: "resume"}.
 */

#define EXL_RING_MAGIC 0x31676e72u /* "rng1" */
#define EXL_RING_HDR_SIZE 4096u
#define EXL_CTRL_SIZE 4096u
#define EXL_RING_SIZE_DEFAULT (1u << 20)
#define EXL_RING_SIZE_MIN (64u << 10)
#define EXL_RING_SIZE_MAX (64u << 20)
#define EXL_REC_ALIGN 16u

/* Data ring header.  Read-only for the client. */
struct exl_ring_hdr {
	uint32_t magic;          /* EXL_RING_MAGIC */
	uint32_t version;        /* EXL_PROTOCOL_VERSION */
	uint32_t hdr_size;       /* EXL_RING_HDR_SIZE: the data area starts here */
	uint32_t data_size;      /* bytes in the data area, a power of two */
	uint32_t max_record;     /* largest record the producer writes (bytes, with header) */
	uint32_t reserved0[11];
	/* producer-written, on a cache line of its own (offset 64) */
	uint64_t write_pos;      /* release-stored after each record */
	uint32_t seq;            /* futex word: +1 after each publish */
	uint32_t pause_epoch;    /* +1 each time a job pauses for lack of room */
	uint32_t closed;         /* 1: the daemon will write no more (shutdown) */
	uint32_t reserved1[11];
};

enum exl_sleep {
	EXL_SLEEP_NONE = 0,
	EXL_SLEEP_FUTEX = 1,  /* blocked in FUTEX_WAIT on hdr->seq */
	EXL_SLEEP_POLL = 2,   /* polling the socket: send a "wake" message */
};

/* Control page.  Written by the client, untrusted by the daemon. */
struct exl_ring_ctrl {
	uint64_t read_pos;       /* bytes consumed */
	uint32_t sleeping;       /* enum exl_sleep */
	uint32_t poll_epoch;     /* bumped by the client each time it arms EXL_SLEEP_POLL */
	uint32_t reserved[12];
};

/* Record header; the payload follows.  A record takes
 * exl_rec_size(len) bytes of the ring. */
struct exl_rec_hdr {
	uint32_t len;    /* payload bytes */
	uint16_t type;   /* enum exl_rec_type */
	uint16_t flags;  /* enum exl_rec_flags */
	uint64_t job;    /* the job id from the generate reply; 0 for PAD */
};

enum exl_rec_type {
	EXL_REC_PAD = 0,     /* skip: filler up to the end of the data area */
	EXL_REC_TOKENS = 1,  /* struct exl_rec_tokens and its arrays */
	EXL_REC_DONE = 2,    /* msgpack map: the job's result (as the "done" message) */
	/* No payload: the job's result is too large for the ring and comes as
	 * a "done" message on the socket; read the socket for it.  The ring is
	 * where a streaming client waits, so the daemon says so here. */
	EXL_REC_DONE_SOCKET = 3,
};

enum exl_rec_flags {
	/* The payload continues in the next record of the same job and type
	 * (a DONE or ERROR map larger than max_record is split). */
	EXL_REC_F_MORE = 1u << 0,
};

/* Payload of EXL_REC_TOKENS: a chunk of generated tokens and the text they
 * released.  The text of a chunk need not be the text of its tokens alone:
 * text held back (a partial stop string, an incomplete UTF-8 sequence) is
 * released with a later chunk.  Arrays follow the struct in this order:
 *   int32_t ids[n_tokens];
 *   float probs[n_tokens];                when flags & EXL_TOK_F_PROBS
 *   int32_t top_ids[n_tokens][n_top];     most likely first
 *   float top_probs[n_tokens][n_top];
 *   char text[text_len];                  UTF-8, not NUL-terminated
 * Probabilities are softmax of the model's logits at that position (after
 * CFG, before bias, penalties and truncation).
 */
struct exl_rec_tokens {
	uint32_t n_tokens;
	uint32_t text_len;
	uint16_t n_top;
	uint16_t flags;     /* enum exl_tok_flags */
	uint32_t t_us;      /* CLOCK_MONOTONIC of the daemon when the chunk was made,
			     * microseconds, low 32 bits (for delivery latency) */
};

enum exl_tok_flags {
	EXL_TOK_F_PROBS = 1u << 0,
};

static inline uint64_t exl_rec_size(uint32_t len)
{
	uint64_t n = (uint64_t)sizeof(struct exl_rec_hdr) + len;
	return (n + EXL_REC_ALIGN - 1) & ~(uint64_t)(EXL_REC_ALIGN - 1);
}

/* Bytes of a TOKENS payload with these counts (no overflow for counts
 * below 2^24, which a valid record never exceeds). */
static inline uint64_t exl_rec_tokens_size(uint32_t n_tokens, uint32_t n_top, int probs,
					   uint32_t text_len)
{
	return (uint64_t)sizeof(struct exl_rec_tokens) + 4ull * n_tokens +
	       (probs ? 4ull * n_tokens : 0) + 8ull * n_tokens * n_top + text_len;
}

#endif
