/* token.c - see token.h. */
#include "token.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

size_t token_encode(const unsigned char *raw, size_t len, char *out)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t o = 0;
    size_t i = 0;
    for (; i + 3 <= len; i += 3) {
        unsigned v = (unsigned)raw[i] << 16 | (unsigned)raw[i + 1] << 8 | raw[i + 2];
        out[o++] = alphabet[(v >> 18) & 63];
        out[o++] = alphabet[(v >> 12) & 63];
        out[o++] = alphabet[(v >> 6) & 63];
        out[o++] = alphabet[v & 63];
    }
    if (len - i == 1) {
        unsigned v = (unsigned)raw[i] << 16;
        out[o++] = alphabet[(v >> 18) & 63];
        out[o++] = alphabet[(v >> 12) & 63];
    } else if (len - i == 2) {
        unsigned v = (unsigned)raw[i] << 16 | (unsigned)raw[i + 1] << 8;
        out[o++] = alphabet[(v >> 18) & 63];
        out[o++] = alphabet[(v >> 12) & 63];
        out[o++] = alphabet[(v >> 6) & 63];
    }
    out[o] = '\0';
    return o;
}

size_t token_text(const unsigned char raw[TOKEN_RANDOM_BYTES], char out[TOKEN_TEXT_LEN + 1])
{
    size_t n = token_encode(raw, TOKEN_RANDOM_BYTES, out);
    if (out[0] == '-')
        out[0] = '.';   /* the 63rd digit, where it would read as an option */
    return n;
}

/* Kernel randomness is read 4 KiB at a time (one getrandom call per 256
 * tokens, not one per token); each token's bytes are wiped from the buffer as
 * they are handed out. Per thread, so no lock. */
#define TOKEN_POOL_BYTES 4096
static _Thread_local unsigned char pool[TOKEN_POOL_BYTES];
static _Thread_local size_t pool_left;

int token_new(char out[TOKEN_TEXT_LEN + 1])
{
    if (pool_left < TOKEN_RANDOM_BYTES) {
        size_t got = 0;
        while (got < sizeof pool) {
            ssize_t n = getrandom(pool + got, sizeof pool - got, 0);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                return -1;
            }
            got += (size_t)n;
        }
        pool_left = sizeof pool;
    }
    unsigned char *raw = pool + (sizeof pool - pool_left);
    token_text(raw, out);
    explicit_bzero(raw, TOKEN_RANDOM_BYTES);
    pool_left -= TOKEN_RANDOM_BYTES;
    return 0;
}
