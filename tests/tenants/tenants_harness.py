"""What the tenant tests (test_tenants.py, tenants_matrix.py) stand on: the
principals (one file per credential kind: tokens, or `cert`), the three
ways a principal reaches redlockd (plain TCP and a Unix socket with a
bearer token, HTTPS with the principal's client certificate), what is on
the masters (read there directly, not through redlockd), and the audit
log's lines.

A transport's req() and stream() send one request as a principal ("who":
a principal's name; "stranger", a token or certificate that names no
principal; None, no credential at all) on a connection of their own, and
note the client address the audit log must give for it: 127.0.0.1 and the
connection's own port, or "unix"."""
import hashlib
import json
import os
import re
import socket
import ssl
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "api"))
sys.path.insert(0, os.path.join(HERE, "..", "races"))
import httpraw  # noqa: E402
from hostile_harness import compare, snapshot  # noqa: E402
from races_harness import Events  # noqa: E402
from testcerts import SERVER_SAN, add, make_ca, make_leaf  # noqa: E402

# Every principal of the matrix, and the stranger: a token that names none.
TOKENS = {"billing": "billing-token-0123456789", "dashboard": "dashboard-token-0123456789",
          "ops": "ops-token-0123456789", "app": "app-token-0123456789",
          "locker": "locker-token-0123456789", "billops": "billops-token-0123456789",
          "stranger": "stranger-token-0123456789"}
PREFIX = b"lock:"   # the default --key-prefix


def sha(token):
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def principals_text(billing_prefixes="billing/,reports/", certs=False):
    """The principals file: each principal's credential its token's digest,
    or (certs) `cert`: the client certificate whose CN is its name.
    billing     locks and reads its own prefixes
    dashboard   reads every name, locks none
    ops         reads, locks and forces every name
    app         locks and reads its Dapr keys (lockstore||...)
    locker      locks billing/ and may read nothing: listings and /ui/state refused
    billops     forces too, but on billing/ only: a force elsewhere refused"""
    rows = [("billing", "lock,read", billing_prefixes), ("dashboard", "read", "*"),
            ("ops", "read,lock,admin", "*"), ("app", "lock,read", "lockstore||"),
            ("locker", "lock", "billing/"), ("billops", "read,lock,admin", "billing/")]
    return "# principal rights prefixes credential\n" + "".join(
        f"{n:10} {r:16} {p:20} {'cert' if certs else sha(TOKENS[n])}\n" for n, r, p in rows)


def make_client_certs(d):
    """A CA, the server's certificate (127.0.0.1, localhost), and a client
    certificate per principal (CN its name) and for the stranger, all made
    by the openssl CLI: a dict of paths (ca.crt, server.crt, billing.key...)."""
    ca = make_ca(d, "ca", "redlockd-tenants-ca")
    p = add(add({}, "ca", ca), "server", make_leaf(d, "server", "/CN=redlockd-tenants", ca, SERVER_SAN))
    for who in TOKENS:
        add(p, who, make_leaf(d, who, f"/CN={who}", ca))
    return p


# ---- transports ----

class Transport:
    """One way to reach one redlockd; name and tag (the matrix's names hold
    the tag, so each transport's keys are its own), audit (the daemon's
    audit log). Subclasses give connector(who) and creds(who, dapr)."""
    host = "127.0.0.1"

    def __init__(self, name, audit):
        self.name, self.tag, self.audit = name, name + ".", audit
        self.client = None   # the audit log's client for the last connection made

    def req(self, method, path, body=None, who=None, dapr=False, headers=()):
        """One request as who; the answer (httpraw.Answer) with .client."""
        h = [("Host", self.host)] + self.creds(who, dapr) + list(headers)
        if body is not None:
            body = json.dumps(body)
            h.append(("Content-Type", "application/json"))
        a = httpraw.request(self.connector(who), method, path, h, body)
        a.client = self.client
        return a

    def stream(self, path, body, who, timeout=10.0):
        """A held stream (races_harness.Events) as who, with .client."""
        h = [("Host", self.host), ("Content-Type", "application/json")] + self.creds(who, False)
        ev = Events(httpraw.Stream(self.connector(who), "POST", path, h, json.dumps(body), timeout))
        ev.client = self.client
        return ev


