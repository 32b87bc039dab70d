#include "sha256.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"

struct Sha256 {
    EVP_MD_CTX *ctx;
};

Sha256 *sha256_new(void) {
    Sha256 *h = xcalloc(1, sizeof *h);
    h->ctx = EVP_MD_CTX_new();
    if (!h->ctx || EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1) die("libcrypto: cannot initialise SHA-256");
    return h;
}

void sha256_update(Sha256 *h, const void *data, size_t n) {
    if (n && EVP_DigestUpdate(h->ctx, data, n) != 1) die("libcrypto: SHA-256 update failed");
}

void sha256_finish(Sha256 *h, char hex[65]) {
    unsigned char md[32];
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(h->ctx, md, &len) != 1 || len != 32) die("libcrypto: SHA-256 final failed");
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    EVP_MD_CTX_free(h->ctx);
    free(h);
}

void sha256_file(const char *path, char hex[65]) {
    FILE *f = fopen_check(path, "rb");
    Sha256 *h = sha256_new();
    static __thread unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) sha256_update(h, buf, n);
    if (ferror(f)) die("'%s': read error at offset %ld: %s", path, ftell(f), strerror(errno));
    fclose(f);
    sha256_finish(h, hex);
}
