#ifndef KVCPT_ADDED_TOKENS_H
#define KVCPT_ADDED_TOKENS_H
/* A set of added tokens (tokenizer.json's added_tokens) found in text the
 * way Hugging Face's AddedVocabulary finds them: leftmost match first, the
 * longest of those starting there, matches never overlapping. */
#include <stddef.h>
#include <stdint.h>

#include "bpe_tables.h"

typedef struct {
    VocabMap content; /* content bytes -> index k */
    int32_t *id;      /* [n] token id of index k */
    uint8_t *special; /* [n] 1 for special = true */
    int32_t *lengths; /* distinct content lengths, longest first */
    int n, n_lengths, n_special;
    uint8_t first[256]; /* bytes that start some content */
} AddedSet;

/* contents[k] (len[k] bytes, none empty or repeated) -> id[k]. */
void added_set_build(AddedSet *s, const char *const *contents, const size_t *len, const int32_t *id,
                     const uint8_t *special, int n);
void added_set_free(AddedSet *s);
/* Index of the leftmost-longest match in text[from..len), its start in *at;
 * -1 when there is none. */
int added_set_find(const AddedSet *s, const char *text, size_t len, size_t from, size_t *at);
/* Index of exactly these bytes, or -1. */
int added_set_lookup(const AddedSet *s, const char *text, size_t len);
size_t added_set_len(const AddedSet *s, int k);

#endif
