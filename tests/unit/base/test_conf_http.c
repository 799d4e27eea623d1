/* Unit tests of configuration that guards the HTTP front (issue 41): the
 * admin token may not be the ordinary one. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"

static const char *env_key, *env_val;

static const char *fake_env(const char *name)
{
    return env_key && !strcmp(name, env_key) ? env_val : NULL;
}

static enum conf_result run(conf *c, char *err, int argc, char **argv)
{
    return conf_parse(c, argc, argv, fake_env, err, 256);
}

static void token_file(char *path, const char *content)
{
    strcpy(path, "/tmp/redlockd-test-tokenXXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, content, strlen(content)), (ssize_t)strlen(content));
    close(fd);
}

/* The admin token would be known to every client that holds the ordinary
 * one: refused, one line naming both flags. */
Test(conf_http, an_admin_token_equal_to_the_ordinary_one_is_refused)
{
    char a[64], u[64], other[64];
    token_file(a, "s4me\n");
    token_file(u, "  s4me  \n");
    token_file(other, "0ther\n");
    conf c;
    char err[256] = "";
    char *argv[] = {"redlockd", "--admin-token-file", a, "--auth-token-file", u};
    cr_assert_eq(run(&c, err, 5, argv), CONF_ERROR, "the same token twice was accepted");
    cr_assert(strstr(err, "--admin-token-file") && strstr(err, "--auth-token-file"), "%s", err);
    cr_assert_null(strchr(err, '\n'));
    conf_free(&c);
    char *ok[] = {"redlockd", "--admin-token-file", other, "--auth-token-file", u};
    cr_assert_eq(run(&c, err, 5, ok), CONF_OK, "%s", err);
    conf_free(&c);
    env_key = "REDLOCKD_AUTH_TOKEN_FILE";
    env_val = u;
    char *by_env[] = {"redlockd", "--admin-token-file", a};
    cr_assert_eq(run(&c, err, 3, by_env), CONF_ERROR, "the same token by the environment was accepted");
    conf_free(&c);
    env_key = NULL;
    unlink(a);
    unlink(u);
    unlink(other);
}
