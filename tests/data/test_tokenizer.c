/* Tokenizer unit checks: Llama 3.1 special names, known ids, decode(encode(x))
 * == x on the adversarial cases and the corpus, special-token modes, UTF-8
 * validation, and long runs that would be quadratic in a naive BPE; small
 * tokenizer.json files written here, whose ids follow by hand from their
 * few merges: the Digits step, ignore_merges, added tokens inside and after
 * the vocabulary, the BOS of the post-processor; and the refusal, naming the
 * JSON path, of every option that is not implemented. The id-for-id
 * comparison with Hugging Face and tiktoken is tests/data/test_tokenizer_oracle.sh. */
#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../common/util.h"
#include "../../data/byte_level.h"
#include "../../data/doc_reader.h"
#include "../../data/tokenizer.h"
#include "../../data/utf8.h"
#include "../testlib.h"

static int ids_equal(const TokenBuf *b, const uint32_t *want, int64_t n) {
    if (b->n != n) return 0;
    for (int64_t i = 0; i < n; i++)
        if (b->ids[i] != want[i]) return 0;
    return 1;
}

static void check_encode(TokEncoder *e, const char *name, const char *text, int allow_special, const uint32_t *want,
                         int64_t n) {
    TokenBuf b = {0};
    int done = tok_encode(e, text, strlen(text), allow_special, &b);
    tl_result(done && ids_equal(&b, want, n), name, "got %lld ids (first %u), expected %lld%s%s", (long long)b.n,
              b.n ? b.ids[0] : 0, (long long)n, done ? "" : "; ", tok_encoder_error(e));
    token_buf_free(&b);
}

static void check_special_names(const Tokenizer *t) {
    struct {
        int32_t id;
        const char *name;
    } want[] = {
        {128000, "<|begin_of_text|>"},
        {128001, "<|end_of_text|>"},
        {128002, "<|reserved_special_token_0|>"},
        {128003, "<|reserved_special_token_1|>"},
        {128004, "<|finetune_right_pad_id|>"},
        {128005, "<|reserved_special_token_2|>"},
        {128006, "<|start_header_id|>"},
        {128007, "<|end_header_id|>"},
        {128008, "<|eom_id|>"},
        {128009, "<|eot_id|>"},
        {128010, "<|python_tag|>"},
        {128011, "<|reserved_special_token_3|>"},
        {128255, "<|reserved_special_token_247|>"},
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
    tl_result(tokenizer_bos_id(t) == 128000 && strcmp(tokenizer_special_names(t), "llama-3.1") == 0,
              "Llama 3.1: BOS 128000 from its TemplateProcessing, 3.1 names", "bos %d", tokenizer_bos_id(t));
    /* its Split then ByteLevel without regex: one regex pass, the speed of the single pattern */
    tl_result(tokenizer_split_stages(t) == 1, "Llama 3.1 pre-tokenizes in a single regex pass", "%d passes",
              tokenizer_split_stages(t));
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
    check_encode(e, "encode equal-rank merges left to right", "ax\n####\nboo", 0, (uint32_t[]){710, 198, 71050, 34093},
                 4);
    check_encode(e, "encode astral + BMP letters", "\xf0\x9f\xa6\x99\xea\x99\x8a", 0,
                 (uint32_t[]){9468, 99, 247, 166, 247, 232}, 6);
    check_encode(e, "encode empty text", "", 0, NULL, 0);
    const char *spec =
        "<|start_header_id|>This text has special tokens<|eom_id|> in the middle of it.<|end_header_id|><|eot_id|>";
    check_encode(
        e, "--allow-special parses spelled-out specials", spec, 1,
        (uint32_t[]){128006, 2028, 1495, 706, 3361, 11460, 128008, 304, 279, 6278, 315, 433, 13, 128007, 128009}, 15);
    TokenBuf b = {0};
    int none_special = tok_encode(e, spec, strlen(spec), 0, &b);
    for (int64_t i = 0; i < b.n; i++) none_special &= b.ids[i] < 128000;
    tl_result(none_special && b.n > 15, "default mode keeps spelled-out specials as ordinary text", "%lld ids",
              (long long)b.n);
    token_buf_free(&b);
}

static int roundtrip(const Tokenizer *t, TokEncoder *e, const char *text, size_t len, int allow_special) {
    TokenBuf ids = {0};
    ByteBuf out = {0};
    int ok = tok_encode(e, text, len, allow_special, &ids) && tok_decode(t, ids.ids, ids.n, &out) == -1 &&
             out.n == (int64_t)len &&
             (len == 0 || memcmp(out.data, text, len) == 0); /* memcmp must not see NULL, even for 0 bytes */
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
        ok &= tok_encode(e, s, n, 0, &b) && b.n > 0 && b.n < (int64_t)n;
        token_buf_free(&b);
    }
    free(s);
    /* a quadratic merge loop would take hours here (the heap BPE: a fraction of a second) */
    tl_result(ok, "1 MiB runs of one character merge into fewer tokens than bytes", "");
}

