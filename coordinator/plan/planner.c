/* planner.c — mesh.toml + GGUF -> per-layer costs -> fence plan. */
#include "coordinator/plan/planner.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "common/format/gguf.h"
#include "common/model/kv_geom.h"
#include "common/wire/wire.h"
#include "engine/scratch.h"

int32_t planner_max_seq(const struct mesh_config *cfg, const struct lm_hparams *hp)
{
	if (cfg->max_seq_len > 0)
		return cfg->max_seq_len;
	if (hp->n_ctx_train <= 0 || hp->n_ctx_train > MESH_MAX_SEQ_DEFAULT)
		return MESH_MAX_SEQ_DEFAULT;
	return hp->n_ctx_train;
}

uint64_t planner_scratch_bytes(const struct mesh_config *cfg, const struct lm_hparams *hp,
			       int32_t j, int32_t max_seq)
{
	const struct mesh_worker *mw = &cfg->workers[j];
	struct lm_scratch_cfg sc = {.begin = 0,
				    .end = hp->n_layer,
				    .trace_layers = 0,
				    .embedding = j == 0,
				    .head = j == cfg->n_workers - 1,
				    .max_batch = cfg->max_batch,
				    .slots = cfg->slots + MESH_PROBE_SLOTS,
				    .max_seq = max_seq,
				    .max_draft = cfg->max_draft,
				    .wire_dtype = cfg->wire_dtype,
				    .backend = mw->backend == MESH_BACKEND_CUDA ? "cuda" : "cpu",
				    .bo = {.n_threads = mw->threads,
					   .device = mw->device,
					   .force_scalar = mw->kernels == MESH_KERNELS_SCALAR,
					   .allow_amx = mw->kernels == MESH_KERNELS_AMX}};
	struct lm_scratch s;
	lm_scratch_estimate(hp, &sc, &s);
	/* A CUDA worker's limit is device memory: the engine's buffers (the lm_head's logits rows
	 * among them) and the backend's scratch are there; the stage's rows, messages and traces
	 * are host memory. */
	if (mw->backend == MESH_BACKEND_CUDA)
		return s.forward + s.backend;
	return s.total;
}

void planner_assignment(const struct mesh_config *cfg, const struct fence_plan *plan, int32_t j,
			int32_t max_seq, int32_t slots, const char *next, struct wire_assign *a)
{
	const struct fence_stage *st = &plan->stages[j];
	*a = (struct wire_assign){.id = 2,
				  .begin = st->start,
				  .end = st->end,
				  .embedding = j == 0,
				  .head = j == plan->n_workers - 1,
				  .max_seq = max_seq,
				  .slots = slots,
				  .k_type = cfg->workers[j].kv.global.k,
				  .v_type = cfg->workers[j].kv.global.v,
				  .k_type_swa = cfg->workers[j].kv.swa.k,
				  .v_type_swa = cfg->workers[j].kv.swa.v,
				  .wire_dtype = wire_dtype_of(cfg->wire_dtype),
				  .max_batch = cfg->max_batch,
				  .max_draft = cfg->max_draft};
	snprintf(a->model, sizeof a->model, "%s", cfg->model_path);
	snprintf(a->next, sizeof a->next, "%s", next);
}

/* Each layer's scratch (lm_scratch_layer_bytes), once fence_kv_costs has its cache: one slot's
 * rows in the largest types any worker may hold the layer in (a worker's own types may be
 * larger than the model's). A scratch_bytes of mesh.toml replaces the whole estimate, the
 * layers' too. */
static void planner_layer_scratch(const struct mesh_config *cfg, const struct lm_hparams *hp,
				  int32_t max_seq, struct fence_layer *layers, int32_t L,
				  const struct fence_worker *workers, int32_t W)
{
	for (int32_t i = 0; i < L && cfg->scratch_bytes == 0; i++) {
		uint64_t kv = layers[i].kv_bytes;
		for (int32_t j = 0; j < W; j++)
			if (workers[j].kv_layers != NULL && workers[j].kv_layers[i].kv_bytes > kv)
				kv = workers[j].kv_layers[i].kv_bytes;
		layers[i].scratch_bytes =
			lm_scratch_layer_bytes(hp, max_seq, kv, cfg->slots + MESH_PROBE_SLOTS);
	}
}

