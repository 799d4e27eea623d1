#!/usr/bin/env python3
"""redlockd's listeners (issue 43) with real tools, on real redis-server
masters:

* a Unix socket beside TCP (--listen given twice, --threads 2):
  `curl --unix-socket` GET /healthz and an acquire and release (the lock
  on the masters, and seen over TCP), its file's mode (0660, and
  --listen-mode 0600), the audit log's client "unix", the health check over
  it; a stale socket file replaced at start; one another process serves,
  and a file that is not a socket, refused (and left alone); the file
  removed at stop, but not a next instance's that replaced it;
* HTTPS with a client CA: `curl --cacert --cert --key` acquires, extends and
  releases as the certificate's principal (by CN; by DNS SAN when it has no
  CN), and a name outside its prefixes is 403; without a certificate
  /healthz answers and a lock call is 401; `openssl s_client` with a
  certificate of another CA and an expired one fails the handshake (with
  its alert), without one gets 401; none of those changes anything on the
  masters; plain HTTP on the HTTPS port gets nothing; the health check
  over HTTPS;
* a held stream over HTTPS: its events, and its release when the client
  closes;
* SIGHUP: a new certificate served to a new connection while an open
  keep-alive connection goes on with its own; a broken key file keeps the
  certificate in force (reload_failed in the log).

Usage: test_listen.py (REDLOCKD_BIN names the daemon)."""
import json
import os
import shutil
import signal
import socket
import ssl
import stat
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from listen_harness import (BIN, Daemon, check, curl, der_of, fail, free_port, json_of, log,  # noqa: E402
                            make_certs, refused_start, run, run_sections)
from races_harness import Master  # noqa: E402


def keys(masters, key):
    """On how many masters key exists."""
    return sum(m.call("EXISTS", key) for m in masters)


def audit_lines(path):
    try:
        return [json.loads(l) for l in open(path) if l.strip()]
    except (OSError, ValueError) as e:
        fail(f"audit log {path}: {e}")
        return []


# ---- the Unix socket ----

def unix_socket(tmp, masters):
    sock = os.path.join(tmp, "run", "redlockd.sock")
    os.makedirs(os.path.dirname(sock))
    port = free_port()
    audit = os.path.join(tmp, "audit-unix.log")
    d = Daemon(tmp, "unix", masters, ["--listen", f"127.0.0.1:{port}", "--listen", f"unix:{sock}"],
               ["--unix-socket", sock, "http://localhost/healthz"], ["--threads", "2", "--audit-log", audit])
    st = os.lstat(sock)
    check(stat.S_ISSOCK(st.st_mode), "the unix: listener is a socket file")
    check(stat.S_IMODE(st.st_mode) == 0o660, f"its mode is 0660 by default, not {oct(stat.S_IMODE(st.st_mode))}")

    s, body, _ = curl("--unix-socket", sock, "http://localhost/healthz")
    check(s == 200 and json_of(body).get("status") == "ok", f"GET /healthz over the socket: {s} {body}")
    s, body, _ = curl("--unix-socket", sock, "-X", "POST", "http://localhost/locks/sock-a", "-d", '{"ttl_ms": 30000}')
    token = json_of(body).get("token", "")
    check(s == 201 and token, f"acquire over the socket: {s} {body}")
    check(keys(masters, "lock:sock-a") == len(masters), "the lock is on every master")
    s, body, _ = curl(f"http://127.0.0.1:{port}/locks/sock-a")
    check(s == 200 and json_of(body).get("held") is True, f"the same lock seen over TCP: {s} {body}")
    s, body, _ = curl("--unix-socket", sock, "-X", "DELETE", "-H", f"Lock-Token: {token}",
                      "http://localhost/locks/sock-a")
    check(s == 204, f"release over the socket: {s} {body}")
    check(keys(masters, "lock:sock-a") == 0, "released on every master")
    s, body, _ = curl("-X", "POST", f"http://127.0.0.1:{port}/locks/tcp-a")
    check(s == 201, f"TCP still serves beside it: {s} {body}")
    # Keep-alive over the socket: several requests, one connection.
    s, body, _ = curl("--unix-socket", sock, "http://localhost/healthz", "http://localhost/readyz")
    check(s == 200, f"two requests on one socket connection: {s}")

    rc, out = run([BIN, "--health-check", "--listen", f"unix:{sock}"])
    check(rc == 0 and "healthy: GET http://localhost/healthz on unix:" in out, f"health check over the socket: {rc} {out}")

    lines = audit_lines(audit)
    clients = {(l.get("name"), l.get("event")): l.get("client") for l in lines}
    check(clients.get(("sock-a", "grant")) == "unix", f"the audit names a Unix client 'unix': {lines}")
    check(str(clients.get(("tcp-a", "grant"), "")).startswith("127.0.0.1:"),
          f"and a TCP client by its address: {lines}")
    d.stop()
    check(not os.path.lexists(sock), "the socket file is removed at stop")


