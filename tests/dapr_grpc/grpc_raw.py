#!/usr/bin/env python3
"""The gRPC test's raw HTTP/2 cases (test_dapr_grpc.py runs them): bad input
must not hurt. Frames and HPACK by hand, on purpose: these are the bytes a
broken or hostile client sends, which no HTTP/2 library would."""
from grpc_harness import *  # noqa: F401,F403


# ---- raw HTTP/2: bad input must not hurt ----

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(ftype, flags, sid, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


def hpack_int(v, prefix_bits, first=0):
    mx = (1 << prefix_bits) - 1
    if v < mx:
        return bytes([first | v])
    out = [first | mx]
    v -= mx
    while v >= 128:
        out.append(v % 128 + 128)
        v //= 128
    out.append(v)
    return bytes(out)


def hpack_literal(name, value):
    """A literal header field without indexing, new name, no Huffman."""
    return b"\x00" + hpack_int(len(name), 7) + name + hpack_int(len(value), 7) + value


def grpc_headers(path=b"/dapr.proto.runtime.v1.Dapr/TryLockAlpha1"):
    return b"".join(hpack_literal(n, v) for n, v in [
        (b":method", b"POST"), (b":scheme", b"http"), (b":path", path),
        (b":authority", b"127.0.0.1"), (b"content-type", b"application/grpc"), (b"te", b"trailers")])


def read_frames(s, timeout):
    """Frames until the server closes or goes quiet: [(type, flags, sid, payload)], closed."""
    s.settimeout(timeout)
    buf = b""
    closed = False
    try:
        while True:
            d = s.recv(65536)
            if not d:
                closed = True
                break
            buf += d
    except socket.timeout:
        pass
    except ConnectionResetError:
        closed = True
    frames = []
    while len(buf) >= 9:
        n = int.from_bytes(buf[:3], "big")
        if len(buf) < 9 + n:
            break
        frames.append((buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7fffffff, buf[9:9 + n]))
        buf = buf[9 + n:]
    return frames, closed


def stop_every_thread(pid):
    """SIGSTOP, and back once every thread has stopped: kill() returns
    before the other threads of the process have taken the stop."""
    os.kill(pid, signal.SIGSTOP)
    os.waitid(os.P_PID, pid, os.WSTOPPED | os.WEXITED | os.WNOWAIT)


def raw_conn(A):
    return socket.create_connection(("127.0.0.1", A.gport), timeout=5)


def raw_not_http2(A):
    """Bytes that are not an HTTP/2 preface: GOAWAY PROTOCOL_ERROR, then
    the close (RFC 9113 3.4: an invalid preface is a connection error)."""
    cases = [
        ("garbage bytes", b"\x00\xffhello garbage\r\n\r\n" * 4),
        ("an HTTP/1.1 request", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("a preface that goes wrong halfway", PREFACE[:10] + b"garbage\r\n\r\nmore garbage"),
    ]
    for what, data in cases:
        s = raw_conn(A)
        try:
            s.sendall(data)
        except OSError:
            pass
        frames, closed = read_frames(s, 10)
        s.close()
        goaway = [f for f in frames if f[0] == 7]
        code = int.from_bytes(goaway[0][3][4:8], "big") if goaway and len(goaway[0][3]) >= 8 else None
        check(closed and code == 1,
              f"{what} on the gRPC port: frames {[f[0] for f in frames]}, GOAWAY error code {code}, "
              f"closed {closed}; expected GOAWAY PROTOCOL_ERROR (1), then the close")
        log(f"raw: {what}: frames {[f[0] for f in frames]}, GOAWAY error {code}, "
            f"{'closed' if closed else 'open'}")


def raw_http2(A):
    cases = [
        ("garbage instead of the preface", os.urandom(4096)),
        ("an HTTP/1.1 request", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("a truncated preface", PREFACE[:10]),
        ("a truncated frame header", PREFACE + frame(4, 0, 0, b"")[:5]),
        ("a frame longer than the maximum", PREFACE + frame(4, 0, 0, b"") + b"\xff\xff\xff\x00\x00\x00\x00\x00\x01"),
        ("DATA on stream 0", PREFACE + frame(4, 0, 0, b"") + frame(0, 1, 0, b"abc")),
        ("a bad HPACK block", PREFACE + frame(4, 0, 0, b"") + frame(1, 5, 1, b"\xff\xff\xff\xff\xff\xff")),
        ("HEADERS on an even stream", PREFACE + frame(4, 0, 0, b"") + frame(1, 5, 2, grpc_headers())),
        ("a truncated gRPC message", PREFACE + frame(4, 0, 0, b"") + frame(1, 4, 1, grpc_headers()) +
         frame(0, 1, 1, b"\x00\xff\xff\xff\xff\x0a\x01")),
        ("random frames after the preface", PREFACE + frame(4, 0, 0, b"") + os.urandom(8192)),
    ]
    for what, data in cases:
        s = raw_conn(A)
        try:
            s.sendall(data)
        except OSError:
            pass
        frames, closed = read_frames(s, 1.5)
        s.close()
        log(f"raw: {what}: {len(frames)} frames back, "
            f"{'closed' if closed else 'open'}; types {[f[0] for f in frames][:8]}")
    # A header list far beyond SETTINGS_MAX_HEADER_LIST_SIZE (16 KiB), in
    # HEADERS + CONTINUATION frames: the stream is refused, not buffered.
    s = raw_conn(A)
    block = grpc_headers() + b"".join(hpack_literal(b"x-big-%d" % i, b"v" * 8000) for i in range(40))
    chunks = [block[i:i + 16000] for i in range(0, len(block), 16000)]
    data = PREFACE + frame(4, 0, 0, b"") + frame(1, 0x1, 1, chunks[0])   # END_STREAM, no END_HEADERS
    for i, c in enumerate(chunks[1:]):
        data += frame(9, 0x4 if i == len(chunks) - 2 else 0, 1, c)
    try:
        s.sendall(data)
    except OSError:
        pass
    frames, closed = read_frames(s, 1.5)
    s.close()
    resets = [f for f in frames if f[0] == 3 or f[0] == 7]
    check(resets or closed, f"320 KB of headers: {len(frames)} frames, closed {closed}: neither "
          "RST_STREAM, GOAWAY nor a close")
    log(f"raw: 320 KB of headers in {len(chunks)} frames: "
        f"{'RST_STREAM' if any(f[0] == 3 for f in frames) else ''}"
        f"{' GOAWAY' if any(f[0] == 7 for f in frames) else ''}{' closed' if closed else ''}")
    # 200 streams opened at once, none ended, after acknowledging the
    # server's SETTINGS: beyond 32 the client breaks the protocol (RFC 9113
    # 5.1.2), and nghttp2 answers with GOAWAY PROTOCOL_ERROR naming at most
    # stream 63 (the 32nd) as processed, or refuses the streams one by one.
    s = raw_conn(A)
    data = PREFACE + frame(4, 0, 0, b"") + frame(4, 1, 0, b"")
    for i in range(200):
        data += frame(1, 0x4, 1 + 2 * i, grpc_headers())
    s.sendall(data)
    frames, closed = read_frames(s, 1.5)
    s.close()
    refused = sum(1 for f in frames if f[0] == 3 and f[3] == b"\x00\x00\x00\x07")
    goaway = [f for f in frames if f[0] == 7]
    last = int.from_bytes(goaway[0][3][:4], "big") if goaway else None
    code = int.from_bytes(goaway[0][3][4:8], "big") if goaway else None
    check(refused >= 200 - 32 or (closed and last is not None and last <= 63 and code == 1),
          f"200 open streams on one connection: {refused} refused, GOAWAY last stream {last} "
          f"code {code}, closed {closed}")
    log(f"raw: 200 streams opened at once (limit 32): {refused} REFUSED_STREAM, GOAWAY last "
        f"stream {last} error {code}, {'closed' if closed else 'open'}")


def raw_limits(A, max_conns, request_timeout_ms):
    # A connection that never sends a whole call is closed after the
    # request timeout.
    s = raw_conn(A)
    s.sendall(PREFACE + frame(4, 0, 0, b""))
    t = time.monotonic()
    _, closed = read_frames(s, request_timeout_ms / 1000 + 2.5)
    took = time.monotonic() - t
    s.close()
    check(closed and took < request_timeout_ms / 1000 + 2.5,
          f"a connection without a call: closed {closed} after {took:.1f} s")
    log(f"raw: a connection without a call closed after {took:.1f} s "
        f"(--request-timeout-ms {request_timeout_ms})")
    # Connections beyond --max-connections are closed at once.
    held = []
    for _ in range(max_conns):
        c = raw_conn(A)
        c.sendall(PREFACE)
        held.append(c)
    time.sleep(0.2)
    extra = raw_conn(A)
    extra.sendall(PREFACE)
    t = time.monotonic()
    _, closed = read_frames(extra, 1.0)
    extra.close()
    check(closed and time.monotonic() - t < 1.0,
          f"connection {max_conns + 1} with --max-connections {max_conns}: closed {closed}")
    for c in held:
        c.close()
    log(f"raw: connection {max_conns + 1} closed at once (--max-connections {max_conns})")
    # A connection that waits to be taken while the server is at its limit
    # is served if, by the time the server takes it, others have closed:
    # closes the server has been told of count before a new connection does.
    # The daemon is stopped while that happens, so the new connection is
    # ready before the closes are (epoll would hand them over in that order).
    held = []
    for _ in range(max_conns):
        c = raw_conn(A)
        c.sendall(PREFACE + frame(4, 0, 0, b""))
        held.append(c)
    for c in held:   # every one taken: its SETTINGS came back
        c.settimeout(5)
        c.recv(9)
    stop_every_thread(A.proc.pid)
    try:
        fresh = raw_conn(A)   # the kernel completes it; the daemon has not taken it
        fresh.sendall(PREFACE + frame(4, 0, 0, b""))
        for c in held:
            c.close()
        time.sleep(0.1)
    finally:
        os.kill(A.proc.pid, signal.SIGCONT)
    frames, closed = read_frames(fresh, 0.5)
    fresh.close()
    check(not closed and frames and frames[0][0] == 4,
          f"a connection waiting while {max_conns} others closed: closed {closed}, "
          f"frames {[f[0] for f in frames]}")
    log(f"raw: a connection waiting at the limit while {max_conns} others closed: "
        f"{'closed' if closed else 'served'}")
