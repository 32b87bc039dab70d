#ifndef KVCPT_BUILD_INFO_H
#define KVCPT_BUILD_INFO_H
/* The git commit this build came from ("unknown" outside a checkout; a
 * "+changes" suffix when tracked files differed from it), so every result
 * file (eval.json) says which code produced it. */
const char *kvcpt_commit(void);
#endif
