/* Unit tests of configuration: defaults, flags, environment, errors. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"

static const char *env_keys[8];
static const char *env_vals[8];
static int env_n;

static const char *fake_env(const char *name)
{
    for (int i = 0; i < env_n; i++)
        if (!strcmp(env_keys[i], name))
            return env_vals[i];
    return NULL;
}

static void setenv_fake(const char *k, const char *v)
{
    env_keys[env_n] = k;
    env_vals[env_n++] = v;
}

static enum conf_result run(conf *c, char *err, int argc, char **argv)
{
    return conf_parse(c, argc, argv, fake_env, err, 256);
}

Test(conf, defaults)
{
    conf c;
    char err[256];
    char *argv[] = {"redlockd"};
    cr_assert_eq(run(&c, err, 1, argv), CONF_OK);
    cr_assert_str_eq(c.listen[0].host, "127.0.0.1");
    cr_assert_eq(c.listen[0].port, 8080);
    cr_assert_eq(c.nmasters, 5);
    cr_assert_eq(c.masters[4].port, 6385);
    cr_assert_str_eq(c.key_prefix, "lock:");
    cr_assert_eq(c.default_ttl_ms, 30000);
    cr_assert_eq(c.max_ttl_ms, 3600000);
    cr_assert_eq(c.max_wait_ms, 60000);
    cr_assert_eq(c.master_timeout_ms, 50);
    cr_assert_float_eq(c.drift_factor, 0.01, 1e-12);
    cr_assert_eq(c.max_body_bytes, 16384);
    cr_assert_null(c.auth_token);
    cr_assert_null(c.redis_password);
    conf_free(&c);
}

/* --threads defaults to one event loop, however many CPUs there are. */
Test(conf, threads_default_to_one)
{
    conf c;
    char err[256];
    char *argv[] = {"redlockd"};
    cr_assert_eq(run(&c, err, 1, argv), CONF_OK);
    cr_assert_eq(c.threads, 1);
    conf_free(&c);
}

Test(conf, flags_both_forms_and_env_with_flag_winning)
{
    conf c;
    char err[256];
    env_n = 0;
    setenv_fake("REDLOCKD_KEY_PREFIX", "env:");
    setenv_fake("REDLOCKD_MASTER_TIMEOUT_MS", "80");
    setenv_fake("REDLOCKD_LISTEN", "0.0.0.0:9000");
    char *argv[] = {"redlockd", "--key-prefix=", "--masters", "10.0.0.1:7000,[::1]:7001,h:1",
                    "--drift-factor", "0.02"};
    cr_assert_eq(run(&c, err, 6, argv), CONF_OK, "%s", err);
    cr_assert_str_eq(c.key_prefix, "", "flag (empty) wins over env");
    cr_assert_eq(c.master_timeout_ms, 80, "env applies where no flag");
    cr_assert_eq(c.listen[0].port, 9000);
    cr_assert_eq(c.nmasters, 3);
    cr_assert_str_eq(c.masters[1].host, "::1");
    cr_assert_eq(c.masters[1].port, 7001);
    cr_assert_float_eq(c.drift_factor, 0.02, 1e-12);
    conf_free(&c);
    env_n = 0;
}