static int planner_default_mem(void *arg, const struct mesh_worker *w, struct lm_backend_mem *m,
			       lm_diag *d)
{
	(void)arg;
	struct lm_backend_opts bo = {.device = w->device};
	return lm_backend_query_memory(w->backend == MESH_BACKEND_CUDA ? "cuda" : "cpu", &bo, m, d);
}

int planner_plan(const struct mesh_config *cfg, struct fence_plan *plan, struct planner_info *info,
		 lm_diag *d)
{
	return planner_plan_with(cfg, plan, info, planner_default_mem, NULL, d);
}

/* Worker j's memory_limit: mesh.toml's, or a CUDA worker's free device memory. */
static int planner_limit(const struct mesh_config *cfg, int32_t j, planner_mem_fn mem,
			 void *mem_arg, uint64_t *limit, lm_diag *d)
{
	const struct mesh_worker *mw = &cfg->workers[j];
	*limit = mw->memory_limit;
	if (*limit != 0 || mw->backend != MESH_BACKEND_CUDA)
		return 0;
	struct lm_backend_mem m;
	int rc = mem(mem_arg, mw, &m, d);
	if (rc != 0) {
		lm_diag_prefix(d,
			       "worker %s (line %d) has no memory_limit, and its device's free "
			       "memory is unknown here",
			       mw->name, (int)mw->line);
		return rc;
	}
	*limit = m.free;
	return 0;
}

/* Each worker as the fence sees it: its limit, speed, scratch and pins. A worker with cache
 * types of its own brings its layers' KV costs in them, one array per distinct set of types
 * in *own (L layers each; the caller frees it). */
static int planner_workers(const struct mesh_config *cfg, const struct lm_hparams *hp,
			   const struct kv_geom *geom, int32_t max_seq, planner_mem_fn mem,
			   void *mem_arg, struct fence_worker *workers, struct fence_layer **own,
			   lm_diag *d)
{
	int32_t L = hp->n_layer, W = cfg->n_workers, n_own = 0;
	for (int32_t j = 0; j < W; j++)
		n_own += cfg->workers[j].own_kv;
	if (n_own > 0 && (*own = calloc((size_t)n_own * (size_t)L, sizeof **own)) == NULL)
		return lm_fail(d, LM_ENOMEM, "planning: out of memory");
	n_own = 0;
	for (int32_t j = 0; j < W; j++) {
		const struct mesh_worker *mw = &cfg->workers[j];
		uint64_t limit;
		int rc = planner_limit(cfg, j, mem, mem_arg, &limit, d);
		if (rc != 0)
			return rc;
		workers[j] = (struct fence_worker){
			.name = mw->name,
			.memory_limit = limit,
			.speed = mw->speed,
			.scratch_bytes = cfg->scratch_bytes != 0
						 ? cfg->scratch_bytes
						 : planner_scratch_bytes(cfg, hp, j, max_seq),
			.pin_start = mw->layer_start,
			.pin_end = mw->layer_end,
			.kv_types = mw->kv,
		};
		if (!mw->own_kv)
			continue;
		for (int32_t k = 0; k < j && workers[j].kv_layers == NULL; k++)
			if (cfg->workers[k].own_kv &&
			    memcmp(&cfg->workers[k].kv, &mw->kv, sizeof mw->kv) == 0)
				workers[j].kv_layers = workers[k].kv_layers;
		if (workers[j].kv_layers != NULL)
			continue;
		struct fence_layer *kv = *own + (size_t)n_own++ * (size_t)L;
		rc = fence_kv_costs(kv, L, geom, max_seq,
				    kv_geom_ring_extra(cfg->max_batch, cfg->max_draft),
				    cfg->slots + MESH_PROBE_SLOTS, &mw->kv, d);
		if (rc != 0) {
			lm_diag_prefix(d, "%s: worker %s (line %d), in its own cache types",
				       cfg->path, mw->name, (int)mw->line);
			return rc;
		}
		workers[j].kv_layers = kv;
	}
	return 0;
}

