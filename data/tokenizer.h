#ifndef KVCPT_TOKENIZER_H
#define KVCPT_TOKENIZER_H
/* BPE tokenizer loaded from a Hugging Face tokenizer.json: byte-level
 * (Llama 3.x, SmolLM2, GPT-2, Qwen2 with its NFC normalizer) or
 * SentencePiece-style with byte fallback (Llama 2, Mistral, TinyLlama), and
 * any other whose pipeline tokenizer_options.h accepts. A Tokenizer is read-only after loading and
 * shared by threads; each thread encodes through its own TokEncoder (regex
 * state, BPE scratch and a memo of recent pieces). */
#include <stddef.h>
#include <stdint.h>

#include "token_buffers.h"

/* Relative to the repository root; `make setup` installs it. */
#define TOKENIZER_DEFAULT_REL_PATH "third_party/tokenizers/llama3.1/tokenizer.json"

typedef struct Tokenizer Tokenizer;
typedef struct TokEncoder TokEncoder;

/* $KVCPT_TOKENIZER if set, else the default path next to the executable,
 * else the default path relative to the working directory. Heap string. */
char *tokenizer_default_path(void);

/* Loads and validates tokenizer.json; dies naming the file and the problem. */
Tokenizer *tokenizer_load(const char *path);
/* The same from the file's text; origin names it in messages. */
Tokenizer *tokenizer_load_text(const char *origin, const char *text);
void tokenizer_free(Tokenizer *t);
/* Every id is below this: model.vocab and added_tokens together (128256
 * for Llama 3.1, 49152 for SmolLM2). */
int32_t tokenizer_vocab_size(const Tokenizer *t);
const char *tokenizer_sha256(const Tokenizer *t);   /* of the tokenizer.json bytes */
/* id of an added token by its name, or -1. Names are the file's `content`,
 * except in Llama 3's file (128000 tokens + 256 added), whose names are
 * Llama 3.1's (special_tokens.h). */
int32_t tokenizer_special_id(const Tokenizer *t, const char *name, size_t len);
/* Where the names come from: "llama-3.1" or "added_tokens". */
const char *tokenizer_special_names(const Tokenizer *t);
/* The token that Hugging Face's encode(text, add_special_tokens=True)
 * prepends (post_processor's TemplateProcessing), or -1 when it adds none. */
int32_t tokenizer_bos_id(const Tokenizer *t);
/* Regex passes of the pre-tokenizer (Llama 3: 1; SmolLM2: 2, digits then
 * GPT-2's pattern). */
int tokenizer_split_stages(const Tokenizer *t);

TokEncoder *tok_encoder_new(const Tokenizer *t);
void tok_encoder_free(TokEncoder *e);

/* Appends the ids of text[0..len) to out (no BOS). text must be valid UTF-8
 * (see utf8_first_invalid). allow_special: spelled-out special tokens such
 * as "<|eot_id|>" become their ids; otherwise they are ordinary text. Added
 * tokens that are not special always become their ids, as in Hugging Face.
 * Returns 1; or 0 when the pre-tokenizer's regex fails (PCRE2 ran out of
 * stack for the pattern), out then holding an unfinished prefix and
 * tok_encoder_error() saying why and at which byte offset of text; the
 * caller names the document. */
int tok_encode(TokEncoder *e, const char *text, size_t len, int allow_special, TokenBuf *out);
const char *tok_encoder_error(const TokEncoder *e);

/* Appends the bytes of ids to out as Hugging Face's decode(ids,
 * skip_special_tokens=False) gives them. Byte-level: added tokens decode to
 * their names, as its ByteLevel decoder reads them (a name written wholly
 * in the byte-level alphabet decodes through it: "\u0120x" is " x"); a
 * sequence cut inside a character stays raw bytes here, where Hugging Face
 * writes U+FFFD. SentencePiece-style: the
 * token strings through tokenizer.json's decoder steps (token_decoder.h),
 * always UTF-8. Returns the index of the first id outside the vocabulary,
 * or -1 when all are valid. */
int64_t tok_decode(const Tokenizer *t, const uint32_t *ids, int64_t n, ByteBuf *out);

#endif
