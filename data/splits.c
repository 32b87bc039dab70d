#include "splits.h"

#include <string.h>

#include "../common/rng.h"

const char *const split_names[SPLIT_COUNT] = {"train", "dev", "test"};

int split_of_text(const char *text, size_t len, uint64_t seed) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) h = (h ^ (uint8_t)text[i]) * 0x100000001b3ull;
    uint64_t bucket = hash_u64(h ^ seed) % 10;
    return bucket < 8 ? SPLIT_TRAIN : bucket == 8 ? SPLIT_DEV : SPLIT_TEST;
}

