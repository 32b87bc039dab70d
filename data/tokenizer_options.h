#ifndef KVCPT_TOKENIZER_OPTIONS_H
#define KVCPT_TOKENIZER_OPTIONS_H
/* What a tokenizer.json asks for beyond its vocabulary: the normalizer, the
 * pre-tokenizer chain, the BPE model's options, the decoder and the BOS of
 * its post-processor. Two families are implemented: byte-level BPE (a
 * ByteLevel pre-tokenizer last; GPT-2, Llama 3, SmolLM2, Qwen2 with its NFC
 * normalizer) and SentencePiece-style BPE (a Metaspace pre-tokenizer or
 * none, vocabulary as text with "<0xNN>" byte fallback; Llama 2, Mistral,
 * TinyLlama). Every option that would change the ids or the decoded text
 * and that we do not implement is refused naming its JSON path (e.g.
 * pre_tokenizer.pretokenizers[1].behavior), never ignored. */
#include <jansson.h>
#include <stdint.h>

#include "metaspace.h"
#include "normalizer.h"
#include "pretokenize.h"
#include "token_decoder.h"

typedef struct {
    /* split stages in order, PCRE2 spelling (regex_translate.h) */
    char *stage_pattern[PRETOKENIZE_MAX_STAGES];
    char stage_path[PRETOKENIZE_MAX_STAGES][96]; /* JSON path each came from */
    int n_stages;
    int byte_level;    /* ByteLevel pre-tokenizer: vocabulary in GPT-2's byte alphabet; else as text */
    int byte_fallback; /* model.byte_fallback (text vocabularies only) */
    Normalizer normalizer;
    int has_metaspace;
    Metaspace metaspace;
    TokDecoder decoder; /* text vocabularies; byte-level ones decode through the alphabet */
    int ignore_merges; /* model.ignore_merges: whole-vocabulary hit before BPE */
    /* post_processor: the SpecialToken that TemplateProcessing's `single`
     * starts with and its id from `special_tokens`; NULL / -1 when none */
    char *bos_token;
    int64_t bos_id;
} TokenizerOptions;

/* Dies naming `file` and the JSON path of the first unsupported field. */
void tokenizer_options_parse(const char *file, const json_t *root, TokenizerOptions *o);
void tokenizer_options_free(TokenizerOptions *o);

#endif
