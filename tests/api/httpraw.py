"""httpraw.py - a small HTTP/1.1 client over raw sockets, so a test controls
every byte it sends (duplicate or conflicting headers, a declared length with
no body, chunked uploads, HEAD) and sees every header it gets back, and can
read a chunked answer line by line while it stays open. Over TCP to
127.0.0.1, or over any socket a function makes (a Unix socket, TLS)."""
import socket
import time


class Answer:
    def __init__(self):
        self.status = None
        self.reason = ""
        self.headers = []     # (name, value) as sent
        self.body = b""
        self.complete = False  # the whole body arrived (chunked: the last chunk)

    def header(self, name):
        vals = [v for k, v in self.headers if k.lower() == name.lower()]
        return vals[0] if vals else None

    def json(self):
        import json
        return json.loads(self.body.decode())


class Conn:
    def __init__(self, port, timeout=10.0):
        """port: a TCP port of 127.0.0.1, or a function (timeout) that
        returns a connected socket (a Unix socket's, a TLS one's)."""
        if callable(port):
            self.sock = port(timeout)
        else:
            self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        self.timeout = timeout

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer in time")
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise TimeoutError("no answer in time")
        if not data:
            raise EOFError("the server closed the connection")
        self.buf += data

    def _line(self, deadline):
        while b"\r\n" not in self.buf:
            self._fill(deadline)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n, deadline):
        while len(self.buf) < n:
            self._fill(deadline)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_head(self, timeout=None):
        deadline = time.monotonic() + (timeout or self.timeout)
        a = Answer()
        status_line = self._line(deadline).decode("latin-1")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise ValueError(f"bad status line {status_line!r}")
        a.status = int(parts[1])
        a.reason = parts[2] if len(parts) > 2 else ""
        while True:
            line = self._line(deadline).decode("latin-1")
            if not line:
                break
            k, _, v = line.partition(":")
            a.headers.append((k.strip(), v.strip()))
        return a

    def read_chunk(self, a, timeout):
        """One chunk of a chunked body into a.body; False at the last chunk."""
        deadline = time.monotonic() + timeout
        size = int(self._line(deadline).split(b";")[0], 16)
        if size == 0:
            while self._line(deadline):   # trailers
                pass
            a.complete = True
            return False
        a.body += self._exact(size, deadline)
        self._exact(2, deadline)
        return True

    def read_body(self, a, method, timeout=None):
        deadline = time.monotonic() + (timeout or self.timeout)
        if method == "HEAD" or a.status in (204, 304) or 100 <= a.status < 200:
            a.complete = True
            return a
        te = (a.header("Transfer-Encoding") or "").lower()
        cl = a.header("Content-Length")
        if "chunked" in te:
            while self.read_chunk(a, max(0.001, deadline - time.monotonic())):
                pass
        elif cl is not None:
            a.body = self._exact(int(cl), deadline)
            a.complete = True
        else:
            try:
                while True:
                    self._fill(deadline)
            except EOFError:
                pass
            a.body, self.buf = self.buf, b""
            a.complete = True
        return a


def build(method, path, headers=None, body=None, chunked=False):
    """The bytes of a request. headers: dict or list of pairs; Host and
    Connection: close are added unless given; Content-Length for a body
    unless chunked or given."""
    hs = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    names = {k.lower() for k, _ in hs}
    if "host" not in names:
        hs.insert(0, ("Host", "127.0.0.1"))
    if "connection" not in names:
        hs.append(("Connection", "close"))
    if body is not None and isinstance(body, str):
        body = body.encode()
    payload = b""
    if body is not None:
        if chunked:
            if "transfer-encoding" not in names:
                hs.append(("Transfer-Encoding", "chunked"))
            step = 4096
            for i in range(0, len(body), step):
                piece = body[i:i + step]
                payload += b"%x\r\n" % len(piece) + piece + b"\r\n"
            payload += b"0\r\n\r\n"
        else:
            if "content-length" not in names:
                hs.append(("Content-Length", str(len(body))))
            payload = body
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hs) + "\r\n"
    return head.encode("latin-1") + payload


def request(port, method, path, headers=None, body=None, chunked=False, raw=None, timeout=10.0):
    """One request on its own connection; the whole answer."""
    c = Conn(port, timeout)
    try:
        c.send(raw if raw is not None else build(method, path, headers, body, chunked))
        a = c.read_head()
        return c.read_body(a, method)
    finally:
        c.close()


class Stream:
    """A request whose answer may be a held stream: the head at once, then the
    body chunk by chunk."""

    def __init__(self, port, method, path, headers=None, body=None, timeout=10.0):
        self.method = method
        self.path = path
        self.conn = Conn(port, timeout)
        self.conn.send(build(method, path, headers, body))
        self.answer = self.conn.read_head()
        te = (self.answer.header("Transfer-Encoding") or "").lower()
        self.chunked = "chunked" in te
        self.pending = b""
        if not self.chunked:
            self.conn.read_body(self.answer, method)

    def next_line(self, timeout):
        """The next line of the stream (bytes, without the newline), or None
        when the stream ended first. TimeoutError when none came in time."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            if self.answer.complete:
                return None
            before = len(self.answer.body)
            self.conn.read_chunk(self.answer, max(0.001, deadline - time.monotonic()))
            self.pending += self.answer.body[before:]
        line, self.pending = self.pending.split(b"\n", 1)
        return line

    def close(self):
        self.conn.close()
