/* GGUF reader and dequantization: every supported type against values
 * computed by hand from the block layouts, every metadata value type, the
 * alignment, and the bad-file corpus (each refused with the file, the byte
 * offset and the reason), plus truncation and byte-mutation sweeps that
 * must never crash. The files are built here, byte by byte. */
#include "../../checkpoints/dtype.h"
#include "../../checkpoints/gguf.h"
#include "../../checkpoints/gguf_dequant.h"
#include "../ckpt_testutil.h"

/* ---------- a GGUF image builder ---------- */

typedef struct {
    uint8_t *p;
    int64_t n, cap;
} Buf;

static void put(Buf *b, const void *src, int64_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, (size_t)b->cap);
    }
    memcpy(b->p + b->n, src, (size_t)n);
    b->n += n;
}
static void put_le_n(Buf *b, uint64_t v, int bytes) {
    uint8_t t[8];
    for (int i = 0; i < bytes; i++) t[i] = (uint8_t)(v >> (8 * i));
    put(b, t, bytes);
}
static void u8(Buf *b, uint64_t v) { put_le_n(b, v, 1); }
static void u16(Buf *b, uint64_t v) { put_le_n(b, v, 2); }
static void u32(Buf *b, uint64_t v) { put_le_n(b, v, 4); }
static void u64(Buf *b, uint64_t v) { put_le_n(b, v, 8); }
static void str(Buf *b, const char *s) {
    u64(b, strlen(s));
    put(b, s, (int64_t)strlen(s));
}
static void pad_to(Buf *b, int64_t align) {
    while (b->n % align) u8(b, 0);
}
static void header(Buf *b, uint64_t n_tensors, uint64_t n_kv) {
    put(b, "GGUF", 4);
    u32(b, 3);
    u64(b, n_tensors);
    u64(b, n_kv);
}
static void tensor_info(Buf *b, const char *name, int nd, const int64_t *ne, uint32_t type, uint64_t offset) {
    str(b, name);
    u32(b, (uint32_t)nd);
    for (int d = 0; d < nd; d++) u64(b, (uint64_t)ne[d]);
    u32(b, type);
    u64(b, offset);
}

/* ---------- dequantization by hand ---------- */

typedef struct {
    const char *name;
    uint32_t type;
    int64_t n;
    uint8_t raw[80];
    int64_t raw_n;
    float want[64];
} DqCase;

