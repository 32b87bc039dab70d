#ifndef KVCPT_OPTIONS_H
#define KVCPT_OPTIONS_H
/* One table per subcommand drives both the parser and --help, so the two
 * cannot drift apart. */
#include <stddef.h>
#include <stdint.h>

/* OPT_COUNT and OPT_POSITIVE are OPT_INT restricted to >= 0 and >= 1: a
 * count, size or length given as -1 is refused by the parser, naming the
 * option, instead of reaching code that reads it as "none" or "all". */
typedef enum { OPT_FLAG, OPT_INT, OPT_COUNT, OPT_POSITIVE, OPT_FLOAT, OPT_STRING, OPT_STRINGS, OPT_ALIAS } OptType;

typedef struct {
    const char *name;   /* long name without dashes, e.g. "device" */
    OptType type;
    void *dst;          /* int* (flag), int64_t* (the integer kinds), double*, const char**, StringList* */
    const char *metavar;/* shown in help, e.g. "N" or "cpu|cuda" */
    const char *help;
} Option;
/* A row {"context", OPT_ALIAS, NULL, "L", NULL} accepts --context as another
 * name of --L; --help lists it beside --L, not on a line of its own. */

/* Repeatable string options (--input a --input b, or --input a b). */
typedef struct {
    const char **items;
    int count;
} StringList;

/* Parses argv (argv[0] is the subcommand name). Unknown options, missing
 * values and malformed numbers are fatal errors naming the option.
 * Returns 1 when --help was given (help already printed), else 0. */
int options_parse(const char *cmd, const char *summary, const Option *opts, int argc, char **argv);
/* --help: each option's help text followed by "(default V)", V read from
 * the option's destination before parsing, so a default is written once
 * (where the variable starts) and the help cannot contradict it. Options
 * without a value (flags, unset strings) print no default. */
void options_print_help(const char *cmd, const char *summary, const Option *opts);
/* The default options_print_help shows for o into buf; 0 when it shows none. */
int options_default_text(const Option *o, char *buf, size_t n);
/* The option whose table name is name as the user typed it in the last
 * options_parse: "--budget" when --budget (an alias of --K) was given,
 * "--K" when --K was, or not given at all. For errors about its value. */
const char *options_spelled(const char *name);
/* "a,b,c" -> up to cap non-negative integers; dies naming the option
 * `what` (its table name) as the user typed it otherwise. */
int options_int_list(const char *s, int64_t *out, int cap, const char *what);

#endif
