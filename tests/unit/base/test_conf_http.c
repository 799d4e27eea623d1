/* Unit tests of configuration that guards the HTTP front (issue 41): the
 * admin token may not be the ordinary one; --allow-origin and --allow-host,
 * from flags (repeatable, or a comma list) and the environment; and the
 * pure rules they rest on (an origin's normal form, a Host's host, what
 * is loopback). */
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

/* --allow-origin: repeatable or a comma list, each origin in its normal
 * form (lowercase, without its scheme's default port). */
Test(conf_http, allow_origin_takes_a_list_in_normal_form)
{
    conf c;
    char err[256] = "";
    char *argv[] = {"redlockd", "--allow-origin", "HTTPS://Locks.Example:443, http://app.example:8000",
                    "--allow-origin=http://[::1]:80"};
    cr_assert_eq(run(&c, err, 4, argv), CONF_OK, "%s", err);
    cr_assert_eq(c.nallow_origins, 3);
    cr_assert_str_eq(c.allow_origins[0], "https://locks.example");
    cr_assert_str_eq(c.allow_origins[1], "http://app.example:8000");
    cr_assert_str_eq(c.allow_origins[2], "http://[::1]");
    cr_assert_eq(c.nallow_hosts, 0);
    conf_free(&c);
    cr_assert_null(c.allow_origins);
    char *none[] = {"redlockd"};
    cr_assert_eq(run(&c, err, 1, none), CONF_OK);
    cr_assert_eq(c.nallow_origins, 0);
    cr_assert_null(c.allow_origins);
    conf_free(&c);
}

/* REDLOCKD_ALLOW_ORIGIN and REDLOCKD_ALLOW_HOST; a flag replaces the
 * variable's list (the flag wins), and repeated flags add up. */
Test(conf_http, the_environment_gives_lists_and_flags_replace_them)
{
    conf c;
    char err[256] = "";
    env_key = "REDLOCKD_ALLOW_ORIGIN";
    env_val = "https://a.example,https://b.example";
    char *argv[] = {"redlockd"};
    cr_assert_eq(run(&c, err, 1, argv), CONF_OK, "%s", err);
    cr_assert_eq(c.nallow_origins, 2);
    cr_assert_str_eq(c.allow_origins[1], "https://b.example");
    conf_free(&c);
    char *flags[] = {"redlockd", "--allow-origin", "https://c.example", "--allow-origin", "https://d.example"};
    cr_assert_eq(run(&c, err, 5, flags), CONF_OK, "%s", err);
    cr_assert_eq(c.nallow_origins, 2);
    cr_assert_str_eq(c.allow_origins[0], "https://c.example");
    cr_assert_str_eq(c.allow_origins[1], "https://d.example");
    conf_free(&c);
    env_key = "REDLOCKD_ALLOW_HOST";
    env_val = "Lock.Example, 10.0.0.7,[FE80::1]";
    cr_assert_eq(run(&c, err, 1, argv), CONF_OK, "%s", err);
    cr_assert_eq(c.nallow_hosts, 3);
    cr_assert_str_eq(c.allow_hosts[0], "lock.example");
    cr_assert_str_eq(c.allow_hosts[1], "10.0.0.7");
    cr_assert_str_eq(c.allow_hosts[2], "[fe80::1]");
    conf_free(&c);
    char *empty[] = {"redlockd", "--allow-host", ""};
    cr_assert_eq(run(&c, err, 3, empty), CONF_OK, "%s", err);
    cr_assert_eq(c.nallow_hosts, 0, "an empty flag clears the variable's list");
    conf_free(&c);
    env_key = NULL;
}