/* One block or a few scalars of each type, and what the layout says they hold. */
static int build_cases(DqCase *c) {
    int k = 0;
    {   /* F32: the bytes are the floats */
        DqCase *d = &c[k++];
        *d = (DqCase){"F32", GGML_T_F32, 3, {0}, 12, {1.5f, -2.25f, 1e-30f}};
        memcpy(d->raw, d->want, 12);
    }
    {   /* F16: 1, -2, the smallest subnormal 2^-24, the largest finite 65504 */
        DqCase *d = &c[k++];
        *d = (DqCase){"F16", GGML_T_F16,
                      4,     {0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00, 0xff, 0x7b},
                      8,     {1.0f, -2.0f, 5.9604644775390625e-8f, 65504.0f}};
    }
    {   /* BF16: the top half of a float32 */
        DqCase *d = &c[k++];
        *d = (DqCase){"BF16", GGML_T_BF16, 3, {0x80, 0x3f, 0x40, 0xc0, 0x49, 0x40}, 6, {1.0f, -3.0f, 3.140625f}};
    }
    {   /* Q8_0: d = 0.5 (fp16 0x3800), q = int8 j - 16 for j < 31, q[31] = -128 */
        DqCase *d = &c[k++];
        *d = (DqCase){"Q8_0", GGML_T_Q8_0, 32, {0x00, 0x38}, 34, {0}};
        for (int j = 0; j < 32; j++) {
            int q = j < 31 ? j - 16 : -128;
            d->raw[2 + j] = (uint8_t)(int8_t)q;
            d->want[j] = 0.5f * (float)q;
        }
    }
    {   /* Q4_0: d = 2 (0x4000); byte j holds element j (low nibble j) and
         * element j + 16 (high nibble 15 - j); value = d * (nibble - 8) */
        DqCase *d = &c[k++];
        *d = (DqCase){"Q4_0", GGML_T_Q4_0, 32, {0x00, 0x40}, 18, {0}};
        for (int j = 0; j < 16; j++) {
            d->raw[2 + j] = (uint8_t)(j | ((15 - j) << 4));
            d->want[j] = 2.0f * (float)(j - 8);
            d->want[j + 16] = 2.0f * (float)(15 - j - 8);
        }
    }
    {   /* Q4_1: d = 0.25 (0x3400), min m = -1.5 (0xbe00); value = d * nibble + m */
        DqCase *d = &c[k++];
        *d = (DqCase){"Q4_1", GGML_T_Q4_1, 32, {0x00, 0x34, 0x00, 0xbe}, 20, {0}};
        for (int j = 0; j < 16; j++) {
            d->raw[4 + j] = (uint8_t)((15 - j) | (j << 4));
            d->want[j] = 0.25f * (float)(15 - j) - 1.5f;
            d->want[j + 16] = 0.25f * (float)j - 1.5f;
        }
    }
    {   /* Q4_1 where the fp32 sum rounds: d = 1/3 in fp16 (0x3555 =
         * 0.333251953125), m = 60000 (0x7b53), q = 7: d * q = 2.332763671875
         * (exact: an fp16 significand times 4 bits fits fp32's), and
         * 60002.332763671875 rounds to 60002.33203125 (fp32 spacing 2^-8) */
        DqCase *d = &c[k++];
        *d = (DqCase){"Q4_1 fp32 sum rounding", GGML_T_Q4_1, 32, {0x55, 0x35, 0x53, 0x7b}, 20, {0}};
        for (int j = 0; j < 16; j++) {
            d->raw[4 + j] = 0x77;
            d->want[j] = d->want[j + 16] = 60002.33203125f;
        }
    }
    return k;
}

static void test_dequant(void) {
    DqCase c[8];
    int n = build_cases(c);
    for (int i = 0; i < n; i++) {
        float got[64];
        int rc = ggml_dequantize(c[i].type, c[i].raw, got, c[i].n);
        int bad = -1;
        for (int64_t j = 0; rc == 0 && j < c[i].n && bad < 0; j++)
            if (kv_f32_bits(got[j]) != kv_f32_bits(c[i].want[j])) bad = (int)j;
        char name[96];
        snprintf(name, sizeof name, "dequantize %s: every element equals the hand-computed value bit for bit",
                 c[i].name);
        tl_result(rc == 0 && bad < 0, name, "rc %d; element %d got %.9g want %.9g", rc, bad, bad < 0 ? 0 : got[bad],
                  bad < 0 ? 0 : c[i].want[bad]);
    }
    /* the block geometry every reader relies on */
    const GgmlTypeInfo *q41 = ggml_type_info(GGML_T_Q4_1), *q4k = ggml_type_info(12);
    tl_result(q41 && q41->block == 32 && q41->block_bytes == 20 && q4k && strcmp(q4k->name, "Q4_K") == 0 &&
                  q4k->block == 256 && q4k->block_bytes == 144 && !ggml_type_info(4) && !ggml_type_info(1000),
              "ggml type table: Q4_1 32/20 bytes, Q4_K 256/144 bytes, retired 4 and unknown 1000 absent", "");
    float dummy[256];
    uint8_t zeros[144] = {0};
    tl_result(!ggml_type_dequantizable(12) && ggml_dequantize(12, zeros, dummy, 256) == -1,
              "Q4_K is known by name but not dequantized (refused, nothing written)", "");
}

/* ---------- files ---------- */

/* A valid file: every metadata value type, string and int arrays,
 * alignment 64, and one tensor of each supported type. */
