#ifndef KVCPT_SPECIAL_TOKENS_H
#define KVCPT_SPECIAL_TOKENS_H
/* Llama 3.1's 256 special tokens (ids 128000..128255). The tokenizer.json we
 * ship (../shared/tokenizers/llama3.1, via `make setup`) carries Llama 3.0's names for some of
 * them; Llama 3.1's tokenizer_config.json renamed 128004, 128005, 128008,
 * 128010 and renumbered the reserved tokens, so the names come from here,
 * for a file laid out as Llama 3's (128000 tokens, then these 256 added);
 * every other tokenizer's names are its added_tokens' content. The BOS is
 * not fixed here: it is what the file's post-processor adds. */
#include <stddef.h>
#include <stdint.h>

#define LLAMA3_FIRST_SPECIAL_ID 128000
#define LLAMA3_NUM_SPECIAL 256

/* Writes the 3.1 name of special token `id` into buf; returns its length,
 * or -1 when id is not a special id. */
int llama31_special_name(int32_t id, char *buf, size_t cap);

#endif
