#!/usr/bin/env python3
"""The gRPC test's cases of clients that hold connection slots (issue 41,
finding 2; test_dapr_grpc.py runs them): what keeps a connection open, and
who may take the last slots. Frames by hand, as in grpc_raw.py."""
import threading

from grpc_harness import *  # noqa: F401,F403
from grpc_raw import PREFACE, frame, hpack_literal

METADATA = b"/dapr.proto.runtime.v1.Dapr/GetMetadata"
TRY_LOCK = b"/dapr.proto.runtime.v1.Dapr/TryLockAlpha1"
EMPTY_MESSAGE = b"\x00\x00\x00\x00\x00"   # a gRPC frame holding an empty message
T_DATA, T_HEADERS, T_RST_STREAM, T_SETTINGS, T_PING, T_GOAWAY, T_WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
SETTINGS, SETTINGS_ACK = frame(T_SETTINGS, 0, 0, b""), frame(T_SETTINGS, 1, 0, b"")
# A client's opening with windows as large as HTTP/2 allows (a stream's
# and the connection's), so that flow control holds no answer back.
HELLO = (PREFACE + frame(T_SETTINGS, 0, 0, struct.pack(">HI", 4, 0x7fffffff)) +
         frame(T_WINDOW_UPDATE, 0, 0, struct.pack(">I", 0x7fffffff - 65535)) + SETTINGS_ACK)


def call(sid, path=METADATA, token=None):
    """A whole unary call on stream sid: HEADERS, then an empty message
    with END_STREAM; with token as dapr-api-token."""
    hs = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", path),
          (b":authority", b"127.0.0.1"), (b"content-type", b"application/grpc"), (b"te", b"trailers")]
    if token:
        hs.append((b"dapr-api-token", token.encode()))
    block = b"".join(hpack_literal(n, v) for n, v in hs)
    return frame(T_HEADERS, 0x4, sid, block) + frame(T_DATA, 0x1, sid, EMPTY_MESSAGE)


def ping(n):
    return frame(T_PING, 0, 0, struct.pack(">Q", n))


