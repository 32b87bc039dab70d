#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Temporaries written but not yet renamed into place (see fopen_check):
 * removed by die_at, so a write that fails half way (a full disk) leaves no
 * partial file holding the space. */
#define MAX_PENDING_TEMPS 64
static char *pending_temps[MAX_PENDING_TEMPS];

static int is_temp_name(const char *path) {
    size_t n = strlen(path);
    return n > 4 && strcmp(path + n - 4, ".tmp") == 0;
}

static void temp_track(const char *path) {
#pragma omp critical(kvcpt_pending_temps)
    {
        int free_slot = -1, known = 0;
        for (int i = 0; i < MAX_PENDING_TEMPS; i++) {
            if (pending_temps[i] && strcmp(pending_temps[i], path) == 0) known = 1;
            if (!pending_temps[i] && free_slot < 0) free_slot = i;
        }
        if (!known && free_slot >= 0) pending_temps[free_slot] = strdup(path); /* full or NULL: not tracked */
    }
}

static void temp_untrack(const char *path) {
#pragma omp critical(kvcpt_pending_temps)
    for (int i = 0; i < MAX_PENDING_TEMPS; i++)
        if (pending_temps[i] && strcmp(pending_temps[i], path) == 0) {
            free(pending_temps[i]);
            pending_temps[i] = NULL;
        }
}

static int die_silent;

void die_set_silent(int silent) { die_silent = silent; }

/* The source location is for whoever debugs kvcpt, not for a user reading
 * what went wrong with their run: shown only when asked for. */
static int debug_locations(void) {
    const char *v = getenv("KVCPT_DEBUG");
    return v && strcmp(v, "1") == 0;
}

void die_at(const char *src, int line, const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    if (!die_silent) {
        fputs("kvcpt: error: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        if (debug_locations()) fprintf(stderr, " (at %s:%d)", src, line);
        fputc('\n', stderr);
    }
    for (int i = 0; i < MAX_PENDING_TEMPS; i++)
        if (pending_temps[i]) unlink(pending_temps[i]);
    if (die_silent) exit_after_rank0(1);
    exit(1);
}

void exit_after_rank0(int status) {
    /* rank 0 prints the message and ends; the launcher then ends the job,
     * naming the first rank that failed: waited for (rank 0 needs
     * microseconds, a loaded machine may hold it back a little), so that
     * the rank named is the one whose message is on the screen */
    sleep(3);
    exit(status);
}

void warnf(const char *fmt, ...) {
    va_list ap;
    fputs("kvcpt: warning: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void path_fmt_at(char *out, size_t n, const char *src, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(out, n, fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= n)
        die_at(src, line, "path too long (%d bytes, at most %zu): '%.80s...'", len, n - 1, out);
}

int parse_error(char *err, int errlen, const char *kind, const char *origin, int64_t offset, const char *fmt, ...) {
    int k = snprintf(err, (size_t)errlen, "%s '%s' at byte %lld: ", kind, origin, (long long)offset);
    if (k < 0 || k >= errlen) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + k, (size_t)(errlen - k), fmt, ap);
    va_end(ap);
    return -1;
}

void *malloc_at(size_t n, const char *src, int line) {
    void *p = malloc(n ? n : 1);
    if (!p) die_at(src, line, "out of memory allocating %zu bytes", n);
    return p;
}

void *calloc_at(size_t count, size_t size, const char *src, int line) {
    if (size && count > SIZE_MAX / size) die_at(src, line, "allocation size overflow: %zu x %zu", count, size);
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) die_at(src, line, "out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

void *realloc_at(void *p, size_t n, const char *src, int line) {
    void *q = realloc(p, n ? n : 1);
    if (!q) die_at(src, line, "out of memory reallocating to %zu bytes", n);
    return q;
}

char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = xmalloc(n);
    memcpy(d, s, n);
    return d;
}

/* fd, opened with O_NONBLOCK so that a FIFO could not block the open: kept
 * and made blocking when it is a regular file, else closed (-1, errno EINVAL
 * for "not a regular file"). */
static int keep_if_regular(int fd) {
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int open_regular_file(const char *path) { return keep_if_regular(open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)); }

const char *open_regular_strerror(int err) { return err == EINVAL ? "not a regular file" : strerror(err); }

FILE *fopen_at(const char *path, const char *mode, const char *src, int line) {
    FILE *f = NULL;
    if (mode[0] == 'r' && !strchr(mode, '+')) {
        int fd = open_regular_file(path);
        if (fd < 0 && errno == EINVAL) die_at(src, line, "'%s' is not a regular file", path);
        if (fd >= 0 && !(f = fdopen(fd, mode))) close(fd);
    } else {
        /* never through a symbolic link planted at the name (O_NOFOLLOW), and
         * never blocking on a FIFO there (O_NONBLOCK, then a regular-file check) */
        int flags = O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (strchr(mode, '+') ? O_RDWR : O_WRONLY);
        if (mode[0] == 'a') flags |= O_CREAT | O_APPEND; /* "r+": an existing file, as it is */
        int fd;
        if (mode[0] == 'w') {
            /* "w" makes a new file (O_EXCL) after removing a regular file of
             * that name: truncating in place would write through a hard link
             * planted there, or into a file another process still reads */
            struct stat st;
            if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && unlink(path) != 0)
                die_at(src, line, "cannot replace '%s': %s", path, strerror(errno));
            fd = open(path, flags | O_CREAT | O_EXCL, 0644);
            if (fd < 0 && errno == EEXIST) { /* what is there is no regular file, or one appeared meanwhile */
                if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) errno = ELOOP;
                else if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) errno = EINVAL;
            }
        } else fd = open(path, flags, 0644);
        if (fd < 0 && errno == ELOOP)
            die_at(src, line, "'%s' is a symbolic link; refusing to write through it (remove it first)", path);
        if (fd < 0 && errno == EINVAL)
            die_at(src, line, "'%s' exists and is not a regular file; refusing to write to it", path);
        fd = keep_if_regular(fd);
        if (fd < 0 && errno == EINVAL)
            die_at(src, line, "'%s' exists and is not a regular file; refusing to write to it", path);
        if (fd >= 0 && !(f = fdopen(fd, mode))) close(fd);
        if (f && mode[0] == 'w' && is_temp_name(path)) temp_track(path);
    }
    if (!f)
        die_at(src, line, "cannot open '%s' (mode %s): %s%s", path, mode, strerror(errno),
               errno == ENOENT ? "; hint: check the path" : "");
    return f;
}