/* The plan's totals and the settings behind them, for `layermesh plan`. */
static void planner_fill_info(struct planner_info *info, const struct mesh_config *cfg,
			      const struct lm_hparams *hp, const struct fence_plan *plan,
			      const struct lm_model_costs *costs, const struct fence_layer *layers,
			      int32_t max_seq)
{
	*info = (struct planner_info){
		.n_layers = hp->n_layer,
		.n_embd = hp->n_embd,
		.n_vocab = hp->n_vocab,
		.n_ctx_train = hp->n_ctx_train,
		.max_seq = max_seq,
		.slots = cfg->slots,
		.max_batch = cfg->max_batch,
		.kv = cfg->kv,
		.wire_dtype = cfg->wire_dtype,
		.has_sliding = plan->has_sliding,
		.tied = hp->tied,
		.embd_bytes = costs->embd_bytes,
		.head_bytes = costs->head_bytes,
	};
	for (int32_t i = 0; i < hp->n_layer; i++) {
		info->weight_bytes += layers[i].weight_bytes;
		info->kv_bytes += layers[i].kv_bytes;
		info->kv_f32_bytes += layers[i].kv_f32_bytes;
	}
}

int planner_plan_with(const struct mesh_config *cfg, struct fence_plan *plan,
		      struct planner_info *info, planner_mem_fn mem, void *mem_arg, lm_diag *d)
{
	memset(plan, 0, sizeof *plan);
	gguf_file *f = NULL;
	struct lm_hparams *hp = calloc(1, sizeof *hp);
	struct lm_layer_cost *lc = NULL;
	struct fence_layer *layers = NULL;
	struct kv_geom *geom = NULL;
	struct fence_worker *workers = NULL;
	struct fence_layer *own = NULL; /* the KV costs of workers with their own types */
	int rc;
	if (hp == NULL) {
		rc = lm_fail(d, LM_ENOMEM, "planning: out of memory");
		goto out;
	}
	rc = gguf_open(cfg->model_path, &f, d);
	if (rc != 0)
		goto out;
	rc = lm_hparams_load(f, hp, d);
	if (rc != 0) {
		lm_diag_prefix(d, "%s", cfg->model_path);
		goto out;
	}
	int32_t L = hp->n_layer, W = cfg->n_workers;
	if (L <= 0 || L > FENCE_MAX_LAYERS) {
		rc = lm_fail(d, LM_EUNSUPPORTED, "%s: %d layers; the planner takes 1 to %d",
			     cfg->model_path, (int)L, FENCE_MAX_LAYERS);
		goto out;
	}
	lc = calloc((size_t)L, sizeof *lc);
	layers = calloc((size_t)L, sizeof *layers);
	geom = calloc((size_t)L, sizeof *geom);
	workers = calloc((size_t)W, sizeof *workers);
	if (lc == NULL || layers == NULL || geom == NULL || workers == NULL) {
		rc = lm_fail(d, LM_ENOMEM, "planning: out of memory");
		goto out;
	}
	if ((rc = planner_check_backends(cfg, f, hp, d)) != 0)
		goto out;
	struct lm_model_costs costs = {.layer = lc};
	rc = lm_model_costs(f, hp, &costs, d);
	if (rc != 0) {
		lm_diag_prefix(d, "%s", cfg->model_path);
		goto out;
	}
	int32_t max_seq = planner_max_seq(cfg, hp);
	for (int32_t i = 0; i < L; i++) {
		layers[i].weight_bytes = lc[i].weight_bytes;
		layers[i].flops = lc[i].flops;
		geom[i] = lm_hparams_kv_geom(hp, i);
		if (hp->layer[i].recurrent)
			geom[i].keep = kv_geom_rec_keep(cfg->max_draft);
	}
	/* One slot more than [model] slots: the coordinator keeps it for probes (smoke tests). */
	rc = fence_kv_costs(layers, L, geom, max_seq,
			    kv_geom_ring_extra(cfg->max_batch, cfg->max_draft),
			    cfg->slots + MESH_PROBE_SLOTS, &cfg->kv, d);
	if (rc != 0) {
		lm_diag_prefix(d, "%s", cfg->model_path);
		goto out;
	}
	if ((rc = planner_workers(cfg, hp, geom, max_seq, mem, mem_arg, workers, &own, d)) != 0)
		goto out;
	planner_layer_scratch(cfg, hp, max_seq, layers, L, workers, W);
	struct fence_input in = {
		.strategy = cfg->strategy,
		.n_layers = L,
		.layers = layers,
		.first_bytes = costs.embd_bytes,
		.last_bytes = costs.head_bytes,
		.last_flops = costs.head_flops,
		.n_workers = W,
		.workers = workers,
		.kv_types = cfg->kv,
	};
	rc = fence_plan_make(plan, &in, d);
	if (rc != 0)
		goto out;
	if (info != NULL)
		planner_fill_info(info, cfg, hp, plan, &costs, layers, max_seq);
out:
	free(own);
	free(workers);
	free(geom);
	free(layers);
	free(lc);
	free(hp);
	gguf_close(f);
	return rc;
}