/* Anything else is one line naming the flag, exit 2 in main. */
Test(conf_http, bad_origins_and_hosts_are_one_line)
{
    const char *cases[][2] = {
        {"--allow-origin", "*"}, {"--allow-origin", "null"}, {"--allow-origin", "app.example"},
        {"--allow-origin", "ftp://app.example"}, {"--allow-origin", "https://app.example/"},
        {"--allow-origin", "https://app.example/path"}, {"--allow-origin", "https://user@app.example"},
        {"--allow-origin", "https://app.example:0"}, {"--allow-origin", "https://app.example:65536"},
        {"--allow-origin", "https://"}, {"--allow-origin", "https://a.example,"},
        {"--allow-origin", "https://a.example,,https://b.example"}, {"--allow-origin", "https://[::g]"},
        {"--allow-host", "lock.example:8080"}, {"--allow-host", "http://lock.example"},
        {"--allow-host", "a b"}, {"--allow-host", "[::1"}, {"--allow-host", "lock.example/x"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        conf c;
        char err[256] = "";
        char *argv[] = {"redlockd", (char *)cases[i][0], (char *)cases[i][1]};
        cr_assert_eq(run(&c, err, 3, argv), CONF_ERROR, "accepted %s %s", cases[i][0], cases[i][1]);
        cr_assert(strstr(err, cases[i][0]), "\"%s\" does not name %s", err, cases[i][0]);
        cr_assert_null(strchr(err, '\n'));
        conf_free(&c);
    }
    char many[70 * 20] = "";
    for (int i = 0; i < 65; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%sh%d.example", i ? "," : "", i);
    conf c;
    char err[256] = "";
    char *argv[] = {"redlockd", "--allow-host", many};
    cr_assert_eq(run(&c, err, 3, argv), CONF_ERROR, "65 hosts accepted");
    cr_assert(strstr(err, "at most 64"), "%s", err);
    conf_free(&c);
}

Test(conf_http, host_norm_reads_a_host_and_its_port)
{
    char out[CONF_HOST_MAX + 1];
    int port;
    const char *host = "LocalHost:8080";
    cr_assert_eq(conf_host_norm(host, strlen(host), out, sizeof out, &port), 0);
    cr_assert_str_eq(out, "localhost");
    cr_assert_eq(port, 8080);
    host = "[::1]";
    cr_assert_eq(conf_host_norm(host, strlen(host), out, sizeof out, &port), 0);
    cr_assert_str_eq(out, "[::1]");
    cr_assert_eq(port, -1);
    host = "a.example:80";
    cr_assert_eq(conf_host_norm(host, strlen(host), out, sizeof out, NULL), -1, "a port where none may be");
    const char *bad[] = {"", ":80", "a.example:", "a.example:x", "a.example:99999", "[::1]x", "a@b", "a b",
                         "[1.2.3.4]", "a.example:80:80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(conf_host_norm(bad[i], strlen(bad[i]), out, sizeof out, &port), -1, "%s", bad[i]);
}

Test(conf_http, origin_norm_is_what_a_browser_sends)
{
    char out[CONF_ORIGIN_MAX + 1];
    const char *cases[][2] = {
        {"http://127.0.0.1:8080", "http://127.0.0.1:8080"}, {"http://LOCALHOST:80", "http://localhost"},
        {"https://a.example:443", "https://a.example"}, {"https://a.example:80", "https://a.example:80"},
        {"HTTP://[::1]:8080", "http://[::1]:8080"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert_eq(conf_origin_norm(cases[i][0], strlen(cases[i][0]), out, sizeof out), 0, "%s", cases[i][0]);
        cr_assert_str_eq(out, cases[i][1]);
    }
    const char *bad[] = {"null", "", "http://", "ws://a.example", "http://a.example/", "file:///etc"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(conf_origin_norm(bad[i], strlen(bad[i]), out, sizeof out), -1, "%s", bad[i]);
}

Test(conf_http, loopback_is_localhost_127_8_and_v6_1)
{
    const char *yes[] = {"localhost", "LOCALHOST", "127.0.0.1", "127.255.0.9", "[::1]", "::1",
                         "[::ffff:127.0.0.1]", "[0:0:0:0:0:0:0:1]"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        cr_assert(conf_host_loopback(yes[i]), "%s", yes[i]);
    const char *no[] = {"localhost.example", "a.localhost", "127.1", "2130706433", "0.0.0.0", "::", "[::2]",
                        "10.0.0.1", "128.0.0.1", "[::ffff:10.0.0.1]", "", "127.0.0.1.example"};
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        cr_assert_not(conf_host_loopback(no[i]), "%s", no[i]);
}

/* --help names both flags and their variables. */
Test(conf_http, usage_names_the_new_flags)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    conf_usage(f);
    fclose(f);
    const char *want[] = {"--allow-origin", "REDLOCKD_ALLOW_ORIGIN", "--allow-host", "REDLOCKD_ALLOW_HOST",
                          "forbidden_origin", "forbidden_host"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(buf, want[i]), "help lacks %s", want[i]);
    free(buf);
}
