/* kvcpt: continued pretraining with RefreshKV attention and KV-cache policy
 * evaluation. main() only dispatches to a subcommand. */
#include <stdio.h>
#include <string.h>

#include "common/backend.h"
#include "common/commands.h"
#include "common/version.h"
#include "parallel/comm.h"

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} Command;

static const Command commands[] = {
    {"prepare", cmd_prepare, "text (JSONL, .zst, .txt) -> tokenized train/dev/test shards"},
    {"train", cmd_train, "pretraining or RefreshKV continued pretraining"},
    {"eval", cmd_eval, "perplexity of every KV-cache policy, before/after CPT"},
    {"convert", cmd_convert, "Hugging Face safetensors <-> native checkpoints"},
    {"tokenize", cmd_tokenize, "Llama 3.1 tokenizer: text on stdin -> token ids"},
    {"plan", cmd_plan, "memory per rank of a sharded training step (N = 1, 2, 4, 8)"},
    {"bench", cmd_bench, "throughput figures (model, adamw, tokenizer, decode, ops)"},
};
#define N_COMMANDS (int)(sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
    fprintf(f, "usage: kvcpt <command> [options]   (kvcpt <command> --help for its options)\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "  %-10s %s\n", "--version", "version and compiled backends");
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("kvcpt %s\n", KVCPT_VERSION);
        backend_describe();
        printf("collectives: %s\n", comm_compiled_backends());
        return 0;
    }
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "kvcpt: error: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