def unix_socket_files(tmp, masters):
    run_dir = os.path.join(tmp, "files")
    os.makedirs(run_dir)

    # A stale socket: bound by a process that died (the file stays).
    stale = os.path.join(run_dir, "stale.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(stale)
    s.close()
    os.chmod(stale, 0o777)
    c = socket.socket(socket.AF_UNIX)
    check(c.connect_ex(stale) != 0, "nobody answers on the stale socket")
    c.close()
    d = Daemon(tmp, "stale", masters, ["--listen", f"unix:{stale}", "--listen-mode", "0600"],
               ["--unix-socket", stale, "http://localhost/healthz"])
    st = os.lstat(stale)
    check(stat.S_IMODE(st.st_mode) == 0o600, f"the stale file was replaced by one of --listen-mode 0600: "
          f"{oct(stat.S_IMODE(st.st_mode))}")
    s, body, _ = curl("--unix-socket", stale, "-X", "POST", "http://localhost/locks/stale-a")
    check(s == 201, f"served on the replaced socket: {s} {body}")
    # A next instance's file at the same path is not ours to remove.
    os.unlink(stale)
    nxt = socket.socket(socket.AF_UNIX)
    nxt.bind(stale)
    nxt.listen(4)
    d.stop()
    check(os.path.lexists(stale), "a socket file that replaced ours is left at stop")
    c = socket.socket(socket.AF_UNIX)
    c.connect(stale)   # the next instance still answers there
    c.close()

    # Another process serves it: refused, and its socket left alone.
    theirs = os.lstat(stale).st_ino
    rc, out = refused_start(tmp, "served", masters, ["--listen", f"unix:{stale}"])
    check(rc not in (None, 0) and "another process serves" in out, f"a served socket is refused: {rc} {out}")
    check(os.path.lexists(stale) and os.lstat(stale).st_ino == theirs, "and its file stays")
    c = socket.socket(socket.AF_UNIX)
    c.connect(stale)
    c.close()
    nxt.close()

    # Not a socket: refused, untouched.
    plain = os.path.join(run_dir, "plain.sock")
    open(plain, "w").write("not a socket\n")
    rc, out = refused_start(tmp, "plain", masters, ["--listen", f"unix:{plain}"])
    check(rc not in (None, 0) and "is not a socket" in out, f"a regular file is refused: {rc} {out}")
    check(open(plain).read() == "not a socket\n", "and left as it was")


# ---- HTTPS with client certificates ----

PRINCIPALS = ("billing      lock,read        billing/     cert\n"
              "ops.example  read,lock,admin  *            cert\n")


def s_client(port, certs, who, request):
    """openssl s_client with who's certificate (None: none): its output."""
    args = ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-CAfile", certs["ca.crt"], "-ign_eof"]
    if who:
        args += ["-cert", certs[f"{who}.crt"], "-key", certs[f"{who}.key"]]
    rc, out = run(args, stdin=request.encode(), timeout=15)
    return out


def https(tmp, masters, certs):
    port = free_port()
    cert, key = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
    shutil.copy(certs["server.crt"], cert)
    shutil.copy(certs["server.key"], key)
    pfile = os.path.join(tmp, "principals")
    open(pfile, "w").write(PRINCIPALS)
    url = f"https://127.0.0.1:{port}"
    ca = ["--cacert", certs["ca.crt"]]
    d = Daemon(tmp, "https", masters, ["--listen", f"127.0.0.1:{port}"], [*ca, f"{url}/healthz"],
               ["--tls-cert-file", cert, "--tls-key-file", key, "--tls-client-ca-file", certs["ca.crt"],
                "--principals-file", pfile])
    billing = [*ca, "--cert", certs["billing.crt"], "--key", certs["billing.key"]]

    s, body, _ = curl(*billing, "-X", "POST", f"{url}/locks/billing/run", "-d", '{"ttl_ms": 30000}')
    token = json_of(body).get("token", "")
    check(s == 201 and token, f"billing's certificate acquires billing/run: {s} {body}")
    check(keys(masters, "lock:billing/run") == len(masters), "on every master")
    s, body, _ = curl(*billing, "-X", "PATCH", "-H", f"Lock-Token: {token}", f"{url}/locks/billing/run",
                      "-d", '{"ttl_ms": 30000}')
    check(s == 200, f"and extends it: {s} {body}")
    s, body, _ = curl(*billing, "-X", "POST", f"{url}/locks/payroll")
    check(s == 403 and json_of(body).get("error") == "forbidden", f"a name outside its prefixes: {s} {body}")
    s, body, _ = curl(*billing, "-X", "DELETE", "-H", f"Lock-Token: {token}", f"{url}/locks/billing/run")
    check(s == 204 and keys(masters, "lock:billing/run") == 0, f"and releases it: {s} {body}")
    ops = [*ca, "--cert", certs["ops.crt"], "--key", certs["ops.key"]]
    s, body, _ = curl(*ops, "-X", "POST", f"{url}/locks/payroll")
    check(s == 201, f"a certificate without CN is its first DNS SAN's principal (ops.example): {s} {body}")

    s, body, _ = curl(*ca, f"{url}/healthz")
    check(s == 200, f"/healthz without a client certificate: {s} {body}")
    s, body, _ = curl(*ca, "-X", "POST", f"{url}/locks/billing/nocert")
    check(s == 401 and json_of(body).get("error") == "unauthorized", f"a lock call without one: {s} {body}")
    s, body, _ = curl(*ca, "-H", "Authorization: Bearer whatever", f"{url}/locks/billing/nocert")
    check(s == 401, f"a token does not stand in for the certificate: {s} {body}")

    req = "POST /locks/billing/sclient HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    out = s_client(port, certs, "foreign", req)
    check("alert unknown ca" in out and "HTTP/1.1" not in out, f"s_client, another CA's certificate: {out[-600:]}")
    out = s_client(port, certs, "expired", req)
    check("alert certificate expired" in out and "HTTP/1.1" not in out, f"s_client, an expired one: {out[-600:]}")
    out = s_client(port, certs, None, req)
    check("HTTP/1.1 401" in out, f"s_client without a certificate: 401, got {out[-600:]}")
    out = s_client(port, certs, "billing", req)
    check("HTTP/1.1 201" in out, f"s_client with billing's: 201 (the control), got {out[-600:]}")
    check(keys(masters, "lock:billing/nocert") == 0, "the refused calls wrote nothing")
    check(d.wait_log("tls_client_refused"), "refused certificates are logged")

    s, _, rc = curl(f"http://127.0.0.1:{port}/healthz", timeout=3)
    check(s != 200, f"plain HTTP on the HTTPS port is not served: {s} (curl {rc})")
    rc, out = run([BIN, "--health-check", "--listen", f"127.0.0.1:{port}", "--tls-cert-file", cert,
                   "--tls-key-file", key])
    check(rc == 0 and f"healthy: GET https://127.0.0.1:{port}/healthz answered 200" in out,
          f"the health check over HTTPS: {rc} {out}")
    held_stream(port, certs, masters)
    reload_certificate(d, port, certs, cert, key)
    d.stop()


def held_stream(port, certs, masters):
    """A held stream over HTTPS: its events arrive through TLS, and closing
    the connection releases the lock (the watcher sees the client go)."""
    s = tls_conn(port, certs)
    body = '{"hold": true, "ttl_ms": 3000}'
    s.sendall(f"POST /locks/billing/held HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n\r\n"
              f"{body}".encode())
    got, deadline = b"", time.monotonic() + 5
    while b'"renewed"' not in got and time.monotonic() < deadline:
        chunk = s.recv(4096)
        if not chunk:
            break
        got += chunk
    check(b'"event":"acquired"' in got and b'"renewed"' in got, f"a held stream's events over HTTPS: {got[-300:]!r}")
    check(keys(masters, "lock:billing/held") == len(masters), "the held lock is on the masters")
    s.close()
    deadline = time.monotonic() + 3
    while keys(masters, "lock:billing/held") and time.monotonic() < deadline:
        time.sleep(0.05)
    check(keys(masters, "lock:billing/held") == 0, "closing the HTTPS connection released the held lock")


def tls_conn(port, certs):
    ctx = ssl.create_default_context(cafile=certs["ca.crt"])
    ctx.load_cert_chain(certs["billing.crt"], certs["billing.key"])
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5), server_hostname="127.0.0.1")
    return s


