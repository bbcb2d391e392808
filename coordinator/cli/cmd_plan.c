/* cmd_plan.c — `layermesh plan [mesh.toml] [--json]`: the fence, before anything starts. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "coordinator/cli/cmds.h"
#include "coordinator/plan/planner.h"

static void plan_usage(FILE *out)
{
	fprintf(out,
		"usage: layermesh plan [MESH.TOML] [--json]\n\n"
		"Reads MESH.TOML (default: mesh.toml) and its model, cuts the model's layers\n"
		"between the workers by [plan] strategy, and prints each worker's layers and\n"
		"bytes (weights, KV cache, scratch, embedding/head) against its memory_limit.\n"
		"Fails, naming the worker, when no cut fits.\n\n"
		"  --json   print the plan as JSON\n");
}

int cmd_plan(int argc, char **argv)
{
	const char *path = NULL;
	bool json = false;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0) {
			json = true;
		} else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			plan_usage(stdout);
			return 0;
		} else if (argv[i][0] == '-' || path != NULL) {
			fprintf(stderr, "layermesh plan: unexpected argument '%s'\n", argv[i]);
			plan_usage(stderr);
			return 2;
		} else {
			path = argv[i];
		}
	}
	return planner_cmd(path != NULL ? path : "mesh.toml", json, stdout, stderr);
}
