#ifndef KVCPT_CONVERT_DEST_H
#define KVCPT_CONVERT_DEST_H
/* The destination rule of kvcpt convert: without --overwrite, a conversion
 * refuses a directory holding any file it would write or remove (or other
 * weights that would end up beside the new ones), before touching anything. */

/* Dies naming the first such file in dir unless overwrite is set. An absent
 * dir passes (the conversion creates it). */
void convert_dest_check(const char *dir, int overwrite);

#endif
