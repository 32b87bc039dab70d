#ifndef KVCPT_COMMANDS_H
#define KVCPT_COMMANDS_H
/* Entry points of the subcommands; each lives in the directory of its
 * concern. argv[0] is the subcommand name. Return value is the exit status. */
int cmd_prepare(int argc, char **argv);  /* data/cmd_prepare.c */
int cmd_tokenize(int argc, char **argv); /* data/cmd_tokenize.c */
int cmd_train(int argc, char **argv);    /* train/cmd_train.c */
int cmd_eval(int argc, char **argv);     /* eval/cmd_eval.c */
int cmd_convert(int argc, char **argv);  /* checkpoints/cmd_convert.c */
int cmd_bench(int argc, char **argv);    /* train/cmd_bench.c */
int cmd_plan(int argc, char **argv);     /* parallel/plan.c */

/* Shared wording for subcommands whose issue is still open: they say so and
 * exit non-zero rather than pretend. */
#endif
