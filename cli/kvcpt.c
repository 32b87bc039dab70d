/* kvcpt: continued pretraining with RefreshKV attention and KV-cache policy
 * evaluation. main() only dispatches to a subcommand. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../backends/backends.h"
#include "../common/backend.h"
#include "../common/build_info.h"
#include "../common/self_restart.h"
#include "../common/util.h"
#include "../common/version.h"
#include "../kernels/blas_core.h"
#include "../parallel/comm.h"
#include "commands.h"

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
    int sharded; /* splits its work across the ranks of an MPI launch */
} Command;

static const Command commands[] = {
    {"prepare", cmd_prepare, "text (JSONL, .zst, .txt) -> tokenized train/dev/test shards", 0},
    {"train", cmd_train, "pretraining or RefreshKV continued pretraining", 1},
    {"eval", cmd_eval, "perplexity of every KV-cache policy, before/after CPT", 0},
    {"convert", cmd_convert, "model formats: llama.cpp GGUF -> Hugging Face, Hugging Face <-> native", 0},
    {"tokenize", cmd_tokenize, "a tokenizer.json's encoding: text on stdin -> token ids", 0},
    {"plan", cmd_plan, "memory per rank of a sharded training step (N = 1, 2, 4, 8)", 0},
    {"bench", cmd_bench, "throughput figures (model, adamw, tokenizer, decode, ops)", 0},
};
#define N_COMMANDS (int)(sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
    fprintf(f, "usage: kvcpt <command> [options]   (kvcpt <command> --help for its options)\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "  %-10s %s\n", "--version", "version and compiled backends");
}

/* Only train splits its work across ranks. Any other command under a
 * multi-rank launch would run whole on every rank: each on device 0 (no
 * rank picks a GPU), each writing the same output files at once. Refused
 * rather than left to rank 0 alone, because the launch itself is the
 * mistake: the other ranks would hold their slots (and GPUs) doing nothing,
 * and a user who asked for N ranks expects N-way work. */
static void refuse_unsharded(const Command *cmd) {
    int world = comm_launcher_world();
    if (cmd->sharded || world <= 1) return;
    if (comm_launcher_rank() > 0) exit_after_rank0(2); /* said once, by rank 0 */
    fprintf(stderr,
            "kvcpt %s: error: started by an MPI launcher with %d ranks, but only `kvcpt train` splits its work across "
            "ranks; every rank would run the whole %s on device 0 and write the same files. Run it as one process "
            "(no mpirun, or mpirun -np 1)\n",
            cmd->name, world, cmd->name);
    exit(2);
}

/* Settings that the libraries read when they load, before main, so the
 * program applies them by running itself again (once: the variables are
 * set then; a user's own settings are kept):
 * - OPENBLAS_CORETYPE, when OpenBLAS picked kernels below what the CPU has
 *   (kernels/blas_core.h: an unknown CPU model gets the SSE3 kernels, 4x
 *   slower);
 * - for eval, OMP_WAIT_POLICY=passive. eval runs hundreds of short OpenMP
 *   regions per decode step; libgomp's default is to spin at the end of
 *   each, which on a machine with more runnable threads than cores turns
 *   every barrier into a wait for a descheduled thread: on the shared 2-core
 *   VM at load 7, an L = 64 eval of SmolLM2-135M took 25 s spinning and 2 s
 *   passive (same results: the policy only changes how threads wait). */
static void restart_with_settings(const char *command, char **argv) {
    RestartVar vars[3];
    int n = blas_core_restart_vars(vars);
    if (strcmp(command, "eval") == 0) vars[n++] = (RestartVar){"OMP_WAIT_POLICY", "passive", 1};
    self_restart(argv, vars, n);
}

int main(int argc, char **argv) {
    backends_register();
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        restart_with_settings(argv[1], argv);
        printf("kvcpt %s (commit %s)\n", KVCPT_VERSION, kvcpt_commit());
        backend_describe();
        printf("collectives: %s\n", comm_compiled_backends());
        printf("blas: %s\n", blas_core_summary());
        return 0;
    }
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(argv[1], commands[i].name) == 0) {
            refuse_unsharded(&commands[i]);
            restart_with_settings(argv[1], argv);
            return commands[i].fn(argc - 1, argv + 1);
        }
    fprintf(stderr, "kvcpt: error: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
