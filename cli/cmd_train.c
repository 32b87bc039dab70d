/* `kvcpt train --config FILE [--set key=value ...] [--resume | --overwrite]` */
#include <stdio.h>
#include <stdlib.h>

#include "../common/options.h"
#include "../common/util.h"
#include "../parallel/comm.h"
#include "../train/train_config.h"
#include "../train/trainer.h"
#include "commands.h"

int cmd_train(int argc, char **argv) {
    const char *config = NULL;
    StringList sets = {0};
    int resume = 0, overwrite = 0;
    const Option opts[] = {
        {"config", OPT_STRING, &config, "FILE", "JSON config (launch/configs/*.json); keys below"},
        {"set", OPT_STRINGS, &sets, "KEY=VALUE", "override a config key (repeatable)"},
        {"resume", OPT_FLAG, &resume, NULL, "continue from the newest complete checkpoint in 'out'"},
        {"overwrite", OPT_FLAG, &overwrite, NULL, "remove an earlier run in 'out' (log, checkpoints, model) and start again"},
        {0},
    };
    const char *summary = "Pretraining from random init or RefreshKV continued pretraining (CPU reference backend; several ranks under mpirun shard it, ZeRO-3).";
    if (options_parse("train", summary, opts, argc, argv)) {
        train_config_print_keys();
        return 0;
    }
    KV_CHECK(!(resume && overwrite), "train: --resume continues the run in 'out' and --overwrite removes it: give one");
    RunStart start = resume ? RUN_RESUME : overwrite ? RUN_OVERWRITE : RUN_FRESH;
    TrainConfig cfg;
    train_config_defaults(&cfg);
    if (config) train_config_apply_file(&cfg, config);
    for (int i = 0; i < sets.count; i++) train_config_apply_set(&cfg, sets.items[i]);
    free((void *)sets.items);
    Comm *comm = comm_open(0);
    comm_set_timeout(comm, cfg.comm_timeout);
    Trainer t;
    trainer_setup(&t, &cfg, start, comm);
    int rc = trainer_run(&t);
    trainer_finish(&t);
    comm_close(comm);
    return rc;
}
