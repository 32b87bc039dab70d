/* safetensors reader/writer and dtype conversions: round trip, the bad-file
 * corpus (each must give an error naming the file and byte offset), and a
 * byte-mutation sweep that must never crash. */
#include "../../checkpoints/dtype.h"
#include "../../checkpoints/safetensors.h"
#include "../ckpt_testutil.h"

/* index of the tensor named name in h, or -1 */
static int st_header_find(const StHeader *h, const char *name) {
    for (int i = 0; i < h->n; i++)
        if (strcmp(h->t[i].name, name) == 0) return i;
    return -1;
}

#define VALID_HDR                                                                                                      \
    "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"         \
    "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]}}"

static void test_dtypes(void) {
    /* 1 + 2^-8 lies halfway between bf16 1.0 and 1.0078125: ties go to even (1.0) */
    int ok = kv_f32_to_bf16(1.00390625f) == 0x3f80 && kv_f32_to_bf16(1.01171875f) == 0x3f82 &&
             kv_f32_to_bf16(kv_bits_f32(0x3f808001u)) == 0x3f81 && kv_f32_to_bf16(-2.0f) == 0xc000 &&
             kv_f32_to_bf16(3.4e38f) == 0x7f80 && (kv_f32_to_bf16(kv_bits_f32(0x7f800001u)) & 0x7fc0) == 0x7fc0;
    tl_result(ok, "bf16 rounds to nearest even, overflows to inf, keeps NaN", "");
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        int nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
        if (!nan && kv_f32_to_bf16(kv_bf16_to_f32((uint16_t)h)) != h) bad++;
    }
    tl_result(bad == 0, "bf16 -> f32 -> bf16 is the identity on all 65536 non-NaN codes", "%d differ", bad);
    bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        int nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (!nan && kv_f32_to_f16(kv_f16_to_f32((uint16_t)h)) != h) bad++;
    }
    tl_result(bad == 0, "f16 -> f32 -> f16 is the identity on all 65536 non-NaN codes", "%d differ", bad);
    /* exhaustive over f16 gaps: the midpoint between neighbours rounds to the even one */
    bad = 0;
    for (uint32_t h = 0; h < 0x7bff; h++) {
        float lo = kv_f16_to_f32((uint16_t)h), hi = kv_f16_to_f32((uint16_t)(h + 1));
        float mid = (float)(((double)lo + (double)hi) / 2);
        uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        if (kv_f32_to_f16(mid) != want) bad++;
        if (kv_f32_to_f16(kv_bits_f32(kv_f32_bits(mid) + 1)) != h + 1) bad++;
    }
    tl_result(bad == 0, "f16 rounding: ties to even, just above a tie rounds up", "%d wrong", bad);
    ok = kv_f32_to_f16(65504.0f) == 0x7bff && kv_f32_to_f16(65520.0f) == 0x7c00 && kv_f32_to_f16(1e-8f) == 0 &&
         kv_f32_to_f16(5.9604645e-8f) == 1 && kv_f32_to_f16(-0.0f) == 0x8000;
    tl_result(ok, "f16 limits: max, overflow, underflow, smallest subnormal, -0", "");
}

