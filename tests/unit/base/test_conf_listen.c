/* Unit tests of the listeners' configuration (issue 43): --listen given
 * more than once, as a comma list and from REDLOCKD_LISTEN (a flag
 * replaces the variable's list), unix:/PATH, --listen-mode, and HTTPS's
 * flags (--tls-cert-file, --tls-key-file, --tls-client-ca-file), which
 * only make sense together and on a TCP listener; --dapr-grpc-listen on a
 * Unix socket or TCP (with TLS). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

static const char *env_key, *env_val;

static const char *fake_env(const char *name)
{
    return env_key && !strcmp(name, env_key) ? env_val : NULL;
}

static char err[256];

static enum conf_result run(conf *c, int argc, char **argv)
{
    err[0] = '\0';
    return conf_parse(c, argc, argv, fake_env, err, sizeof err);
}

Test(conf_listen, one_tcp_listener_by_default_with_mode_0660)
{
    conf c;
    env_key = NULL;
    char *argv[] = {"redlockd"};
    cr_assert_eq(run(&c, 1, argv), CONF_OK, "%s", err);
    cr_assert_eq(c.nlisten, 1);
    cr_assert_str_eq(c.listen[0].host, "127.0.0.1");
    cr_assert_eq(c.listen[0].port, 8080);
    cr_assert_not(c.listen[0].unix_socket);
    cr_assert_not(c.listen[0].tls);
    cr_assert_eq(c.listen_mode, 0660);
    cr_assert_null(c.tls_cert_file);
    conf_free(&c);
}

Test(conf_listen, repeated_flags_and_comma_lists_keep_their_order)
{
    conf c;
    env_key = NULL;
    char *argv[] = {"redlockd", "--listen", "0.0.0.0:8080", "--listen=unix:/run/redlockd/r.sock,[::1]:9090"};
    cr_assert_eq(run(&c, 4, argv), CONF_OK, "%s", err);
    cr_assert_eq(c.nlisten, 3);
    cr_assert_str_eq(c.listen[0].host, "0.0.0.0");
    cr_assert(c.listen[1].unix_socket);
    cr_assert_str_eq(c.listen[1].host, "/run/redlockd/r.sock");
    cr_assert_eq(c.listen[1].port, 0);
    cr_assert_str_eq(c.listen[2].host, "::1");
    cr_assert_eq(c.listen[2].port, 9090);
    char s[400];
    conf_listen_str(&c, s, sizeof s);
    cr_assert_str_eq(s, "0.0.0.0:8080,unix:/run/redlockd/r.sock,[::1]:9090");
    conf_free(&c);
}

Test(conf_listen, a_flag_replaces_the_variables_list)
{
    conf c;
    env_key = "REDLOCKD_LISTEN";
    env_val = "127.0.0.1:1000, unix:/tmp/env.sock";
    char *none[] = {"redlockd"};
    cr_assert_eq(run(&c, 1, none), CONF_OK, "%s", err);
    cr_assert_eq(c.nlisten, 2, "the variable's comma list");
    cr_assert(c.listen[1].unix_socket);
    cr_assert_str_eq(c.listen[1].host, "/tmp/env.sock");
    conf_free(&c);
    char *argv[] = {"redlockd", "--listen", "127.0.0.1:2000", "--listen", "127.0.0.1:3000"};
    cr_assert_eq(run(&c, 5, argv), CONF_OK, "%s", err);
    cr_assert_eq(c.nlisten, 2, "the flags' list only");
    cr_assert_eq(c.listen[0].port, 2000);
    cr_assert_eq(c.listen[1].port, 3000);
    conf_free(&c);
    env_key = NULL;
}

Test(conf_listen, bad_listeners_are_refused_naming_the_flag)
{
    static const char *const bad[][2] = {
        {"unix:relative.sock", "ABSOLUTE"},
        {"unix:", "ABSOLUTE"},
        {"unix:/tmp/dir/", "ABSOLUTE"},
        {"127.0.0.1:8080,,127.0.0.1:8081", "empty"},
        {"127.0.0.1:8080,127.0.0.1:8080", "twice"},
        {"unix:/tmp/a.sock,unix:/tmp/a.sock", "twice"},
        {"localhost", "HOST:PORT"},
        {"127.0.0.1:8,127.0.0.1:9,127.0.0.1:10,127.0.0.1:11,127.0.0.1:12,127.0.0.1:13,127.0.0.1:14,"
         "127.0.0.1:15,127.0.0.1:16", "more than 8"},
    };
    env_key = NULL;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        conf c;
        char *argv[] = {"redlockd", "--listen", (char *)bad[i][0]};
        cr_assert_eq(run(&c, 3, argv), CONF_ERROR, "%s accepted", bad[i][0]);
        cr_assert(strstr(err, "--listen") && strstr(err, bad[i][1]), "%s: %s", bad[i][0], err);
        conf_free(&c);
    }
    /* sun_path holds 107 bytes and the NUL. */
    char path[200] = "unix:/";
    memset(path + 6, 'p', 107);
    path[6 + 107] = '\0';
    conf c;
    char *argv[] = {"redlockd", "--listen", path};
    cr_assert_eq(run(&c, 3, argv), CONF_ERROR, "a path of 108 bytes accepted");
    conf_free(&c);
    path[6 + 106] = '\0';
    cr_assert_eq(run(&c, 3, argv), CONF_OK, "a path of 107 bytes: %s", err);
    conf_free(&c);
}