static void check_utf8(void) {
    struct {
        const char *s;
        int64_t bad;
    } cases[] = {
        {"plain ascii", -1},     {"caf\xc3\xa9", -1}, {"\xf0\x9f\xa6\x99", -1},
        {"ab\xc3", 2},           {"\xc0\xaf", 0},     {"x\xed\xa0\x80", 1},
        {"\xf4\x90\x80\x80", 0}, {"ok\x80", 2},       {"12345678\xff", 8},
    };
    int ok = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ok &= utf8_first_invalid((const uint8_t *)cases[i].s, strlen(cases[i].s)) == cases[i].bad;
    tl_result(ok, "UTF-8 validation: overlong, surrogate, > U+10FFFF, truncated, stray continuation", "");
}

/* --- small tokenizer.json files --- */

/* The byte-level spelling of a byte string (as tokenizer.json writes it). */
static void byte_level_key(const char *bytes, char *out) {
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)bytes; *p; p++) {
        uint32_t c = byte_level_codepoint(*p);
        if (c < 0x80) out[n++] = (char)c;
        else {
            out[n++] = (char)(0xC0 | (c >> 6));
            out[n++] = (char)(0x80 | (c & 0x3F));
        }
    }
    out[n] = '\0';
}

/* Ids 0..255 are the bytes in order; then "12" (256), " 1" (257), "ab"
 * (258), "<x" (259), "<x>" (260), each with one merge in this rank order,
 * and "qq" (261) without a merge (only ignore_merges reaches it); added
 * tokens "<x>" (260, special, inside the vocabulary) and "zz" (262, not
 * special, after it). */
static json_t *small_tokenizer(void) {
    json_t *vocab = json_object(), *merges = json_array();
    char key[16], b[2] = {0, 0};
    for (int i = 0; i < 256; i++) {
        b[0] = (char)i;
        if (i == 0) {
            json_object_set_new(vocab, "\xc4\x80", json_integer(0)); /* byte 0 is U+0100 */
            continue;
        }
        byte_level_key(b, key);
        json_object_set_new(vocab, key, json_integer(i));
    }
    const char *extra[][3] = {{"12", "1", "2"}, {" 1", " ", "1"},   {"ab", "a", "b"},
                              {"<x", "<", "x"}, {"<x>", "<x", ">"}, {"qq", NULL, NULL}};
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
        if (extra[i][1]) {
            char l[16], r[16], m[40];
            byte_level_key(extra[i][1], l);
            byte_level_key(extra[i][2], r);
            snprintf(m, sizeof m, "%s %s", l, r);
            json_array_append_new(merges, json_string(m));
        }
        byte_level_key(extra[i][0], key);
        json_object_set_new(vocab, key, json_integer(256 + (json_int_t)i));
    }
    json_t *root = json_pack(
        "{s:s, s:n, s:n, s:n, s:[{s:i, s:s, s:b, s:b, s:b, s:b, s:b}, {s:i, s:s, s:b, s:b, s:b, s:b, s:b}],"
        " s:{s:s, s:[{s:s, s:b}, {s:s, s:b, s:b, s:b}]}, s:{s:s}, s:{s:s},"
        " s:{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:o, s:o}}",
        "version", "1.0", "truncation", "padding", "normalizer", "added_tokens", "id", 260, "content", "<x>",
        "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1, "id", 262, "content", "zz",
        "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 1, "special", 0, "pre_tokenizer", "type", "Sequence",
        "pretokenizers", "type", "Digits", "individual_digits", 1, "type", "ByteLevel", "add_prefix_space", 0,
        "trim_offsets", 1, "use_regex", 1, "post_processor", "type", "ByteLevel", "decoder", "type", "ByteLevel",
        "model", "type", "BPE", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk",
        0, "byte_fallback", 0, "ignore_merges", 0, "vocab", vocab, "merges", merges);
    if (!root) die("test: cannot build the small tokenizer.json");
    return root;
}

