/* fence_render.c — a plan shown to people (a table) and to programs (JSON). */
#include "common/plan/fence.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <string.h>

static double mib(uint64_t b)
{
	return (double)b / (1024.0 * 1024.0);
}

static double share(uint64_t part, uint64_t whole)
{
	return whole == 0 ? 0.0 : 100.0 * (double)part / (double)whole;
}

static const char *fmt_flops(uint64_t f, char *buf, size_t cap)
{
	static const char *const units[] = {"kflop", "Mflop", "Gflop", "Tflop", "Pflop", "Eflop"};
	if (f < 1000) {
		snprintf(buf, cap, "%llu flop", (unsigned long long)f);
		return buf;
	}
	double v = (double)f / 1000.0;
	size_t u = 0;
	while (v >= 1000.0 && u + 1 < sizeof units / sizeof units[0]) {
		v /= 1000.0;
		u++;
	}
	snprintf(buf, cap, "%.1f %s", v, units[u]);
	return buf;
}

/* The type of one layer kind's K (kv 0) or V (kv 1) in types t. */
static enum lm_dtype kv_type_of(const struct kv_types *t, int kind, int kv)
{
	if (kind == FENCE_KV_RECURRENT)
		return LM_F32;
	const struct kv_pair *p = kind == FENCE_KV_SLIDING ? &t->swa : &t->global;
	return kv ? p->v : p->k;
}

/* "global K q8_0" and the like: the column of one layer kind's K or V; where the workers'
 * types differ, "global K", each cell naming its own. */
static const char *kv_column(const struct fence_plan *p, int kind, int kv, char *buf, size_t cap)
{
	if (kind == FENCE_KV_RECURRENT) {
		snprintf(buf, cap, "rec. %s f32", kv ? "state" : "conv");
		return buf;
	}
	snprintf(buf, cap, "%s %s%s%s", kind == FENCE_KV_SLIDING ? "sliding" : "global",
		 kv ? "V" : "K", p->mixed_kv ? "" : " ",
		 p->mixed_kv ? "" : lm_dtype_name(kv_type_of(&p->kv_types, kind, kv)));
	return buf;
}

/* Whether the plan has layers of `kind` (global ones always are shown). */
static bool kv_has_kind(const struct fence_plan *p, int kind)
{
	return kind == FENCE_KV_GLOBAL || (kind == FENCE_KV_SLIDING && p->has_sliding) ||
	       (kind == FENCE_KV_RECURRENT && p->has_recurrent);
}

/* The KV cache by type: each worker's K and V of each layer kind in its own type, beside what
 * the same rows would take in f32 and the share saved. A recurrent layer's conv ring and SSM
 * state (f32, per slot: they do not grow with the context) have their own columns. */
static void kv_table(const struct fence_plan *p, FILE *out, int nw)
{
	char col[FENCE_KV_KINDS * 2][40];
	fprintf(out, "\nKV cache by type (every slot's rows):\n%-*s", nw, "worker");
	for (int kind = 0; kind < FENCE_KV_KINDS; kind++)
		for (int kv = 0; kv_has_kind(p, kind) && kv < 2; kv++)
			fprintf(out, " %17s", kv_column(p, kind, kv, col[2 * kind + kv], 40));
	fprintf(out, " %10s %11s %7s\n", "KV MiB", "as f32 MiB", "saved");
	uint64_t tot[FENCE_KV_KINDS][2] = {{0}}, tk = 0, tf = 0;
	for (int32_t j = 0; j <= p->n_workers; j++) {
		const bool total = j == p->n_workers;
		const struct fence_stage *s = total ? NULL : &p->stages[j];
		uint64_t kvb = total ? tk : s->kv_bytes, f32 = total ? tf : s->kv_f32_bytes;
		fprintf(out, "%-*s", nw, total ? "total" : s->name);
		for (int kind = 0; kind < FENCE_KV_KINDS; kind++)
			for (int kv = 0; kv_has_kind(p, kind) && kv < 2; kv++) {
				uint64_t b = total ? tot[kind][kv] : s->kv_kind[kind][kv];
				if (p->mixed_kv && !total)
					fprintf(out, " %5s %11.2f",
						lm_dtype_name(kv_type_of(&s->kv_types, kind, kv)),
						mib(b));
				else
					fprintf(out, " %17.2f", mib(b));
				if (!total)
					tot[kind][kv] += b;
			}
		fprintf(out, " %10.2f %11.2f %6.1f%%\n", mib(kvb), mib(f32),
			f32 > kvb ? share(f32 - kvb, f32) : 0.0);
		if (!total) {
			tk += s->kv_bytes;
			tf += s->kv_f32_bytes;
		}
	}
}

