/* rules.c - see rules.h. */
#include "rules.h"

#include <stdio.h>
#include <string.h>

static bool name_byte(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == ':' || c == '-';
}

bool rules_name_valid(const char *s, size_t len)
{
    if (!s || len == 0 || len > RULES_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!name_byte((unsigned char)s[i]))
            return false;
    return true;
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
    if (!s || len == 0 || len > RULES_OWNER_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            return false;
    return true;
}

int rules_name_path(const char *name, char *out, size_t outlen)
{
    size_t len = name ? strlen(name) : 0;
    if (!rules_name_valid(name, len))
        return -1;
    bool dots = !strcmp(name, ".") || !strcmp(name, "..");
    int n = dots ? snprintf(out, outlen, "%s", len == 1 ? "%2E" : "%2E%2E")
                 : snprintf(out, outlen, "%s", name);
    return n < 0 || (size_t)n >= outlen ? -1 : 0;
}
