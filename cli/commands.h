#ifndef KVCPT_COMMANDS_H
#define KVCPT_COMMANDS_H
/* Entry points of the subcommands, one file each in cli/ (the command-line
 * front: options in, the library's calls out). argv[0] is the subcommand
 * name. Return value is the exit status. */
int cmd_prepare(int argc, char **argv);  /* cli/cmd_prepare.c */
int cmd_tokenize(int argc, char **argv); /* cli/cmd_tokenize.c */
int cmd_train(int argc, char **argv);    /* cli/cmd_train.c */
int cmd_eval(int argc, char **argv);     /* cli/cmd_eval.c */
int cmd_convert(int argc, char **argv);  /* cli/cmd_convert.c */
int cmd_bench(int argc, char **argv);    /* cli/cmd_bench.c */
int cmd_plan(int argc, char **argv);     /* cli/plan.c */
#endif