static void test_roundtrip(void) {
    float a[6] = {1, -2, 3.5f, 0, 1e-3f, 7};
    uint16_t b[4] = {0x3f80, 0xc000, 0x0001, 0x7f80};
    StTensorSpec specs[3] = {{"model.a", KV_F32, 2, {2, 3}}, {"b", KV_BF16, 1, {4}}, {"scalar", KV_F16, 0, {0}}};
    const char *meta[] = {"format", "pt", "note", "caf\xc3\xa9"};
    const char *path = "build/tests/tmp_st_roundtrip.safetensors";
    StWriter w;
    st_writer_begin(&w, path, specs, 3, meta, 2);
    st_writer_write(&w, a, sizeof a);
    st_writer_write(&w, b, sizeof b);
    uint16_t s = 0x3c00;
    st_writer_write(&w, &s, 2);
    st_writer_end(&w);
    StFile f;
    char err[ST_ERR_LEN];
    int rc = st_open(&f, path, err, sizeof err);
    tl_result(rc == 0, "written file opens", "%s", err);
    if (rc) return;
    int ia = st_header_find(&f.h, "model.a"), ib = st_header_find(&f.h, "b"), is = st_header_find(&f.h, "scalar");
    int ok = ia >= 0 && ib >= 0 && is >= 0 && f.h.t[ia].dtype == KV_F32 && f.h.t[ia].ndim == 2 &&
             f.h.t[ia].shape[1] == 3 && f.h.t[is].ndim == 0 && memcmp(st_tensor_data(&f, ia), a, sizeof a) == 0 &&
             memcmp(st_tensor_data(&f, ib), b, sizeof b) == 0 && memcmp(st_tensor_data(&f, is), &s, 2) == 0;
    tl_result(ok, "tensors read back with names, dtypes, shapes and bytes", "");
    ok = f.h.n_meta == 2 && strcmp(f.h.meta_keys[0], "format") == 0 && strcmp(f.h.meta_values[1], "caf\xc3\xa9") == 0;
    tl_result(ok, "__metadata__ read back (UTF-8 preserved)", "");
    int64_t hl = f.h.data_start - 8;
    int pad_ok = hl % 8 == 0;
    const char *hdr = (const char *)f.map.data + 8;
    int64_t end = hl;
    while (end > 0 && hdr[end - 1] == ' ') end--;
    pad_ok = pad_ok && hdr[end - 1] == '}' && hl - end < 8;
    tl_result(pad_ok, "header padded with spaces to a multiple of 8", "header length %lld", (long long)hl);
    st_close(&f);
}

typedef struct {
    const char *name, *header, *want;
    int64_t data_len, len_override; /* len_override > 0 replaces the header length field */
    int64_t truncate_to;            /* > 0: keep only this many bytes */
} BadCase;

static const BadCase bad_cases[] = {
    {"empty file", "{}", "expected at least the 8-byte header length", 0, 0, 0},
    {"truncated inside the length", VALID_HDR, "expected at least the 8-byte header length", 32, 0, 5},
    {"truncated inside the header", VALID_HDR, "runs past the end of the file", 32, 0, 40},
    {"truncated data", VALID_HDR, "must satisfy begin <= end <= 28", 32, 0, 8 + sizeof VALID_HDR - 1 + 28},
    {"header length beyond the file", VALID_HDR, "runs past the end of the file", 32, 5000, 0},
    {"2 GB header claim", VALID_HDR, "exceeds the 100000000-byte limit", 32, 2147483648LL, 0},
    {"header length 0", "", "start with '{'", 0, 0, 0},
    {"offsets out of bounds", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]}}",
     "data_offsets [16, 32]", 24, 0, 0},
    {"begin after end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", "begin <= end", 8, 0, 0},
    {"overlapping offsets",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]},\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_"
     "offsets\":[20,28]}}",
     "overlap", 32, 0, 0},
    {"hole between tensors",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_"
     "offsets\":[24,32]}}",
     "hole in the data buffer", 32, 0, 0},
    {"bytes after the last tensor", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
     "file holds 24", 24, 0, 0},
    {"unknown dtype", "{\"a\":{\"dtype\":\"Q4_K\",\"shape\":[4],\"data_offsets\":[0,16]}}",
     "dtype 'Q4_K' is not supported", 16, 0, 0},
    {"integer dtype", "{\"a\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}",
     "dtype 'I64' is not supported", 16, 0, 0},
    {"shape/byte-count mismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[0,24]}}",
     "need 32 bytes but data_offsets span 24", 24, 0, 0},
    {"shape product overflow", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,16]}}",
     "overflows", 16, 0, 0},
    {"negative shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}}", "non-negative", 16, 0, 0},
    {"negative offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[-16,0]}}", "non-negative", 16, 0, 0},
    {"missing data_offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4]}}", "exactly dtype, shape, data_offsets", 16, 0,
     0},
    {"non-UTF-8 JSON", "{\"\xff\xfe\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
     "invalid JSON header", 16, 0, 0},
    {"overlong UTF-8", "{\"\xc0\xaf\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
     "invalid JSON header", 16, 0, 0},
    {"duplicate tensor name",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_"
     "offsets\":[8,16]}}",
     "duplicate", 16, 0, 0},
    {"header not an object", "[1,2]", "start with '{'", 0, 0, 0},
    {"garbage after the JSON", "{} x", "invalid JSON header", 0, 0, 0},
    {"unterminated JSON", "{\"a\":{\"dtype\":", "invalid JSON header", 0, 0, 0},
    {"metadata value not a string", "{\"__metadata__\":{\"format\":1}}", "expected a string value", 0, 0, 0},
    {"escaped NUL in a name", "{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
     "invalid JSON header", 16, 0, 0},
    {"too many dimensions", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
     "dimensions", 4, 0, 0},
};

