#ifndef KVCPT_EVAL_OUTPUT_PATHS_H
#define KVCPT_EVAL_OUTPUT_PATHS_H
/* The paths `kvcpt eval` writes, checked at start-up so that a bad one is
 * found before the models are loaded, not after the whole evaluation. */

/* mkdir -p dir, then dies unless it is a directory this process can create
 * files in; the message names `option` (e.g. "--out") and the path. */
void eval_prepare_out_dir(const char *cmd, const char *option, const char *dir);
#endif
