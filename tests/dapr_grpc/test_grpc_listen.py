#!/usr/bin/env python3
"""The gRPC listener's Unix socket and TLS (issue 43), with real clients on
real redis-server masters:

* --dapr-grpc-listen unix:PATH: grpcio (Debian's python3-grpcio) with a
  `unix:` target locks and unlocks (the lock on every master, then on
  none); the file's mode (--listen-mode, 0660 by default); the audit log
  names the client `unix`; --max-connections-per-ip does not apply to Unix
  clients (two raw connections held, a call still served, under a limit of
  1); the file removed at stop; a stale file replaced at start, a socket
  another process serves refused and left alone;
* TLS on a TCP --dapr-grpc-listen (--tls-cert-file, --tls-key-file,
  --tls-client-ca-file, a principals file): grpcio's secure channel with a
  client certificate locks and unlocks as its `cert` principal (audited
  with its name), 100 calls at once on one TLS connection all answered;
  a certificate of the CA that names no principal is UNAUTHENTICATED, none
  at all is UNAUTHENTICATED (a dapr-api-token does not stand in), a
  principal without the lock right and one outside its prefixes are
  PERMISSION_DENIED, and none of those writes anything on the masters;
  `openssl s_client -alpn h2` with another CA's certificate and an expired
  one fails the handshake with its alert, without a certificate completes
  it with ALPN h2; a client offering no ALPN, or no h2, is refused; h2c on
  the TLS port is not served;
* SIGHUP: a new connection gets the new certificate, a grpcio channel and
  a raw HTTP/2-over-TLS connection opened before it go on serving calls
  (the raw one with the certificate it was handshaken with); a key that
  is not the certificate's keeps the pair in force (reload_failed).

usage: test_grpc_listen.py SOURCE_ROOT BUILD_DIR   (env REDLOCKD_BIN: the daemon)
"""
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
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "listen"))
import grpc_harness  # noqa: E402
from grpc_raw import PREFACE, frame, hpack_literal, read_frames  # noqa: E402
from listen_harness import Daemon, der_of, free_port, make_certs, refused_start, run, run_sections  # noqa: E402
from races_harness import Master, check, fail, log  # noqa: E402

STORE = "lockstore"


def on_masters(masters, resource):
    """On how many masters the Dapr lock STORE||resource is held."""
    return sum(m.call("EXISTS", f"lock:{STORE}||{resource}") for m in masters)


def audit_lines(path):
    try:
        return [json.loads(line) for line in open(path) if line.strip()]
    except (OSError, ValueError) as e:
        fail(f"audit log {path}: {e}")
        return []