class Tokens(Transport):
    """Plain HTTP with a bearer token (Dapr's routes: dapr-api-token), over
    TCP to port, or over the Unix socket at sock (Host: localhost, as curl
    --unix-socket http://localhost/ sends)."""

    def __init__(self, name, audit, port=None, sock=None):
        super().__init__(name, audit)
        self.port, self.sock = port, sock
        if sock:
            self.host = "localhost"

    def connector(self, who):
        def connect(timeout):
            if self.sock:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(timeout)
                s.connect(self.sock)
                self.client = "unix"
            else:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
                self.client = "127.0.0.1:%d" % s.getsockname()[1]
            return s
        return connect

    def creds(self, who, dapr):
        if who is None:
            return []
        return [("dapr-api-token", TOKENS[who])] if dapr else [("Authorization", f"Bearer {TOKENS[who]}")]


class Certs(Transport):
    """HTTPS to port with who's client certificate (None: none); the
    service's certificate checked against the test CA. No token is sent:
    the certificate names the principal."""

    def __init__(self, name, audit, port, certs):
        super().__init__(name, audit)
        self.port, self.certs, self.ctx = port, certs, {}

    def connector(self, who):
        if who not in self.ctx:
            ctx = ssl.create_default_context(cafile=self.certs["ca.crt"])
            if who:
                ctx.load_cert_chain(self.certs[f"{who}.crt"], self.certs[f"{who}.key"])
            self.ctx[who] = ctx

        def connect(timeout):
            raw = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
            self.client = "127.0.0.1:%d" % raw.getsockname()[1]
            try:
                return self.ctx[who].wrap_socket(raw, server_hostname="127.0.0.1")
            except (OSError, ssl.SSLError):
                raw.close()
                raise
        return connect

    def creds(self, who, dapr):
        return []


# ---- the masters, read directly ----

def snap(masters, tag):
    """Every key of the transport's names on every master: per master
    {key: (DUMP, PTTL)} (hostile_harness.snapshot)."""
    return snapshot(masters, "*" + tag + "*")


def changes(before, after, elapsed_ms, live=()):
    """What changed: keys created, values changed or removed
    (hostile_harness.compare), and an expiry pushed later (an extension
    changes nothing but the PTTL). live: names a stream keeps, whose own
    renewals may push their keys' expiry meanwhile."""
    probs = compare(before, after, elapsed_ms)
    kept = [PREFIX + n.encode() for n in live]
    for i, (b, a) in enumerate(zip(before, after)):
        for k in set(a) & set(b):
            if any(k.startswith(n) for n in kept):
                continue
            if isinstance(a[k][1], int) and isinstance(b[k][1], int) and a[k][1] > b[k][1] >= 0:
                probs.append(f"master {i}: key {k.decode(errors='replace')} extended ({b[k][1]} -> {a[k][1]} ms)")
    return probs


def holding(masters, name, kind="lock"):
    """On how many masters name is held: its lock key (a lock's, a Dapr
    key's), its election key, or a semaphore's slot of it (what a release
    removes; the fence and a semaphore's limit stay)."""
    key = PREFIX + name.encode()
    n = 0
    for m in masters:
        if kind == "semaphore":
            n += any(re.fullmatch(re.escape(key + b"\x1f#") + rb"[0-9]+", k) for k in m.r().call("KEYS", key + b"*"))
        else:
            n += m.r().call("EXISTS", key + b"\x1f#election" if kind == "election" else key) == 1
    return n


# ---- the audit log ----

def audit_read(path):
    """(the file's text, its lines parsed; a line that is not JSON is None)."""
    try:
        text = open(path, errors="replace").read()
    except OSError:
        return "", []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append(None)
    return text, out


def audit_match(line, want, client):
    """Does line say what want says (a field None: absent), from client?"""
    if not isinstance(line, dict) or line.get("client") != client:
        return False
    return all(line.get(k) is None if v is None else line.get(k) == v for k, v in want.items())
