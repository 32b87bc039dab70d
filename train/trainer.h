#ifndef KVCPT_TRAINER_H
#define KVCPT_TRAINER_H
/* The training driver: setup, step, evaluation and checkpoint as separate
 * functions over one context. One code path for one process and for N
 * ranks under mpirun: parameters, gradients and optimizer states are
 * sharded (parallel/fsdp.h); a single process is the world of one. The global
 * batch is the same samples in the same order whatever the rank count, and
 * the step's arithmetic too, so 1, 2, 3 or 4 ranks give identical runs. */
#include <stdint.h>
#include <stdio.h>

#include "../data/data_split.h"
#include "../data/loader.h"
#include "../common/tfevents.h"
#include "../parallel/comm.h"
#include "../parallel/fsdp.h"
#include "../model/decoder.h"
#include "../optim/optimizer.h"
#include "../optim/schedule.h"
#include "final_model.h"
#include "train_config.h"
#include "train_engine.h"
#include "train_mode.h"

typedef struct {
    TrainConfig cfg;
    Decoder model;            /* host parameters and gradients (sharding works on these) */
    const Backend *backend; /* what config 'device' resolved to (common/backend.h) */
    TrainMode mode;         /* host or device, precision, where the optimizer steps (train_mode.h) */
    TrainEngine engine;     /* runs forward and backward (train_engine.h) */
    Comm *comm;
    int rank, world;
    Fsdp fsdp;
    Optimizer *opt;         /* over this rank's shard */
    LrSchedule sched;
    DataSplit *train_split, *dev_split;
    Loader *loader;
    int64_t step, total_steps, accum, T;
    int64_t rounds;              /* micro-batches per rank per step (accum / world) */
    double *round_loss, *all_loss; /* rounds; accum */
    uint32_t *sample;            /* micro_batch * (T + 1) */
    int32_t *tokens, *targets;   /* micro_batch * T each */
    const AnswerRule *answers;   /* loss_on=answers: the train split's rule; NULL: loss on every target */
    uint8_t *answer_class;       /* T + 1: AnswerClass of each sample token */
    FILE *log;
    TfEvents events;        /* rank 0: out/TFEVENTS_FILE, log.jsonl's scalars for TensorBoard */
    int lock_fd;            /* rank 0: flock held on out/train.lock for the run, else -1 */
    int allow_schedule_change; /* --resume may go on under another lr schedule */
    char log_path[4200];
    /* the data's identity, recorded in checkpoints and checked on --resume:
     * the SHA-256 of its manifest.json (which lists every shard's counts and
     * the inputs' hashes) and the directory as it was resolved */
    char data_sha256[65];
    char data_realpath[4096];
    double t_setup, t_run, flops_per_token;
    int64_t first_step;          /* the step this process started from (0, or a resumed one) */
    int64_t skipped_steps;
    int blas_logged;             /* this run's first log record named the BLAS configuration */
    FinalModel *final_model;     /* rank 0: what out/model will hold besides the weights (final_model.h) */
} Trainer;

/* In the run directory beside log.jsonl: the run's effective configuration
 * (not config.json, the model config's name), and the TensorBoard event
 * file with every numeric field of log.jsonl (common/tfevents.h). */
#define TRAIN_CONFIG_FILE "train_config.json"
#define TFEVENTS_FILE "events.out.tfevents.kvcpt"

/* How a run treats what an earlier run left in its out directory (log.jsonl,
 * ckpt/, model/): a fresh run refuses such a directory, since starting over
 * would truncate the log, replace the model and prune its own checkpoints
 * as older than the earlier ones. */
typedef enum {
    RUN_FRESH = 0,     /* out must hold no earlier run */
    RUN_RESUME = 1,    /* continue from out's newest complete checkpoint (fresh when there is none) */
    RUN_OVERWRITE = 2, /* remove the earlier run's files first, then start fresh */
} RunStart;

/* comm: the ranks (comm_open); the trainer does not own it.
 * allow_schedule_change: a resumed run may change steps or the lr schedule
 * (otherwise refused, showing both schedules). */
void trainer_setup(Trainer *t, const TrainConfig *cfg, RunStart start, int allow_schedule_change, Comm *comm);
/* One optimizer step; returns the mean training loss (stops the run on NaN). */
float trainer_step(Trainer *t, double *grad_norm, double *lr);
double trainer_eval_dev(Trainer *t);
void trainer_checkpoint(Trainer *t);
void trainer_finish(Trainer *t);
/* Runs steps until the end or a signal; returns the exit status. */
int trainer_run(Trainer *t);
#endif