static Buf valid_file(void) {
    Buf b = {0};
    DqCase c[8];
    int n = build_cases(c) - 1; /* one Q4_1 is enough */
    header(&b, (uint64_t)n, 17);
    str(&b, "general.alignment"), u32(&b, GGUF_UINT32), u32(&b, 64);
    str(&b, "k.u8"), u32(&b, GGUF_UINT8), u8(&b, 200);
    str(&b, "k.i8"), u32(&b, GGUF_INT8), u8(&b, 0xfe);
    str(&b, "k.u16"), u32(&b, GGUF_UINT16), u16(&b, 60000);
    str(&b, "k.i16"), u32(&b, GGUF_INT16), u16(&b, 0xfffd);
    str(&b, "k.u32"), u32(&b, GGUF_UINT32), u32(&b, 4000000000u);
    str(&b, "k.i32"), u32(&b, GGUF_INT32), u32(&b, 0xfffffffc);
    str(&b, "k.f32"), u32(&b, GGUF_FLOAT32), u32(&b, kv_f32_bits(1e-5f));
    str(&b, "k.bool"), u32(&b, GGUF_BOOL), u8(&b, 1);
    str(&b, "k.str"), u32(&b, GGUF_STRING), str(&b, "caf\xc3\xa9");
    str(&b, "k.u64"), u32(&b, GGUF_UINT64), u64(&b, 1ull << 40);
    str(&b, "k.i64"), u32(&b, GGUF_INT64), u64(&b, (uint64_t)-5);
    str(&b, "k.f64"), u32(&b, GGUF_FLOAT64);
    double pi = 3.141592653589793;
    uint64_t pb;
    memcpy(&pb, &pi, 8);
    u64(&b, pb);
    str(&b, "k.strs"), u32(&b, GGUF_ARRAY), u32(&b, GGUF_STRING), u64(&b, 3), str(&b, "a"), str(&b, ""), str(&b, "b c");
    str(&b, "k.ints"), u32(&b, GGUF_ARRAY), u32(&b, GGUF_INT32), u64(&b, 2), u32(&b, 7), u32(&b, (uint32_t)-1);
    str(&b, "k.empty"), u32(&b, GGUF_ARRAY), u32(&b, GGUF_FLOAT32), u64(&b, 0);
    str(&b, "k.last"), u32(&b, GGUF_UINT8), u8(&b, 9);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        int64_t ne[2] = {c[i].n, 1};
        tensor_info(&b, c[i].name, i % 2 ? 2 : 1, ne, c[i].type, off);
        off += (uint64_t)((c[i].raw_n + 63) / 64 * 64);
    }
    pad_to(&b, 64);
    for (int i = 0; i < n; i++) {
        put(&b, c[i].raw, c[i].raw_n);
        pad_to(&b, 64);
    }
    return b;
}

