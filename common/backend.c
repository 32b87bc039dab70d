#include "backend.h"

#include <stdio.h>
#include <string.h>

#include "util.h"

enum { BACKEND_MAX = 8 };

static const Backend host = {.name = "cpu",
                             .label = "CPU",
                             .kind = BACKEND_HOST,
                             .compiled = 1,
                             .built_for = "C11 + OpenMP + OpenBLAS (always built)"};

static const Backend *registered[BACKEND_MAX];
static int n_registered;

void backend_register(const Backend *b) {
    if (!b) return;
    KV_CHECK(strcmp(b->name, host.name) != 0, "backend_register: '%s' is the host's name", b->name);
    for (int i = 0; i < n_registered; i++)
        KV_CHECK(strcmp(registered[i]->name, b->name) != 0, "backend_register: a second backend named '%s'", b->name);
    KV_CHECK(n_registered < BACKEND_MAX, "backend_register: more than %d backends", BACKEND_MAX);
    KV_CHECK(b->kind == BACKEND_ACCEL && (!b->compiled || b->device_count),
             "backend_register: '%s' must be an accelerator with a device count", b->name);
    registered[n_registered++] = b;
}

static int visible(const Backend *b) { return b->compiled && b->device_count() > 0; }

/* b as the one a run asked for (who: "--device cuda", "bench ops"): built and with a device */
static const Backend *usable(const Backend *b, const char *who) {
    if (!b->compiled) die("%s: this binary was built without the %s backend; hint: %s", who, b->label, b->hint);
    if (b->device_count() == 0) die("%s: no %s device is visible", who, b->label);
    return b;
}

int backend_known(const char *name) {
    if (strcmp(name, "auto") == 0 || strcmp(name, host.name) == 0) return 1;
    for (int i = 0; i < n_registered; i++)
        if (strcmp(name, registered[i]->name) == 0) return 1;
    return 0;
}

const char *backend_names(char *buf, size_t cap) {
    size_t len = (size_t)snprintf(buf, cap, "%s", host.name);
    for (int i = 0; i < n_registered && len < cap; i++)
        len +=
            (size_t)snprintf(buf + len, cap - len, "%s%s", i + 1 == n_registered ? " or " : ", ", registered[i]->name);
    return buf;
}

const Backend *backend_resolve(const char *requested) {
    if (!requested || strcmp(requested, "auto") == 0) {
        for (int i = 0; i < n_registered; i++)
            if (visible(registered[i])) return registered[i];
        return &host;
    }
    if (strcmp(requested, host.name) == 0) return &host;
    char who[96];
    snprintf(who, sizeof who, "--device %s", requested);
    for (int i = 0; i < n_registered; i++)
        if (strcmp(requested, registered[i]->name) == 0) return usable(registered[i], who);
    char names[256];
    die("--device must be %s (got '%s')", backend_names(names, sizeof names), requested);
}

const Backend *backend_require_accel(const char *who) {
    for (int i = 0; i < n_registered; i++)
        if (visible(registered[i])) return registered[i];
    for (int i = 0; i < n_registered; i++)
        if (registered[i]->compiled) return usable(registered[i], who);
    if (n_registered > 0) return usable(registered[0], who);
    die("%s: this binary was built without an accelerator backend", who);
}

void backend_describe(void) {
    printf("backend %s: %s\n", host.name, host.built_for);
    for (int i = 0; i < n_registered; i++) {
        const Backend *b = registered[i];
        if (b->compiled)
            printf("backend %s: compiled (%s); visible devices: %d\n", b->name, b->built_for, b->device_count());
        else printf("backend %s: not compiled (%s)\n", b->name, b->built_for);
    }
}