Test(conf_listen, listen_mode_is_octal)
{
    static const char *const good[][2] = {{"0600", "384"}, {"660", "432"}, {"0", "0"}, {"0777", "511"}};
    env_key = NULL;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        conf c;
        char *argv[] = {"redlockd", "--listen-mode", (char *)good[i][0]};
        cr_assert_eq(run(&c, 3, argv), CONF_OK, "%s: %s", good[i][0], err);
        cr_assert_eq(c.listen_mode, atoi(good[i][1]), "%s", good[i][0]);
        conf_free(&c);
    }
    static const char *const bad[] = {"", "8", "0778", "01777", "abc", "-1", "0x1f"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        conf c;
        char *argv[] = {"redlockd", "--listen-mode", (char *)bad[i]};
        cr_assert_eq(run(&c, 3, argv), CONF_ERROR, "\"%s\" accepted", bad[i]);
        cr_assert(strstr(err, "--listen-mode"), "%s", err);
        conf_free(&c);
    }
}

Test(conf_listen, tls_serves_the_tcp_listeners_only)
{
    conf c;
    env_key = NULL;
    char *argv[] = {"redlockd", "--listen", "0.0.0.0:8443", "--listen", "unix:/run/r.sock", "--tls-cert-file",
                    "/etc/r/tls.crt", "--tls-key-file", "/etc/r/tls.key", "--tls-client-ca-file", "/etc/r/ca.crt"};
    cr_assert_eq(run(&c, 11, argv), CONF_OK, "%s", err);
    cr_assert(c.listen[0].tls);
    cr_assert_not(c.listen[1].tls, "a Unix socket is never HTTPS");
    cr_assert_str_eq(c.tls_cert_file, "/etc/r/tls.crt");
    cr_assert_str_eq(c.tls_key_file, "/etc/r/tls.key");
    cr_assert_str_eq(c.tls_client_ca_file, "/etc/r/ca.crt");
    char s[400];
    conf_listen_str(&c, s, sizeof s);
    cr_assert_str_eq(s, "0.0.0.0:8443 (https),unix:/run/r.sock");
    conf_free(&c);
}

Test(conf_listen, tls_flags_that_only_make_sense_together)
{
    static const struct {
        int argc;
        char *argv[8];
        const char *want;
    } bad[] = {
        {3, {"redlockd", "--tls-cert-file", "/c.crt"}, "--tls-cert-file needs --tls-key-file"},
        {3, {"redlockd", "--tls-key-file", "/c.key"}, "--tls-key-file needs --tls-cert-file"},
        {3, {"redlockd", "--tls-client-ca-file", "/ca.crt"}, "--tls-client-ca-file needs --tls-cert-file"},
        {7, {"redlockd", "--listen", "unix:/r.sock", "--tls-cert-file", "/c.crt", "--tls-key-file", "/c.key"},
         "Unix sockets only"},
    };
    env_key = NULL;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        conf c;
        cr_assert_eq(run(&c, bad[i].argc, (char **)bad[i].argv), CONF_ERROR, "case %zu accepted", i);
        cr_assert(strstr(err, bad[i].want), "case %zu: %s", i, err);
        conf_free(&c);
    }
}

