#ifndef KVCPT_CKPT_TESTUTIL_H
#define KVCPT_CKPT_TESTUTIL_H
/* Helpers shared by the checkpoint tests: building file images in memory and
 * running a code path that must exit with an error in a child process. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testlib.h"

typedef struct {
    uint8_t *p;
    int64_t n;
} Bytes;

/* A safetensors image: 8-byte length, header text as given, then data_len
 * bytes of a repeating pattern. */
static inline Bytes st_image(const char *header, int64_t data_len) {
    int64_t h = (int64_t)strlen(header);
    Bytes b = {calloc((size_t)(8 + h + data_len) + 1, 1), 8 + h + data_len};
    for (int i = 0; i < 8; i++) b.p[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(b.p + 8, header, (size_t)h);
    for (int64_t i = 0; i < data_len; i++) b.p[8 + h + i] = (uint8_t)(i * 7 + 1);
    return b;
}

static inline void write_bytes(const char *path, const void *p, int64_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, (size_t)n, f) != (size_t)n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
}

/* Runs fn(arg) in a child with stderr captured; passes when the child exits
 * with status 1 (an error, not a crash) and its message contains `want`. */
static inline void expect_error(const char *name, void (*fn)(void *), void *arg, const char *want) {
    int fds[2];
    if (pipe(fds) != 0) exit(2);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        fn(arg);
        _exit(0);
    }
    close(fds[1]);
    char msg[4096] = {0};
    int64_t got = 0;
    ssize_t k;
    while ((k = read(fds[0], msg + got, sizeof msg - 1 - (size_t)got)) > 0) got += k;
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    int exited = WIFEXITED(status) && WEXITSTATUS(status) == 1;
    tl_result(exited && strstr(msg, want) != NULL, name, "%s; stderr: %.600s",
              exited ? "message lacks the expected text" : "child did not exit with status 1 (crash or success)", msg);
}

#endif
