/* Tokenizer unit checks: Llama 3.1 special names, known ids, decode(encode(x))
 * == x on the adversarial cases and the corpus, special-token modes, UTF-8
 * validation, and long runs that would be quadratic in a naive BPE. The
 * id-for-id comparison with the JS oracle is tests/test_tokenizer_oracle.sh. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/util.h"
#include "../data/doc_reader.h"
#include "../data/tokenizer.h"
#include "../data/utf8.h"
#include "testlib.h"

static int ids_equal(const TokenBuf *b, const uint32_t *want, int64_t n) {
    if (b->n != n) return 0;
    for (int64_t i = 0; i < n; i++)
        if (b->ids[i] != want[i]) return 0;
    return 1;
}

static void check_encode(TokEncoder *e, const char *name, const char *text, int allow_special, const uint32_t *want,
                         int64_t n) {
    TokenBuf b = {0};
    tok_encode(e, text, strlen(text), allow_special, &b);
    tl_result(ids_equal(&b, want, n), name, "got %lld ids (first %u), expected %lld", (long long)b.n,
              b.n ? b.ids[0] : 0, (long long)n);
    token_buf_free(&b);
}

static void check_special_names(const Tokenizer *t) {
    struct { int32_t id; const char *name; } want[] = {
        {128000, "<|begin_of_text|>"}, {128001, "<|end_of_text|>"}, {128002, "<|reserved_special_token_0|>"},
        {128003, "<|reserved_special_token_1|>"}, {128004, "<|finetune_right_pad_id|>"},
        {128005, "<|reserved_special_token_2|>"}, {128006, "<|start_header_id|>"}, {128007, "<|end_header_id|>"},
        {128008, "<|eom_id|>"}, {128009, "<|eot_id|>"}, {128010, "<|python_tag|>"},
        {128011, "<|reserved_special_token_3|>"}, {128255, "<|reserved_special_token_247|>"},
    };
    int ok = tokenizer_vocab_size(t) == 128256;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        ok &= tokenizer_special_id(t, want[i].name, strlen(want[i].name)) == want[i].id;
        ByteBuf out = {0};
        uint32_t id = (uint32_t)want[i].id;
        ok &= tok_decode(t, &id, 1, &out) == -1 && out.n == (int64_t)strlen(want[i].name) &&
              memcmp(out.data, want[i].name, (size_t)out.n) == 0;
        byte_buf_free(&out);
    }
    ok &= tokenizer_special_id(t, "<|reserved_special_token_248|>", 30) == -1;
    tl_result(ok, "Llama 3.1 special token names and vocabulary size 128256", "mismatch");
    uint32_t bad[] = {9906, 128256};
    ByteBuf out = {0};
    tl_result(tok_decode(t, bad, 2, &out) == 1, "decode reports the first out-of-vocabulary id", "");
    byte_buf_free(&out);
}

/* Expected ids: the test vectors published with the llama3-tokenizer-js package
 * (a JavaScript Llama 3 tokenizer), independent of our code. */
static void check_known_ids(TokEncoder *e) {
    check_encode(e, "encode 'Hello world!'", "Hello world!", 0, (uint32_t[]){9906, 1917, 0}, 3);
    check_encode(e, "encode tabs", "\ttabs\t\t\t\tout here", 0, (uint32_t[]){3324, 3518, 573, 14294, 1618}, 5);
    check_encode(e, "encode equal-rank merges left to right", "ax\n####\nboo", 0, (uint32_t[]){710, 198, 71050, 34093}, 4);
    check_encode(e, "encode astral + BMP letters", "\xf0\x9f\xa6\x99\xea\x99\x8a", 0,
                 (uint32_t[]){9468, 99, 247, 166, 247, 232}, 6);
    check_encode(e, "encode empty text", "", 0, NULL, 0);
    const char *spec = "<|start_header_id|>This text has special tokens<|eom_id|> in the middle of it.<|end_header_id|><|eot_id|>";
    check_encode(e, "--allow-special parses spelled-out specials", spec, 1,
                 (uint32_t[]){128006, 2028, 1495, 706, 3361, 11460, 128008, 304, 279, 6278, 315, 433, 13, 128007, 128009}, 15);
    TokenBuf b = {0};
    tok_encode(e, spec, strlen(spec), 0, &b);
    int none_special = 1;
    for (int64_t i = 0; i < b.n; i++) none_special &= b.ids[i] < 128000;
    tl_result(none_special && b.n > 15, "default mode keeps spelled-out specials as ordinary text", "%lld ids", (long long)b.n);
    token_buf_free(&b);
}

