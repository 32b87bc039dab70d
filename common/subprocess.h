#ifndef KVCPT_SUBPROCESS_H
#define KVCPT_SUBPROCESS_H
/* Runs another program with an argument vector, never through a shell, so
 * paths and names from the user cannot become commands. */
#include <stddef.h>

/* 1 when `prog` names an executable file in $PATH (or is a path to one). */
int subprocess_found(const char *prog);

/* Runs argv[0] (looked up in $PATH) with argv (NULL-terminated) and waits.
 * stdin reads stdin_path (NULL: /dev/null). stdout goes into out (up to
 * out_cap - 1 bytes, NUL-terminated) when out is not NULL, else to log_path;
 * stderr goes to log_path; a NULL log_path is /dev/null. Returns the exit
 * status, or -1 when the program could not be started or was killed. */
int subprocess_run(const char *const argv[], const char *stdin_path, const char *log_path, char *out, size_t out_cap);

/* The last non-empty line of a text file (a child's stderr log), or "" when
 * there is none or the file cannot be read. */
void subprocess_last_line(const char *path, char *out, size_t cap);

/* The running executable's path (/proc/self/exe), into out; dies when it
 * cannot be read or does not fit. */
void exe_self_path(char *out, size_t cap);
/* `rel` under the directory holding the running executable (the repository
 * root for ./kvcpt), or under the nearest of the two directories above it
 * where that file exists (build/asan/kvcpt, build/emu/kvcpt), into out.
 * Dies when it cannot be located or does not fit. */
void exe_dir_path(char *out, size_t cap, const char *rel);
#endif
