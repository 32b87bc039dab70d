#ifndef KVCPT_JSON_FILE_H
#define KVCPT_JSON_FILE_H
/* jansson's json_load_file, refusing (without blocking) a path that is not
 * a regular file: a FIFO named as a manifest or config would hang it. */
#include <jansson.h>

/* NULL with err->text set when the file cannot be opened, is not a regular
 * file, or does not parse. */
json_t *json_load_regular(const char *path, size_t flags, json_error_t *err);
#endif