static int roundtrip(const Tokenizer *t, TokEncoder *e, const char *text, size_t len, int allow_special) {
    TokenBuf ids = {0};
    ByteBuf out = {0};
    tok_encode(e, text, len, allow_special, &ids);
    int ok = tok_decode(t, ids.ids, ids.n, &out) == -1 && out.n == (int64_t)len && memcmp(out.data, text, len) == 0;
    token_buf_free(&ids);
    byte_buf_free(&out);
    return ok;
}

static void check_roundtrip_file(const Tokenizer *t, TokEncoder *e, const char *name, const char *path) {
    if (access(path, R_OK) != 0) {
        tl_skip(name, "input file missing");
        return;
    }
    DocReader *r = doc_reader_open(path);
    const char *text;
    size_t len;
    int64_t line, docs = 0, bad_line = -1;
    while (doc_reader_next(r, &text, &len, &line)) {
        docs++;
        if (bad_line < 0 && (!roundtrip(t, e, text, len, 0) || !roundtrip(t, e, text, len, 1))) bad_line = line;
    }
    doc_reader_close(r, NULL);
    tl_result(bad_line < 0 && docs > 0, name, "decode(encode(x)) != x at line %lld", (long long)bad_line);
}

static void check_long_runs(TokEncoder *e) {
    size_t n = 1 << 20;
    char *s = xmalloc(n + 1);
    const char fill[] = {' ', '=', '7', 'q'};
    int ok = 1;
    for (int k = 0; k < 4; k++) {
        memset(s, fill[k], n);
        s[n] = '\0';
        TokenBuf b = {0};
        tok_encode(e, s, n, 0, &b);
        ok &= b.n > 0 && b.n < (int64_t)n;
        token_buf_free(&b);
    }
    free(s);
    /* a quadratic merge loop would take hours here (the heap BPE: a fraction of a second) */
    tl_result(ok, "1 MiB runs of one character merge into fewer tokens than bytes", "");
}

static void check_utf8(void) {
    struct { const char *s; int64_t bad; } cases[] = {
        {"plain ascii", -1}, {"caf\xc3\xa9", -1}, {"\xf0\x9f\xa6\x99", -1}, {"ab\xc3", 2}, {"\xc0\xaf", 0},
        {"x\xed\xa0\x80", 1}, {"\xf4\x90\x80\x80", 0}, {"ok\x80", 2}, {"12345678\xff", 8},
    };
    int ok = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ok &= utf8_first_invalid((const uint8_t *)cases[i].s, strlen(cases[i].s)) == cases[i].bad;
    tl_result(ok, "UTF-8 validation: overlong, surrogate, > U+10FFFF, truncated, stray continuation", "");
}

int main(void) {
    check_utf8();
    char *path = tokenizer_default_path();
    if (access(path, R_OK) != 0) {
        tl_skip("tokenizer", "tokenizer.json missing (run make setup)");
        free(path);
        return tl_finish();
    }
    Tokenizer *t = tokenizer_load(path);
    TokEncoder *e = tok_encoder_new(t);
    check_special_names(t);
    check_known_ids(e);
    check_roundtrip_file(t, e, "decode(encode(x)) == x on the adversarial cases", "tests/data/tokenizer_cases.jsonl");
    const char *dir = getenv("KVCPT_CORPUS") ? getenv("KVCPT_CORPUS") : "../shared/corpus";
    const char *corpus[] = {"arxiv-latex.jsonl.zst", "books.jsonl.zst"};
    for (int i = 0; i < 2; i++) {
        char name[512], file[4096];
        snprintf(file, sizeof file, "%s/%s", dir, corpus[i]);
        snprintf(name, sizeof name, "decode(encode(x)) == x on corpus %s", corpus[i]);
        check_roundtrip_file(t, e, name, file);
    }
    check_long_runs(e);
    tok_encoder_free(e);
    tokenizer_free(t);
    free(path);
    return tl_finish();
}