/* The probe follows the same listeners: what it asks, and how. */
Test(conf_listen, the_health_check_sees_the_listeners_and_tls)
{
    conf c;
    env_key = "REDLOCKD_LISTEN";
    env_val = "unix:/run/r.sock,0.0.0.0:8443";
    char *argv[] = {"redlockd", "--health-check", "--tls-cert-file", "/c.crt", "--tls-key-file", "/c.key"};
    cr_assert_eq(run(&c, 6, argv), CONF_HEALTH_CHECK, "%s", err);
    cr_assert_eq(c.nlisten, 2);
    cr_assert(c.listen[0].unix_socket);
    cr_assert(c.listen[1].tls);
    conf_free(&c);
    char *half[] = {"redlockd", "--health-check", "--tls-cert-file", "/c.crt"};
    cr_assert_eq(run(&c, 4, half), CONF_ERROR, "a probe of a half-set HTTPS");
    conf_free(&c);
    env_key = NULL;
}

/* --dapr-grpc-listen takes one entry as --listen does (conf_listen_entry):
 * TCP or unix:/PATH; TLS with --tls-cert-file on TCP only. */
Test(conf_listen, dapr_grpc_listen_on_a_unix_socket_or_tcp_with_tls)
{
    conf c;
    env_key = NULL;
    char *none[] = {"redlockd"};
    cr_assert_eq(run(&c, 1, none), CONF_OK, "%s", err);
    cr_assert_not(conf_grpc_on(&c), "off by default");
    conf_free(&c);

    char *sock[] = {"redlockd", "--dapr-grpc-listen", "unix:/run/redlockd/grpc.sock", "--listen", "0.0.0.0:8443",
                    "--tls-cert-file", "/c.crt", "--tls-key-file", "/c.key"};
    cr_assert_eq(run(&c, 9, sock), CONF_OK, "%s", err);
    cr_assert(conf_grpc_on(&c));
    cr_assert(c.dapr_grpc_listen.unix_socket);
    cr_assert_str_eq(c.dapr_grpc_listen.host, "/run/redlockd/grpc.sock");
    cr_assert_not(c.dapr_grpc_listen.tls, "a Unix socket stays h2c");
    cr_assert(c.listen[0].tls);
    char s[300];
    conf_addr_str(&c.dapr_grpc_listen, "(tls)", s, sizeof s);
    cr_assert_str_eq(s, "unix:/run/redlockd/grpc.sock");
    conf_free(&c);

    /* TLS on gRPC alone: every --listen a Unix socket. */
    env_key = "REDLOCKD_DAPR_GRPC_LISTEN";
    env_val = "[::1]:50001";
    char *tcp[] = {"redlockd", "--listen", "unix:/r.sock", "--tls-cert-file", "/c.crt", "--tls-key-file", "/c.key"};
    cr_assert_eq(run(&c, 7, tcp), CONF_OK, "%s", err);
    cr_assert(conf_grpc_on(&c));
    cr_assert(c.dapr_grpc_listen.tls);
    conf_addr_str(&c.dapr_grpc_listen, "(tls)", s, sizeof s);
    cr_assert_str_eq(s, "[::1]:50001 (tls)");
    conf_free(&c);
    env_key = NULL;
}

Test(conf_listen, bad_dapr_grpc_listen_entries_say_why)
{
    static const struct {
        int argc;
        char *argv[6];
        const char *want;
    } bad[] = {
        {3, {"redlockd", "--dapr-grpc-listen", "unix:run/grpc.sock"}, "unix:/ABSOLUTE/PATH"},
        {3, {"redlockd", "--dapr-grpc-listen", "unix:/run/"}, "unix:/ABSOLUTE/PATH"},
        {3, {"redlockd", "--dapr-grpc-listen", "50001"}, "expected HOST:PORT"},
        {3, {"redlockd", "--dapr-grpc-listen", "unix:/run/a\tb"}, "a control byte"},
        {5, {"redlockd", "--listen", "unix:/r.sock", "--dapr-grpc-listen", "unix:/r.sock"},
         "--listen serves HTTP there already"},
        {5, {"redlockd", "--listen", "127.0.0.1:9000", "--dapr-grpc-listen", "127.0.0.1:9000"},
         "--listen serves HTTP there already"},
    };
    env_key = NULL;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        conf c;
        cr_assert_eq(run(&c, bad[i].argc, (char **)bad[i].argv), CONF_ERROR, "case %zu accepted", i);
        cr_assert(strstr(err, bad[i].want) && strstr(err, "--dapr-grpc-listen"), "case %zu: %s", i, err);
        conf_free(&c);
    }
    char long_path[200] = "unix:/";
    memset(long_path + 6, 'a', 110);
    char *argv[] = {"redlockd", "--dapr-grpc-listen", long_path};
    conf c;
    cr_assert_eq(run(&c, 3, argv), CONF_ERROR, "a path of 111 bytes");
    conf_free(&c);
}
