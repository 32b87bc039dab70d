#ifndef KVCPT_SELF_RESTART_H
#define KVCPT_SELF_RESTART_H
/* Some settings are read by a library when it loads, before main
 * (OPENBLAS_CORETYPE, OMP_WAIT_POLICY): the program applies them by setting
 * the variables and running itself again, once (they are set then). */

typedef struct {
    const char *name, *value;
    int keep_user; /* a value the user set is kept (else it is replaced) */
} RestartVar;

/* Sets the n variables and, when any of them changed, runs /proc/self/exe
 * again with argv. Returns only when nothing changed, or when setting or
 * execv failed: then says so on stderr, naming the variables, and the
 * program goes on as it is. */
void self_restart(char **argv, const RestartVar *vars, int n);
#endif
