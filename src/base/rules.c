/* rules.c - see rules.h. */
#include "rules.h"

#include <stdio.h>
#include <string.h>

/* The length of the UTF-8 sequence at s (n bytes left), or 0 when it is not
 * well formed: no overlong form, no surrogate, nothing past U+10FFFF
 * (RFC 3629 section 4). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf;   /* the second byte's range */
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else {
        return 0;
    }
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return len;
}

bool rules_text_valid(const char *s, size_t len, size_t max)
{
    if (!s || len == 0 || len > max)
        return false;
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        if (p[i] < 0x20 || p[i] == 0x7f)
            return false;
        size_t n = utf8_seq(p + i, len - i);
        if (!n)
            return false;
        i += n;
    }
    return true;
}

bool rules_name_valid(const char *s, size_t len)
{
    return rules_text_valid(s, len, RULES_NAME_MAX);
}

bool rules_token_valid(const char *s, size_t len)
{
    if (!s || len == 0 || len > RULES_TOKEN_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x21 || c > 0x7e || c == '"' || c == '\\')
            return false;
    }
    return true;
}

bool rules_owner_valid(const char *s, size_t len)
{
    return rules_text_valid(s, len, RULES_OWNER_MAX);
}

static bool path_safe(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~' || c == ':' || c == '@';
}

int rules_name_path(const char *name, char *out, size_t outlen)
{
    size_t len = name ? strlen(name) : 0;
    if (!rules_name_valid(name, len) || outlen == 0)
        return -1;
    if (!strcmp(name, ".") || !strcmp(name, "..")) {
        int n = snprintf(out, outlen, "%s", len == 1 ? "%2E" : "%2E%2E");
        return n < 0 || (size_t)n >= outlen ? -1 : 0;
    }
    static const char hex[] = "0123456789ABCDEF";
    size_t w = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (path_safe(c)) {
            if (w + 1 >= outlen)
                return -1;
            out[w++] = (char)c;
        } else {
            if (w + 3 >= outlen)
                return -1;
            out[w++] = '%';
            out[w++] = hex[c >> 4];
            out[w++] = hex[c & 15];
        }
    }
    out[w] = '\0';
    return 0;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

long rules_percent_decode(const char *in, size_t len, char *out, size_t cap)
{
    size_t w = 0;
    for (size_t r = 0; r < len; r++) {
        if (w + 1 >= cap)
            return -1;
        if (in[r] != '%') {
            out[w++] = in[r];
            continue;
        }
        int hi = r + 2 < len ? hexval(in[r + 1]) : -1, lo = hi >= 0 ? hexval(in[r + 2]) : -1;
        if (hi < 0 || lo < 0)
            return -1;
        char v = (char)(hi * 16 + lo);
        out[w++] = v ? v : 0x7f;
        r += 2;
    }
    if (cap == 0)
        return -1;
    out[w] = '\0';
    return (long)w;
}