int fence_plan_write_table(const struct fence_plan *p, FILE *out)
{
	int nw = 6;
	for (int32_t j = 0; j < p->n_workers; j++) {
		int n = (int)strlen(p->stages[j].name);
		if (n > nw)
			nw = n;
	}
	fprintf(out, "plan: %s, %d layers over %d worker%s\n\n", fence_strategy_name(p->strategy),
		(int)p->n_layers, (int)p->n_workers, p->n_workers == 1 ? "" : "s");
	fprintf(out, "%-*s  %-12s %12s %10s %12s %14s %11s %11s %6s %7s\n", nw, "worker", "layers",
		"weights MiB", "KV MiB", "scratch MiB", "embd/head MiB", "total MiB", "limit MiB",
		"use", "flops");
	uint64_t tw = 0, tk = 0, ts = 0, te = 0, tt = 0;
	for (int32_t j = 0; j < p->n_workers; j++) {
		const struct fence_stage *s = &p->stages[j];
		char range[32];
		snprintf(range, sizeof range, "[%d, %d)", (int)s->start, (int)s->end);
		fprintf(out,
			"%-*s  %-12s %12.2f %10.2f %12.2f %14.2f %11.2f %11.2f %5.1f%% %6.1f%%\n",
			nw, s->name, range, mib(s->weight_bytes), mib(s->kv_bytes),
			mib(s->scratch_bytes), mib(s->extra_bytes), mib(s->total_bytes),
			mib(s->memory_limit), share(s->total_bytes, s->memory_limit),
			share(s->flops, p->total_flops));
		tw += s->weight_bytes;
		tk += s->kv_bytes;
		ts += s->scratch_bytes;
		te += s->extra_bytes;
		tt += s->total_bytes;
	}
	fprintf(out, "%-*s  %-12s %12.2f %10.2f %12.2f %14.2f %11.2f\n", nw, "total", "", mib(tw),
		mib(tk), mib(ts), mib(te), mib(tt));
	int32_t slow = 0;
	for (int32_t j = 1; j < p->n_workers; j++)
		if (p->stages[j].time > p->stages[slow].time)
			slow = j;
	char a[32], b[32];
	if (p->n_workers > 0)
		fprintf(out,
			"\nslowest stage: '%s', %s per token at speed %g (%s per token in all)\n",
			p->stages[slow].name, fmt_flops(p->stages[slow].flops, a, sizeof a),
			p->stages[slow].speed, fmt_flops(p->total_flops, b, sizeof b));
	uint64_t f32 = 0;
	for (int32_t j = 0; j < p->n_workers; j++)
		f32 += p->stages[j].kv_f32_bytes;
	if (f32 > 0) /* the layers were priced by fence_kv_costs */
		kv_table(p, out, nw);
	return ferror(out) ? LM_EIO : 0;
}

/* "kv_by_type": {"global_k": {"type": "q8_0", "bytes": n}, ...}, "kv_f32_bytes". */
static bool kv_json(const struct fence_plan *p, cJSON *w, const struct fence_stage *s)
{
	static const char *const names[FENCE_KV_KINDS][2] = {{"global_k", "global_v"},
							     {"sliding_k", "sliding_v"},
							     {"recurrent_conv", "recurrent_state"}};
	cJSON *by = cJSON_AddObjectToObject(w, "kv_by_type");
	bool ok = by != NULL &&
		  cJSON_AddNumberToObject(w, "kv_f32_bytes", (double)s->kv_f32_bytes) != NULL;
	for (int kind = 0; ok && kind < FENCE_KV_KINDS; kind++)
		for (int kv = 0; ok && kv_has_kind(p, kind) && kv < 2; kv++) {
			cJSON *e = cJSON_AddObjectToObject(by, names[kind][kv]);
			ok = e != NULL &&
			     cJSON_AddStringToObject(
				     e, "type",
				     lm_dtype_name(kv_type_of(&s->kv_types, kind, kv))) &&
			     cJSON_AddNumberToObject(e, "bytes", (double)s->kv_kind[kind][kv]);
		}
	return ok;
}

struct cJSON *fence_plan_to_json(const struct fence_plan *p)
{
	cJSON *root = cJSON_CreateObject();
	if (root == NULL)
		return NULL;
	cJSON *cuts = cJSON_AddArrayToObject(root, "cuts");
	cJSON *workers = cJSON_AddArrayToObject(root, "workers");
	bool ok = cuts != NULL && workers != NULL &&
		  cJSON_AddStringToObject(root, "strategy", fence_strategy_name(p->strategy)) &&
		  cJSON_AddNumberToObject(root, "layers", p->n_layers) &&
		  cJSON_AddNumberToObject(root, "total_flops", (double)p->total_flops) &&
		  cJSON_AddNumberToObject(root, "max_time", p->max_time);
	for (int32_t j = 0; ok && j <= p->n_workers; j++) {
		cJSON *n = cJSON_CreateNumber(p->cuts[j]);
		ok = n != NULL && cJSON_AddItemToArray(cuts, n);
		if (!ok)
			cJSON_Delete(n);
	}
	for (int32_t j = 0; ok && j < p->n_workers; j++) {
		const struct fence_stage *s = &p->stages[j];
		cJSON *w = cJSON_CreateObject();
		if (w == NULL || !cJSON_AddItemToArray(workers, w)) {
			cJSON_Delete(w);
			ok = false;
			break;
		}
		ok = cJSON_AddStringToObject(w, "name", s->name) &&
		     cJSON_AddNumberToObject(w, "start", s->start) &&
		     cJSON_AddNumberToObject(w, "end", s->end) &&
		     cJSON_AddNumberToObject(w, "weight_bytes", (double)s->weight_bytes) &&
		     cJSON_AddNumberToObject(w, "kv_bytes", (double)s->kv_bytes) &&
		     kv_json(p, w, s) &&
		     cJSON_AddNumberToObject(w, "scratch_bytes", (double)s->scratch_bytes) &&
		     cJSON_AddNumberToObject(w, "extra_bytes", (double)s->extra_bytes) &&
		     cJSON_AddNumberToObject(w, "total_bytes", (double)s->total_bytes) &&
		     cJSON_AddNumberToObject(w, "memory_limit", (double)s->memory_limit) &&
		     cJSON_AddNumberToObject(w, "flops", (double)s->flops) &&
		     cJSON_AddNumberToObject(w, "flops_share",
					     share(s->flops, p->total_flops) / 100.0) &&
		     cJSON_AddNumberToObject(w, "speed", s->speed) &&
		     cJSON_AddNumberToObject(w, "time", s->time);
	}
	if (!ok) {
		cJSON_Delete(root);
		return NULL;
	}
	return root;
}
