#ifndef KVCPT_GGUF_TOKENIZER_H
#define KVCPT_GGUF_TOKENIZER_H
/* A GGUF file's tokenizer (tokenizer.ggml.*) as Hugging Face tokenizers'
 * tokenizer.json and transformers' tokenizer_config.json: byte-level BPE
 * (model gpt2; pre smollm, llama-bpe or qwen2) or SentencePiece BPE (model
 * llama: merges built from the scores, "<0xNN>" byte fallback, Llama 2's
 * normalizer and decoder). */
#include <stdint.h>

#include "gguf.h"

/* Builds both texts (heap strings). Returns 0, or -1 with both NULL when the
 * file carries no tokenizer (no tokenizer.ggml.model). Dies naming the key
 * and its byte offset on a tokenizer it cannot express: a model other than
 * gpt2 and llama, an unknown pre-tokenizer name, scores missing, of another
 * count or not finite (llama), a token that is not UTF-8, a token
 * type outside llama.cpp's, merges missing or empty, a merge that is not
 * "A B" of two tokens whose concatenation is a token, duplicate tokens; and
 * on a tokenizer.json that kvcpt's own loader would refuse.
 * context_length: model_max_length. */
int gguf_tokenizer_json(const GgufFile *f, int64_t context_length, char **tokenizer_json, char **config_json);

#endif