static char tmp_dir[] = "/tmp/kvcpt_test_tokenizer_XXXXXX";

static void write_json(const json_t *root, const char *name, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s.json", tmp_dir, name);
    if (json_dump_file(root, path, JSON_COMPACT) != 0) die("test: cannot write %s", path);
}

/* Sets `path` ("a.b[1].c"; only object keys and array indices) in root to
 * the JSON value `value`. */
static void set_at(json_t *root, const char *path, const char *value) {
    json_error_t err;
    json_t *v = json_loads(value, JSON_DECODE_ANY, &err);
    if (!v) die("test: bad JSON value %s", value);
    json_t *cur = root;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    char *p = buf;
    for (;;) {
        char *dot = strpbrk(p, ".["), sep = dot ? *dot : '\0';
        if (dot) *dot = '\0';
        int last = !dot;
        if (*p) {
            if (last) {
                json_object_set_new(cur, p, v);
                return;
            }
            cur = json_object_get(cur, p);
        }
        if (sep == '[') {
            char *close = strchr(dot + 1, ']');
            size_t idx = strtoul(dot + 1, NULL, 10);
            if (close[1] == '\0') {
                json_array_set_new(cur, idx, v);
                return;
            }
            cur = json_array_get(cur, idx);
            p = close + 2;
        } else {
            p = dot + 1;
        }
        if (!cur) die("test: no %s in the small tokenizer", path);
    }
}

static void check_ids(const char *name, const char *path, const char *text, int allow_special, const uint32_t *want,
                      int64_t n) {
    Tokenizer *t = tokenizer_load(path);
    TokEncoder *e = tok_encoder_new(t);
    check_encode(e, name, text, allow_special, want, n);
    tok_encoder_free(e);
    tokenizer_free(t);
}