Test(conf, bad_values_are_one_line_naming_the_flag)
{
    const char *cases[][2] = {
        {"--listen", "nope"},
        {"--listen", "1.2.3.4:99999"},
        {"--masters", ""},
        {"--masters", "a:1,b"},
        {"--default-ttl-ms", "abc"},
        {"--default-ttl-ms", "0"},
        {"--max-wait-ms", "-1"},
        {"--drift-factor", "2"},
        {"--threads", "0"},
        {"--log-level", "loud"},
        {"--log-format", "xml"},
        {"--auth-token-file", "/nonexistent/token"},
        {"--max-body-bytes", "12x"},
        {"--connection-buffer-bytes", "1535"},
        {"--connection-buffer-bytes", "65537"},
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
}

Test(conf, unknown_missing_and_cross_checks)
{
    conf c;
    char err[256];
    char *a1[] = {"redlockd", "--nope"};
    cr_assert_eq(run(&c, err, 2, a1), CONF_ERROR);
    cr_assert(strstr(err, "--nope"));
    conf_free(&c);
    char *a2[] = {"redlockd", "--listen"};
    cr_assert_eq(run(&c, err, 2, a2), CONF_ERROR);
    cr_assert(strstr(err, "needs a value"));
    conf_free(&c);
    char *a3[] = {"redlockd", "--default-ttl-ms", "5000", "--max-ttl-ms", "1000"};
    cr_assert_eq(run(&c, err, 5, a3), CONF_ERROR);
    cr_assert(strstr(err, "--max-ttl-ms"));
    conf_free(&c);
    char *a4[] = {"redlockd", "stray"};
    cr_assert_eq(run(&c, err, 2, a4), CONF_ERROR);
    conf_free(&c);
    env_n = 0;
    setenv_fake("REDLOCKD_DEFAULT_TTL_MS", "x");
    char *a5[] = {"redlockd"};
    cr_assert_eq(run(&c, err, 1, a5), CONF_ERROR);
    cr_assert(strstr(err, "REDLOCKD_DEFAULT_TTL_MS"), "%s", err);
    conf_free(&c);
    env_n = 0;
}

Test(conf, help_and_version)
{
    conf c;
    char err[256];
    char *a1[] = {"redlockd", "--help"};
    cr_assert_eq(run(&c, err, 2, a1), CONF_HELP);
    conf_free(&c);
    char *a2[] = {"redlockd", "--version"};
    cr_assert_eq(run(&c, err, 2, a2), CONF_VERSION);
    conf_free(&c);
}

Test(conf, auth_token_file_is_trimmed)
{
    char path[] = "/tmp/redlockd-test-tokenXXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "  s3cret-token\n", 15), 15);
    close(fd);
    conf c;
    char err[256];
    char *argv[] = {"redlockd", "--auth-token-file", path};
    cr_assert_eq(run(&c, err, 3, argv), CONF_OK, "%s", err);
    cr_assert_str_eq(c.auth_token, "s3cret-token");
    conf_free(&c);
    unlink(path);
}

Test(conf, usage_lists_every_flag_and_variable)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    conf_usage(f);
    fclose(f);
    const char *flags[] = {"--listen", "--masters", "--key-prefix", "--default-ttl-ms",
                           "--max-ttl-ms", "--max-wait-ms", "--master-timeout-ms",
                           "--drift-factor", "--retry-delay-ms", "--threads", "--max-body-bytes", "--connection-buffer-bytes",
                           "--auth-token-file", "--redis-password", "--redis-username", "--redis-tls",
                           "--redis-tls-ca-file", "--redis-tls-cert-file", "--redis-tls-key-file",
                           "--redis-tls-server-name", "REDLOCKD_REDIS_TLS_SERVER_NAME", "--log-level", "--log-format",
                           "--help", "--version", "REDLOCKD_MASTER_TIMEOUT_MS", "--listen-mode",
                           "REDLOCKD_LISTEN_MODE", "--tls-cert-file", "--tls-key-file", "--tls-client-ca-file",
                           "REDLOCKD_TLS_CLIENT_CA_FILE"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        cr_assert(strstr(buf, flags[i]), "help lacks %s", flags[i]);
    free(buf);
}

Test(conf, quarantine_on_by_default_and_off_by_flag_or_env)
{
    conf c;
    char err[256];
    char *argv[] = {"redlockd"};
    cr_assert_eq(run(&c, err, 1, argv), CONF_OK);
    cr_assert(c.quarantine);
    conf_free(&c);

    setenv_fake("REDLOCKD_QUARANTINE", "off");
    cr_assert_eq(run(&c, err, 1, argv), CONF_OK);
    cr_assert_not(c.quarantine);
    conf_free(&c);

    char *on[] = {"redlockd", "--quarantine", "on"};
    cr_assert_eq(run(&c, err, 3, on), CONF_OK, "the flag wins over the environment");
    cr_assert(c.quarantine);
    conf_free(&c);

    char *bad[] = {"redlockd", "--quarantine=maybe"};
    cr_assert_eq(run(&c, err, 2, bad), CONF_ERROR);
    cr_assert(strstr(err, "--quarantine"), "%s", err);
    cr_assert(strstr(err, "maybe"), "%s", err);
    conf_free(&c);
}

Test(conf, dapr_stores)
{
    conf c;
    char err[256];
    char *argv[] = {"redlockd"};
    cr_assert_eq(run(&c, err, 1, argv), CONF_OK);
    cr_assert_str_eq(c.dapr_stores, "lockstore");
    conf_free(&c);
    char *two[] = {"redlockd", "--dapr-stores", "orders,billing"};
    cr_assert_eq(run(&c, err, 3, two), CONF_OK);
    cr_assert_str_eq(c.dapr_stores, "orders,billing");
    conf_free(&c);
    char *prefixed[] = {"redlockd", "--dapr-stores", "a,b=appid,c=name,d=none,e=tenant-7:eu@x/y",
                        "--dapr-app-id", "checkout"};
    cr_assert_eq(run(&c, err, 5, prefixed), CONF_OK, "%s", err);
    cr_assert_str_eq(c.dapr_stores, "a,b=appid,c=name,d=none,e=tenant-7:eu@x/y");
    cr_assert_str_eq(c.dapr_app_id, "checkout");
    conf_free(&c);
    char long_name[80];
    memset(long_name, 's', 65);
    long_name[65] = '\0';
    const char *bad[] = {"", "a,,b", ",a", "a,", "a:b", "a b", "a=", "=p", "a=b||c", "a=b|c", "a=b c", "a=b=c",
                         long_name};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *av[] = {"redlockd", "--dapr-stores", (char *)bad[i]};
        cr_assert_eq(run(&c, err, 3, av), CONF_ERROR, "\"%s\"", bad[i]);
        cr_assert(strstr(err, "--dapr-stores"), "%s", err);
        conf_free(&c);
    }
    const char *bad_ids[] = {"a||b", "two words", long_name};
    for (size_t i = 0; i < sizeof bad_ids / sizeof *bad_ids; i++) {
        char *av[] = {"redlockd", "--dapr-app-id", (char *)bad_ids[i]};
        cr_assert_eq(run(&c, err, 3, av), CONF_ERROR, "\"%s\"", bad_ids[i]);
        cr_assert(strstr(err, "--dapr-app-id"), "%s", err);
        conf_free(&c);
    }
}