static void test_bad_corpus(void) {
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const BadCase *c = &bad_cases[i];
        Bytes b = st_image(c->header, c->data_len);
        if (c->len_override > 0)
            for (int k = 0; k < 8; k++) b.p[k] = (uint8_t)((uint64_t)c->len_override >> (8 * k));
        if (c->truncate_to > 0) b.n = c->truncate_to;
        if (strcmp(c->name, "empty file") == 0) b.n = 0;
        char path[256], err[ST_ERR_LEN] = {0}, name[160];
        snprintf(path, sizeof path, "build/tests/tmp_bad_%02zu.safetensors", i);
        write_bytes(path, b.p, b.n);
        StFile f;
        int rc = st_open(&f, path, err, sizeof err);
        snprintf(name, sizeof name, "bad file rejected: %s", c->name);
        tl_result(rc == -1 && strstr(err, c->want) && strstr(err, path) && strstr(err, "at byte"), name,
                  "rc %d, message: %s (wanted '%s', the path and 'at byte')", rc, err, c->want);
        if (rc == 0) st_close(&f);
        remove(path);
        free(b.p);
    }
}

/* Every single-byte substitution and every truncation of a valid file must
 * parse or fail cleanly (run under ASan/UBSan by `make fuzz` for more). */
static void test_mutation_sweep(void) {
    Bytes b = st_image(VALID_HDR, 32);
    static const uint8_t subst[] = {0x00, 0xff, '"', '{', '}', '9', '-', ',', 0xc3};
    int64_t accepted = 0, rejected = 0;
    char err[ST_ERR_LEN];
    uint8_t *m = malloc((size_t)b.n);
    for (int64_t pos = 0; pos < b.n; pos++)
        for (size_t s = 0; s < sizeof subst; s++) {
            memcpy(m, b.p, (size_t)b.n);
            m[pos] = subst[s];
            StHeader h;
            if (st_parse(&h, m, b.n, "mutant", err, sizeof err) == 0) accepted++, st_header_free(&h);
            else rejected++;
        }
    for (int64_t len = 0; len < b.n; len++) {
        StHeader h;
        if (st_parse(&h, b.p, len, "truncated", err, sizeof err) == 0) accepted++, st_header_free(&h);
        else rejected++;
    }
    tl_result(rejected > 0 && accepted > 0, "mutation sweep: every mutant parsed or rejected without crashing",
              "accepted %lld rejected %lld", (long long)accepted, (long long)rejected);
    free(m);
    free(b.p);
}

int main(void) {
    test_dtypes();
    test_roundtrip();
    test_bad_corpus();
    test_mutation_sweep();
    return tl_finish();
}
