/* Linked in place of eval/engine_cuda.c when the CUDA backend is not built:
 * there is no device decode engine to register (an eval run on --device
 * cuda is refused before it asks, by common/backend.c). */
#include "decode_device.h"

#include <stddef.h>

const DecodeDevice *decode_device_cuda(void) { return NULL; }