def wait_audit(path, pred, timeout=5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        hit = [a for a in audit_lines(path) if pred(a)]
        if hit:
            return hit[0]
        time.sleep(0.05)
    return None


class Calls:
    """TryLock and Unlock on a channel: (result, None) or (None, status code, details)."""

    def __init__(self, ch, pb, pbg):
        self.ch, self.pb = ch, pb
        self.stub = pbg.DaprStub(ch)

    def lock(self, res, owner="o", md=None):
        try:
            return self.stub.TryLockAlpha1(self.pb.TryLockRequest(store_name=STORE, resource_id=res, lock_owner=owner,
                                                                  expiry_in_seconds=30), metadata=md, timeout=10).success, None, ""
        except Exception as e:  # grpc.RpcError
            return None, e.code(), e.details()

    def unlock(self, res, owner="o"):
        try:
            return self.stub.UnlockAlpha1(self.pb.UnlockRequest(store_name=STORE, resource_id=res, lock_owner=owner),
                                          timeout=10).status, None, ""
        except Exception as e:  # grpc.RpcError
            return None, e.code(), e.details()


# ---- a Unix socket ----

def unix_socket(tmp, masters, pb, pbg):
    import grpc
    sock = os.path.join(tmp, "run", "grpc.sock")
    os.makedirs(os.path.dirname(sock))
    audit = os.path.join(tmp, "audit-unix.log")
    port = free_port()
    d = Daemon(tmp, "grpc-unix", masters, ["--listen", f"127.0.0.1:{port}"], [f"http://127.0.0.1:{port}/healthz"],
               ["--dapr-grpc-listen", f"unix:{sock}", "--audit-log", audit, "--max-connections-per-ip", "1"])
    st = os.lstat(sock)
    check(stat.S_ISSOCK(st.st_mode), f"--dapr-grpc-listen unix:{sock} is a socket file")
    check(stat.S_IMODE(st.st_mode) == 0o660, f"its mode is 0660 by default: {oct(stat.S_IMODE(st.st_mode))}")
    check(d.wait_log(f"grpc_listening addr=unix:{sock}"), "the log says where gRPC listens")

    # Two raw connections held open: over --max-connections-per-ip 1, were
    # Unix clients counted by address.
    held = []
    for _ in range(2):
        s = socket.socket(socket.AF_UNIX)
        s.connect(sock)
        s.sendall(PREFACE + frame(4, 0, 0, b""))
        held.append(s)
    time.sleep(0.2)
    ch = grpc.insecure_channel(f"unix:{sock}")
    c = Calls(ch, pb, pbg)
    got = c.lock("sock-1")
    check(got[0] is True, f"TryLock over the Unix socket (two other connections open, per-ip limit 1): {got}")
    check(on_masters(masters, "sock-1") == len(masters), "the lock is on every master")
    check(c.lock("sock-1", "other")[0] is False, "held: another owner gets success false")
    got = c.unlock("sock-1")
    check(got[0] == 0, f"Unlock over the Unix socket: SUCCESS, got {got}")
    check(on_masters(masters, "sock-1") == 0, "released on every master")
    for s in held:
        frames, closed = read_frames(s, 0.3)
        check(not closed and any(f[0] == 4 for f in frames), "the held raw connections were served (SETTINGS)")
        s.close()
    a = wait_audit(audit, lambda a: a.get("event") == "grant" and a.get("name") == f"{STORE}||sock-1")
    check(a is not None and a.get("client") == "unix" and a.get("route") == "grpc TryLockAlpha1",
          f"the audit log names a Unix gRPC client 'unix': {a}")
    a = wait_audit(audit, lambda a: a.get("event") == "release" and a.get("name") == f"{STORE}||sock-1")
    check(a is not None and a.get("client") == "unix", f"and its release: {a}")
    ch.close()
    d.stop()
    check(not os.path.lexists(sock), "the socket file is removed at stop")
    log("grpc unix: lock/unlock over unix:, mode 0660, audit client 'unix', no per-ip limit, file removed")

    # A stale file (its server died) is replaced; a served one is refused.
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(sock)
    stale.close()
    d = Daemon(tmp, "grpc-stale", masters, ["--listen", f"127.0.0.1:{port}"], [f"http://127.0.0.1:{port}/healthz"],
               ["--dapr-grpc-listen", f"unix:{sock}", "--listen-mode", "0600"])
    check(stat.S_IMODE(os.lstat(sock).st_mode) == 0o600, "a stale file is replaced, with --listen-mode 0600")
    ch = grpc.insecure_channel(f"unix:{sock}")
    got = Calls(ch, pb, pbg).lock("stale-1")
    check(got[0] is True, f"served on the replaced socket: {got}")
    ch.close()
    ino = os.lstat(sock).st_ino
    rc, out = refused_start(tmp, "grpc-served", masters,
                            ["--listen", f"127.0.0.1:{free_port()}", "--dapr-grpc-listen", f"unix:{sock}"])
    check(rc not in (None, 0) and "--dapr-grpc-listen unix:" in out and "another process serves" in out,
          f"a socket another redlockd serves is refused: {rc} {out[-400:]}")
    check(os.lstat(sock).st_ino == ino, "and its file is left alone")
    d.stop()
    log("grpc unix: a stale file replaced, a served one refused")


# ---- TLS ----

PRINCIPALS = (f"billing      lock,read   {STORE}||billing/   cert\n"
              "ops.example  read        *                  cert\n")


def creds(certs, who):
    import grpc
    ca = open(certs["ca.crt"], "rb").read()
    if who is None:
        return grpc.ssl_channel_credentials(root_certificates=ca)
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=open(certs[f"{who}.key"], "rb").read(),
                                        certificate_chain=open(certs[f"{who}.crt"], "rb").read())


def tls_channel(gport, certs, who):
    import grpc
    return grpc.secure_channel(f"127.0.0.1:{gport}", creds(certs, who),
                               options=[("grpc.ssl_target_name_override", "localhost")])


def s_client(gport, certs, who, alpn="h2", wait=False):
    """openssl s_client's output. wait: it reads until the server closes
    (-ign_eof): a refused client certificate is judged after the client's
    side of a TLS 1.3 handshake is done, and its alert comes after."""
    args = ["openssl", "s_client", "-connect", f"127.0.0.1:{gport}", "-CAfile", certs["ca.crt"]]
    if wait:
        args.append("-ign_eof")
    if alpn:
        args += ["-alpn", alpn]
    if who:
        args += ["-cert", certs[f"{who}.crt"], "-key", certs[f"{who}.key"]]
    return run(args, stdin=b"", timeout=15)[1]


def tls_raw(gport, certs, who="billing"):
    """HTTP/2 over TLS by hand: python's ssl with ALPN h2."""
    ctx = ssl.create_default_context(cafile=certs["ca.crt"])
    ctx.set_alpn_protocols(["h2"])
    ctx.load_cert_chain(certs[f"{who}.crt"], certs[f"{who}.key"])
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", gport), timeout=5), server_hostname="localhost")
    check(s.selected_alpn_protocol() == "h2", f"ALPN selected h2: {s.selected_alpn_protocol()}")
    return s