static void test_valid_file(void) {
    Buf b = valid_file();
    const char *path = "build/tests/tmp_gguf_valid.gguf";
    write_bytes(path, b.p, b.n);
    GgufFile f;
    char err[GGUF_ERR_LEN] = {0};
    int rc = gguf_open(&f, path, err, sizeof err);
    tl_result(rc == 0, "a valid file with every metadata type and tensor type opens", "%s", err);
    if (rc) return;
    const GgufHeader *h = &f.h;
#define KV(k) (&h->kv[gguf_find_kv(h, k)])
    int ok = h->version == 3 && h->n_kv == 17 && KV("k.u8")->i == 200 && KV("k.i8")->i == -2 &&
             KV("k.u16")->i == 60000 && KV("k.i16")->i == -3 && KV("k.u32")->i == 4000000000LL &&
             KV("k.i32")->i == -4 && (float)KV("k.f32")->f == 1e-5f && KV("k.bool")->i == 1 &&
             KV("k.str")->s.len == 5 && memcmp(KV("k.str")->s.p, "caf\xc3\xa9", 5) == 0 &&
             KV("k.u64")->i == (1ll << 40) && KV("k.i64")->i == -5 && KV("k.f64")->f == 3.141592653589793 &&
             KV("k.last")->i == 9 && gguf_find_kv(h, "k.nope") == -1;
    tl_result(ok, "metadata: all 12 scalar types read with their signs and widths", "");
    const GgufKV *s = KV("k.strs"), *in = KV("k.ints"), *e = KV("k.empty");
    ok = s->type == GGUF_ARRAY && s->arr_type == GGUF_STRING && s->arr_n == 3 && s->arr_str[1].len == 0 &&
         s->arr_str[2].len == 3 && memcmp(s->arr_str[2].p, "b c", 3) == 0 && in->arr_n == 2 &&
         in->arr_type == GGUF_INT32 && e->arr_n == 0 && e->arr_type == GGUF_FLOAT32;
    tl_result(ok, "metadata: arrays of strings (an empty one included), of int32, and an empty array", "");
    tl_result(h->alignment == 64 && h->data_start % 64 == 0 && h->n_tensors == 6,
              "general.alignment 64: the data section starts on a 64-byte boundary", "alignment %lld data_start %lld",
              (long long)h->alignment, (long long)h->data_start);
    DqCase c[8];
    build_cases(c);
    int bad = 0;
    for (int i = 0; i < 6; i++) {
        int64_t t = gguf_find_tensor(h, c[i].name);
        float got[64];
        if (t < 0 || h->t[t].numel != c[i].n || ggml_dequantize(h->t[t].type, gguf_tensor_data(&f, t), got, c[i].n))
            bad++;
        else
            for (int j = 0; j < c[i].n; j++) bad += kv_f32_bits(got[j]) != kv_f32_bits(c[i].want[j]);
    }
    tl_result(bad == 0, "tensors read back from the file dequantize to the hand-computed values", "%d wrong", bad);
    gguf_close(&f);
    tl_result(gguf_file_detect(path) && !gguf_file_detect("Makefile"), "GGUF detected by its magic", "");
    free(b.p);
}

typedef struct {
    const char *name, *want;
    Buf b;
} BadCase;

static Buf one_tensor(uint32_t type, int64_t ne0, uint64_t offset, int64_t data_bytes) {
    Buf b = {0};
    header(&b, 1, 0);
    int64_t ne[1] = {ne0};
    tensor_info(&b, "w", 1, ne, type, offset);
    pad_to(&b, 32);
    for (int64_t i = 0; i < data_bytes; i++) u8(&b, 0);
    return b;
}

