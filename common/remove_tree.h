#ifndef KVCPT_REMOVE_TREE_H
#define KVCPT_REMOVE_TREE_H
/* Removing what kvcpt itself wrote (an earlier run's checkpoints, its
 * exported model) without ever leaving that place: a symbolic link met on
 * the way is removed as a link, never followed, and the walk stays on the
 * file system it started on. Dies naming the path on any failure. */

/* Removes path (a file, a link or a whole directory tree); a missing path is
 * not an error. */
void remove_tree(const char *path);

/* The same walk that reports nothing and never dies, for an exit handler
 * (which cannot report): what cannot be removed stays. */
void remove_tree_best_effort(const char *path);

/* 1 when path is a directory itself (lstat: a link to one is not), else 0. */
int is_real_dir(const char *path);

#endif