Test(conf, key_prefix_takes_only_name_characters)
{
    conf c;
    char err[256];
    char *ok[] = {"redlockd", "--key-prefix", "app.v2:locks-_"};
    cr_assert_eq(run(&c, err, 3, ok), CONF_OK, "%s", err);
    cr_assert_str_eq(c.key_prefix, "app.v2:locks-_");
    conf_free(&c);
    /* '#' would let a prefix and a name spell an internal key. */
    const char *bad[] = {"lock#", "a b", "x/", "redlockd#marker"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *av[] = {"redlockd", "--key-prefix", (char *)bad[i]};
        cr_assert_eq(run(&c, err, 3, av), CONF_ERROR, "\"%s\"", bad[i]);
        cr_assert(strstr(err, "--key-prefix"), "%s", err);
        conf_free(&c);
    }
}

Test(conf, safety_flags)
{
    conf c;
    char err[256];
    char *argv[] = {"redlockd"};
    cr_assert_eq(run(&c, err, 1, argv), CONF_OK);
    cr_assert_eq(c.fence_keep_ms, CONF_DEFAULT_FENCE_KEEP_MS);
    cr_assert_not(c.cluster_setup_manual);
    cr_assert_not(c.refuse_unsafe);
    cr_assert_not(c.setup_cluster);
    conf_free(&c);

    setenv_fake("REDLOCKD_CLUSTER_SETUP", "manual");
    char *set[] = {"redlockd", "--fence-keep-ms", "1500", "--unsafe-masters", "refuse", "--setup-cluster"};
    cr_assert_eq(run(&c, err, 6, set), CONF_OK, "%s", err);
    cr_assert_eq(c.fence_keep_ms, 1500);
    cr_assert(c.cluster_setup_manual);
    cr_assert(c.refuse_unsafe);
    cr_assert(c.setup_cluster);
    conf_free(&c);

    char *bad1[] = {"redlockd", "--cluster-setup", "sometimes"};
    cr_assert_eq(run(&c, err, 3, bad1), CONF_ERROR);
    cr_assert(strstr(err, "--cluster-setup"), "%s", err);
    conf_free(&c);
    char *bad2[] = {"redlockd", "--unsafe-masters", "ignore"};
    cr_assert_eq(run(&c, err, 3, bad2), CONF_ERROR);
    conf_free(&c);
    char *bad3[] = {"redlockd", "--fence-keep-ms", "-1"};
    cr_assert_eq(run(&c, err, 3, bad3), CONF_ERROR);
    conf_free(&c);
    /* 0 would let a counter expire with its lock: below every clock
     * difference, and no bound for restart quarantine to wait out. */
    char *bad4[] = {"redlockd", "--fence-keep-ms", "0"};
    cr_assert_eq(run(&c, err, 3, bad4), CONF_ERROR);
    cr_assert(strstr(err, "--fence-keep-ms") && strstr(err, "from 1 to"), "%s", err);
    conf_free(&c);
}

