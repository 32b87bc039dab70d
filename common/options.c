#include "options.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

int options_default_text(const Option *o, char *buf, size_t n) {
    switch (o->type) {
        case OPT_INT:
        case OPT_COUNT:
        case OPT_POSITIVE: snprintf(buf, n, "%lld", (long long)*(const int64_t *)o->dst); return 1;
        case OPT_FLOAT: snprintf(buf, n, "%g", *(const double *)o->dst); return 1;
        case OPT_STRING: {
            const char *v = *(const char *const *)o->dst;
            if (!v || !*v) return 0;
            snprintf(buf, n, "%s", v);
            return 1;
        }
        case OPT_STRINGS: {
            const StringList *l = (const StringList *)o->dst;
            if (l->count == 0) return 0;
            buf[0] = '\0';
            for (int i = 0; i < l->count; i++)
                snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", i ? " " : "", l->items[i]);
            return 1;
        }
        case OPT_FLAG:
        case OPT_ALIAS: return 0;
    }
    return 0;
}

void options_print_help(const char *cmd, const char *summary, const Option *opts) {
    printf("usage: kvcpt %s [options]\n\n%s\n\noptions:\n", cmd, summary);
    for (const Option *o = opts; o->name; o++) {
        char lhs[96], dflt[512];
        snprintf(lhs, sizeof lhs, "--%s%s%s", o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
        if (o->type == OPT_ALIAS) continue;
        char also[96] = "";
        for (const Option *a = opts; a->name; a++)
            if (a->type == OPT_ALIAS && strcmp(a->metavar, o->name) == 0)
                snprintf(also + strlen(also), sizeof also - strlen(also), " (also --%s)", a->name);
        if (options_default_text(o, dflt, sizeof dflt)) printf("  %-30s %s%s (default %s)\n", lhs, o->help, also, dflt);
        else printf("  %-30s %s%s\n", lhs, o->help, also);
    }
    printf("  %-30s %s\n", "--help", "show this help and exit");
}

/* How the user spelled each option of the table last parsed: its own name,
 * or the alias it was given by, so that an error about its value names
 * what the user typed ("--budget" or "--K"). One table per process: a
 * subcommand parses its options once. */
#define MAX_SPELLED 128
static struct {
    char name[48], typed[52];
} spelled[MAX_SPELLED];
static int n_spelled;

static void spelled_reset(const Option *opts) {
    n_spelled = 0;
    for (const Option *o = opts; o->name && n_spelled < MAX_SPELLED; o++) {
        if (o->type == OPT_ALIAS || strlen(o->name) >= sizeof spelled[0].name) continue;
        snprintf(spelled[n_spelled].name, sizeof spelled[0].name, "%s", o->name);
        snprintf(spelled[n_spelled].typed, sizeof spelled[0].typed, "--%s", o->name);
        n_spelled++;
    }
}

static void spelled_record(const Option *o, const char *typed) {
    for (int i = 0; i < n_spelled; i++)
        if (strcmp(spelled[i].name, o->name) == 0 && strlen(typed) + 2 < sizeof spelled[0].typed)
            snprintf(spelled[i].typed, sizeof spelled[0].typed, "--%s", typed);
}

const char *options_spelled(const char *name) {
    for (int i = 0; i < n_spelled; i++)
        if (strcmp(spelled[i].name, name) == 0) return spelled[i].typed;
    /* not in the table parsed (a library function called from a test): its
     * own name, from a few rotating buffers so that one message can hold two */
    static char own[4][52];
    static int next;
    char *b = own[next++ % 4];
    snprintf(b, sizeof own[0], "--%s", name);
    return b;
}

static const Option *find_option(const Option *opts, const char *name) {
    for (const Option *o = opts; o->name; o++)
        if (strcmp(o->name, name) == 0) {
            if (o->type != OPT_ALIAS) return o;
            for (const Option *t = opts; t->name; t++)
                if (t->type != OPT_ALIAS && strcmp(t->name, o->metavar) == 0) return t;
            die("option table: alias --%s names no option --%s", o->name, o->metavar);
        }
    return NULL;
}

static void set_value(const char *cmd, const Option *o, const char *val) {
    char *end = NULL;
    errno = 0;
    switch (o->type) {
        case OPT_INT:
        case OPT_COUNT:
        case OPT_POSITIVE: {
            long long v = strtoll(val, &end, 10);
            long long min = o->type == OPT_COUNT ? 0 : 1;
            if (errno || end == val || *end)
                die("kvcpt %s: %s expects an integer, got '%s'", cmd, options_spelled(o->name), val);
            if (o->type != OPT_INT && v < min)
                die("kvcpt %s: %s expects an integer >= %lld, got '%s'", cmd, options_spelled(o->name), min, val);
            *(int64_t *)o->dst = (int64_t)v;
            break;
        }
        case OPT_FLOAT: {
            double v = strtod(val, &end);
            if (errno || end == val || *end)
                die("kvcpt %s: %s expects a number, got '%s'", cmd, options_spelled(o->name), val);
            *(double *)o->dst = v;
            break;
        }
        case OPT_STRING: *(const char **)o->dst = val; break;
        case OPT_STRINGS: {
            StringList *l = (StringList *)o->dst;
            l->items = xrealloc((void *)l->items, sizeof(char *) * (size_t)(l->count + 1));
            l->items[l->count++] = val;
            break;
        }
        case OPT_FLAG:
        case OPT_ALIAS: break;
    }
}

int options_parse(const char *cmd, const char *summary, const Option *opts, int argc, char **argv) {
    spelled_reset(opts);
    /* --help first, wherever it stands: the defaults it prints are the
     * table's starting values, not ones an earlier option already changed */
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            options_print_help(cmd, summary, opts);
            return 1;
        }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0)
            die("kvcpt %s: unexpected argument '%s'; hint: options start with --, see 'kvcpt %s --help'", cmd, a, cmd);
        char name[128];
        const char *eq = strchr(a + 2, '=');
        size_t n = eq ? (size_t)(eq - (a + 2)) : strlen(a + 2);
        if (n >= sizeof name) die("kvcpt %s: option name too long: '%s'", cmd, a);
        memcpy(name, a + 2, n);
        name[n] = '\0';
        const Option *o = find_option(opts, name);
        if (!o) die("kvcpt %s: unknown option '--%s'; see 'kvcpt %s --help'", cmd, name, cmd);
        spelled_record(o, name);
        if (o->type == OPT_FLAG) {
            if (eq) die("kvcpt %s: --%s takes no value", cmd, name);
            *(int *)o->dst = 1;
            continue;
        }
        if (eq) {
            set_value(cmd, o, eq + 1);
            continue;
        }
        if (i + 1 >= argc) die("kvcpt %s: --%s needs a value (%s)", cmd, name, o->metavar ? o->metavar : "value");
        set_value(cmd, o, argv[++i]);
        /* a list option swallows following non-option words: --input a b c */
        while (o->type == OPT_STRINGS && i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
            set_value(cmd, o, argv[++i]);
    }
    return 0;
}

int options_int_list(const char *s, int64_t *out, int cap, const char *what) {
    int n = 0;
    char *copy = xstrdup(s), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *end;
        errno = 0;
        long long v = strtoll(tok, &end, 10);
        if (errno || end == tok || *end || v < 0 || n == cap)
            die("%s: expected up to %d comma-separated integers (got '%s')", options_spelled(what), cap, s);
        out[n++] = v;
    }
    free(copy);
    return n;
}
