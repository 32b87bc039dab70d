#include "byte_size.h"

#include <errno.h>
#include <stdlib.h>
#include <strings.h>

int byte_size_parse(const char *s, int64_t *bytes) {
    static const struct {
        const char *suffix;
        double mult;
    } units[] = {{"", 1},      {"B", 1},        {"KB", 1e3},        {"MB", 1e6},          {"GB", 1e9},
                 {"TB", 1e12}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s) return -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcasecmp(end, units[i].suffix) == 0 && v * units[i].mult >= 1 && v * units[i].mult < 9e18) {
            *bytes = (int64_t)(v * units[i].mult);
            return 0;
        }
    return -1;
}