/* --health-check probes the address the daemon would listen on, so it must
 * read the same flags and variables, whichever order they come in. */
Test(conf, health_check_reads_the_listen_address)
{
    conf c;
    char err[256];
    env_n = 0;
    char *plain[] = {"redlockd", "--health-check"};
    cr_assert_eq(run(&c, err, 2, plain), CONF_HEALTH_CHECK, "%s", err);
    cr_assert_str_eq(c.listen[0].host, "127.0.0.1");
    cr_assert_eq(c.listen[0].port, 8080);
    conf_free(&c);

    setenv_fake("REDLOCKD_LISTEN", "0.0.0.0:9000");
    cr_assert_eq(run(&c, err, 2, plain), CONF_HEALTH_CHECK, "%s", err);
    cr_assert_str_eq(c.listen[0].host, "0.0.0.0", "REDLOCKD_LISTEN applies to the probe");
    cr_assert_eq(c.listen[0].port, 9000);
    conf_free(&c);

    char *after[] = {"redlockd", "--health-check", "--listen", "[::]:7000"};
    cr_assert_eq(run(&c, err, 4, after), CONF_HEALTH_CHECK, "%s", err);
    cr_assert_str_eq(c.listen[0].host, "::", "a flag after --health-check still applies");
    cr_assert_eq(c.listen[0].port, 7000);
    conf_free(&c);
    env_n = 0;

    char *bad[] = {"redlockd", "--health-check=yes"};
    cr_assert_eq(run(&c, err, 2, bad), CONF_ERROR);
    cr_assert(strstr(err, "--health-check"), "%s", err);
    conf_free(&c);

    char *badlisten[] = {"redlockd", "--health-check", "--listen", "nope"};
    cr_assert_eq(run(&c, err, 4, badlisten), CONF_ERROR, "a bad address is an error, not a probe");
    conf_free(&c);

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    conf_usage(f);
    fclose(f);
    cr_assert(strstr(buf, "--health-check"), "help lacks --health-check");
    free(buf);
}

Test(conf, connection_and_waiter_bounds)
{
    conf c;
    char err[256];
    env_n = 0;
    char *argv[] = {"redlockd"};
    cr_assert_eq(run(&c, err, 1, argv), CONF_OK);
    cr_assert_eq(c.max_connections, CONF_DEFAULT_MAX_CONNECTIONS);
    cr_assert_eq(c.max_connections_per_ip, CONF_DEFAULT_MAX_CONNECTIONS_PER_IP);
    cr_assert_eq(c.request_timeout_ms, CONF_DEFAULT_REQUEST_TIMEOUT_MS);
    cr_assert_eq(c.max_waiters, CONF_DEFAULT_MAX_WAITERS);
    cr_assert_eq(c.connection_buffer_bytes, 3072);
    conf_free(&c);
    char *set[] = {"redlockd", "--max-connections=64", "--max-connections-per-ip=8",
                   "--request-timeout-ms=500", "--max-waiters=3", "--max-body-bytes=1048576",
                   "--connection-buffer-bytes=8192"};
    cr_assert_eq(run(&c, err, 7, set), CONF_OK, "%s", err);
    cr_assert_eq(c.connection_buffer_bytes, 8192);
    cr_assert_eq(c.max_connections, 64);
    cr_assert_eq(c.max_connections_per_ip, 8);
    cr_assert_eq(c.request_timeout_ms, 500);
    cr_assert_eq(c.max_waiters, 3);
    cr_assert_eq(c.max_body_bytes, 1048576);
    conf_free(&c);
    /* A body whose parse would cost hundreds of megabytes is not allowed. */
    char *big[] = {"redlockd", "--max-body-bytes", "16777216"};
    cr_assert_eq(run(&c, err, 3, big), CONF_ERROR);
    cr_assert(strstr(err, "--max-body-bytes"), "%s", err);
    conf_free(&c);
    char *zero[] = {"redlockd", "--max-waiters", "0"};
    cr_assert_eq(run(&c, err, 3, zero), CONF_ERROR);
    conf_free(&c);
}

