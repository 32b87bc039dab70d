/* Writes a valid file of each parsed kind into the fuzz corpus directory,
 * so the fuzzer starts from inputs that reach the deep checks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    /* GGUF: one string key, an alignment, a Q4_1 tensor of one block (the
     * bytes by hand: kvcpt writes no GGUF) */
    static const uint8_t gguf[] = {
        'G', 'G', 'U', 'F', 3, 0, 0, 0,  1, 0,   0,   0,   0,   0,   0,   0,   2,   0,   0,   0,   0,   0,   0,
        0,   1,   0,   0,   0, 0, 0, 0,  0, 'k', 8,   0,   0,   0,   2,   0,   0,   0,   0,   0,   0,   0,   'h',
        'i', 17,  0,   0,   0, 0, 0, 0,  0, 'g', 'e', 'n', 'e', 'r', 'a', 'l', '.', 'a', 'l', 'i', 'g', 'n', 'm',
        'e', 'n', 't', 4,   0, 0, 0, 16, 0, 0,   0,   1,   0,   0,   0,   0,   0,   0,   0,   'w', 1,   0,   0,
        0,   32,  0,   0,   0, 0, 0, 0,  0, 3,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0};
    uint8_t img[sizeof gguf + 16 + 20] = {0};
    memcpy(img, gguf, sizeof gguf);
    size_t data = (sizeof gguf + 15) / 16 * 16;
    static const uint8_t block[4] = {0x00, 0x34, 0x00, 0xbe}; /* d 0.25, m -1.5, quants 0 */
    memcpy(img + data, block, 4);
    snprintf(p, sizeof p, "%s/seed.gguf", argv[1]);
    FILE *f = fopen_check(p, "wb");
    fwrite_check(img, 1, data + 20, f, p);
    fclose_check(f, p);
    return 0;
}
