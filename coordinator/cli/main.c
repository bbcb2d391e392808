/* layermesh — the command line: one binary, one subcommand per job. */
#include <stdio.h>
#include <string.h>

#include "common/base/crash.h"
#include "coordinator/cli/cmds.h"
#include "lm_config.h"

struct lm_cmd {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
};

static int cmd_version(int argc, char **argv);

static const struct lm_cmd main_cmds[] = {
	/* Keep in the order `layermesh --help` should list them. */
	{"run", cmd_run, "generate text with the whole model in this process"},
	{"up", cmd_up, "bring the mesh of mesh.toml up and serve its HTTP API"},
	{"generate", cmd_generate, "generate text through a running mesh"},
	{"redeploy", cmd_redeploy, "roll a new worker build out over a running mesh"},
	{"diff", cmd_diff, "compare the mesh's hidden states with the single process, per layer"},
	{"status", cmd_status, "show a running mesh's workers, fence and counters"},
	{"plan", cmd_plan, "show how mesh.toml's model is cut between its workers"},
	{"synth", cmd_synth, "write a random-weight llama GGUF of any shape and type"},
	{"quantize", cmd_quantize, "copy a GGUF with its float matrices in another type"},
	{"tokenize", cmd_tokenize, "print the token ids of a text"},
	{"template", cmd_template, "show a chat template's format and the prompts it renders"},
	{"version", cmd_version, "print the build and protocol versions"},
};

static int cmd_version(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	printf("layermesh %s\n", LM_VERSION);
	return 0;
}

static void main_usage(FILE *out)
{
	fprintf(out, "usage: layermesh <command> [options]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof main_cmds / sizeof main_cmds[0]; i++)
		fprintf(out, "  %-10s %s\n", main_cmds[i].name, main_cmds[i].summary);
	fprintf(out, "\n'layermesh <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv)
{
	lm_crash_handler_install("layermesh");
	if (argc < 2) {
		main_usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		main_usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("layermesh %s\n", LM_VERSION);
		return 0;
	}
	for (size_t i = 0; i < sizeof main_cmds / sizeof main_cmds[0]; i++)
		if (strcmp(argv[1], main_cmds[i].name) == 0)
			return main_cmds[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "layermesh: unknown command '%s'\n", argv[1]);
	main_usage(stderr);
	return 2;
}
