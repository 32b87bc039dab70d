/* `kvcpt train --config FILE [--set key=value ...] [--resume | --overwrite]` */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/options.h"
#include "../common/util.h"
#include "../parallel/comm.h"
#include "../train/train_config.h"
#include "../train/trainer.h"
#include "commands.h"

int cmd_train(int argc, char **argv) {
    const char *config = NULL;
    StringList sets = {0};
    int resume = 0, overwrite = 0, allow_schedule_change = 0;
    const Option opts[] = {
        {"config", OPT_STRING, &config, "FILE", "JSON config (launch/configs/*.json); keys below"},
        {"set", OPT_STRINGS, &sets, "KEY=VALUE", "override a config key (repeatable)"},
        {"resume", OPT_FLAG, &resume, NULL, "continue from the newest complete checkpoint in 'out'"},
        {"allow-schedule-change", OPT_FLAG, &allow_schedule_change, NULL,
         "--resume: go on under other steps or another lr schedule than the checkpoint's (refused otherwise)"},
        {"overwrite", OPT_FLAG, &overwrite, NULL,
         "remove an earlier run in 'out' (log, checkpoints, model) and start again"},
        {0},
    };
    const char *summary = "Pretraining from random init or RefreshKV continued pretraining, on the CPU or a CUDA GPU "
                          "(key device); several ranks under mpirun shard it (ZeRO-3). Writes log.jsonl, a TensorBoard "
                          "event file, train_config.json, checkpoints and the final model into 'out'.";
    /* Every rank parses the same argv and config and runs the same checks
     * on them: ranks above 0 keep quiet, so that a mistake is printed once
     * (by rank 0), and all of it before MPI starts, so that the launcher
     * ends the job with one notice rather than one per rank. Reading the
     * config file stays loud on every rank: a file one node cannot read is
     * that node's own message. */
    int quiet = comm_launcher_rank() > 0;
    die_set_silent(quiet);
    if (quiet) /* --help too is rank 0's to print */
        for (int i = 1; i < argc; i++)
            if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 0;
    if (options_parse("train", summary, opts, argc, argv)) {
        train_config_print_keys();
        return 0;
    }
    KV_CHECK(!(resume && overwrite), "train: --resume continues the run in 'out' and --overwrite removes it: give one");
    KV_CHECK(!allow_schedule_change || resume, "train: --allow-schedule-change applies to --resume only");
    RunStart start = resume ? RUN_RESUME : overwrite ? RUN_OVERWRITE : RUN_FRESH;
    TrainConfig cfg;
    train_config_defaults(&cfg);
    char *text = NULL;
    if (config) {
        die_set_silent(0);
        text = read_text_file(config, NULL);
        die_set_silent(quiet);
        train_config_apply_json(&cfg, text, config);
    }
    free(text);
    for (int i = 0; i < sets.count; i++) train_config_apply_set(&cfg, sets.items[i]);
    free((void *)sets.items);
    train_config_validate(&cfg, comm_launcher_world());
    die_set_silent(0);
    Comm *comm = comm_open(0);
    comm_set_timeout(comm, cfg.comm_timeout);
    Trainer t;
    trainer_setup(&t, &cfg, start, allow_schedule_change, comm);
    int rc = trainer_run(&t);
    trainer_finish(&t);
    comm_close(comm);
    return rc;
}
