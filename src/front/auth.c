/* auth.c - see auth.h. */
#include "auth.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct auth_set {
    struct auth_set *retired;   /* sets replaced before this one (auth_free frees them) */
    principals *file;           /* --principals-file's; NULL: none */
    principals *implicit;       /* the token files'; NULL: none */
    bool admin;                 /* some principal has the admin right */
    bool closed;                /* reading and locking need a principal: a principals file, or
                                   --auth-token-file (--admin-token-file alone opens force only) */
};

static _Atomic(struct auth_set *) current;
static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;

static char *read_file(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "--principals-file %s: cannot read it", path);
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *text = malloc(cap);
    size_t n;
    while (text && (n = fread(text + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (len + 1 == cap) {
            char *more = cap < (64u << 20) ? realloc(text, cap * 2) : NULL;
            if (!more) {
                free(text);
                text = NULL;
                break;
            }
            text = more;
            cap *= 2;
        }
    }
    fclose(f);
    if (!text) {
        snprintf(err, errlen, "--principals-file %s: too large, or out of memory", path);
        return NULL;
    }
    text[len] = '\0';
    return text;
}

static bool any_admin(const principals *ps)
{
    for (int i = 0; ps && i < ps->n; i++)
        if (ps->p[i].rights & RIGHT_ADMIN)
            return true;
    return false;
}

int auth_load(const conf *c, char *err, size_t errlen)
{
    struct auth_set *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (c->principals_file) {
        char *text = read_file(c->principals_file, err, errlen);
        if (!text) {
            free(s);
            return -1;
        }
        char why[300];
        s->file = principals_parse(text, why, sizeof why);
        explicit_bzero(text, strlen(text));
        free(text);
        if (!s->file) {
            snprintf(err, errlen, "--principals-file %s: %s", c->principals_file, why);
            free(s);
            return -1;
        }
    }
    s->implicit = principals_implicit(c->auth_token, c->admin_token);
    if ((c->auth_token || c->admin_token) && !s->implicit) {
        principals_free(s->file);
        free(s);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; s->file && s->implicit && i < s->file->n; i++)
        if (principals_by_cert(s->implicit, s->file->p[i].name) || !strcmp(s->file->p[i].name, "token") ||
            !strcmp(s->file->p[i].name, "admin")) {
            snprintf(err, errlen, "--principals-file %s: the principal name %s is taken by --%s-token-file",
                     c->principals_file, s->file->p[i].name, !strcmp(s->file->p[i].name, "admin") ? "admin" : "auth");
            principals_free(s->file);
            principals_free(s->implicit);
            free(s);
            return -1;
        }
    s->admin = any_admin(s->file) || any_admin(s->implicit);
    s->closed = s->file || c->auth_token;
    pthread_mutex_lock(&load_mu);
    s->retired = atomic_load(&current);
    atomic_store(&current, s);
    pthread_mutex_unlock(&load_mu);
    return 0;
}

bool auth_closed(void)
{
    struct auth_set *s = atomic_load(&current);
    return s && s->closed;
}

bool auth_admin_exists(void)
{
    struct auth_set *s = atomic_load(&current);
    return s && s->admin;
}

const principal *auth_who(const char *cert_name, const char *token)
{
    struct auth_set *s = atomic_load(&current);
    if (!s)
        return NULL;
    const principal *p = cert_name ? principals_by_cert(s->file, cert_name) : NULL;
    if (!p && token) {
        /* Both sets are compared whole: the time says nothing of which. */
        const principal *a = principals_by_token(s->implicit, token), *b = principals_by_token(s->file, token);
        p = a ? a : b;
    }
    return p;
}

bool auth_may(const principal *p, unsigned right, const char *name)
{
    if (right == RIGHT_NONE || (p && testhook_breaks(TESTHOOK_NO_RIGHTS)))
        return true;   /* (the test hook: any principal may do anything) */
    if (right != RIGHT_ADMIN && !auth_closed())
        return true;   /* an open service: anyone reads and locks */
    return principal_may(p, right, name);
}

void auth_free(void)
{
    pthread_mutex_lock(&load_mu);
    struct auth_set *s = atomic_exchange(&current, NULL);
    pthread_mutex_unlock(&load_mu);
    while (s) {
        struct auth_set *next = s->retired;
        principals_free(s->file);
        principals_free(s->implicit);
        free(s);
        s = next;
    }
}
