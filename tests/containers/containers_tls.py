#!/usr/bin/env python3
"""The containers suite's TLS and ACL masters (containers.py runs them):
compose.tls.yml with its own CA, an ACL user, and a wrong CA refused with
the cause in /readyz."""
from containers_setup import *  # noqa: F401,F403
from containers_checks import *  # noqa: F401,F403


# ---------------------------------------------------------------- TLS and ACL masters

def tls_masters():
    """deploy/compose.tls.yml for real, under a project of its own
    (PROJECT-tls): five TLS-only (--port 0), ACL-only (default user off)
    masters with tls-auth-clients yes and the real redlockd image dialling
    rediss://redis-N:6380 as user redlockd with a client certificate. The
    certificates and the masters' ACL file come from deploy/redis-tls-certs.sh
    (the openssl CLI, on this machine) in a folder of STATE named after the
    run, mounted read-only; the password is made anew each run. Checks what a
    user sees: /readyz ready with five masters up over TLS, a lock's token on
    all five masters (read with redis-cli over TLS as the ACL user), the
    release, and that the masters refuse clear text and clients without a
    certificate or a login. Negative control: a second redlockd on the same
    network trusting another CA is not ready, every master down with the
    certificate failure in /readyz. Everything it started is removed at the
    end, also on failure (teardown() also sweeps PROJECT-tls* and the
    certificates' folder)."""
    project = PROJECT + "-tls"
    certs = tempfile.mkdtemp(dir=STATE, prefix=f"tls-{PROJECT}.")
    password = secrets.token_hex(16)
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        port = so.getsockname()[1]
    env = dict(os.environ, REDLOCKD_REDIS_PASSWORD=password, REDLOCKD_TLS_DIR=certs,
               REDLOCKD_HOST_PORT=str(port))
    wrong = PROJECT + "-tls-wrongca"
    services = ["redis-%d" % i for i in range(1, 6)]
    masters_env = ",".join(f"rediss://{s}:6380" for s in services)
    try:
        with step("TLS masters: certificates and ACL file (openssl)") as s:
            os.chmod(certs, 0o755)   # the containers' users (999, 10001) read through it
            run(["sh", os.path.join(ROOT, "deploy", "redis-tls-certs.sh"), certs], 60, env=env,
                what="deploy/redis-tls-certs.sh")
            # A CA that signed nothing here, for the negative control.
            run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                 "-nodes", "-keyout", os.path.join(certs, "other-ca.key"), "-out",
                 os.path.join(certs, "other-ca.crt"), "-days", "2", "-subj", "/CN=some-other-ca"], 60,
                what="openssl req (another CA)")
            os.chmod(os.path.join(certs, "other-ca.crt"), 0o644)
            san = run(["openssl", "x509", "-in", os.path.join(certs, "redis.crt"), "-noout", "-ext",
                       "subjectAltName"], 30)[1]
            check(all(f"DNS:{m}" in san for m in services), f"redis.crt's SANs: {san.strip()}")
        with step("TLS masters: compose -f deploy/compose.tls.yml up, until /readyz shows 5 TLS masters up"):
            st, out, err = run(["podman-compose", "-p", project, "-f", COMPOSE_TLS, "up", "-d", "--no-build"],
                               300, check=False, env=env)
            with open(os.path.join(OUT, "containers-compose-tls-up.log"), "w") as f:
                f.write((out + err).replace(password, "<password>"))
            try:
                j = wait_ready(port, len(services))
            except Fail as e:
                raise Fail(f"TLS masters: {e}\npodman-compose up said:\n"
                           f"{tail((out + err).replace(password, '<password>'), 20)}") from None
            check(all(m.get("tls") is True for m in j["masters"]), f"TLS masters: /readyz without tls: {j}")
            check(sorted(m["addr"] for m in j["masters"]) == [f"{s}:6380" for s in services],
                  f"TLS masters: /readyz names {[m['addr'] for m in j['masters']]}")
        with step("TLS masters: checks") as s:
            masters = [container(sv, project) for sv in services]
            r = container("redlockd", project)

            def cli(m, *cmd, auth=True, tls=True):
                args = ["redis-cli", "-p", "6380"]
                if tls:
                    # The master's own certificate serves as the client's
                    # (tls-auth-clients yes): the masters hold no client key.
                    args += ["--tls", "--cacert", "/tls/ca.crt", "--cert", "/tls/redis.crt",
                             "--key", "/tls/redis.key"]
                if auth:
                    args += ["--user", "redlockd", "--pass", password, "--no-auth-warning"]
                st, out, err = podman("exec", m, *args, *cmd, check=False, what=f"redis-cli on {m}")
                return st, (out + err).strip()

            st, body, _ = http("POST", port, "/locks/ct-tls", '{"ttl_ms": 20000}')
            check(st == 201, f"TLS masters: acquire ct-tls: {st} {body}")
            token = json.loads(body)["token"]
            for m in masters:
                st, out = cli(m, "GET", "lock:ct-tls")
                check(st == 0 and out == token, f"TLS masters: {m}: lock:ct-tls holds {out!r}, not the token")
            st, _, _ = http("DELETE", port, "/locks/ct-tls", headers={"Lock-Token": token})
            check(st == 204, f"TLS masters: release ct-tls: {st}")
            for m in masters:
                st, out = cli(m, "EXISTS", "lock:ct-tls")
                check(out == "0", f"TLS masters: {m}: lock:ct-tls still there after the release: {out!r}")
            # TLS only, client certificates required, ACL only.
            m = masters[0]
            got = {k: cli(m, "CONFIG", "GET", k)[1].split("\n")[-1] for k in ("port", "tls-port", "tls-auth-clients")}
            check(got == {"port": "0", "tls-port": "6380", "tls-auth-clients": "yes"},
                  f"TLS masters: {m}: CONFIG GET says {got}")
            st, out = cli(m, "PING", auth=False, tls=False)
            check("PONG" not in out, f"TLS masters: {m} answered a clear-text PING: {out!r}")
            _, out, err = podman("exec", m, "redis-cli", "-p", "6380", "--tls", "--cacert", "/tls/ca.crt", "PING",
                                 check=False)
            check("PONG" not in out + err, f"TLS masters: {m} answered a client without a certificate: "
                  f"{(out + err).strip()!r}")
            st, out = cli(m, "PING", auth=False)
            check("NOAUTH" in out, f"TLS masters: {m}: PING without a login (default user off): {out!r}")
            st, out = cli(m, "ACL", "WHOAMI")
            check(out == "redlockd", f"TLS masters: {m}: ACL WHOAMI {out!r}")
            # The masters' and redlockd's health checks, as compose.tls.yml writes them.
            check(healthcheck_passes(m), f"TLS masters: podman healthcheck run {m}")
            check(healthcheck_passes(r), "TLS masters: podman healthcheck run redlockd")
            # No secret in redlockd's log.
            logs = podman("logs", r)
            check(password not in logs[1] + logs[2], "TLS masters: the password is in redlockd's log")

            # Negative control: the same masters, another CA.
            nets = podman("inspect", "--format", "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}",
                          r)[1].split()
            check(len(nets) == 1, f"TLS masters: redlockd's networks: {nets}")
            with socket.socket() as so:
                so.bind(("127.0.0.1", 0))
                port2 = so.getsockname()[1]
            extra_containers.append(wrong)
            image = podman("inspect", "--format", "{{.ImageName}}", r)[1].strip()
            # The password from the environment, as compose passes it.
            run(["podman", "run", "-d", "--name", wrong, "--network", nets[0], "-p", f"127.0.0.1:{port2}:8080",
                   "-v", os.path.join(certs, "other-ca.crt") + ":/tls/ca.crt:ro",
                   "-v", os.path.join(certs, "client.crt") + ":/tls/client.crt:ro",
                   "-v", os.path.join(certs, "client.key") + ":/tls/client.key:ro",
                   "-e", "REDLOCKD_MASTERS=" + masters_env, "-e", "REDLOCKD_REDIS_USERNAME=redlockd",
                   "-e", "REDLOCKD_REDIS_PASSWORD", "-e", "REDLOCKD_REDIS_TLS_CA_FILE=/tls/ca.crt",
                   "-e", "REDLOCKD_REDIS_TLS_CERT_FILE=/tls/client.crt",
                   "-e", "REDLOCKD_REDIS_TLS_KEY_FILE=/tls/client.key", image], 60, env=env,
                what="podman run (redlockd with another CA)")
            deadline = time.monotonic() + WRONG_CA_DEADLINE_S
            last, done = "no answer", False
            while not done and time.monotonic() < deadline:
                try:
                    st, body, _ = http("GET", port2, "/readyz", timeout=2)
                    last = f"{st} {body}"
                    j = json.loads(body)
                    done = st == 503 and len(j["masters"]) == 5 and all(
                        not m["up"] and "certificate verify failed" in m.get("reason", "")
                        for m in j["masters"])
                except (OSError, ValueError, KeyError) as e:
                    last = repr(e)
                if not done:
                    time.sleep(0.5)
            check(done, f"TLS masters, wrong CA: /readyz did not show every master down for the certificate "
                  f"within {WRONG_CA_DEADLINE_S} s; last: {last[:600]}")
            check(j.get("status") == "not_ready" and "certificate verify failed" in j.get("reason", ""),
                  f"TLS masters, wrong CA: /readyz's reason: {j.get('reason')!r}")
            st, body, _ = http("POST", port2, "/locks/ct-tls-wrongca", '{"ttl_ms": 5000}')
            check(st == 503, f"TLS masters, wrong CA: acquire answered {st} {body}")
            logs = podman("logs", wrong)
            check('"event":"master_down"' in logs[1] + logs[2] and "certificate verify failed" in logs[1] + logs[2],
                  "TLS masters, wrong CA: no master_down line naming the certificate in its log")
            s.note = "(wrong CA: %s)" % j["masters"][0]["reason"]
    finally:
        # Best effort, raising nothing (a failure above stays the one
        # reported); what is left, the final teardown() sweeps and reports.
        with step("TLS masters: teardown (compose down -v, wrong-CA container, certificates)") as s:
            if wrong in extra_containers:
                podman("rm", "-f", "-t", "0", wrong, check=False, timeout=60)
                extra_containers.remove(wrong)
            st, _, err = run(["podman-compose", "-p", project, "-f", COMPOSE_TLS, "down", "-v", "-t", "5"], 180,
                             check=False, env=env)
            # podman-compose 1.0 leaves the network behind: swept here.
            errors = teardown(project, compose=False)
            shutil.rmtree(certs, ignore_errors=True)
            if st != 0 or errors:
                s.note = "(podman-compose down: %d; %s)" % (st, "; ".join(errors) or tail(err, 2))