static void check_small_tokenizers(void) {
    char path[4200];
    json_t *root = small_tokenizer();
    write_json(root, "digits", path, sizeof path);
    /* Digits first: " ", "1", "2", "ab" are pieces, so neither "12" nor " 1" can form */
    check_ids("Digits(individual) + ByteLevel: each digit its own piece", path, " 12ab", 0,
              (uint32_t[]){' ', '1', '2', 258}, 4);
    Tokenizer *two = tokenizer_load(path);
    tl_result(tokenizer_split_stages(two) == 2, "Digits + ByteLevel(use_regex): two regex passes", "%d",
              tokenizer_split_stages(two));
    tokenizer_free(two);
    check_ids("digits of other scripts are pieces too (\\p{N})", path,
              "a\xd9\xa3"
              "b",
              0, (uint32_t[]){'a', 0xd9, 0xa3, 'b'}, 4);
    check_ids("ignore_merges false: a vocabulary entry no merge builds stays bytes", path, "qq", 0,
              (uint32_t[]){'q', 'q'}, 2);
    Tokenizer *t = tokenizer_load(path);
    tl_result(tokenizer_vocab_size(t) == 263 && tokenizer_bos_id(t) == -1 &&
                  strcmp(tokenizer_special_names(t), "added_tokens") == 0 && tokenizer_special_id(t, "<x>", 3) == 260 &&
                  tokenizer_special_id(t, "zz", 2) == 262,
              "vocabulary 263, no BOS (ByteLevel post-processor), added-token names from the file", "");
    ByteBuf out = {0};
    uint32_t ids[] = {260, 262, 'q', 259};
    tl_result(tok_decode(t, ids, 4, &out) == -1 && out.n == 8 && memcmp(out.data, "<x>zzq<x", 8) == 0,
              "added tokens decode to their content", "%lld bytes", (long long)out.n);
    byte_buf_free(&out);
    tokenizer_free(t);

    set_at(root, "pre_tokenizer.pretokenizers[0].individual_digits", "false");
    write_json(root, "runs", path, sizeof path);
    check_ids("Digits(runs) + ByteLevel: the run of digits is one piece", path, " 12ab", 0, (uint32_t[]){' ', 256, 258},
              3);

    set_at(root, "pre_tokenizer", "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}");
    write_json(root, "gpt2", path, sizeof path);
    /* GPT-2's pattern keeps " 12" together; merge rank 0 ("12") wins over " 1" */
    check_ids("ByteLevel alone (GPT-2 pattern): ' 12' is one piece", path, " 12ab", 0, (uint32_t[]){' ', 256, 258}, 3);
    check_ids("special added token stays text without allow_special", path, "<x>", 0, (uint32_t[]){'<', 'x', '>'}, 3);
    check_ids("special added token inside the vocabulary, allow_special", path, "a<x>b", 1, (uint32_t[]){'a', 260, 'b'},
              3);
    check_ids("non-special added token matched even without allow_special", path, "azzb", 0,
              (uint32_t[]){'a', 262, 'b'}, 3);

    set_at(root, "model.ignore_merges", "true");
    set_at(root, "pre_tokenizer",
           "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
           "{\"Regex\": \"\\\\s+|[^\\\\s]+\"}, \"behavior\": \"Isolated\", \"invert\": false}, "
           "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}");
    set_at(root, "post_processor",
           "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<x>\", "
           "\"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"special_tokens\": "
           "{\"<x>\": {\"id\": \"<x>\", \"ids\": [260], \"tokens\": [\"<x>\"]}}}");
    write_json(root, "split", path, sizeof path);
    t = tokenizer_load(path);
    tl_result(tokenizer_bos_id(t) == 260, "TemplateProcessing starting with a SpecialToken: that token is the BOS",
              "bos %d", tokenizer_bos_id(t));
    tokenizer_free(t);
    check_ids("Split + ByteLevel(no regex), ignore_merges true: whole-vocabulary hit", path, "12 qq", 0,
              (uint32_t[]){256, ' ', 261}, 3);

    /* Llama 3's \s*[\r\n]+ takes a white-space run whole, then gives it back
     * a character at a time looking for a line break: past 10 million
     * characters that exceeded PCRE2's default match limit. Here with
     * Llama 3's white-space alternatives alone and no merge for spaces, so
     * the ids are plain: every space, then the word. Llama 3's and SmolLM2's
     * own ids on such runs are compared with Hugging Face's in
     * tests/data/test_tokenizer_oracle.sh. */
    set_at(root, "pre_tokenizer",
           "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
           "{\"Regex\": \"\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": "
           "\"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
           "\"use_regex\": false}]}");
    write_json(root, "spaces", path, sizeof path);
    t = tokenizer_load(path);
    TokEncoder *e = tok_encoder_new(t);
    size_t n = 12000000;
    char *s = xmalloc(n + 2);
    memset(s, ' ', n);
    s[n] = 'a';
    s[n + 1] = '\0';
    TokenBuf b = {0};
    int done = tok_encode(e, s, n + 1, 0, &b), same = done && b.n == (int64_t)n + 1 && b.ids[n] == 'a';
    for (size_t i = 0; same && i < n; i++) same = b.ids[i] == ' ';
    tl_result(same, "12 million spaces then a word pass the pre-tokenizer (PCRE2's default match limit is 10 million)",
              "returned %d, %lld ids: %s", done, (long long)b.n, tok_encoder_error(e));
    b.n = 0;
    free(s);
    tok_encoder_free(e);
    tokenizer_free(t);

    /* A repeated group takes JIT stack for every repetition: a long run
     * exhausts PCRE2's, and the failure is an error naming the byte offset
     * in the whole text (here past a special token, which a separate pass
     * splits off first), not a crash or ids of half the text. */
    set_at(root, "pre_tokenizer",
           "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
           "{\"Regex\": \"(?:ab)+\"}, \"behavior\": \"Isolated\", \"invert\": false}, "
           "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}");
    write_json(root, "group_run", path, sizeof path);
    t = tokenizer_load(path);
    e = tok_encoder_new(t);
    n = 4 + (2 << 20);
    s = xmalloc(n + 1);
    memcpy(s, "q<x>", 4);
    for (size_t i = 4; i < n; i++) s[i] = (i % 2) ? 'b' : 'a';
    s[n] = '\0';
    done = tok_encode(e, s, n, 1, &b);
    const char *want = "pre-tokenizer regex (stage 0) failed searching from byte offset 4 of the text: JIT stack limit";
    tl_result(!done && strncmp(tok_encoder_error(e), want, strlen(want)) == 0,
              "a regex failure is reported with its stage and byte offset in the text", "returned %d: '%s'", done,
              tok_encoder_error(e));
    check_encode(e, "the encoder works again after a regex failure", "q<x>ab", 1, (uint32_t[]){'q', 260, 258}, 3);
    token_buf_free(&b);
    free(s);
    tok_encoder_free(e);
    tokenizer_free(t);
    json_decref(root);
}

