#ifndef KVCPT_CONVERT_DEST_H
#define KVCPT_CONVERT_DEST_H
/* The destination rule of kvcpt convert: without --overwrite, a conversion
 * refuses a directory holding any file it would write or remove (or other
 * weights that would end up beside the new ones), before touching anything. */

/* Dies naming the first such file in dir unless overwrite is set. An absent
 * dir passes (the conversion creates it). */
void convert_dest_check(const char *dir, int overwrite);

/* A file the conversion reads, and the option that named it (for messages). */
typedef struct {
    const char *path, *option;
} ConvertInput;

/* Dies when any entry of dir is one of the inputs (the same device and
 * inode, symlinks followed: the input itself, a hard link or a symlink to
 * it), whatever its name and with or without --overwrite: the conversion
 * writes, renames over and removes files there (and NAME.tmp beside each),
 * so such an input could be replaced or lost. The conversion touches only
 * dir's own entries, never its subdirectories. An absent dir passes. */
void convert_dest_check_inputs(const char *dir, const ConvertInput *inputs, int n);

#endif