static void test_bad_files(void) {
    BadCase c[32];
    int n = 0;
    Buf b;
    b = (Buf){0}, put(&b, "GGUG", 4), u32(&b, 3), u64(&b, 0), u64(&b, 0);
    c[n++] = (BadCase){"bad magic", "bad magic 47 47 55 47", b};
    b = (Buf){0}, put(&b, "GG", 2);
    c[n++] = (BadCase){"2-byte file", "expected at least the 4-byte magic", b};
    b = (Buf){0}, put(&b, "GGUF", 4), u32(&b, 2), u64(&b, 0), u64(&b, 0);
    c[n++] = (BadCase){"version 2", "unsupported GGUF version 2 (expected 3)", b};
    b = (Buf){0}, put(&b, "GGUF", 4), u32(&b, 0x03000000), u64(&b, 0), u64(&b, 0);
    c[n++] = (BadCase){"big-endian file", "big-endian", b};
    b = (Buf){0}, put(&b, "GGUF", 4), u32(&b, 3), u64(&b, 0);
    c[n++] = (BadCase){"truncated inside the counts", "file ends inside the metadata count", b};
    b = (Buf){0}, header(&b, 1ull << 62, 0);
    c[n++] = (BadCase){"overflowing tensor count 2^62", "tensor count 4611686018427387904 cannot fit", b};
    b = (Buf){0}, header(&b, 0, 0xffffffffffffffffull);
    c[n++] = (BadCase){"metadata count 2^64-1", "metadata count 18446744073709551615 cannot fit", b};
    b = (Buf){0}, header(&b, 0, 1), str(&b, "a"), u32(&b, GGUF_ARRAY), u32(&b, GGUF_UINT64), u64(&b, 1ull << 61);
    c[n++] = (BadCase){"array count whose byte size overflows", "key 'a': array of 2305843009213693952 uint64", b};
    b = (Buf){0}, header(&b, 0, 1), str(&b, "a"), u32(&b, GGUF_ARRAY), u32(&b, GGUF_STRING), u64(&b, 100), str(&b, "x");
    c[n++] = (BadCase){"string array longer than the file", "key 'a': array of 100 string", b};
    b = (Buf){0}, header(&b, 0, 1), str(&b, "a"), u32(&b, GGUF_STRING), u64(&b, 1000), put(&b, "abc", 3);
    c[n++] = (BadCase){"string length past the end", "string length 1000 runs past the end", b};
    b = (Buf){0}, header(&b, 0, 1), str(&b, "a"), u32(&b, 13), u8(&b, 0);
    c[n++] = (BadCase){"unknown metadata value type", "key 'a': unknown value type 13", b};
    b = (Buf){0}, header(&b, 0, 1), str(&b, "a"), u32(&b, GGUF_ARRAY), u32(&b, GGUF_ARRAY), u64(&b, 0);
    c[n++] = (BadCase){"array of arrays", "arrays of arrays are not supported", b};
    b = (Buf){0}, header(&b, 0, 2), str(&b, "a"), u32(&b, GGUF_UINT8), u8(&b, 1), str(&b, "a"), u32(&b, GGUF_UINT8),
    u8(&b, 2);
    c[n++] = (BadCase){"duplicate key", "metadata key 'a' appears twice", b};
    b = (Buf){0}, header(&b, 0, 1), str(&b, "general.alignment"), u32(&b, GGUF_UINT32), u32(&b, 48);
    c[n++] = (BadCase){"alignment not a power of two", "general.alignment': expected a uint32 power of two", b};
    b = (Buf){0}, header(&b, 0, 1), str(&b, "b"), u32(&b, GGUF_BOOL), u8(&b, 7);
    c[n++] = (BadCase){"bool value 7", "key 'b': bool value 7", b};
    c[n++] = (BadCase){"unknown tensor type 99", "tensor 'w': unknown ggml type 99", one_tensor(99, 32, 0, 128)};
    c[n++] = (BadCase){"retired tensor type 4 (Q4_2)", "tensor 'w': unknown ggml type 4", one_tensor(4, 32, 0, 128)};
    c[n++] = (BadCase){"tensor data past the end of the file", "tensor 'w': 128 bytes at data offset 0",
                       one_tensor(GGML_T_F32, 32, 0, 100)};
    c[n++] = (BadCase){"tensor offset far past the end", "tensor 'w': 128 bytes at data offset 1048576",
                       one_tensor(GGML_T_F32, 32, 1 << 20, 128)};
    c[n++] = (BadCase){"tensor offset 2^63 + 32", "data offset 9223372036854775840",
                       one_tensor(GGML_T_F32, 32, (1ull << 63) + 32, 128)};
    c[n++] = (BadCase){"misaligned tensor offset", "data offset 4 is not a multiple of the alignment 32",
                       one_tensor(GGML_T_F32, 4, 4, 64)};
    c[n++] =
        (BadCase){"Q4_1 row not a multiple of its block", "first dimension 40 is not a multiple of Q4_1's block of 32",
                  one_tensor(GGML_T_Q4_1, 40, 0, 64)};
    {
        b = (Buf){0}, header(&b, 1, 0);
        int64_t ne[2] = {1ll << 32, 1ll << 32};
        tensor_info(&b, "w", 2, ne, GGML_T_F32, 0);
        c[n++] = (BadCase){"dimensions whose product overflows",
                           "tensor 'w': dimension 1 = 4294967296 makes the element count overflow", b};
    }
    {
        b = (Buf){0}, header(&b, 1, 0);
        int64_t ne[1] = {32};
        str(&b, "w"), u32(&b, 5), u64(&b, 32), u64(&b, 1), u64(&b, 1), u64(&b, 1), u64(&b, 1), u32(&b, 0), u64(&b, 0);
        (void)ne;
        c[n++] = (BadCase){"5 dimensions", "tensor 'w': 5 dimensions (expected 1..4)", b};
    }
    {
        b = (Buf){0}, header(&b, 2, 0);
        int64_t ne[1] = {8};
        tensor_info(&b, "w", 1, ne, GGML_T_F32, 0);
        tensor_info(&b, "w", 1, ne, GGML_T_F32, 32);
        pad_to(&b, 32);
        for (int i = 0; i < 64; i++) u8(&b, 0);
        c[n++] = (BadCase){"duplicate tensor name", "tensor name 'w' appears twice", b};
    }
    {
        b = (Buf){0}, header(&b, 2, 0);
        int64_t ne[1] = {16}, ne2[1] = {8};
        tensor_info(&b, "a", 1, ne, GGML_T_F32, 0);
        tensor_info(&b, "b", 1, ne2, GGML_T_F32, 32);
        pad_to(&b, 32);
        for (int i = 0; i < 96; i++) u8(&b, 0);
        c[n++] = (BadCase){"overlapping tensors", "tensor 'b' (data offset 32) overlaps tensor 'a'", b};
    }
    for (int i = 0; i < n; i++) {
        char path[256], err[GGUF_ERR_LEN] = {0}, name[200];
        snprintf(path, sizeof path, "build/tests/tmp_gguf_bad_%d.gguf", i);
        write_bytes(path, c[i].b.p, c[i].b.n);
        GgufFile f;
        int rc = gguf_open(&f, path, err, sizeof err);
        if (rc == 0) gguf_close(&f);
        snprintf(name, sizeof name, "bad file refused: %s", c[i].name);
        tl_result(rc == -1 && strstr(err, c[i].want) && strstr(err, path) && strstr(err, "at byte"), name,
                  "rc %d, message: %s (wanted '%s', the path and 'at byte')", rc, err, c[i].want);
        free(c[i].b.p);
        unlink(path);
    }
}