class Peer:
    """A raw HTTP/2 client on one socket, from a source address of its
    choice: what it sent, and every frame the server sent back."""

    def __init__(self, port, source="127.0.0.1", rcvbuf=None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.bind((source, 0))
        self.sock.settimeout(5)
        self.sock.connect(("127.0.0.1", port))
        self.buf, self.frames, self.closed = b"", [], False

    def send(self, data):
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            return False

    def pump(self, timeout):
        """Reads what comes within timeout (seconds); frames parsed, the close noted."""
        if self.closed:
            return
        self.sock.settimeout(timeout)
        try:
            while True:
                d = self.sock.recv(65536)
                if not d:
                    self.closed = True
                    break
                self.buf += d
                self.sock.settimeout(0.01)
        except socket.timeout:
            pass
        except OSError:   # reset
            self.closed = True
        while len(self.buf) >= 9:
            n = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + n:
                break
            b = self.buf
            self.frames.append((b[3], b[4], int.from_bytes(b[5:9], "big") & 0x7fffffff, b[9:9 + n]))
            self.buf = b[9 + n:]

    def wait(self, cond, limit):
        """Reads until cond() holds or the server closes, for at most limit seconds."""
        until = time.monotonic() + limit
        while not cond() and not self.closed and time.monotonic() < until:
            self.pump(0.2)
        return cond()

    def has(self, ftype, sid=None, flags=0):
        return any(f[0] == ftype and (sid is None or f[2] == sid) and f[1] & flags == flags
                   for f in self.frames)

    def answered(self, sid):
        """The call on sid has ended: trailers (or a trailers-only answer) came."""
        return self.has(T_HEADERS, sid, 0x1)

    def got_message(self, sid):
        return self.has(T_DATA, sid)

    def types(self):
        return [f[0] for f in self.frames]

    def close(self):
        self.sock.close()


def pinger(peers, stop, every_s=0.2):
    """A thread that sends PING on each of peers every every_s until stop is set."""
    def run():
        n = 0
        while not stop.wait(every_s):
            n += 1
            for p in peers:
                p.send(ping(n))
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def served_with_token(port, token, limit):
    """Whether a new client with the right token has a GetMetadata answered
    within limit seconds (a fresh connection each try, as a client whose
    connection was refused would)."""
    until = time.monotonic() + limit
    while time.monotonic() < until:
        try:
            p = Peer(port)
        except OSError:
            time.sleep(0.2)
            continue
        p.send(HELLO + call(1, token=token))
        p.wait(lambda: p.answered(1), 2)
        ok = p.got_message(1) and p.answered(1)
        p.close()
        if ok:
            return True
        time.sleep(0.2)
    return False


# ---- the cases ----

def slots_tokenless(C, max_conns, request_timeout_ms):
    """max_conns connections that each send one call without the token, then
    PING every 200 ms, do not keep a client with the token out: a call
    without a valid token does not make a connection served, so each is
    closed --request-timeout-ms after its start."""
    hogs = [Peer(C.gport) for _ in range(max_conns)]
    for p in hogs:
        p.send(HELLO + call(1, TRY_LOCK))
    for p in hogs:
        p.wait(lambda: p.answered(1), 10)
    check(all(p.answered(1) and not p.got_message(1) for p in hogs),
          f"{max_conns} token-less calls: not all answered UNAUTHENTICATED "
          f"({sum(p.answered(1) for p in hogs)} answered)")
    stop = threading.Event()
    t = pinger(hogs, stop)
    limit = request_timeout_ms / 1000 + 20
    t0 = time.monotonic()
    served = served_with_token(C.gport, TOKEN, limit)
    took = time.monotonic() - t0
    stop.set()
    t.join()
    for p in hogs:
        p.pump(0.01)
    closed = sum(p.closed for p in hogs)
    for p in hogs:
        p.close()
    check(served, f"{max_conns} connections (--max-connections {max_conns}) that each sent a call "
          f"without the token and then PING every 200 ms kept a client with the token out for "
          f"{limit:.0f} s ({closed} of them closed)")
    log(f"slots: {max_conns} token-less connections pinging: a client with the token "
        f"{'served' if served else 'still refused'} after {took:.1f} s; {closed} of them closed")


def slots_open_calls_without_token(C, request_timeout_ms):
    """A connection that keeps a call without the token open, a new one
    every 300 ms (each is reset after --request-timeout-ms, but another is
    always open), is closed all the same: it was never served."""
    p = Peer(C.gport)
    block = b"".join(hpack_literal(n, v) for n, v in [
        (b":method", b"POST"), (b":scheme", b"http"), (b":path", TRY_LOCK),
        (b":authority", b"127.0.0.1"), (b"content-type", b"application/grpc")])
    p.send(HELLO)
    limit = request_timeout_ms / 1000 + 15
    t0 = time.monotonic()
    sid = 1
    while not p.closed and time.monotonic() - t0 < limit:
        p.send(frame(T_HEADERS, 0x4, sid, block))   # END_HEADERS, never END_STREAM
        sid += 2
        p.pump(0.3)
    took = time.monotonic() - t0
    p.close()
    check(p.closed, f"a connection that kept a call without the token open ({(sid - 1) // 2} "
          f"calls, one every 300 ms): still open after {took:.0f} s; expected the close after "
          "--request-timeout-ms")
    log(f"slots: a connection that kept calls without the token open: closed {p.closed} after "
        f"{took:.1f} s, frames {p.types()[-4:]}")


def slots_pings_are_not_activity(C, idle_ms):
    """A served connection that only PINGs is closed (GOAWAY) after the
    idle timeout, as one that sends nothing is; one that keeps calling is
    not."""
    quiet, pinging, calling = Peer(C.gport), Peer(C.gport), Peer(C.gport)
    for p in (quiet, pinging, calling):
        p.send(HELLO + call(1, token=TOKEN))
        p.wait(lambda: p.answered(1), 10)
    check(all(p.got_message(1) for p in (quiet, pinging, calling)), "three calls with the token: answered")
    t0 = time.monotonic()
    sid, n = 1, 0
    # Until the pinging one is closed, and the calling one has gone on for
    # three idle timeouts.
    while time.monotonic() - t0 < 30 and (not pinging.closed or time.monotonic() - t0 < 3 * idle_ms / 1000):
        n += 1
        pinging.send(ping(n))
        if n % 2 == 0:
            sid += 2
            calling.send(call(sid, token=TOKEN))
        tick = t0 + n * 0.2
        while time.monotonic() < tick:
            for p in (quiet, pinging, calling):
                p.pump(0.01)
            time.sleep(0.01)
    took = time.monotonic() - t0
    check(quiet.closed and quiet.has(T_GOAWAY),
          f"a served connection that sent nothing for {took:.0f} s: closed {quiet.closed}, frames "
          f"{quiet.types()[-6:]}; expected GOAWAY and the close after the idle timeout ({idle_ms} ms)")
    check(pinging.closed and pinging.has(T_GOAWAY),
          f"a served connection that only PINGs (every 200 ms) for {took:.0f} s: closed "
          f"{pinging.closed}, frames {pinging.types()[-6:]}; expected GOAWAY and the close "
          f"after the idle timeout ({idle_ms} ms)")
    calling.wait(lambda: calling.answered(sid), 5)
    check(not calling.closed and all(calling.got_message(s) for s in range(1, sid + 1, 2)),
          f"a connection calling every 400 ms for {took:.0f} s (idle timeout {idle_ms} ms): "
          f"closed {calling.closed}")
    for p in (quiet, pinging, calling):
        p.close()
    log(f"slots: served connections, idle timeout {idle_ms} ms, after {took:.1f} s: one silent "
        f"closed {quiet.closed}, one that only PINGs closed {pinging.closed}; one calling every "
        f"400 ms served {(sid + 1) // 2} calls, closed {calling.closed}")


def slots_window_zero(C, request_timeout_ms):
    """A client that sets SETTINGS_INITIAL_WINDOW_SIZE 0 and makes one call
    with the token cannot be sent its answer: the call is reset
    (RST_STREAM) and, with nothing else open, the connection closed after
    --request-timeout-ms."""
    p = Peer(C.gport)
    p.send(PREFACE + frame(T_SETTINGS, 0, 0, struct.pack(">HI", 4, 0)) + SETTINGS_ACK +
           call(1, token=TOKEN))
    limit = request_timeout_ms / 1000 + 15
    t0 = time.monotonic()
    p.wait(lambda: False, limit)
    took = time.monotonic() - t0
    p.close()
    check(p.closed and p.has(T_RST_STREAM, 1) and p.has(T_HEADERS, 1) and not p.got_message(1),
          f"one call with the token on a connection with INITIAL_WINDOW_SIZE 0: closed {p.closed} "
          f"after {took:.0f} s, frames {p.types()}; expected HEADERS, RST_STREAM on stream 1, "
          "then the close")
    log(f"slots: a call on a connection with INITIAL_WINDOW_SIZE 0 (--request-timeout-ms "
        f"{request_timeout_ms}): frames {p.types()}, closed {p.closed} after {took:.1f} s")


def server_socket(port, peer_port):
    """The server's side of the connection from peer_port, as /proc/net/tcp
    shows it: (state, bytes in its send queue), or None once it is gone.
    State 01 is ESTABLISHED; a socket the server closed with bytes unsent is
    FIN_WAIT1 (04)."""
    with open("/proc/net/tcp") as f:
        for line in f:
            col = line.split()
            if col[1] == "0100007F:%04X" % port and col[2].endswith(":%04X" % peer_port):
                return col[3], int(col[4].split(":")[0], 16)
    return None


def slots_not_reading(C, request_timeout_ms):
    """A client that reads nothing, and calls until the server can write no
    more to it (the server socket's send queue stops growing): the calls
    whose answers cannot be written are reset and the connection, with
    nothing else, closed after --request-timeout-ms, though neither the
    RST_STREAMs nor a GOAWAY can reach the client. Once it reads, what was
    written comes, then the close."""
    p = Peer(C.gport, rcvbuf=4096)
    here = p.sock.getsockname()[1]

    def send_queue():
        sock = server_socket(C.gport, here)
        return sock[1] if sock else None

    p.send(HELLO)   # only the socket holds the answers back
    sid, last, stalled = 1, -1, False
    t0 = time.monotonic()
    # Eight calls at a time, so that once the queue stops, fewer than the 32
    # streams a connection may open are left waiting.
    while time.monotonic() - t0 < 120 and not stalled:
        p.send(b"".join(call(sid + 2 * i, token=TOKEN) for i in range(8)))
        sid += 16
        time.sleep(0.005)
        q = send_queue()
        if q == last:
            time.sleep(0.3)
            stalled = send_queue() == q
        last = q
    calls = (sid - 1) // 2
    if not check(stalled, f"a client that reads nothing: the server's send queue still grew after "
                 f"{calls} calls ({last} bytes)"):
        p.close()
        return
    t1 = time.monotonic()
    limit = request_timeout_ms / 1000 + 15
    while time.monotonic() - t1 < limit and (server_socket(C.gport, here) or ("01",))[0] == "01":
        time.sleep(0.2)
    took = time.monotonic() - t1
    state = server_socket(C.gport, here)
    p.wait(lambda: False, 30)
    p.close()
    check(state is None or state[0] != "01",
          f"a client that read nothing for {took:.0f} s after its {calls} calls ({last} bytes "
          f"queued): the server's socket still open ({state}); expected the close after "
          "--request-timeout-ms")
    check(p.closed, f"a client that read nothing, then read for 30 s: no close came after "
          f"{len(p.frames)} frames")
    log(f"slots: a client that reads nothing: {calls} calls until {last} bytes queued in "
        f"{t1 - t0:.1f} s; the server's socket {state} {took:.1f} s later; then "
        f"{len(p.frames)} frames read, closed {p.closed}")


def slots_per_ip(P):
    """--max-connections-per-ip 2: a third connection from 127.0.0.1 is
    closed at once, while one from 127.0.0.2 is served; once one of the two
    closes, 127.0.0.1 gets in again."""
    two = [Peer(P.gport) for _ in range(2)]
    for p in two:
        p.send(PREFACE + SETTINGS)
        p.wait(lambda: p.has(T_SETTINGS), 5)
    third = Peer(P.gport)
    third.send(HELLO + call(1))
    third.wait(lambda: False, 5)
    third.close()
    check(third.closed and not third.frames,
          f"a third gRPC connection from 127.0.0.1 under --max-connections-per-ip 2: closed "
          f"{third.closed}, frames {third.types()}; expected the close at once, nothing sent")
    other = Peer(P.gport, source="127.0.0.2")
    other.send(HELLO + call(1))
    other.wait(lambda: other.answered(1), 5)
    other.close()
    check(other.got_message(1) and not other.closed,
          f"a connection from 127.0.0.2 beside two from 127.0.0.1: frames {other.types()}, "
          f"closed {other.closed}; expected served")
    two[0].close()
    back = False
    until = time.monotonic() + 10
    while not back and time.monotonic() < until:
        p = Peer(P.gport)
        p.send(HELLO + call(1))
        p.wait(lambda: p.answered(1), 2)
        back = p.got_message(1)
        p.close()
    two[1].close()
    check(back, "127.0.0.1 with one of its two connections closed: a new one still refused")
    log(f"slots: --max-connections-per-ip 2 on gRPC: a third from 127.0.0.1: frames "
        f"{third.types()}, closed {third.closed}; 127.0.0.2 served {other.got_message(1)}; "
        f"127.0.0.1 served again after one closed: {back}")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        col = f.read().rsplit(")", 1)[1].split()
    return (int(col[11]) + int(col[12])) / os.sysconf("SC_CLK_TCK")


def refused_cost(D, held, k):
    """held connections take every slot; then k connections are refused one
    after another. The CPU the daemon spent on those k, and how many were
    refused (closed with nothing sent)."""
    socks = []
    for _ in range(held):
        s = socket.create_connection(("127.0.0.1", D.gport), timeout=10)
        s.sendall(PREFACE + SETTINGS)
        socks.append(s)
    for s in socks:   # every one taken: its SETTINGS came
        s.recv(9)
    cpu0 = cpu_seconds(D.proc.pid)
    refused = 0
    for _ in range(k):
        s = socket.create_connection(("127.0.0.1", D.gport), timeout=10)
        try:
            refused += s.recv(9) == b""
        except OSError:
            refused += 1   # reset: refused too
        s.close()
    cpu = cpu_seconds(D.proc.pid) - cpu0
    for s in socks:
        s.close()
    return cpu, refused


def slots_full_table(small, big, big_n, k=3000):
    """A full table costs the same per refused connection whatever it
    holds: k connections refused by a server holding 16, then by one
    holding big_n (CPU time of the daemon, with a wide margin: polling
    every connection for each refusal cost about 20 times as much at 2,000)."""
    cpu_small, ref_small = refused_cost(small, 16, k)
    cpu_big, ref_big = refused_cost(big, big_n, k)
    check(ref_small == k and ref_big == k,
          f"{k} connections to a full server: {ref_small} and {ref_big} refused")
    check(cpu_big <= 4 * cpu_small + 0.1,
          f"{k} connections refused by a full server: {cpu_big:.2f} s of CPU at {big_n} "
          f"connections against {cpu_small:.2f} s at 16; a refusal should not cost more with "
          "more connections")
    log(f"slots: {k} refused connections cost {cpu_small * 1e6 / k:.0f} us of CPU each at 16 "
        f"connections, {cpu_big * 1e6 / k:.0f} us at {big_n}")


def stores(n):
    """n lock stores (--dapr-stores), so that GetMetadata answers are long."""
    return ",".join("s%02d" % i for i in range(n))


def run_slots(tmp, masters, tok):
    """Starts the daemons the cases need, runs each (one that throws is a
    failure; the others still run), stops them."""
    idle_ms = 2000
    daemons = {}
    cases = [
        ("C", ["--dapr-stores", stores(60), "--auth-token-file", tok, "--max-connections", "16",
               "--request-timeout-ms", "1000"], {"REDLOCKD_TEST_GRPC_IDLE_MS": str(idle_ms)},
         [lambda d: slots_tokenless(d["C"], 16, 1000),
          lambda d: slots_open_calls_without_token(d["C"], 1000),
          lambda d: slots_pings_are_not_activity(d["C"], idle_ms),
          lambda d: slots_window_zero(d["C"], 1000),
          lambda d: slots_not_reading(d["C"], 1000)]),
        ("P", ["--max-connections-per-ip", "2"], {}, [lambda d: slots_per_ip(d["P"])]),
        ("F16", ["--max-connections", "16", "--max-connections-per-ip", "1000000",
                 "--request-timeout-ms", "600000"], {}, []),
        ("F2000", ["--max-connections", "2000", "--max-connections-per-ip", "1000000",
                   "--request-timeout-ms", "600000"], {},
         [lambda d: slots_full_table(d["F16"], d["F2000"], 2000)]),
    ]
    try:
        for name, argv, env, runs in cases:
            daemons[name] = Daemon(tmp, name, masters, argv, env)
            for run in runs:
                try:
                    run(daemons)
                except Exception:
                    fail(traceback.format_exc())
    finally:
        for d in daemons.values():
            if d.proc.poll() is None:
                d.stop()
