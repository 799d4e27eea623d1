/* principals.c - see principals.h. */
#include "principals.h"

#include <ctype.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void sha256(const char *text, unsigned char out[32])
{
    unsigned int len = 32;
    if (EVP_Digest(text, strlen(text), out, &len, EVP_sha256(), NULL) != 1)
        memset(out, 0, 32);   /* (never matches a token: a token's digest is not all zeros) */
}

static bool name_char(char c)
{
    return isalnum((unsigned char)c) || c == '.' || c == '_' || c == '-' || c == '@';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The next blank-separated field of *s (NUL-terminated in place), or NULL. */
static char *field(char **s)
{
    char *p = *s;
    while (*p == ' ' || *p == '\t')
        p++;
    if (!*p)
        return NULL;
    char *start = p;
    while (*p && *p != ' ' && *p != '\t')
        p++;
    if (*p)
        *p++ = '\0';
    *s = p;
    return start;
}

static int parse_rights(char *text, unsigned *out)
{
    *out = 0;
    char *save = NULL;
    for (char *r = strtok_r(text, ",", &save); r; r = strtok_r(NULL, ",", &save)) {
        if (!strcmp(r, "read"))
            *out |= RIGHT_READ;
        else if (!strcmp(r, "lock"))
            *out |= RIGHT_LOCK;
        else if (!strcmp(r, "admin"))
            *out |= RIGHT_ADMIN;
        else
            return -1;
    }
    return *out ? 0 : -1;
}

/* One line's fields into p; its prefixes are copied into *pool. 0, or -1
 * with err. */
static int parse_line(char *line, principal *p, char **pool, char *err, size_t errlen)
{
    char *rest = line;
    char *name = field(&rest), *rights = field(&rest), *prefixes = field(&rest), *cred = field(&rest);
    if (!name || !rights || !prefixes || !cred || field(&rest)) {
        snprintf(err, errlen, "a principal is four fields: name, rights, prefixes, credential");
        return -1;
    }
    size_t nl = strlen(name);
    for (size_t i = 0; i < nl; i++)
        if (!name_char(name[i]))
            nl = 0;
    if (nl == 0 || nl > PRINCIPAL_NAME_MAX) {
        snprintf(err, errlen, "principal name %.80s: 1 to 64 bytes of A-Z a-z 0-9 . _ - @", name);
        return -1;
    }
    memcpy(p->name, name, nl + 1);
    if (parse_rights(rights, &p->rights) < 0) {
        snprintf(err, errlen, "%s: rights are read, lock and admin, comma-separated", p->name);
        return -1;
    }
    if (!strcmp(prefixes, "*")) {
        p->all_names = true;
    } else {
        p->prefixes = (char **)*pool;
        char *save = NULL;
        for (char *x = strtok_r(prefixes, ",", &save); x; x = strtok_r(NULL, ",", &save)) {
            size_t xl = strlen(x);
            for (size_t i = 0; i < xl; i++)
                if ((unsigned char)x[i] < 0x20 || x[i] == 0x7f || x[i] == '*')
                    xl = 0;
            if (xl == 0) {
                snprintf(err, errlen, "%s: a prefix is a name's first bytes, or * alone for every name", p->name);
                return -1;
            }
            p->prefixes[p->nprefixes++] = x;
        }
        if (p->nprefixes == 0) {
            snprintf(err, errlen, "%s: no prefix", p->name);
            return -1;
        }
        *pool += (size_t)p->nprefixes * sizeof(char *);
    }
    if (!strcmp(cred, "cert")) {
        p->cert = true;
    } else if (!strncmp(cred, "sha256:", 7) && strlen(cred + 7) == 64) {
        for (int i = 0; i < 32; i++) {
            int hi = hexval(cred[7 + 2 * i]), lo = hexval(cred[8 + 2 * i]);
            if (hi < 0 || lo < 0) {
                snprintf(err, errlen, "%s: sha256: takes 64 hex digits", p->name);
                return -1;
            }
            p->sha256[i] = (unsigned char)(hi << 4 | lo);
        }
    } else {
        snprintf(err, errlen, "%s: the credential is sha256:<64 hex digits of the token's SHA-256> or cert",
                 p->name);
        return -1;
    }
    return 0;
}

principals *principals_parse(const char *text, char *err, size_t errlen)
{
    size_t len = strlen(text);
    /* One allocation: the set, its principals, room for every prefix
     * pointer (at most one a byte), then a copy of the text the prefixes
     * point into. */
    int lines = 1;
    for (const char *c = text; *c; c++)
        lines += *c == '\n';
    size_t bytes = sizeof(principals) + (size_t)lines * sizeof(principal) + (len + 1) * sizeof(char *) + len + 1;
    principals *ps = calloc(1, bytes);
    if (!ps) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    ps->p = (principal *)(ps + 1);
    char *pool = (char *)(ps->p + lines);
    char *copy = pool + (len + 1) * sizeof(char *);
    memcpy(copy, text, len + 1);
    int lineno = 0;
    for (char *line = copy, *next; line; line = next) {
        lineno++;
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        size_t ll = strlen(line);
        while (ll && (line[ll - 1] == ' ' || line[ll - 1] == '\t' || line[ll - 1] == '\r'))
            line[--ll] = '\0';
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            continue;
        char why[300];
        if (ps->n >= PRINCIPALS_MAX || parse_line(p, &ps->p[ps->n], &pool, why, sizeof why) < 0) {
            snprintf(err, errlen, "line %d: %s", lineno, ps->n >= PRINCIPALS_MAX ? "too many principals" : why);
            free(ps);
            return NULL;
        }
        for (int i = 0; i < ps->n; i++)
            if (!strcmp(ps->p[i].name, ps->p[ps->n].name)) {
                snprintf(err, errlen, "line %d: principal %s is named twice", lineno, ps->p[i].name);
                free(ps);
                return NULL;
            }
        ps->n++;
    }
    if (ps->n == 0) {
        snprintf(err, errlen, "no principal");
        free(ps);
        return NULL;
    }
    return ps;
}

principals *principals_implicit(const char *auth_token, const char *admin_token)
{
    if (!auth_token && !admin_token)
        return NULL;
    principals *ps = calloc(1, sizeof *ps + 2 * sizeof(principal));
    if (!ps)
        return NULL;
    ps->p = (principal *)(ps + 1);
    if (auth_token) {
        principal *p = &ps->p[ps->n++];
        snprintf(p->name, sizeof p->name, "token");
        p->rights = RIGHT_READ | RIGHT_LOCK;
        p->all_names = true;
        sha256(auth_token, p->sha256);
    }
    if (admin_token) {
        principal *p = &ps->p[ps->n++];
        snprintf(p->name, sizeof p->name, "admin");
        p->rights = RIGHT_ADMIN;
        p->all_names = true;
        sha256(admin_token, p->sha256);
    }
    return ps;
}

void principals_free(principals *ps) { free(ps); }

const principal *principals_by_token(const principals *ps, const char *token)
{
    if (!ps || !token)
        return NULL;
    unsigned char d[32];
    sha256(token, d);
    const principal *found = NULL;
    for (int i = 0; i < ps->n; i++) {
        unsigned char diff = (unsigned char)ps->p[i].cert;
        for (int k = 0; k < 32; k++)
            diff |= (unsigned char)(d[k] ^ ps->p[i].sha256[k]);
        if (diff == 0 && !found)
            found = &ps->p[i];
    }
    return found;
}

const principal *principals_by_cert(const principals *ps, const char *name)
{
    if (!ps || !name)
        return NULL;
    for (int i = 0; i < ps->n; i++)
        if (ps->p[i].cert && !strcmp(ps->p[i].name, name))
            return &ps->p[i];
    return NULL;
}

bool principal_may(const principal *p, unsigned right, const char *name)
{
    if (right == RIGHT_NONE)
        return true;
    if (!p || (p->rights & right) != right)
        return false;
    if (p->all_names || !name)
        return true;   /* (no name: a listing, filtered name by name) */
    for (int i = 0; i < p->nprefixes; i++)
        if (!strncmp(name, p->prefixes[i], strlen(p->prefixes[i])))
            return true;
    return false;
}

bool principal_may_list(const principal *p) { return p && (p->rights & RIGHT_READ); }
