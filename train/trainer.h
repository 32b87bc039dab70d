#ifndef KVCPT_TRAINER_H
#define KVCPT_TRAINER_H
/* The training driver: setup, step, evaluation and checkpoint as separate
 * functions over one context. Single process for now (rank 0 of 1); the
 * sharded path plugs in at the gradient and optimizer calls. */
#include <stdint.h>
#include <stdio.h>

#include "../data/data_split.h"
#include "../data/loader.h"
#include "../model/llama.h"
#include "../optim/optimizer.h"
#include "../optim/schedule.h"
#include "../optim/segments.h"
#include "train_config.h"

typedef struct {
    TrainConfig cfg;
    Llama model;
    Optimizer *opt;
    OptimSegments segs;
    LrSchedule sched;
    DataSplit *train_split, *dev_split;
    Loader *loader;
    int64_t step, total_steps, accum, T;
    uint32_t *sample;            /* micro_batch * (T + 1) */
    int32_t *tokens, *targets;   /* micro_batch * T each */
    FILE *log;
    char log_path[4200];
    double t_run, flops_per_token;
    int64_t skipped_steps;
} Trainer;

void trainer_setup(Trainer *t, const TrainConfig *cfg, int resume);
/* One optimizer step; returns the mean training loss (stops the run on NaN). */
float trainer_step(Trainer *t, double *grad_norm, double *lr);
double trainer_eval_dev(Trainer *t);
void trainer_checkpoint(Trainer *t);
void trainer_finish(Trainer *t);
/* Runs steps until the end or a signal; returns the exit status. */
int trainer_run(Trainer *t);
#endif