/* An added token as tokenizer.json lists it; the small tokenizer's own two
 * come first in each list below. */
#define ADDED_AS(id, content, normalized, special)                                                                     \
    "{\"id\": " id ", \"content\": \"" content "\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "    \
    "\"normalized\": " normalized ", \"special\": " special "}"
#define ADDED(id, content) ADDED_AS(id, content, "false", "false")
#define SMALL_ADDED ADDED_AS("260", "<x>", "false", "true") ", " ADDED_AS("262", "zz", "true", "false")

static void check_decode(const Tokenizer *t, const char *name, const uint32_t *ids, int64_t n, const char *want,
                         size_t want_n) {
    ByteBuf out = {0};
    int64_t bad = tok_decode(t, ids, n, &out);
    tl_result(bad == -1 && (size_t)out.n == want_n && memcmp(out.data, want, want_n) == 0, name,
              "first bad id #%lld, %lld bytes", (long long)bad, (long long)out.n);
    byte_buf_free(&out);
}

/* The small tokenizer with `added` as its added_tokens, written as NAME. */
static Tokenizer *with_added(json_t *root, const char *added, const char *name, char *path, size_t cap) {
    set_at(root, "added_tokens", added);
    write_json(root, name, path, cap);
    return tokenizer_load(path);
}

static void check_added_id(const Tokenizer *t, const char *name, const char *content, int32_t want_id,
                           int32_t want_vocab) {
    int32_t id = tokenizer_special_id(t, content, strlen(content));
    tl_result(id == want_id && tokenizer_vocab_size(t) == want_vocab, name, "id %d, vocabulary %d", id,
              tokenizer_vocab_size(t));
}

/* The ids of added tokens as Hugging Face tokenizers gives them, whatever
 * ids the file lists (tests/data/test_tokenizer_added.sh compares with it): a
 * content that is a model.vocab key takes that id, any other the next id
 * after the vocabulary (262 here), in list order. */
