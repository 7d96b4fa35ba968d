/* TLS 1.3's record layer for one direction of a link, on herd's own
   buffers: TLS_AES_128_GCM_SHA256 records sealed and opened with
   OpenSSL's AES-GCM (AES-NI and carry-less multiply where the CPU has
   them). The handshake is the Haskell tls package's; this takes over with
   the application traffic secret it produced (RFC 8446, sections 5.2,
   5.3 and 7.3). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#define KEY_BYTES 16
#define IV_BYTES 12
#define TAG_BYTES 16

typedef struct {
    EVP_CIPHER_CTX *ctx;
    int seal;                 /* 1: this side sends, 0: it receives */
    uint8_t iv[IV_BYTES];
    uint64_t seq;
} herd_aead;

/* HKDF-Expand-Label(secret, label, "", n) for n up to one SHA-256 block. */
static int expand_label(const uint8_t *secret, int secret_len, const char *label, uint8_t *out, int n)
{
    uint8_t info[64];
    const char *prefix = "tls13 ";
    int plen = (int)strlen(prefix), llen = (int)strlen(label), k = 0;
    if (n > 32 || plen + llen > 40) return -1;
    info[k++] = (uint8_t)(n >> 8);
    info[k++] = (uint8_t)n;
    info[k++] = (uint8_t)(plen + llen);
    memcpy(info + k, prefix, plen); k += plen;
    memcpy(info + k, label, llen); k += llen;
    info[k++] = 0;            /* empty context */
    info[k++] = 1;            /* T(1) = HMAC(secret, info || 0x01) */
    uint8_t t[32];
    unsigned int tlen = 0;
    if (!HMAC(EVP_sha256(), secret, secret_len, info, k, t, &tlen) || tlen != 32) return -1;
    memcpy(out, t, n);
    return 0;
}

/* A direction's state from its traffic secret (32 bytes); NULL on failure. */
herd_aead *herd_aead_new(const uint8_t *secret, int secret_len, int seal)
{
    uint8_t key[KEY_BYTES];
    herd_aead *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    if (expand_label(secret, secret_len, "key", key, KEY_BYTES) != 0
        || expand_label(secret, secret_len, "iv", a->iv, IV_BYTES) != 0) { free(a); return NULL; }
    a->seal = seal;
    a->ctx = EVP_CIPHER_CTX_new();
    if (!a->ctx) { free(a); return NULL; }
    int ok = seal ? EVP_EncryptInit_ex(a->ctx, EVP_aes_128_gcm(), NULL, key, NULL)
                  : EVP_DecryptInit_ex(a->ctx, EVP_aes_128_gcm(), NULL, key, NULL);
    memset(key, 0, sizeof key);
    if (!ok) { EVP_CIPHER_CTX_free(a->ctx); free(a); return NULL; }
    return a;
}

void herd_aead_free(herd_aead *a)
{
    if (!a) return;
    EVP_CIPHER_CTX_free(a->ctx);
    memset(a, 0, sizeof *a);
    free(a);
}

/* Count n records as sealed or opened already (by the handshake's own
   record layer, with the same key). */
void herd_aead_skip(herd_aead *a, int n)
{
    if (n > 0) a->seq += (uint64_t)n;
}

static void nonce_of(const herd_aead *a, uint8_t nonce[IV_BYTES])
{
    memcpy(nonce, a->iv, IV_BYTES);
    for (int i = 0; i < 8; i++) nonce[IV_BYTES - 1 - i] ^= (uint8_t)(a->seq >> (8 * i));
}

/* Seal n bytes (at most 16384) of application data as one record at out,
   which has room for n + 22 bytes; the record's size, or -1. */
int herd_aead_seal(herd_aead *a, const uint8_t *in, int n, uint8_t *out)
{
    if (!a->seal || n < 0 || n > 16384) return -1;
    int body = n + 1 + TAG_BYTES, len = 0;
    uint8_t nonce[IV_BYTES], type = 23;
    out[0] = 23; out[1] = 3; out[2] = 3; out[3] = (uint8_t)(body >> 8); out[4] = (uint8_t)body;
    nonce_of(a, nonce);
    if (!EVP_EncryptInit_ex(a->ctx, NULL, NULL, NULL, nonce)
        || !EVP_EncryptUpdate(a->ctx, NULL, &len, out, 5)
        || !EVP_EncryptUpdate(a->ctx, out + 5, &len, in, n)
        || !EVP_EncryptUpdate(a->ctx, out + 5 + n, &len, &type, 1)
        || !EVP_EncryptFinal_ex(a->ctx, out + 5 + n + 1, &len)
        || !EVP_CIPHER_CTX_ctrl(a->ctx, EVP_CTRL_GCM_GET_TAG, TAG_BYTES, out + 5 + n + 1))
        return -1;
    a->seq++;
    return 5 + body;
}

/* Open one whole record (its 5-byte header, then its body: len bytes in
   all) into out, which has room for len - 5 bytes: the length of its
   content, with its inner content type in *type; -1 if it does not
   authenticate or is malformed. */
int herd_aead_open(herd_aead *a, const uint8_t *rec, int len, uint8_t *out, int *type)
{
    if (a->seal || len < 5 + 1 + TAG_BYTES || rec[0] != 23) return -1;
    int ct = len - 5 - TAG_BYTES, got = 0;
    uint8_t nonce[IV_BYTES];
    nonce_of(a, nonce);
    if (!EVP_DecryptInit_ex(a->ctx, NULL, NULL, NULL, nonce)
        || !EVP_DecryptUpdate(a->ctx, NULL, &got, rec, 5)
        || !EVP_DecryptUpdate(a->ctx, out, &got, rec + 5, ct)
        || !EVP_CIPHER_CTX_ctrl(a->ctx, EVP_CTRL_GCM_SET_TAG, TAG_BYTES, (void *)(rec + 5 + ct))
        || EVP_DecryptFinal_ex(a->ctx, out + ct, &got) <= 0)
        return -1;
    a->seq++;
    /* the content ends at the last non-zero byte, which is its type */
    int end = ct;
    while (end > 0 && out[end - 1] == 0) end--;
    if (end == 0) return -1;
    *type = out[end - 1];
    return end - 1;
}
