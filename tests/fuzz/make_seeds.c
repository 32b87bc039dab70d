/* Writes a valid file of each parsed kind into the fuzz corpus directory,
 * so the fuzzer starts from inputs that reach the deep checks. */
#include <stdio.h>
#include <stdlib.h>

#include "../../checkpoints/ckpt.h"
#include "../../checkpoints/native_model.h"
#include "../../checkpoints/safetensors.h"
#include "../../common/util.h"

int main(int argc, char **argv) {
    if (argc != 2) die("usage: make_seeds CORPUS_DIR");
    make_dirs(argv[1]);
    char p[4096];
    float a[6] = {1, 2, 3, 4, 5, 6};
    StTensorSpec t[3] = {{"model.a.weight", KV_F32, 2, {2, 2}}, {"b", KV_BF16, 1, {2}}, {"c", KV_F16, 0, {0}}};
    const char *meta[] = {"format", "pt"};
    snprintf(p, sizeof p, "%s/seed.safetensors", argv[1]);
    StWriter sw;
    st_writer_begin(&sw, p, t, 3, meta, 1);
    st_writer_write(&sw, a, 16 + 4 + 2);
    st_writer_end(&sw);
    snprintf(p, sizeof p, "%s/seed.kvcpt", argv[1]);
    NmWriter nw;
    nm_writer_begin(&nw, p, t, 3);
    nm_writer_write(&nw, a, 16 + 4 + 2);
    nm_writer_end(&nw);
    snprintf(p, sizeof p, "%s/run", argv[1]);
    CkptWriter cw;
    ckpt_writer_begin(&cw, p, 3, 0, 1);
    ckpt_add_section(&cw, "params", a, sizeof a);
    ckpt_add_section(&cw, "rng", a, 8);
    ckpt_writer_finish(&cw);
    char from[4200], to[4200];
    snprintf(from, sizeof from, "%s/run/ckpt/step_00000003/rank_00000.bin", argv[1]);
    snprintf(to, sizeof to, "%s/seed.ckpt", argv[1]);
    rename_check(from, to);
    return 0;
}
