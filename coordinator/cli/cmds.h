/* cmds.h — the subcommands of the `layermesh` CLI. Each takes the arguments after its name
 * (argv[0] is the subcommand) and returns the process exit status: 0 success, 1 failure,
 * 2 usage error. */
#ifndef LM_CMDS_H
#define LM_CMDS_H

/* Each module adds its command here and to the table in coordinator/cli/main.c. */

/* layermesh plan [mesh.toml] [--json] (coordinator/cli/cmd_plan.c) */
int cmd_plan(int argc, char **argv);

/* layermesh synth: a deterministic random-weight llama GGUF (coordinator/cli/cmd_synth.c). */
int cmd_synth(int argc, char **argv);
/* layermesh quantize: a GGUF's matrices in another type (coordinator/cli/cmd_quantize.c). */
int cmd_quantize(int argc, char **argv);

/* coordinator/cli/cmd_tokenize.c: text to token ids. */
int cmd_tokenize(int argc, char **argv);

/* coordinator/cli/cmd_run.c: generate text in this process. */
int cmd_run(int argc, char **argv);

/* coordinator/cli/cmd_up.c: bring a mesh up and serve it. */
int cmd_up(int argc, char **argv);

/* coordinator/cli/cmd_generate.c: generate through a running mesh. */
int cmd_generate(int argc, char **argv);

/* coordinator/cli/cmd_diff.c: the mesh against the single process, layer by layer. */
int cmd_diff(int argc, char **argv);

/* coordinator/cli/cmd_redeploy.c: roll a new worker build out over a running mesh. */
int cmd_redeploy(int argc, char **argv);
/* coordinator/cli/cmd_status.c: a running mesh's workers, fence and counters. */
int cmd_status(int argc, char **argv);
/* coordinator/cli/cmd_template.c: a chat template's format, and the prompts it renders. */
int cmd_template(int argc, char **argv);

#endif
