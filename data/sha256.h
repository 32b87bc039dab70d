#ifndef KVCPT_SHA256_H
#define KVCPT_SHA256_H
/* SHA-256 through OpenSSL's libcrypto (EVP), for the manifest's input and
 * tokenizer fingerprints. */
#include <stddef.h>

typedef struct Sha256 Sha256;

Sha256 *sha256_new(void);
void sha256_update(Sha256 *h, const void *data, size_t n);
/* Writes 64 lowercase hex digits + NUL into hex[65] and frees h. */
void sha256_finish(Sha256 *h, char hex[65]);
/* Hash of a whole file; dies naming the file on a read error. */
void sha256_file(const char *path, char hex[65]);

#endif
