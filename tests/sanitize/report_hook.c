/* Linked into build/asan/kvcpt only (make sanitize). Every sanitizer report
 * (AddressSanitizer, LeakSanitizer, UBSan) ends with a summary that the
 * runtime hands to this hook. It is appended to the file
 * $KVCPT_SANITIZER_REPORTS, so that a report is counted even when the runtime
 * wrote it to the stderr of a test that only checked for a non-zero exit
 * (UBSan, in the combined runtime, ignores log_path). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void __sanitizer_report_error_summary(const char *summary);
void __sanitizer_report_error_summary(const char *summary) {
    char line[2048];
    int n = snprintf(line, sizeof line, "pid %d: %s\n", (int)getpid(), summary);
    if (n < 0) return;
    size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    if (write(STDERR_FILENO, line, len) < 0) { /* the report itself was already printed */
    }
    const char *path = getenv("KVCPT_SANITIZER_REPORTS");
    if (!path || !*path) return;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return;
    if (write(fd, line, len) < 0) { /* nothing more to do from inside a report */
    }
    close(fd);
}