void fread_at(void *dst, size_t size, size_t count, FILE *f, const char *path, const char *src, int line) {
    long off = ftell(f);
    size_t got = fread(dst, size, count, f);
    if (got != count)
        die_at(src, line, "'%s': short read at offset %ld: expected %zu items of %zu bytes, got %zu (%s)", path, off,
               count, size, got, feof(f) ? "file is truncated" : strerror(errno));
}

void fwrite_at(const void *p, size_t size, size_t count, FILE *f, const char *path, const char *src, int line) {
    size_t put = fwrite(p, size, count, f);
    if (put != count)
        die_at(src, line, "'%s': short write: %zu of %zu items of %zu bytes (%s)", path, put, count, size,
               strerror(errno));
}

void fclose_at(FILE *f, const char *path, const char *src, int line) {
    if (fclose(f) != 0) die_at(src, line, "'%s': close failed: %s", path, strerror(errno));
}

int64_t file_size(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    return (int64_t)st.st_size;
}

char *read_text_file(const char *path, int64_t *len_out) {
    FILE *f = fopen_check(path, "rb");
    int64_t n = file_size(path);
    if (n < 0) die("cannot stat '%s': %s", path, strerror(errno));
    char *buf = xmalloc((size_t)n + 1);
    if (n > 0) fread_check(buf, 1, (size_t)n, f, path);
    buf[n] = '\0';
    fclose(f);
    if (len_out) *len_out = n;
    return buf;
}

int make_dirs_try(const char *path, char *failed, size_t n) {
    char *tmp = xstrdup(path);
    int err = 0;
    for (char *p = tmp + 1; *p && !err; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) err = errno;
        else *p = '/';
    }
    if (!err && mkdir(tmp, 0755) != 0 && errno != EEXIST) err = errno;
    if (err) snprintf(failed, n, "%s", tmp);
    free(tmp);
    return err;
}

void make_dirs(const char *path) {
    char failed[4200];
    int err = make_dirs_try(path, failed, sizeof failed);
    if (err) die("cannot create directory '%s': %s", failed, strerror(err));
}

void rename_check(const char *tmp, const char *final_path) {
    if (rename(tmp, final_path) != 0) die("cannot rename '%s' to '%s': %s", tmp, final_path, strerror(errno));
    temp_untrack(tmp);
}

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void progress_begin(Progress *p, const char *label, int64_t total, const char *unit) {
    memset(p, 0, sizeof *p);
    p->label = label;
    p->total = total;
    p->unit = unit;
    p->t_start = p->t_last = now_seconds();
    p->is_tty = isatty(fileno(stderr));
}

void clock_text(char *buf, size_t n, double s) {
    long t = s > 0 && s < 1e9 ? (long)(s + 0.5) : 0;
    if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

static void progress_draw(Progress *p, int64_t done, const char *extra, int final) {
    double dt = now_seconds() - p->t_start;
    double rate = dt > 0 ? (double)done / dt : 0.0;
    /* a terminal's line is redrawn in place; a log gets whole lines */
    const char *pre = p->is_tty ? "\r" : "", *post = final || !p->is_tty ? "\n" : "";
    char el[32], eta[32];
    clock_text(el, sizeof el, dt);
    if (p->total > 0) {
        int width = 30, fill = (int)(width * (double)done / (double)p->total);
        if (fill > width) fill = width;
        char bar[64];
        memset(bar, '#', (size_t)fill);
        memset(bar + fill, '.', (size_t)(width - fill));
        bar[width] = '\0';
        if (rate > 0) clock_text(eta, sizeof eta, (double)(p->total - done) / rate);
        else snprintf(eta, sizeof eta, "?");
        fprintf(stderr, "%s%s [%s] %lld/%lld %s  %.1f %s/s  elapsed %s  ETA %s %s%s", pre, p->label, bar,
                (long long)done, (long long)p->total, p->unit, rate, p->unit, el, eta, extra ? extra : "", post);
    } else {
        fprintf(stderr, "%s%s %lld %s  %.1f %s/s  elapsed %s %s%s", pre, p->label, (long long)done, p->unit, rate,
                p->unit, el, extra ? extra : "", post);
    }
    fflush(stderr);
}

void progress_update(Progress *p, int64_t done, const char *extra) {
    if (p->quiet || (!p->is_tty && p->log_interval <= 0)) return;
    double t = now_seconds();
    if (p->logged && t - p->t_last < (p->is_tty ? 0.1 : p->log_interval)) return;
    p->t_last = t;
    p->logged = 1;
    progress_draw(p, done, extra, 0);
}

void progress_end(Progress *p, int64_t done, const char *extra) {
    if (p->quiet || (!p->is_tty && p->log_interval <= 0)) return;
    progress_draw(p, done, extra, 1);
}