Test(conf, redis_acl_user_and_tls)
{
    conf c;
    char err[256];
    char *argv[] = {"redlockd", "--masters", "redis://10.0.0.1:6379,rediss://redis.example:6380/,h:1",
                    "--redis-username", "locker", "--redis-password", "pw",
                    "--redis-tls-ca-file", "/etc/ca.pem", "--redis-tls-server-name", "redis.internal"};
    cr_assert_eq(run(&c, err, 11, argv), CONF_OK, "%s", err);
    cr_assert_eq(c.nmasters, 3);
    cr_assert_str_eq(c.masters[0].host, "10.0.0.1");
    cr_assert_not(c.masters[0].tls);
    cr_assert_str_eq(c.masters[1].host, "redis.example");
    cr_assert_eq(c.masters[1].port, 6380);
    cr_assert(c.masters[1].tls);
    cr_assert_not(c.masters[2].tls);
    cr_assert(conf_tls_used(&c));
    cr_assert_str_eq(c.redis_username, "locker");
    cr_assert_str_eq(c.redis_tls_ca_file, "/etc/ca.pem");
    cr_assert_str_eq(c.redis_tls_server_name, "redis.internal");
    char s[512];
    conf_masters_str(&c, s, sizeof s);
    cr_assert_str_eq(s, "10.0.0.1:6379,rediss://redis.example:6380,h:1");
    conf_free(&c);

    /* --redis-tls on: every master, from the environment too. */
    setenv_fake("REDLOCKD_REDIS_TLS", "on");
    setenv_fake("REDLOCKD_REDIS_TLS_CERT_FILE", "/c.pem");
    setenv_fake("REDLOCKD_REDIS_TLS_KEY_FILE", "/k.pem");
    char *a2[] = {"redlockd", "--masters", "a:1,b:2"};
    cr_assert_eq(run(&c, err, 3, a2), CONF_OK, "%s", err);
    cr_assert(c.redis_tls && c.masters[0].tls && c.masters[1].tls);
    cr_assert_str_eq(c.redis_tls_key_file, "/k.pem");
    conf_free(&c);
    env_n = 0;

    char *a3[] = {"redlockd"};
    cr_assert_eq(run(&c, err, 1, a3), CONF_OK);
    cr_assert_not(conf_tls_used(&c));
    cr_assert_null(c.redis_username);
    conf_free(&c);
}

Test(conf, redis_acl_and_tls_mistakes_are_one_line)
{
    const char *cases[][5] = {
        /* flag, value, another flag, its value, what the line names */
        {"--redis-username", "locker", NULL, NULL, "--redis-username"},
        {"--redis-tls-cert-file", "/c.pem", NULL, NULL, "--redis-tls-key-file"},
        {"--redis-tls-key-file", "/k.pem", NULL, NULL, "--redis-tls-cert-file"},
        {"--redis-tls", "maybe", NULL, NULL, "--redis-tls"},
        {"--redis-username", "two words", "--redis-password", "pw", "--redis-username"},
        {"--redis-tls-server-name", "a b", NULL, NULL, "--redis-tls-server-name"},
        {"--masters", "https://h:1", NULL, NULL, "--masters"},
        {"--masters", "rediss://user:pw@h:1", NULL, NULL, "--masters"},
        {"--masters", "rediss://h:1/0", NULL, NULL, "--masters"},
        {"--masters", "rediss://h", NULL, NULL, "--masters"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        conf c;
        char err[256] = "";
        char *argv[] = {"redlockd", (char *)cases[i][0], (char *)cases[i][1], (char *)cases[i][2],
                        (char *)cases[i][3]};
        int argc = cases[i][2] ? 5 : 3;
        cr_assert_eq(run(&c, err, argc, argv), CONF_ERROR, "accepted %s %s", cases[i][0], cases[i][1]);
        cr_assert(strstr(err, cases[i][4]), "\"%s\" does not name %s", err, cases[i][4]);
        cr_assert_null(strchr(err, '\n'));
        conf_free(&c);
    }
}