def raw_metadata_call(s, sid):
    """GetMetadata on the open connection s: the grpc-status it answered."""
    hdr = b"".join(hpack_literal(n, v) for n, v in [
        (b":method", b"POST"), (b":scheme", b"https"), (b":path", b"/dapr.proto.runtime.v1.Dapr/GetMetadata"),
        (b":authority", b"localhost"), (b"content-type", b"application/grpc"), (b"te", b"trailers")])
    s.sendall(frame(1, 0x4, sid, hdr) + frame(0, 0x1, sid, b"\x00\x00\x00\x00\x00"))
    frames, closed = read_frames(s, 1.0)
    data = [f for f in frames if f[2] == sid and f[0] == 0]
    ends = [f for f in frames if f[2] == sid and f[0] == 1 and f[1] & 0x1]
    return bool(data) and bool(ends) and not closed


def tls(tmp, masters, certs, pb, pbg):
    import grpc
    port, gport = free_port(), free_port()
    cert, key = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
    shutil.copy(certs["server.crt"], cert)
    shutil.copy(certs["server.key"], key)
    pfile = os.path.join(tmp, "principals")
    open(pfile, "w").write(PRINCIPALS)
    audit = os.path.join(tmp, "audit-tls.log")
    d = Daemon(tmp, "grpc-tls", masters, ["--listen", f"127.0.0.1:{port}"],
               ["--cacert", certs["ca.crt"], f"https://127.0.0.1:{port}/healthz"],
               ["--dapr-grpc-listen", f"127.0.0.1:{gport}", "--tls-cert-file", cert, "--tls-key-file", key,
                "--tls-client-ca-file", certs["ca.crt"], "--principals-file", pfile, "--audit-log", audit])
    check(d.wait_log(f'grpc_listening addr="127.0.0.1:{gport} (tls)"'), "the log says gRPC listens with TLS")

    ch = tls_channel(gport, certs, "billing")
    c = Calls(ch, pb, pbg)
    got = c.lock("billing/run")
    check(got[0] is True, f"billing's certificate: TryLock billing/run over TLS: {got}")
    check(on_masters(masters, "billing/run") == len(masters), "on every master")
    got = c.unlock("billing/run")
    check(got[0] == 0 and on_masters(masters, "billing/run") == 0, f"and Unlock: {got}")
    a = wait_audit(audit, lambda a: a.get("event") == "grant" and a.get("name") == f"{STORE}||billing/run")
    check(a is not None and a.get("principal") == "billing" and a.get("client") == "127.0.0.1",
          f"the audit log names the certificate's principal: {a}")
    got = c.lock("payroll")
    check(got[1] == grpc.StatusCode.PERMISSION_DENIED and "billing may not" in got[2],
          f"billing outside its prefixes: PERMISSION_DENIED, got {got}")
    # 100 calls at once on the one TLS connection: none may stall in SSL's buffers.
    futs = [c.stub.TryLockAlpha1.future(pb.TryLockRequest(store_name=STORE, resource_id=f"billing/c-{i}",
                                                          lock_owner="many", expiry_in_seconds=30), timeout=30)
            for i in range(100)]
    ok = sum(1 for f in futs if f.exception() is None and f.result().success)
    futs = [c.stub.UnlockAlpha1.future(pb.UnlockRequest(store_name=STORE, resource_id=f"billing/c-{i}",
                                                        lock_owner="many"), timeout=30) for i in range(100)]
    unl = sum(1 for f in futs if f.exception() is None and f.result().status == 0)
    check(ok == 100 and unl == 100, f"100 concurrent calls over TLS: {ok} locked, {unl} unlocked")

    for who, code, words in [("ops", grpc.StatusCode.PERMISSION_DENIED, "may not make this call"),
                             ("nobody", grpc.StatusCode.UNAUTHENTICATED, ""),
                             (None, grpc.StatusCode.UNAUTHENTICATED, "client certificate")]:
        och = tls_channel(gport, certs, who)
        got = Calls(och, pb, pbg).lock("billing/refused", md=[("dapr-api-token", "anything")])
        check(got[1] == code and words in got[2], f"certificate {who}: {code} expected, got {got}")
        och.close()
    check(on_masters(masters, "billing/refused") == 0 and on_masters(masters, "payroll") == 0,
          "the refused calls wrote nothing on the masters")
    a = wait_audit(audit, lambda a: a.get("outcome") == "PERMISSION_DENIED" and a.get("principal") == "ops.example")
    check(a is not None, "the audit log has the principal refused its right")
    log("grpc tls: a cert principal locks; none, nobody: UNAUTHENTICATED; no right: PERMISSION_DENIED")

    out = s_client(gport, certs, "foreign", wait=True)
    check("alert unknown ca" in out, f"s_client -alpn h2, another CA's certificate: {out[-600:]}")
    out = s_client(gport, certs, "expired", wait=True)
    check("alert certificate expired" in out, f"s_client -alpn h2, an expired certificate: {out[-600:]}")
    out = s_client(gport, certs, None)
    check("ALPN protocol: h2" in out and "Verify return code: 0" in out,
          f"s_client -alpn h2 without a certificate completes the handshake: {out[-600:]}")
    out = s_client(gport, certs, "billing", alpn=None)
    check("no application protocol" in out and "ALPN protocol: h2" not in out,
          f"s_client offering no ALPN is refused: {out[-600:]}")
    out = s_client(gport, certs, "billing", alpn="http/1.1")
    check("no application protocol" in out, f"s_client offering http/1.1 only is refused: {out[-600:]}")
    got = Calls(grpc.insecure_channel(f"127.0.0.1:{gport}"), pb, pbg).lock("billing/h2c")
    check(got[1] == grpc.StatusCode.UNAVAILABLE, f"h2c on the TLS port is not served: {got}")
    check(d.wait_log("tls_client_refused listener=grpc"), "refused certificates are logged")
    log("grpc tls: s_client with another CA, expired: alerts; none: handshake; no ALPN h2: refused")

    reload_certificate(d, gport, certs, cert, key, ch, pb, pbg)
    ch.close()
    d.stop()


