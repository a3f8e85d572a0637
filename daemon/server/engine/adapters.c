/* The loaded models' LoRA adapters (adapters.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon/core/gguf/gguf.h"
#include "daemon/core/model/lora.h"
#include "daemon/core/util/log.h"
#include "daemon/server/engine/adapters.h"
#include "daemon/server/delivery/sink.h"
#include "daemon/server/engine/models_registry.h"
#include "daemon/server/wire/config.h"

bool exl_adapter_file(const char *path)
{
	char err[256], type[32];
	struct gguf_file *f = exl_gguf_open(path, err, sizeof(err));
	bool yes;

	if (!f)
		return false;
	yes = exl_gguf_get_str(f, "general.type", type, sizeof(type)) && !strcmp(type, "adapter");
	exl_gguf_close(f);
	return yes;
}

static struct exl_adapter *find_on(struct exl_model_entry *e, const char *name)
{
	for (struct exl_adapter *a = e->adapters; a; a = a->next)
		if (!strcmp(a->name, name))
			return a;
	return NULL;
}

int exl_adapter_load(struct exl_registry *r, const char *dir, const char *name,
		     const char *base, struct exl_model_entry **on, struct exl_adapter **out,
		     char *err, size_t errlen)
{
	char path[EXL_CONFIG_MAX_PATH + EXL_MAX_NAME + 8];
	char why[512];
	size_t off = 0;
	int tried = 0;

	snprintf(path, sizeof(path), "%s/%s.gguf", dir, name);
	snprintf(err, errlen, "adapter '%s' fits no loaded model:", name);
	off = strlen(err);
	for (struct exl_model_entry *e = exl_registry_next_loaded(r, NULL); e;
	     e = exl_registry_next_loaded(r, e)) {
		if (base[0] && strcmp(base, e->name))
			continue;
		tried++;
		if (find_on(e, name)) {
			snprintf(err, errlen, "adapter '%s' is already loaded for model '%s'", name,
				 e->name);
			return EXL_E_EXISTS;
		}
		struct exl_lora *l = exl_lora_load(path, e->model, why, sizeof(why));
		if (!l) {
			if (off < errlen)
				off += (size_t)snprintf(err + off, errlen - off, " %s: %s;", e->name,
							why);
			continue;
		}
		struct exl_adapter *a = calloc(1, sizeof(*a));
		if (!a) {
			exl_lora_unref(l);
			snprintf(err, errlen, "out of memory");
			return EXL_E_INTERNAL;
		}
		snprintf(a->name, sizeof(a->name), "%s", name);
		a->lora = l;
		a->next = e->adapters;
		e->adapters = a;
		*on = e;
		*out = a;
		exl_log(EXL_LOG_INFO, "loaded adapter '%s' (rank %d, alpha %g, %d weights) for "
			"model '%s'", name, l->max_rank, (double)l->alpha, l->n_pairs, e->name);
		return 0;
	}
	if (!tried) {
		if (base[0])
			snprintf(err, errlen, "adapter '%s': no model '%s' is loaded", name, base);
		else
			snprintf(err, errlen, "adapter '%s': load its base model first (no model is "
				 "loaded)", name);
		return EXL_E_UNKNOWN_MODEL;
	}
	return EXL_E_BAD_REQUEST;
}

int exl_adapter_unload(struct exl_registry *r, const char *name)
{
	int n = 0;

	for (struct exl_model_entry *e = exl_registry_next_loaded(r, NULL); e;
	     e = exl_registry_next_loaded(r, e)) {
		for (struct exl_adapter **p = &e->adapters; *p; p = &(*p)->next) {
			struct exl_adapter *a = *p;

			if (strcmp(a->name, name))
				continue;
			*p = a->next;
			exl_lora_unref(a->lora);
			free(a);
			n++;
			exl_log(EXL_LOG_INFO, "unloaded adapter '%s' of model '%s'", name, e->name);
			break;
		}
	}
	return n;
}

void exl_adapters_free(struct exl_model_entry *e)
{
	while (e->adapters) {
		struct exl_adapter *a = e->adapters;

		e->adapters = a->next;
		exl_lora_unref(a->lora);
		free(a);
	}
}

int exl_adapters_resolve(struct exl_model_entry *e, struct exl_req_generate *g, char *err,
			 size_t errlen)
{
	struct exl_lora_set *set = &g->lora_set;

	exl_adapters_release(g);   /* a request retried after waiting for the pool */
	for (int i = 0; i < g->n_lora; i++) {
		struct exl_adapter *a = find_on(e, g->lora_name[i]);

		if (!a) {
			snprintf(err, errlen, "generate: lora: no adapter '%s' is loaded for model "
				 "'%s' (load it with the load op first)", g->lora_name[i], e->name);
			exl_adapters_release(g);
			return EXL_E_NOT_FOUND;
		}
		exl_lora_ref(a->lora);
		set->use[set->n].lora = a->lora;
		set->use[set->n++].scale = g->lora_scale[i];
	}
	set->key = exl_lora_set_key(set);
	g->s.loras = set->n ? set : NULL;
	return 0;
}

void exl_adapters_release(struct exl_req_generate *g)
{
	for (int i = 0; i < g->lora_set.n; i++)
		exl_lora_unref(g->lora_set.use[i].lora);
	g->lora_set.n = 0;
	g->s.loras = NULL;
}

int exl_adapter_op_load(struct exl_registry *r, const char *dir, const char *name,
			struct exl_sink *sink, const struct exl_packed_id *id, bool *handled,
			char *err, size_t errlen)
{
	char path[EXL_CONFIG_MAX_PATH + EXL_MAX_NAME + 8];
	struct exl_model_entry *e;
	struct exl_adapter *a;
	msgpack_sbuffer sb;
	msgpack_packer pk;

	*handled = false;
	if (!exl_model_name_valid(name, strlen(name)))
		return 0;
	snprintf(path, sizeof(path), "%s/%s.gguf", dir, name);
	if (!exl_adapter_file(path))
		return 0;
	*handled = true;
	int code = exl_adapter_load(r, dir, name, "", &e, &a, err, errlen);
	if (code)
		return code;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	exl_pack_reply(&pk, &sb, EXL_OP_LOAD, id, 6);
	exl_pack_key(&pk, "model");
	exl_pack_cstr(&pk, name);
	exl_pack_key(&pk, "adapter");
	exl_pack_cstr(&pk, "lora");
	exl_pack_key(&pk, "base");
	exl_pack_cstr(&pk, e->name);
	exl_pack_key(&pk, "arch");
	exl_pack_cstr(&pk, a->lora->arch);
	exl_pack_key(&pk, "rank");
	msgpack_pack_int(&pk, a->lora->max_rank);
	exl_pack_key(&pk, "alpha");
	msgpack_pack_double(&pk, a->lora->alpha);
	if (sb.data)
		exl_sink_send(sink, sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
	return 0;
}

bool exl_adapter_op_unload(struct exl_registry *r, const char *name, struct exl_sink *sink,
			   const struct exl_packed_id *id)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	if (!exl_adapter_unload(r, name))
		return false;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	exl_pack_reply(&pk, &sb, EXL_OP_UNLOAD, id, 2);
	exl_pack_key(&pk, "model");
	exl_pack_cstr(&pk, name);
	exl_pack_key(&pk, "adapter");
	exl_pack_cstr(&pk, "lora");
	if (sb.data)
		exl_sink_send(sink, sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
	return true;
}
