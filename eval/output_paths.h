#ifndef KVCPT_EVAL_OUTPUT_PATHS_H
#define KVCPT_EVAL_OUTPUT_PATHS_H
/* The paths `kvcpt eval` writes, checked at start-up so that a bad one is
 * found before the models are loaded, not after the whole evaluation, and
 * so that an output can never replace one of the inputs it reads. */

/* mkdir -p dir, then dies unless it is a directory this process can create
 * files in; the message names `option` (e.g. "--out") and the path. */
void eval_prepare_out_dir(const char *cmd, const char *option, const char *dir);

/* Dies when the file `path` (given as `option`; it need not exist yet) is
 * `input` (given as `input_option`) or lies anywhere below it, or when path
 * names a directory or a file in a directory that does not exist. Compared
 * by device and inode from path's resolved directory upwards, so another
 * spelling of the same place (a symbolic link, "..", a bind mount) is
 * caught too. An input that does not exist is not checked here (loading it
 * reports it). */
void eval_refuse_inside_input(const char *cmd, const char *option, const char *path, const char *input_option,
                              const char *input);
#endif
