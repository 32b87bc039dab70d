#include "build_info.h"

/* written by the Makefile, and rewritten only when the commit changes */
#include "build/commit.h"

const char *kvcpt_commit(void) { return KVCPT_GIT_COMMIT; }