/* Every prefix of a valid file and every single-byte mutation of its header
 * is either refused with a message or parsed; never a crash. */
static void test_sweeps(void) {
    Buf b = valid_file();
    GgufHeader h;
    char err[GGUF_ERR_LEN];
    int accepted = 0, no_msg = 0;
    /* up to the last tensor byte: the padding after it may go */
    int64_t end = b.n;
    while (end > 0 && b.p[end - 1] == 0) end--;
    for (int64_t len = 0; len < end; len++) {
        uint8_t *copy = malloc((size_t)len + 1); /* exact size: ASan sees any overread */
        memcpy(copy, b.p, (size_t)len);
        err[0] = 0;
        if (gguf_parse(&h, copy, len, "truncated", err, sizeof err) == 0) accepted++, gguf_header_free(&h);
        else if (!strstr(err, "at byte")) no_msg++;
        free(copy);
    }
    tl_result(accepted == 0 && no_msg == 0, "every truncation of a valid file is refused with a byte offset",
              "%d of %lld prefixes accepted, %d without a message", accepted, (long long)end, no_msg);
    int64_t hdr = 0;
    { /* mutate the header part (before the data) */
        GgufHeader ok;
        gguf_parse(&ok, b.p, b.n, "valid", err, sizeof err);
        hdr = ok.data_start;
        gguf_header_free(&ok);
    }
    int parsed = 0, refused = 0;
    uint8_t *m = malloc((size_t)b.n);
    for (int64_t i = 0; i < hdr; i++)
        for (int v = 0; v < 3; v++) {
            memcpy(m, b.p, (size_t)b.n);
            m[i] = v == 0 ? (uint8_t)~m[i] : v == 1 ? 0xff : (uint8_t)(m[i] + 1);
            if (gguf_parse(&h, m, b.n, "mutant", err, sizeof err) == 0) parsed++, gguf_header_free(&h);
            else refused++;
        }
    free(m);
    tl_result(parsed + refused == 3 * hdr && refused > 0, "byte mutations of the header: parsed or refused, no crash",
              "%d parsed, %d refused", parsed, refused);
    free(b.p);
}

int main(void) {
    test_dequant();
    test_valid_file();
    test_bad_files();
    test_sweeps();
    printf("%d passed, %d failed\n", tl_passed, tl_failed);
    return tl_failed ? 1 : 0;
}
