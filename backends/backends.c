#include "backends.h"

/* one line per backend: adding a backend adds its line here */
void backends_register(void) { backend_register(backend_cuda()); }
