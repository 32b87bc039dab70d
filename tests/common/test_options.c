/* The option parser: each printed default is the destination's starting
 * value (--help is answered before any other option is applied), an alias
 * row sets its target and is listed beside it, flags and unset strings
 * print no default, and an option is named in errors as the user typed it
 * (options_spelled: the alias when the alias was given). */
#include <string.h>
#include <unistd.h>

#include "../../common/options.h"
#include "../../common/util.h"
#include "../testlib.h"

/* Runs options_parse on argv with stdout captured into out. */
static int parse_captured(const Option *opts, int argc, char **argv, char *out, size_t cap) {
    fflush(stdout);
    FILE *tmp = tmpfile();
    KV_CHECK(tmp != NULL, "tmpfile failed");
    int saved = dup(1);
    KV_CHECK(saved >= 0 && dup2(fileno(tmp), 1) >= 0, "cannot redirect stdout");
    int r = options_parse("demo", "a test table", opts, argc, argv);
    fflush(stdout);
    KV_CHECK(dup2(saved, 1) >= 0, "cannot restore stdout");
    close(saved);
    rewind(tmp);
    size_t n = fread(out, 1, cap - 1, tmp);
    out[n] = '\0';
    fclose(tmp);
    return r;
}

typedef struct {
    const Option *opts;
    char **argv;
} ParseArgs;

static void parse_quietly(void *arg) {
    const ParseArgs *p = arg;
    int argc = 0;
    while (p->argv[argc]) argc++;
    options_parse("demo", "a test table", p->opts, argc, p->argv);
}

int main(void) {
    int64_t n = 42, L = 8192, count = 5, pos = 3;
    double f = 0.85;
    const char *s = "runs/eval", *unset = NULL, *empty = "";
    int flag = 0;
    StringList list = {0};
    const Option opts[] = {
        {"n", OPT_INT, &n, "N", "a count"},
        {"f", OPT_FLOAT, &f, "X", "a threshold"},
        {"s", OPT_STRING, &s, "DIR", "a directory"},
        {"unset", OPT_STRING, &unset, "P", "absent: something else"},
        {"empty", OPT_STRING, &empty, "E", "empty means none"},
        {"flag", OPT_FLAG, &flag, NULL, "a flag"},
        {"list", OPT_STRINGS, &list, "A", "repeatable"},
        {"L", OPT_INT, &L, "L", "prefill length"},
        {"context", OPT_ALIAS, NULL, "L", NULL},
        {"count", OPT_COUNT, &count, "N", "a count, 0 allowed"},
        {"pos", OPT_POSITIVE, &pos, "N", "a size"},
        {0},
    };
    char buf[64], out[8192];
    tl_result(options_default_text(&opts[0], buf, sizeof buf) && strcmp(buf, "42") == 0, "int default text", "'%s'",
              buf);
    tl_result(options_default_text(&opts[1], buf, sizeof buf) && strcmp(buf, "0.85") == 0, "float default text", "'%s'",
              buf);
    tl_result(options_default_text(&opts[2], buf, sizeof buf) && strcmp(buf, "runs/eval") == 0, "string default text",
              "'%s'", buf);
    tl_result(!options_default_text(&opts[3], buf, sizeof buf) && !options_default_text(&opts[4], buf, sizeof buf) &&
                  !options_default_text(&opts[5], buf, sizeof buf) &&
                  !options_default_text(&opts[6], buf, sizeof buf) && !options_default_text(&opts[8], buf, sizeof buf),
              "unset or empty strings, flags, empty lists and aliases print no default", "");

    /* --help after options that change values still prints the starting ones */
    char *argv1[] = {"demo", "--n", "7", "--f", "0.5", "--context", "99", "--help", NULL};
    int r = parse_captured(opts, 8, argv1, out, sizeof out);
    tl_result(r == 1 && n == 42 && f == 0.85 && L == 8192, "--help is answered before any option is applied",
              "r %d n %lld f %g L %lld", r, (long long)n, f, (long long)L);
    tl_result(strstr(out, "a count (default 42)") && strstr(out, "a threshold (default 0.85)") &&
                  strstr(out, "a directory (default runs/eval)") &&
                  strstr(out, "prefill length (also --context) (default 8192)"),
              "help prints each default from the table's starting value", "%s", out);
    tl_result(!strstr(out, "absent: something else (default") && !strstr(out, "a flag (default") &&
                  !strstr(out, "--context L") && !strstr(out, "empty means none (default"),
              "no default where there is none; the alias has no line of its own", "%s", out);

    char *argv2[] = {"demo", "--context", "123", "--n=5", "--flag", "--list", "a", "b", NULL};
    r = parse_captured(opts, 8, argv2, out, sizeof out);
    tl_result(r == 0 && L == 123 && n == 5 && flag == 1 && list.count == 2, "an alias sets its target",
              "r %d L %lld n %lld flag %d list %d", r, (long long)L, (long long)n, flag, list.count);
    tl_result(strcmp(options_spelled("L"), "--context") == 0 && strcmp(options_spelled("n"), "--n") == 0 &&
                  strcmp(options_spelled("f"), "--f") == 0,
              "an option given by its alias is spelled as the alias, one given by its name (or not given) by its name",
              "L '%s' n '%s' f '%s'", options_spelled("L"), options_spelled("n"), options_spelled("f"));
    char *argv3[] = {"demo", "--context", "5", "--L", "6", NULL};
    parse_captured(opts, 5, argv3, out, sizeof out);
    tl_result(L == 6 && strcmp(options_spelled("L"), "--L") == 0,
              "the spelling is the last one given (the one whose value counts)", "L %lld '%s'", (long long)L,
              options_spelled("L"));
    char *argv4[] = {"demo", "--n", "1", NULL};
    parse_captured(opts, 3, argv4, out, sizeof out);
    tl_result(strcmp(options_spelled("L"), "--L") == 0, "a new parse forgets the spellings of the last one", "'%s'",
              options_spelled("L"));
    free((void *)list.items);

    /* the restricted integer kinds: below their range refused naming the
     * option, their lowest values pass, --help prints their defaults */
    char *below0[] = {"demo", "--count", "-1", NULL}, *below1[] = {"demo", "--pos=0", NULL};
    tl_expect_death("--count -1 refused", parse_quietly, &(ParseArgs){opts, below0},
                    "--count expects an integer >= 0, got '-1'");
    tl_expect_death("--pos=0 refused", parse_quietly, &(ParseArgs){opts, below1},
                    "--pos expects an integer >= 1, got '0'");
    tl_result(options_default_text(&opts[9], buf, sizeof buf) && strcmp(buf, "5") == 0 &&
                  options_default_text(&opts[10], buf, sizeof buf) && strcmp(buf, "3") == 0,
              "count and positive defaults print", "'%s'", buf);
    char *argv5[] = {"demo", "--count", "0", "--pos=1", "--n", "-7", NULL};
    r = parse_captured(opts, 6, argv5, out, sizeof out);
    tl_result(r == 0 && count == 0 && pos == 1 && n == -7,
              "--count 0 and --pos 1 accepted, a plain integer may be negative", "r %d count %lld pos %lld n %lld", r,
              (long long)count, (long long)pos, (long long)n);
    return tl_finish();
}
