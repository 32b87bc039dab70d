#ifndef KVCPT_BACKENDS_H
#define KVCPT_BACKENDS_H
/* The accelerator backends this program can carry (common/backend.h), each
 * the entry of its folder (backends/NAME/backend.c) or, where the Makefile
 * did not build that folder, its stand-in (backends/NAME_none.c), which
 * registers the name alone. */
#include "../common/backend.h"

const Backend *backend_cuda(void);

/* Registers every one of them, in the order device=auto tries them; main
 * calls it before any command. */
void backends_register(void);
#endif
