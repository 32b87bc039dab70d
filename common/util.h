#ifndef KVCPT_UTIL_H
#define KVCPT_UTIL_H
/* Error reporting, checked allocation and checked file I/O shared by every
 * unit. Every failure path names the file/line of the caller, the values
 * involved and, where one exists, a hint; validation never uses assert(). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#if defined(__GNUC__)
#define KV_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define KV_NORETURN __attribute__((noreturn))
#else
#define KV_PRINTF(a, b)
#define KV_NORETURN
#endif

/* Prints "kvcpt: error: <msg>" and exits with status 1; with the
 * environment variable KVCPT_DEBUG=1 the message ends with the caller's
 * "(at src:line)". */
KV_NORETURN void die_at(const char *src, int line, const char *fmt, ...) KV_PRINTF(3, 4);
#define die(...) die_at(__FILE__, __LINE__, __VA_ARGS__)

/* Validation of user-provided data: on failure, report the condition text too. */
#define KV_CHECK(cond, ...)                                                                                            \
    do {                                                                                                               \
        if (!(cond)) die_at(__FILE__, __LINE__, __VA_ARGS__);                                                          \
    } while (0)

/* Silent (1): die_at prints nothing and only exits with status 1. For the
 * ranks above 0 of a multi-rank launch while they run the checks every
 * rank runs alike on the same input (options, config values): rank 0
 * prints the one message a user needs; a silent rank ends through
 * exit_after_rank0. */
void die_set_silent(int silent);
/* A rank above 0 that found what rank 0 finds and reports: waits up to 3 s
 * for the launcher to end it (which it does once rank 0 has failed), then
 * exits with status, so that the launcher's notice names rank 0, whose
 * message is on the screen, as the rank that failed. */
KV_NORETURN void exit_after_rank0(int status);

void warnf(const char *fmt, ...) KV_PRINTF(1, 2);

/* snprintf for file paths: a path that does not fit the buffer is an error
 * naming its start and the limit, never a silently cut path (which would
 * read or write a different file). */
void path_fmt_at(char *out, size_t n, const char *src, int line, const char *fmt, ...) KV_PRINTF(5, 6);
#define path_fmt(out, n, ...) path_fmt_at((out), (n), __FILE__, __LINE__, __VA_ARGS__)

/* For parsers that report instead of exiting (so they can be fuzzed):
 * writes "<kind> '<origin>' at byte <offset>: <message>" into err and
 * returns -1. */
int parse_error(char *err, int errlen, const char *kind, const char *origin, int64_t offset, const char *fmt, ...)
    KV_PRINTF(6, 7);

void *malloc_at(size_t n, const char *src, int line);
void *calloc_at(size_t count, size_t size, const char *src, int line);
void *realloc_at(void *p, size_t n, const char *src, int line);
#define xmalloc(n) malloc_at((n), __FILE__, __LINE__)
#define xcalloc(c, s) calloc_at((c), (s), __FILE__, __LINE__)
#define xrealloc(p, n) realloc_at((p), (n), __FILE__, __LINE__)
char *xstrdup(const char *s);

/* Checked stdio: errors name the path, the offset and what was expected. */
/* Opens path read-only when it is a regular file; a FIFO or a device is
 * refused without blocking on it (a plain open of a FIFO waits for a
 * writer forever). Returns the fd, or -1 with errno set (EINVAL: not a
 * regular file). */
int open_regular_file(const char *path);
/* open_regular_file's errno in words ("not a regular file" for EINVAL). */
const char *open_regular_strerror(int err);
/* Read modes open through open_regular_file; write and append modes refuse
 * a symbolic link or anything but a regular file at path. A file opened
 * for writing ("w") whose name ends in ".tmp" is a temporary: if the process
 * dies with an error (die) before rename_check moves it into place, it is
 * removed, so a failed write (a full disk) leaves no partial file behind. */
FILE *fopen_at(const char *path, const char *mode, const char *src, int line);
void fread_at(void *dst, size_t size, size_t count, FILE *f, const char *path, const char *src, int line);
void fwrite_at(const void *p, size_t size, size_t count, FILE *f, const char *path, const char *src, int line);
void fclose_at(FILE *f, const char *path, const char *src, int line);
#define fopen_check(path, mode) fopen_at((path), (mode), __FILE__, __LINE__)
#define fread_check(dst, sz, n, f, path) fread_at((dst), (sz), (n), (f), (path), __FILE__, __LINE__)
#define fwrite_check(p, sz, n, f, path) fwrite_at((p), (sz), (n), (f), (path), __FILE__, __LINE__)
#define fclose_check(f, path) fclose_at((f), (path), __FILE__, __LINE__)

/* Size of a regular file in bytes, or -1 with errno set. */
int64_t file_size(const char *path);
/* Reads a whole file into a NUL-terminated heap buffer; dies on failure. */
char *read_text_file(const char *path, int64_t *len_out);
/* mkdir -p; dies on failure. */
void make_dirs(const char *path);
/* mkdir -p for callers that name their option in the error: 0, or the
 * errno of the first directory that could not be made, whose path goes
 * into failed (n bytes, cut to fit: it is only shown). */
int make_dirs_try(const char *path, char *failed, size_t n);
/* Atomic publish: rename tmp -> final, dying with both names on failure. */
void rename_check(const char *tmp, const char *final_path);

double now_seconds(void);
/* A duration in seconds as m:ss, or h:mm:ss from an hour on. */
void clock_text(char *buf, size_t n, double s);

/* A one-line progress display on stderr: on a terminal one line redrawn
 * in place (\r) at most every 0.1 s; otherwise silent, unless log_interval
 * > 0 (set after progress_begin): then the first update, one line at most
 * every log_interval seconds, and the last are printed as lines, for logs.
 * quiet (set after progress_begin) silences both. With a total, the line
 * shows the elapsed time and an ETA from the rate so far. */
typedef struct {
    const char *label;
    int64_t total;       /* units of work expected, 0 if unknown */
    const char *unit;    /* e.g. "tok", "MB" */
    double t_start, t_last;
    int is_tty;
    double log_interval; /* seconds between lines when stderr is not a terminal; 0: silent there */
    int quiet, logged;   /* logged: a line was printed (the first is printed at once) */
} Progress;
void progress_begin(Progress *p, const char *label, int64_t total, const char *unit);
void progress_update(Progress *p, int64_t done, const char *extra);
void progress_end(Progress *p, int64_t done, const char *extra);

#endif /* KVCPT_UTIL_H */