def exchange(s, method, path):
    """One request on the open connection s: the status (0 when it broke)."""
    try:
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n".encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(4096)
            if not chunk:
                return 0
            buf += chunk
        head, _, rest = buf.partition(b"\r\n\r\n")
        n = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                n = int(line.split(b":")[1])
        while len(rest) < n:
            rest += s.recv(4096)
        return int(head.split(b" ")[1])
    except OSError:
        return 0


def reload_certificate(d, port, certs, cert, key):
    kept = tls_conn(port, certs)
    check(exchange(kept, "GET", "/healthz") == 200, "a keep-alive connection before the reload")
    first = kept.getpeercert(binary_form=True)
    check(first == der_of(certs["server.crt"]), "it got the first certificate")
    at = len(d.text())
    shutil.copy(certs["server2.crt"], cert)
    shutil.copy(certs["server2.key"], key)
    d.proc.send_signal(signal.SIGHUP)
    check(d.wait_log("reloaded what=\"tls certificate\"", at), f"SIGHUP reloads the certificate: {d.text()[at:]}")
    new = tls_conn(port, certs)
    check(new.getpeercert(binary_form=True) == der_of(certs["server2.crt"]),
          "a new connection gets the new certificate")
    check(exchange(new, "POST", "/locks/billing/new-conn") == 201, "and is served")
    new.close()
    check(exchange(kept, "POST", "/locks/billing/kept-conn") == 201, "the open connection goes on after the reload")
    check(exchange(kept, "GET", "/locks/billing/kept-conn") == 200, "... request after request")
    check(kept.getpeercert(binary_form=True) == first, "with the certificate it was handshaken with")
    kept.close()

    # A broken pair (billing's key is not server2's certificate's): kept.
    at = len(d.text())
    shutil.copy(certs["billing.key"], key)
    d.proc.send_signal(signal.SIGHUP)
    check(d.wait_log("reload_failed what=\"tls certificate\"", at), f"a key that does not match: {d.text()[at:]}")
    again = tls_conn(port, certs)
    check(again.getpeercert(binary_form=True) == der_of(certs["server2.crt"]), "the certificate in force stays")
    check(exchange(again, "GET", "/healthz") == 200, "and serves")
    again.close()


def main():
    if shutil.which("curl") is None or shutil.which("openssl") is None:
        fail("curl and openssl are needed (scripts/deps.sh installs them)")
        return 1
    tmp = tempfile.mkdtemp(prefix="redlockd-listen-")
    masters, certs = [], {}

    def setup():
        masters.extend(Master(tmp, i) for i in range(3))
        os.mkdir(os.path.join(tmp, "certs"))
        certs.update(make_certs(os.path.join(tmp, "certs")))

    return run_sections(tmp, [("masters and certificates", setup),
                              ("unix socket", lambda: unix_socket(tmp, masters)),
                              ("unix socket files", lambda: unix_socket_files(tmp, masters)),
                              ("https", lambda: https(tmp, masters, certs))])

if __name__ == "__main__":
    sys.exit(main())
