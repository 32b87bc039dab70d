#include "subprocess.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

int subprocess_found(const char *prog) {
    if (strchr(prog, '/')) return access(prog, X_OK) == 0;
    const char *path = getenv("PATH");
    if (!path) return 0;
    char cand[4096];
    for (const char *p = path; *p;) {
        size_t n = strcspn(p, ":");
        int len = snprintf(cand, sizeof cand, "%.*s/%s", (int)n, p, prog);
        if (n > 0 && len > 0 && (size_t)len < sizeof cand && access(cand, X_OK) == 0) return 1;
        p += n;
        if (*p == ':') p++;
    }
    return 0;
}

/* In the child: fd `target` reads or writes `path` (NULL: /dev/null). */
static void redirect(int target, const char *path, int flags) {
    int fd = open(path ? path : "/dev/null", flags | O_CLOEXEC, 0644);
    if (fd < 0 || dup2(fd, target) < 0) _exit(127);
    close(fd);
}

int subprocess_run(const char *const argv[], const char *stdin_path, const char *log_path, char *out, size_t out_cap) {
    int pipefd[2] = {-1, -1};
    if (out && (out_cap == 0 || pipe(pipefd) != 0)) return -1;
    fflush(NULL); /* buffered output must not be written twice by the child */
    pid_t pid = fork();
    if (pid < 0) {
        if (out) {
            close(pipefd[0]);
            close(pipefd[1]);
        }
        return -1;
    }
    if (pid == 0) {
        redirect(STDIN_FILENO, stdin_path, O_RDONLY);
        redirect(STDERR_FILENO, log_path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW); /* never through a planted link */
        if (out) {
            close(pipefd[0]);
            if (dup2(pipefd[1], STDOUT_FILENO) < 0) _exit(127);
            close(pipefd[1]);
        } else if (dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
            _exit(127);
        }
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    if (out) {
        close(pipefd[1]);
        size_t got = 0;
        for (;;) {
            char sink[4096];
            char *dst = got + 1 < out_cap ? out + got : sink;
            size_t room = got + 1 < out_cap ? out_cap - 1 - got : sizeof sink;
            ssize_t r = read(pipefd[0], dst, room);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            if (dst != sink) got += (size_t)r;
        }
        out[got] = '\0';
        close(pipefd[0]);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) && WEXITSTATUS(status) != 127 ? WEXITSTATUS(status) : -1;
}

void exe_self_path(char *out, size_t cap) {
    ssize_t n = readlink("/proc/self/exe", out, cap - 1);
    KV_CHECK(n > 0 && (size_t)n < cap - 1, "cannot locate the running executable");
    out[n] = '\0';
}

void exe_dir_path(char *out, size_t cap, const char *rel) {
    char exe[4096];
    exe_self_path(exe, sizeof exe);
    *strrchr(exe, '/') = '\0';
    path_fmt(out, cap, "%s/%s", exe, rel);
    /* a build variant (build/asan/kvcpt, build/emu/kvcpt) finds the repository's
     * scripts a few directories up; the program's own directory comes first */
    char dir[4096], cand[4096];
    path_fmt(dir, sizeof dir, "%s", exe);
    for (int up = 0; up < 3; up++) {
        path_fmt(cand, sizeof cand, "%s/%s", dir, rel);
        if (access(cand, R_OK) == 0) {
            path_fmt(out, cap, "%s", cand);
            return;
        }
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir) return;
        *slash = '\0';
    }
}

void subprocess_last_line(const char *path, char *out, size_t cap) {
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0]) snprintf(out, cap, "%s", line);
    }
    fclose(f);
}
