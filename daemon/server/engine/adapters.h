/* LoRA adapters in the daemon: MODELDIR/NAME.gguf files of general.type
 * "adapter", loaded by name with the load op and attached to a loaded
 * model they fit (daemon/core/model/lora.h checks the fit); a generate
 * request names them, and the loop resolves the names against its model's
 * adapters.  An adapter is small next to its model, so it is read on the
 * loop thread.
 *
 * Loop thread only.
 */
#ifndef EXL_ADAPTERS_H
#define EXL_ADAPTERS_H

#include <stdbool.h>
#include <stddef.h>

#include "daemon/server/wire/protocol.h"

struct exl_registry;
struct exl_model_entry;
struct exl_lora;

struct exl_adapter {
	struct exl_adapter *next;
	char name[EXL_MAX_NAME + 1];
	struct exl_lora *lora;        /* the list's reference */
};

/* Whether the file at path is an adapter (general.type "adapter"). */
bool exl_adapter_file(const char *path);

/* Loads dir/NAME.gguf for the loaded model base (or, when base is empty,
 * the first loaded model it fits) and lists it on that model.  0 with
 * *on and *out set, or an EXL_E_* code with a message giving each model's
 * reason for refusing it. */
int exl_adapter_load(struct exl_registry *r, const char *dir, const char *name,
		     const char *base, struct exl_model_entry **on, struct exl_adapter **out,
		     char *err, size_t errlen);
/* Drops the adapter NAME from every model that has it (running jobs keep
 * their references).  Returns how many were dropped. */
int exl_adapter_unload(struct exl_registry *r, const char *name);
/* Frees e's adapter list (the model is being freed). */
void exl_adapters_free(struct exl_model_entry *e);

/* The load op when dir/NAME.gguf is an adapter: *handled set, then 0
 * after the reply went to sink, or an EXL_E_* code with a message.  Not
 * an adapter: 0 with *handled false (a model load). */
struct exl_sink;
int exl_adapter_op_load(struct exl_registry *r, const char *dir, const char *name,
			struct exl_sink *sink, const struct exl_packed_id *id, bool *handled,
			char *err, size_t errlen);
/* The unload op when NAME is a loaded adapter: true after the reply went
 * to sink; false when no model has one of that name. */
bool exl_adapter_op_unload(struct exl_registry *r, const char *name, struct exl_sink *sink,
			   const struct exl_packed_id *id);

/* Resolves g's adapter names on model e into g->lora_set (a reference
 * each) and points g->s.loras at it.  0, or EXL_E_NOT_FOUND with a
 * message. */
int exl_adapters_resolve(struct exl_model_entry *e, struct exl_req_generate *g, char *err,
			 size_t errlen);
/* Drops the references exl_adapters_resolve took (any thread). */
void exl_adapters_release(struct exl_req_generate *g);

#endif
