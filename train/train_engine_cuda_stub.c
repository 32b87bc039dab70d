/* Linked in place of train/train_engine_cuda.c when the CUDA backend is not
 * built: a CUDA mode is refused by name (train_mode_resolve already refuses
 * device=cuda through common/backend.c; this covers any other caller). */
#include "../common/util.h"
#include "train_engine.h"

TrainEngine train_engine_cuda_create(TrainMode mode, const TrainConfig *c, Llama *model, Fsdp *fsdp, Comm *comm) {
    die("train: device cuda: this binary was built without the CUDA backend; hint: install nvcc and run 'make'");
}
