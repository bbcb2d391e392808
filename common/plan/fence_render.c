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
	return ferror(out) ? LM_EIO : 0;
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