static void check_added_ids(void) {
    char path[4200];
    json_t *root = small_tokenizer();
    /* 98 is "b" */
    Tokenizer *t = with_added(root, "[" SMALL_ADDED ", " ADDED("98", "QQQ") "]", "added_taken", path, sizeof path);
    check_added_id(t, "an added token listed at a vocabulary token's id (98, \"b\") takes the next id, 263", "QQQ", 263,
                   264);
    check_decode(t, "... and id 98 still decodes to \"b\", 263 to \"QQQ\"", (uint32_t[]){98, 263}, 2, "bQQQ", 4);
    tokenizer_free(t);
    check_ids("... and \"QQQ b\" encodes to 263 ' ' 'b'", path, "QQQ b", 0, (uint32_t[]){263, ' ', 'b'}, 3);

    t = with_added(root, "[" SMALL_ADDED ", " ADDED("100000", "QQQ") "]", "added_far", path, sizeof path);
    check_added_id(t, "an added token listed at id 100000 takes the next id, 263", "QQQ", 263, 264);
    tokenizer_free(t);

    /* U+00E9 is byte 0xE9's letter in the byte-level alphabet: token 233 */
    t = with_added(root, "[" SMALL_ADDED ", " ADDED("263", "\\u00e9") "]", "added_in_vocab", path, sizeof path);
    check_added_id(t, "an added token whose content is vocabulary token 233 (listed at 263) takes id 233", "\xc3\xa9",
                   233, 263);
    check_decode(t, "... and 233 decodes as Hugging Face's ByteLevel decoder reads \"\u00e9\": byte 0xE9",
                 (uint32_t[]){233}, 1, "\xe9", 1);
    tokenizer_free(t);
    check_ids("... and the text \"\u00e9\" encodes to 233", path, "\xc3\xa9", 0, (uint32_t[]){233}, 1);

    /* the list's order gives the ids; two listed at one id both get one */
    t = with_added(
        root, "[" ADDED("300", "QQQ") ", " ADDED("300", "RR") ", " ADDED("262", "zz") ", " ADDED("5", "\u0120x") "]",
        "added_order", path, sizeof path);
    tl_result(tokenizer_special_id(t, "QQQ", 3) == 262 && tokenizer_special_id(t, "RR", 2) == 263 &&
                  tokenizer_special_id(t, "zz", 2) == 264 && tokenizer_special_id(t, "\xc4\xa0x", 3) == 265 &&
                  tokenizer_vocab_size(t) == 266,
              "added tokens outside the vocabulary take 262, 263, ... in list order, whatever ids are listed",
              "QQQ %d, RR %d, zz %d, \\u0120x %d", tokenizer_special_id(t, "QQQ", 3), tokenizer_special_id(t, "RR", 2),
              tokenizer_special_id(t, "zz", 2), tokenizer_special_id(t, "\xc4\xa0x", 3));
    check_decode(t, "an added token written in the byte-level alphabet (\"\u0120x\") decodes through it: \" x\"",
                 (uint32_t[]){265, 262}, 2, " xQQQ", 5);
    tokenizer_free(t);
    json_decref(root);
}

typedef struct {
    const char *name, *at, *value, *expect;
} Refusal;

/* A SentencePiece-style pipeline on the small vocabulary (read as text). */
#define METASPACE_PRE                                                                                                  \
    "{\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": \"first\", \"split\": false}"

static void load_and_exit(void *path) {
    tokenizer_load(path);
    exit(0);
}