def new_connection_serves(gport, certs, cert, what):
    """A new TLS connection: the server shows cert, and serves a call."""
    s = tls_raw(gport, certs)
    check(s.getpeercert(binary_form=True) == der_of(certs[f"{cert}.crt"]), f"{what}: {cert}.crt")
    s.sendall(PREFACE + frame(4, 0, 0, b""))
    check(raw_metadata_call(s, 1), f"{what}: and serves a call")
    s.close()


def reload_certificate(d, gport, certs, cert, key, ch, pb, pbg):
    raw = tls_raw(gport, certs)
    raw.sendall(PREFACE + frame(4, 0, 0, b""))
    first = raw.getpeercert(binary_form=True)
    check(first == der_of(certs["server.crt"]), "the raw connection got the first certificate")
    check(raw_metadata_call(raw, 1), "a call on it before the reload")
    at = len(d.text())
    shutil.copy(certs["server2.crt"], cert)
    shutil.copy(certs["server2.key"], key)
    d.proc.send_signal(signal.SIGHUP)
    check(d.wait_log('reloaded what="grpc tls certificate"', at), f"SIGHUP reloads gRPC's certificate: {d.text()[at:]}")
    new_connection_serves(gport, certs, "server2", "a new connection gets the new certificate")
    check(raw_metadata_call(raw, 3), "the connection opened before the reload goes on serving calls")
    check(raw.getpeercert(binary_form=True) == first, "with the certificate it was handshaken with")
    raw.close()
    got = Calls(ch, pb, pbg).lock("billing/after-reload")
    check(got[0] is True, f"the grpcio channel opened before the reload still calls: {got}")
    Calls(ch, pb, pbg).unlock("billing/after-reload")
    nch = tls_channel(gport, certs, "billing")
    got = Calls(nch, pb, pbg).lock("billing/new-channel")
    check(got[0] is True, f"a new grpcio channel after the reload: {got}")
    nch.close()

    at = len(d.text())
    shutil.copy(certs["billing.key"], key)   # not server2's key
    d.proc.send_signal(signal.SIGHUP)
    check(d.wait_log('reload_failed what="grpc tls certificate"', at), f"a key that does not match: {d.text()[at:]}")
    new_connection_serves(gport, certs, "server2", "the pair in force stays")
    log("grpc tls: SIGHUP: new certificate for new connections, open ones go on; a broken pair is not taken")


def main():
    grpc_harness.need_python_packages()
    if shutil.which("openssl") is None:
        fail("openssl is needed (scripts/deps.sh installs it)")
        return 1
    tmp = tempfile.mkdtemp(prefix="redlockd-grpc-listen-")
    masters, certs, stubs = [], {}, []

    def setup():
        stubs.extend(grpc_harness.stubs(tmp))
        masters.extend(Master(tmp, i) for i in range(3))
        os.mkdir(os.path.join(tmp, "certs"))
        certs.update(make_certs(os.path.join(tmp, "certs")))

    return run_sections(tmp, [("masters, certificates and stubs", setup),
                              ("unix socket", lambda: unix_socket(tmp, masters, *stubs)),
                              ("tls", lambda: tls(tmp, masters, certs, *stubs))])

if __name__ == "__main__":
    sys.exit(main())
