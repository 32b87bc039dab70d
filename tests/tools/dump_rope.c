/* Writes kvcpt's RoPE tables for the transformers oracle (tests/rope_oracle.py):
 * inv_freq (head_dim / 2), then cos and sin (T, head_dim / 2), fp32, for a sequence of T tokens of
 * the model whose config CONFIG names (a preset, config.json or a model
 * directory), its scaling replaced by SPEC as `kvcpt eval --rope-scaling`
 * replaces it. Prints the scaling's label, the trained and the covered context.
 * usage: dump_rope CONFIG T OUT [SPEC] */
#include <stdio.h>
#include <stdlib.h>

#include "../../common/util.h"
#include "../../model/config.h"

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) die("usage: dump_rope CONFIG T OUT [SPEC]");
    DecoderConfig c;
    config_load(&c, argv[1]);
    if (argc == 5) rope_scaling_override(&c, argv[4], "--rope-scaling");
    int64_t T = atoll(argv[2]), half = c.head_dim / 2;
    KV_CHECK(T >= 1 && T <= ((int64_t)1 << 20), "dump_rope: T must be in [1, 2^20]");
    float *t = xmalloc(sizeof(float) * (size_t)((2 * T + 1) * half));
    RopeParams p = rope_params(&c, T);
    rope_inv_freq(t, c.head_dim, &p);
    rope_table(t + half, t + (T + 1) * half, T, c.head_dim, &p);
    FILE *f = fopen_check(argv[3], "wb");
    fwrite_check(t, sizeof(float), (size_t)((2 * T + 1) * half), f, argv[3]);
    fclose_check(f, argv[3]);
    char label[96];
    rope_scaling_label(label, sizeof label, &c.rope_scaling);
    printf("%s | trained %lld | covered %lld\n", label, (long long)rope_trained_context(&c),
           (long long)rope_covered_context(&c));
    free(t);
    return 0;
}