static cJSON *planner_info_json(const struct planner_info *i, const struct mesh_config *cfg)
{
	cJSON *m = cJSON_CreateObject();
	if (m == NULL)
		return NULL;
	bool ok = cJSON_AddStringToObject(m, "path", cfg->model_path) &&
		  cJSON_AddNumberToObject(m, "layers", i->n_layers) &&
		  cJSON_AddNumberToObject(m, "n_embd", i->n_embd) &&
		  cJSON_AddNumberToObject(m, "n_vocab", i->n_vocab) &&
		  cJSON_AddNumberToObject(m, "context_length", i->n_ctx_train) &&
		  cJSON_AddNumberToObject(m, "max_seq", i->max_seq) &&
		  cJSON_AddNumberToObject(m, "slots", i->slots) &&
		  cJSON_AddNumberToObject(m, "max_batch", i->max_batch) &&
		  cJSON_AddStringToObject(m, "kv_type_k", lm_dtype_name(i->kv.global.k)) &&
		  cJSON_AddStringToObject(m, "kv_type_v", lm_dtype_name(i->kv.global.v)) &&
		  cJSON_AddStringToObject(m, "kv_type_k_swa", lm_dtype_name(i->kv.swa.k)) &&
		  cJSON_AddStringToObject(m, "kv_type_v_swa", lm_dtype_name(i->kv.swa.v)) &&
		  cJSON_AddNumberToObject(m, "kv_f32_bytes", (double)i->kv_f32_bytes) &&
		  cJSON_AddStringToObject(m, "wire_dtype", lm_dtype_name(i->wire_dtype)) &&
		  cJSON_AddBoolToObject(m, "tied_embedding", i->tied) &&
		  cJSON_AddNumberToObject(m, "weight_bytes", (double)i->weight_bytes) &&
		  cJSON_AddNumberToObject(m, "kv_bytes", (double)i->kv_bytes) &&
		  cJSON_AddNumberToObject(m, "embd_bytes", (double)i->embd_bytes) &&
		  cJSON_AddNumberToObject(m, "head_bytes", (double)i->head_bytes);
	if (!ok) {
		cJSON_Delete(m);
		return NULL;
	}
	return m;
}

static int planner_print_json(const struct planner_info *info, const struct mesh_config *cfg,
			      const struct fence_plan *plan, FILE *out)
{
	cJSON *root = cJSON_CreateObject();
	cJSON *model = planner_info_json(info, cfg);
	cJSON *p = fence_plan_to_json(plan);
	char *text = NULL;
	int rc = LM_ENOMEM;
	if (root != NULL && model != NULL && p != NULL) {
		cJSON_AddItemToObject(root, "model", model);
		cJSON_AddItemToObject(root, "plan", p);
		model = p = NULL;
		text = cJSON_Print(root);
	}
	if (text != NULL) {
		fprintf(out, "%s\n", text);
		rc = ferror(out) ? LM_EIO : 0;
	}
	free(text);
	cJSON_Delete(model);
	cJSON_Delete(p);
	cJSON_Delete(root);
	return rc;
}