static void check_refusals(void) {
    const Refusal cases[] = {
        {"behavior other than Isolated", "pre_tokenizer",
         "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
         "\"Split\", \"pattern\": {\"Regex\": \"x\"}, \"behavior\": \"Removed\", \"invert\": false}, {\"type\": "
         "\"ByteLevel\", \"add_prefix_space\": false}]}",
         "pre_tokenizer.pretokenizers[0].behavior"},
        {"invert true", "pre_tokenizer",
         "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
         "{\"Regex\": \"x\"}, \"behavior\": \"Isolated\", \"invert\": true}, {\"type\": \"ByteLevel\", "
         "\"add_prefix_space\": false}]}",
         "pre_tokenizer.pretokenizers[0].invert"},
        {"a regex the translator does not understand", "pre_tokenizer",
         "{\"type\": \"Sequence\", \"pretokenizers\": "
         "[{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\d+\"}, \"behavior\": \"Isolated\", \"invert\": false}, "
         "{\"type\": \"ByteLevel\", \"add_prefix_space\": false}]}",
         "pre_tokenizer.pretokenizers[0].pattern.Regex: at byte 0"},
        {"a literal String pattern", "pre_tokenizer",
         "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
         "\"pattern\": {\"String\": \" \"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", "
         "\"add_prefix_space\": false}]}",
         "pre_tokenizer.pretokenizers[0].pattern"},
        {"another pre-tokenizer type", "pre_tokenizer.pretokenizers[0]", "{\"type\": \"Whitespace\"}",
         "pre_tokenizer.pretokenizers[0].type"},
        {"add_prefix_space true", "pre_tokenizer.pretokenizers[1].add_prefix_space", "true",
         "pre_tokenizer.pretokenizers[1].add_prefix_space"},
        {"ByteLevel before another step", "pre_tokenizer",
         "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
         "\"ByteLevel\", \"add_prefix_space\": false}, {\"type\": \"Digits\"}]}",
         "pre_tokenizer.pretokenizers[0]: ByteLevel"},
        {"no ByteLevel step", "pre_tokenizer", "{\"type\": \"Digits\"}", "no ByteLevel"},
        {"null pre_tokenizer with a ByteLevel decoder", "pre_tokenizer", "null",
         "decoder.type is \"ByteLevel\" but pre_tokenizer has no ByteLevel step"},
        {"a normalizer other than NFC, Prepend, Replace", "normalizer", "{\"type\": \"NFKC\"}",
         "normalizer.type is \"NFKC\""},
        {"a normalizer inside a Sequence", "normalizer",
         "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}, "
         "{\"type\": \"Lowercase\"}]}",
         "normalizer.normalizers[1].type is \"Lowercase\""},
        {"a Replace normalizer with a regex", "normalizer",
         "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \" \"}, "
         "\"content\": \"x\"}",
         "normalizer.pattern is not {\"String\""},
        {"Metaspace inside a Sequence", "pre_tokenizer",
         "{\"type\": \"Sequence\", \"pretokenizers\": [" METASPACE_PRE "]}",
         "pre_tokenizer.pretokenizers[0].type is \"Metaspace\""},
        {"Metaspace replacement of two characters", "pre_tokenizer",
         "{\"type\": \"Metaspace\", \"replacement\": \"ab\"}",
         "pre_tokenizer.replacement is not a string of one character"},
        {"Metaspace prepend_scheme unknown", "pre_tokenizer",
         "{\"type\": \"Metaspace\", \"replacement\": \"_\", "
         "\"prepend_scheme\": \"sometimes\"}",
         "pre_tokenizer.prepend_scheme"},
        {"Metaspace add_prefix_space false with prepend_scheme first", "pre_tokenizer",
         "{\"type\": \"Metaspace\", "
         "\"replacement\": \"_\", \"prepend_scheme\": \"first\", \"add_prefix_space\": false}",
         "pre_tokenizer.add_prefix_space is false but prepend_scheme is \"first\""},
        {"truncation", "truncation", "{\"max_length\": 8}", "truncation is set"},
        {"model type other than BPE", "model.type", "\"WordPiece\"", "model.type"},
        {"dropout", "model.dropout", "0.1", "model.dropout"},
        {"byte_fallback true with ByteLevel", "model.byte_fallback", "true",
         "model.byte_fallback is true with a ByteLevel pre-tokenizer"},
        {"continuing_subword_prefix", "model.continuing_subword_prefix", "\"##\"", "model.continuing_subword_prefix"},
        {"end_of_word_suffix", "model.end_of_word_suffix", "\"</w>\"", "model.end_of_word_suffix"},
        {"decoder other than ByteLevel", "decoder", "{\"type\": \"WordPiece\"}", "decoder.type"},
        {"post-processor type", "post_processor", "{\"type\": \"RobertaProcessing\"}", "post_processor.type"},
        {"a special token after the sequence (EOS)", "post_processor",
         "{\"type\": \"Sequence\", \"processors\": [{\"type\": \"ByteLevel\"}, {\"type\": \"TemplateProcessing\", "
         "\"single\": [{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"<x>\", "
         "\"type_id\": 0}}], \"special_tokens\": {}}]}",
         "post_processor.processors[1].single[1]"},
        {"merges: a pair after a string", "model.merges[1]", "[\"\\u0120\", \"1\"]",
         "model.merges[1] is a [LEFT, RIGHT] pair but model.merges[0] is a \"LEFT RIGHT\" string"},
        {"merges: a string after pairs", "model.merges[0]", "[\"1\", \"2\"]",
         "model.merges[1] is a \"LEFT RIGHT\" string but model.merges[0] is a [LEFT, RIGHT] pair"},
        {"added token content repeated", "added_tokens[1].content", "\"<x>\"",
         "added_tokens[1] repeats the content of added_tokens[0]"},
        {"added token lstrip", "added_tokens[0].lstrip", "true", "added_tokens[0].lstrip"},
        {"added token single_word", "added_tokens[1].single_word", "true", "added_tokens[1].single_word"},
    };
    /* the decoders of a vocabulary read as text: the Metaspace pre-tokenizer, then the decoder */
    const Refusal text_decoders[] = {
        {"a SentencePiece-style decoder step not implemented", "decoder",
         "{\"type\": \"Sequence\", \"decoders\": "
         "[{\"type\": \"Fuse\"}, {\"type\": \"CTC\"}]}",
         "decoder.decoders[1].type is \"CTC\""},
        {"a decoder Replace with a regex", "decoder",
         "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"_\"}, "
         "\"content\": \" \"}",
         "decoder.pattern is not {\"String\""},
        {"a decoder Strip without start", "decoder", "{\"type\": \"Strip\", \"content\": \" \", \"stop\": 0}",
         "decoder.start and .stop must be integers"},
    };
    size_t n = sizeof cases / sizeof cases[0], n_text = sizeof text_decoders / sizeof text_decoders[0];
    for (size_t i = 0; i < n + n_text; i++) {
        const Refusal *c = i < n ? &cases[i] : &text_decoders[i - n];
        json_t *root = small_tokenizer();
        if (i >= n) set_at(root, "pre_tokenizer", METASPACE_PRE);
        set_at(root, c->at, c->value);
        char path[4200], name[160];
        snprintf(name, sizeof name, "refuse%zu", i);
        write_json(root, name, path, sizeof path);
        json_decref(root);
        snprintf(name, sizeof name, "refused, naming %s: %s", c->expect, c->name);
        tl_expect_death(name, load_and_exit, path, c->expect);
    }
}

static pid_t tmp_owner;

static void remove_tmp_dir(void) {
    if (getpid() != tmp_owner) return; /* a refusal's child exits through here too */
    DIR *d = opendir(tmp_dir);
    if (!d) return;
    struct dirent *e;
    char path[4200];
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof path, "%s/%s", tmp_dir, e->d_name);
            unlink(path);
        }
    closedir(d);
    rmdir(tmp_dir);
}

int main(void) {
    check_utf8();
    if (!mkdtemp(tmp_dir)) die("test: mkdtemp %s failed", tmp_dir);
    tmp_owner = getpid();
    atexit(remove_tmp_dir);
    check_small_tokenizers();
    check_added_ids();
    check_refusals();
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
