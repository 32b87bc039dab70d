#include "special_tokens.h"

#include <stdio.h>

/* The eleven named ones; every other id is <|reserved_special_token_K|>
 * with K counting on from 3 at id 128011. */
static const char *const named[] = {
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|reserved_special_token_2|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
};
#define N_NAMED (int)(sizeof named / sizeof named[0])

int llama31_special_name(int32_t id, char *buf, size_t cap) {
    int k = id - LLAMA3_FIRST_SPECIAL_ID;
    if (k < 0 || k >= LLAMA3_NUM_SPECIAL) return -1;
    int n = k < N_NAMED ? snprintf(buf, cap, "%s", named[k])
                        : snprintf(buf, cap, "<|reserved_special_token_%d|>", k - N_NAMED + 3);
    return (n < 0 || (size_t)n >= cap) ? -1 : n;
}