static void planner_print_header(const struct planner_info *info, const struct mesh_config *cfg,
				 FILE *out)
{
	char a[32], b[32], c[32], e[32], types[96];
	fprintf(out, "model: %s (%d layers, n_embd %d, vocab %d, context %d%s)\n", cfg->model_path,
		(int)info->n_layers, (int)info->n_embd, (int)info->n_vocab, (int)info->n_ctx_train,
		info->tied ? ", tied embedding" : "");
	if (info->has_sliding)
		snprintf(types, sizeof types, "global layers K %s, V %s; sliding layers K %s, V %s",
			 lm_dtype_name(info->kv.global.k), lm_dtype_name(info->kv.global.v),
			 lm_dtype_name(info->kv.swa.k), lm_dtype_name(info->kv.swa.v));
	else
		snprintf(types, sizeof types, "K %s, V %s", lm_dtype_name(info->kv.global.k),
			 lm_dtype_name(info->kv.global.v));
	fprintf(out,
		"cache: %d positions x %d slots (+1 kept for probes), %s: %s for all layers in one "
		"process (%s in f32); weights %s, embedding %s, head %s\n",
		(int)info->max_seq, (int)info->slots, types,
		fence_fmt_bytes(info->kv_bytes, a, sizeof a),
		fence_fmt_bytes(info->kv_f32_bytes, e, sizeof e),
		fence_fmt_bytes(info->weight_bytes, b, sizeof b),
		fence_fmt_bytes(info->embd_bytes, c, sizeof c),
		fence_fmt_bytes(info->head_bytes, (char[32]){0}, 32));
	for (int32_t j = 0; j < cfg->n_workers; j++) {
		const struct mesh_worker *w = &cfg->workers[j];
		if (!w->own_kv)
			continue;
		if (info->has_sliding)
			snprintf(types, sizeof types,
				 "global layers K %s, V %s; sliding layers K %s, V %s",
				 lm_dtype_name(w->kv.global.k), lm_dtype_name(w->kv.global.v),
				 lm_dtype_name(w->kv.swa.k), lm_dtype_name(w->kv.swa.v));
		else
			snprintf(types, sizeof types, "K %s, V %s", lm_dtype_name(w->kv.global.k),
				 lm_dtype_name(w->kv.global.v));
		fprintf(out, "cache of worker %s: its own types, %s\n", w->name, types);
	}
}

int32_t planner_warn_ephemeral(const struct mesh_config *cfg, const char *range_file, FILE *err)
{
	int32_t lo, hi;
	if (mesh_local_port_range(range_file, &lo, &hi) != 0)
		return 0; /* not Linux, or not readable: nothing to say */
	char ports[1024];
	int32_t n = mesh_config_ephemeral_ports(cfg, lo, hi, ports, sizeof ports);
	if (n > 0)
		fprintf(err,
			"layermesh plan: warning: %s: %d port%s lie%s in this machine's ephemeral "
			"range %d-%d (%s), where the kernel takes local ports for outgoing "
			"connections: a busy machine may hold one when the mesh starts, and the "
			"listener fails: %s; move them below %d (or shrink the range)\n",
			cfg->path, (int)n, n == 1 ? "" : "s", n == 1 ? "s" : "", (int)lo, (int)hi,
			range_file, ports, (int)lo);
	return n;
}

void planner_layer_kv_types(const struct mesh_config *cfg, const struct fence_plan *plan,
			    struct kv_types *types)
{
	for (int32_t j = 0; j < plan->n_workers; j++)
		for (int32_t i = plan->stages[j].start; i < plan->stages[j].end; i++)
			types[i] = cfg->workers[j].kv;
}

int planner_cmd(const char *mesh_path, bool json, FILE *out, FILE *err)
{
	struct mesh_config cfg;
	struct fence_plan plan;
	struct planner_info info;
	lm_diag d = {{0}};
	int rc = mesh_config_load(&cfg, mesh_path, &d);
	if (rc != 0) {
		fprintf(err, "layermesh plan: %s\n", lm_diag_str(&d, rc));
		return 1;
	}
	rc = planner_plan(&cfg, &plan, &info, &d);
	if (rc != 0) {
		fprintf(err, "layermesh plan: %s: %s\n", mesh_path, lm_diag_str(&d, rc));
		mesh_config_fini(&cfg);
		return 1;
	}
	/* Workers on several hosts without [tls]: every plane travels in the clear. */
	char hosts[512];
	int32_t n_hosts = 0;
	int32_t plain = mesh_config_plain_hosts(&cfg, hosts, sizeof hosts, &n_hosts);
	if (n_hosts > 1 && cfg.tls_ca_file == NULL && plain > 0)
		fprintf(err,
			"layermesh plan: warning: %s puts the workers on %d hosts over plain "
			"tcp:// (%s) with insecure = true: anything that can reach them can read "
			"the hidden states and forge ring and control messages; use tls+tcp:// "
			"addresses and a [tls] table (README.md, \"Security\")\n",
			mesh_path, (int)n_hosts, hosts);
	planner_warn_ephemeral(&cfg, MESH_PORT_RANGE_FILE, err);
	if (json) {
		rc = planner_print_json(&info, &cfg, &plan, out);
	} else {
		planner_print_header(&info, &cfg, out);
		rc = fence_plan_write_table(&plan, out);
	}
	if (rc != 0)
		fprintf(err, "layermesh plan: writing the plan: %s\n", lm_strerror(rc));
	fence_plan_fini(&plan);
	mesh_config_fini(&cfg);
	return rc == 0 ? 0 : 1;
}
