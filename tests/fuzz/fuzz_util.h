/* fuzz_util.h - what the libFuzzer targets of tests/fuzz share: a check
 * that stops the run with the broken invariant named (libFuzzer saves the
 * input that did it), a reader that cuts an input into NUL-terminated
 * parts, and the checks of an error message.
 *
 * Each target owns everything it allocates and frees it before it returns,
 * so that LeakSanitizer's report at the end of a run is about the code
 * under test.
 */
#ifndef RL_FUZZ_UTIL_H
#define RL_FUZZ_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An invariant of the code under test does not hold: say which, and abort
 * (libFuzzer writes the input to crash-<sha1>, with -artifact_prefix). */
#define FUZZ_CHECK(cond, what)                                                             \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: invariant broken: %s (%s)\n", __FILE__, __LINE__,      \
                    (what), #cond);                                                        \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

/* An input, read from the front. */
typedef struct fuzz_in {
    const uint8_t *p;
    size_t left;
} fuzz_in;

/* The next byte (0 once the input is used up). */
static inline uint8_t fuzz_byte(fuzz_in *in)
{
    if (!in->left)
        return 0;
    in->left--;
    return *in->p++;
}

/* The bytes up to the next NUL (or the end) as a malloc'd string of exactly
 * that length plus its NUL, so that ASan sees a read past it; the NUL is
 * consumed. The caller frees. */
static inline char *fuzz_cstr(fuzz_in *in)
{
    const uint8_t *nul = memchr(in->p, 0, in->left);
    size_t n = nul ? (size_t)(nul - in->p) : in->left;
    char *s = malloc(n + 1);
    if (!s)
        abort();
    memcpy(s, in->p, n);
    s[n] = '\0';
    in->p += n;
    in->left -= n;
    if (nul) {
        in->p++;
        in->left--;
    }
    return s;
}

/* What is left, as a malloc'd buffer of exactly that length without a NUL
 * (request bodies come with a length, never a terminator: ASan sees a read
 * past the end). Never NULL. The caller frees. */
static inline char *fuzz_rest(fuzz_in *in, size_t *len)
{
    char *b = malloc(in->left ? in->left : 1);
    if (!b)
        abort();
    if (in->left)
        memcpy(b, in->p, in->left);
    *len = in->left;
    in->p += in->left;
    in->left = 0;
    return b;
}

/* A message buffer of exactly msglen bytes: "" followed by filler that is
 * not NUL, so that a message left without its terminator is seen. */
static inline char *fuzz_msg_new(size_t msglen)
{
    char *m = malloc(msglen);
    if (!m)
        abort();
    memset(m, 0x7f, msglen);
    m[0] = '\0';
    return m;
}

/* The contract of every parser here: 0 leaves the message empty (a parse
 * never both succeeds and says why it failed); -1 (or another failure)
 * leaves one sentence, NUL-terminated within msglen. */
static inline void fuzz_check_msg(bool ok, const char *msg, size_t msglen)
{
    if (ok) {
        FUZZ_CHECK(msg[0] == '\0', "a successful parse left an error message");
    } else {
        FUZZ_CHECK(msg[0] != '\0', "a failed parse said nothing");
        FUZZ_CHECK(memchr(msg, '\0', msglen) != NULL, "an error message has no NUL within msglen");
    }
}

/* Is the string in buf (size bytes) terminated within it? */
/* Are the sl bytes of store one of the comma-separated names in list? The
 * oracle of api.c's store check, written apart from it. */
static inline bool fuzz_store_listed(const char *store, size_t sl, const char *list)
{
    for (const char *p = list;;) {
        const char *comma = strchr(p, ',');
        size_t l = comma ? (size_t)(comma - p) : strlen(p);
        if (l == sl && !memcmp(p, store, l))
            return true;
        if (!comma)
            return false;
        p = comma + 1;
    }
}

static inline bool fuzz_terminated(const char *buf, size_t size)
{
    return memchr(buf, '\0', size) != NULL;
}

static inline bool fuzz_printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
            return false;
    return true;
}

#endif
