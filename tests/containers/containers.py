#!/usr/bin/env python3
"""The `containers` suite: builds deploy/Dockerfile and runs docker-compose.yml
for real, with podman and podman-compose (no Docker engine runs here, and no
container registry is reachable, so the base images are made locally).

  1. installs podman, podman-compose, runc, debootstrap, netavark,
     aardvark-dns, iptables (netavark's firewall setup needs it) if missing
     (root);
  2. makes the base images from Debian's archive with debootstrap and
     `podman import` (debian:bookworm and a -slim stand-in) and a stand-in for
     the compose file's Redis image, unless they exist already (cached);
  3. `podman build --format docker --pull=never -f deploy/Dockerfile`;
  4. `podman-compose up` under a unique project name, on a free loopback port;
  5. checks what a user sees: /readyz with five masters up, the README's curl
     examples, the locks on all five masters, uid/gid 10001 with entries,
     `podman healthcheck run` passing (and failing when pointed at a wrong
     port), `redlockd --health-check` following REDLOCKD_LISTEN, the masters'
     maxmemory-policy noeviction and appendfsync always, and `podman stop`
     making redlockd exit 0 within a few seconds;
  6. deploy/compose.tls.yml under a project of its own: certificates and an
     ACL file from deploy/redis-tls-certs.sh (openssl, on this machine),
     five TLS-only, ACL-only masters and redlockd; /readyz ready with every
     master up over TLS, a lock's token on all five (redis-cli --tls as the
     ACL user), release 204, the masters refusing clear text, clients without
     a certificate and clients not logged in; a second redlockd trusting
     another CA is not ready, /readyz naming the certificate failure; all
     of it removed at the end of the step, certificates included;
  7. the README's two steps on a bare Debian 12: a new container from the
     debootstrap bookworm image (nothing installed beyond minbase) gets the
     source tree (git's tracked files, as they are in the work tree), runs
     ./scripts/run.sh, which must install everything it needs with apt-get,
     build and serve /readyz with five masters up within BARE_DEADLINE_S, and
     then the README's curl lines under "Using it" run inside it as printed
     (201 with the JSON fields, 409 locked, 204, the script block); the .deb
     files are cached in /var/tmp/redlockd-containers/apt-archives;
  8. always tears down what it made (compose down -v, its own containers,
     volumes and network), and prints the time of each step and the image size
     (also written to OUT_DIR/containers-report.md; run.sh's output in the
     bare container goes to OUT_DIR/containers-bare-run.log).

A machine that cannot run containers at all fails with one line saying so.

usage: containers.py SOURCE_ROOT OUT_DIR
"""
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import yaml

ROOT = os.path.abspath(sys.argv[1])
OUT = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else ".")
STATE = "/var/tmp/redlockd-containers"   # podman's config file, debootstrap's scratch
PROJECT = "rlct%d" % os.getpid()         # compose project: unique per run
COMPOSE = os.path.join(ROOT, "docker-compose.yml")
COMPOSE_TLS = os.path.join(ROOT, "deploy", "compose.tls.yml")   # its own project: PROJECT-tls
# iptables: netavark (podman's network backend) runs it to set up every
# bridge network, also a build's RUN steps; podman only suggests it, and
# without it `podman build` exits 125 with "netavark: No such file or
# directory" on a bare Debian 12.
# git: lists the source files the bare-bookworm step copies into its container.
PACKAGES = ["podman", "podman-compose", "runc", "debootstrap", "netavark", "aardvark-dns", "iptables",
            "curl", "git"]
BASE = "docker.io/library/debian:bookworm"
SLIM = "docker.io/library/debian:bookworm-slim"
STOP_LIMIT_S = 5         # "podman stop" must see redlockd exit 0 within this
READY_DEADLINE_S = 90    # compose up to five masters up in /readyz
WRONG_CA_DEADLINE_S = 30 # redlockd with a wrong CA: every master down with the cause in /readyz
BARE_DEADLINE_S = 900    # bare bookworm: run.sh from nothing (apt, build) to /readyz ready
                         # (145-250 s measured; 450 s with other tests loading both cores)

steps = []               # (name, seconds, note)
extra_containers = []    # containers started by name outside compose
compose_started = False
detached_teardown = False  # set when a signal handed the teardown to a detached process


class Fail(Exception):
    pass


class Cannot(Exception):
    """This machine cannot run containers at all: one line, and a failure."""


def cannot(reason):
    raise Cannot(reason)


def tail(text, n=25):
    lines = (text or "").strip().splitlines()
    return "\n".join(lines[-n:])


def run(cmd, timeout, check=True, what=None, env=None, stdin=None):
    """Runs cmd in its own process group, killed as a whole on timeout or
    interruption; stdin is a file to read from (default none). Returns
    (status, stdout, stderr)."""
    what = what or " ".join(cmd[:3])
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=stdin if stdin is not None else subprocess.DEVNULL,
                         text=True, errors="replace", start_new_session=True, env=env)
    try:
        out, err = p.communicate(timeout=timeout)
    except BaseException as e:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
        if isinstance(e, subprocess.TimeoutExpired):
            raise Fail(f"{what}: still running after {timeout} s") from None
        raise
    if check and p.returncode != 0:
        raise Fail(f"{what}: exit status {p.returncode}\n{tail(err or out)}")
    return p.returncode, out, err


class step:
    """Times one step: `with step("build"): ...`."""

    def __init__(self, name):
        self.name, self.note = name, ""

    def __enter__(self):
        self.t0 = time.monotonic()
        print(f"-- {self.name}", flush=True)
        return self

    def __exit__(self, *exc):
        dt = time.monotonic() - self.t0
        steps.append((self.name, dt, self.note + ("" if exc[0] is None else " (failed)")))
        print(f"   {self.name}: {dt:.1f} s {self.note}", flush=True)
        return False


def check(cond, what):
    if not cond:
        raise Fail(what)


def podman(*args, timeout=60, check=True, what=None):
    return run(["podman", *args], timeout, check=check, what=what or "podman " + " ".join(args[:2]))


# ---------------------------------------------------------------- setup

def install():
    def installed(p):
        r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True)
        return "install ok installed" in r.stdout
    missing = [p for p in PACKAGES if not installed(p)]
    if missing:
        if os.geteuid() != 0:
            cannot("%s missing, and installing needs root" % " ".join(missing))
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        # Another apt-get (another suite, another session) may hold apt's
        # lock: wait for it rather than fail at once with status 100.
        lock = ["-o", "DPkg::Lock::Timeout=300"]
        try:
            run(["apt-get", *lock, "update", "-qq"], 600, env=env, what="apt-get update")
            run(["apt-get", *lock, "install", "-y", "-qq", *missing], 900, env=env, what="apt-get install")
        except Fail as e:
            cannot("cannot install %s: %s" % (" ".join(missing), tail(str(e), 3).replace("\n", " / ")))
    if os.geteuid() != 0:
        cannot("the suite runs rootful podman and needs root")


def configure_podman():
    """Podman's two settings for these VMs (shared/FACTS.md): nofile at the
    hard limit (no CAP_SYS_RESOURCE to raise it) and runc (crun refuses the
    hybrid cgroup layout)."""
    import resource
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    hard = 1048576 if hard == resource.RLIM_INFINITY else hard
    os.makedirs(STATE, exist_ok=True)
    conf = os.path.join(STATE, "containers.conf")
    with open(conf, "w") as f:
        f.write('[containers]\ndefault_ulimits = ["nofile=%d:%d", "nproc=32768:32768"]\n'
                '[engine]\nruntime = "runc"\n' % (hard, hard))
    os.environ["CONTAINERS_CONF"] = conf
    st, out, err = run(["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"], 60, check=False)
    if st != 0:
        cannot("podman info fails: " + tail(err, 1))


def debian_mirror():
    try:
        text = open("/etc/apt/sources.list.d/debian.sources").read()
        for stanza in text.split("\n\n"):
            if re.search(r"^Suites:.*\bbookworm\b", stanza, re.M) and "security" not in stanza:
                m = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
                if m:
                    return m.group(1)
    except OSError:
        pass
    return "http://deb.debian.org/debian"


# What Debian's official images add to a debootstrap tree (debuerreotype):
# apt keeps no caches and no translations; -slim also keeps no docs, man
# pages or locales of packages installed later.
APT_CONF = """Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
Acquire::GzipIndexes "true";
Acquire::Languages "none";
Apt::AutoRemove::SuggestsImportant "false";
"""
SLIM_DPKG = """path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
"""
BASE_KEY = hashlib.sha256((APT_CONF + SLIM_DPKG + "1").encode()).hexdigest()[:16]


def base_images(s):
    def cached(tag):
        st, out, _ = podman("image", "inspect", "--format", '{{index .Labels "redlockd.base"}}', tag,
                            check=False)
        return st == 0 and out.strip() == BASE_KEY
    if cached(BASE) and cached(SLIM):
        s.note = "(cached)"
        return
    s.note = "(cold: debootstrap)"
    mirror = debian_mirror()
    with tempfile.TemporaryDirectory(dir=STATE, prefix="rootfs.") as tmp:
        root = os.path.join(tmp, "root")
        st, out, err = run(["debootstrap", "--variant=minbase", "bookworm", root, mirror], 900,
                           check=False)
        if st != 0:
            raise Fail(f"debootstrap from {mirror} failed:\n{tail(out + err)}")
        # The same apt sources as this machine (bookworm, -updates, -security),
        # no downloaded packages or lists.
        if os.path.exists("/etc/apt/sources.list.d/debian.sources"):
            run(["cp", "/etc/apt/sources.list.d/debian.sources", root + "/etc/apt/sources.list.d/"], 10)
            run(["rm", "-f", root + "/etc/apt/sources.list"], 10)
        run(["sh", "-c", f"rm -rf {root}/var/cache/apt/archives/*.deb {root}/var/cache/apt/*.bin "
                         f"{root}/var/lib/apt/lists/*"], 30)
        with open(root + "/etc/apt/apt.conf.d/docker-clean", "w") as f:
            f.write(APT_CONF)

        def imp(tag):
            tar = subprocess.Popen(["tar", "--numeric-owner", "-C", root, "-c", "."],
                                   stdout=subprocess.PIPE)
            try:
                run(["podman", "import", "--change", 'CMD ["bash"]', "--change",
                     "LABEL redlockd.base=" + BASE_KEY, "-", tag], 300,
                    stdin=tar.stdout, what="podman import " + tag)
            finally:
                tar.stdout.close()
                tar.wait()
        imp(BASE)
        # -slim: the same tree without docs, man pages and locales.
        run(["sh", "-c", f"rm -rf {root}/usr/share/doc/* {root}/usr/share/man/* "
                         f"{root}/usr/share/info/* {root}/usr/share/locale/*"], 60)
        with open(root + "/etc/dpkg/dpkg.cfg.d/docker", "w") as f:
            f.write(SLIM_DPKG)
        imp(SLIM)


def redis_standin(s, image):
    """Builds the Redis stand-in, tagged as the compose file names it; cached
    by a label over the Containerfile and the base image."""
    cf = os.path.join(ROOT, "tests", "containers", "redis-standin.Containerfile")
    base_id = podman("image", "inspect", "--format", "{{.Id}}", BASE)[1].strip()
    key = hashlib.sha256(open(cf, "rb").read() + base_id.encode()).hexdigest()[:16]
    st, out, _ = podman("image", "inspect", "--format", '{{index .Labels "redlockd.standin"}}', image,
                        check=False)
    if st == 0 and out.strip() == key:
        s.note = "(cached)"
        return
    s.note = "(cold)"
    old = image_id(image)
    run(["podman", "build", "--format", "docker", "--pull=never", "--label", "redlockd.standin=" + key,
         "-f", cf, "-t", image, os.path.dirname(cf)], 600, what="podman build (Redis stand-in)")
    drop_replaced(old, image)


def image_id(tag):
    st, out, _ = podman("image", "inspect", "--format", "{{.Id}}", tag, check=False)
    return out.strip() if st == 0 else None


def drop_replaced(old_id, tag):
    """Removes the image a rebuild of tag replaced (now untagged), so that
    repeated runs do not pile up images; its cached layers stay if used."""
    if old_id and old_id != image_id(tag):
        podman("rmi", old_id, check=False)


def drop_stale_stages(build_output):
    """Removes build-stage images of earlier builds (untagged, made from this
    suite's base images), keeping this build's: its layers are the cache of
    the next build. Their shared parents stay, as other images use them."""
    m = re.search(r"^--> ([0-9a-f]+)\s*\n\[2/2\] STEP 1/", build_output, re.M)
    if not m:
        return
    _, out, _ = podman("images", "-q", "--no-trunc", "--filter", "dangling=true", "--filter",
                       "label=redlockd.base", check=False)
    for i in out.split():
        if not i.replace("sha256:", "").startswith(m.group(1)):
            podman("rmi", i, check=False)


def smoke():
    st, out, err = run(["podman", "run", "--rm", "--network", "none", BASE, "true"], 120, check=False)
    if st != 0:
        cannot("podman cannot start a container: " + tail(err or out, 1))


# ---------------------------------------------------------------- checks

def http(method, port, path, body=None, headers=None, timeout=5):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=body.encode() if body else None, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def wait_ready(port, n):
    deadline = time.monotonic() + READY_DEADLINE_S
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            st, body, _ = http("GET", port, "/readyz", timeout=2)
            last = f"{st} {body}"
            j = json.loads(body)
            if st == 200 and len(j["masters"]) == n and all(m["up"] for m in j["masters"]):
                return j
        except (OSError, ValueError, KeyError) as e:
            last = repr(e)
        time.sleep(0.5)
    raise Fail(f"/readyz did not show {n} masters up within {READY_DEADLINE_S} s; last: {last}")


def readme_block(after):
    """The indented code block following the README line that starts with after."""
    lines = open(os.path.join(ROOT, "README.md")).read().splitlines()
    i = next((k for k, l in enumerate(lines) if l.startswith(after)), None)
    check(i is not None, f"README has no line starting {after!r}")
    block = []
    for l in lines[i + 1:]:
        if l.startswith("    "):
            block.append(l[4:])
        elif block and l.strip():
            break
    return block


def sh(script, timeout=30):
    return run(["bash", "-c", script], timeout, check=False)


def readme_examples(shell, url):
    """Runs the README's curl examples as they are printed, with localhost:8080
    replaced by url (itself where nothing needs replacing), through shell(script,
    timeout) -> (status, stdout, stderr): bash here, or bash in a container."""
    def at(line):
        return line.replace("localhost:8080", url)
    first = [l for l in readme_block("While `./scripts/run.sh` runs") if l.startswith("curl")]
    check(len(first) == 3, "README: the first curl block has acquire, acquire again, release")
    # The status code too (what the README's comment says: 201), after the body.
    st, out, err = shell(at(first[0]).replace("curl -s ", "curl -s -w '\\n%{http_code}' ", 1), 30)
    body, _, code = out.rpartition("\n")
    try:
        j = json.loads(body)
    except ValueError:
        j = {}
    check(st == 0 and code == "201" and j.get("name") == "orders" and len(j.get("token", "")) >= 20
          and isinstance(j.get("fence"), int) and j.get("ttl_ms") == 30000
          and 0 < j.get("validity_ms", 0) <= 30000,
          f"README acquire: {first[0]} answered {code} {body!r} {tail(err, 3)}")
    token = j["token"]
    st, out, _ = shell(at(first[1]), 30)
    check(" 409 " in (out.splitlines() or [""])[0] and re.search(r"(?im)^retry-after: \d+", out)
          and '"locked"' in out, f"README second acquire: expected 409 locked, got {out[:300]!r}")
    release = re.sub(r"Lock-Token: [^\"]+", "Lock-Token: " + token, first[2])
    st, out, _ = shell(at(release).replace("curl -s ", "curl -s -w '%{http_code}' "), 30)
    check(out.strip() == "204", f"README release: expected 204, got {out!r}")

    script = readme_block("In a script, keep the token in a variable:")
    check(len(script) >= 5 and script[0].startswith("TOKEN=$(curl"), "README: the script block")
    marked = []
    for k, l in enumerate(script):
        marked += [f"echo '@@{k}'", at(l)]
    marked.append("echo '@@token'; echo \"$TOKEN\"")
    st, out, err = shell("set -e\n" + "\n".join(marked), 60)
    check(st == 0, f"README script block exited {st}: {tail(err)}")
    parts = dict((p.split("\n", 1) + [""])[:2] for p in out.split("@@")[1:])
    check(len(parts.get("token", "").strip()) >= 20, "README: TOKEN=$(curl ...) took a token")
    expect = {"curl -s localhost:8080/locks/reports": '"held":true',
              "curl -s 'localhost:8080/locks?prefix=rep'": '{"locks":[{"name":"reports",',
              "curl -s -X PATCH": '"validity_ms"',
              "curl -s -i -X DELETE": "HTTP/1.1 204",
              "curl -s localhost:8080/readyz": '"status":"ready"',
              "curl -s localhost:8080/metrics": "redlockd_grants_total"}
    for k, l in enumerate(script[1:], 1):
        want = next((v for p, v in expect.items() if l.startswith(p)), None)
        check(want is not None, f"README script line without an expectation here: {l}")
        check(want in parts.get(str(k), ""), f"README: {l!r} answered {parts.get(str(k), '')[:300]!r}")
    st, body, _ = shell(f"curl -s {url}/locks/reports", 30)
    check(st == 0 and '"held":false' in body, f"README: reports still held after the DELETE: {body}")


def compose_names():
    c = yaml.safe_load(open(COMPOSE))
    redis = sorted(n for n, s in c["services"].items() if "redis" in str(s.get("image", "")))
    images = {c["services"][n]["image"] for n in redis}
    check(len(images) == 1, "one Redis image in the compose file")
    return images.pop(), c["services"]["redlockd"]["image"], redis


def container(service, project=None):
    """The container podman-compose made for a service."""
    st, out, _ = podman("ps", "-a", "--filter", f"label=io.podman.compose.project={project or PROJECT}",
                        "--filter", f"label=com.docker.compose.service={service}",
                        "--format", "{{.Names}}")
    names = out.split()
    check(len(names) == 1, f"one container for {service}, found {names}")
    return names[0]


def healthcheck_passes(name, deadline_s=20):
    deadline = time.monotonic() + deadline_s
    out = ""
    while time.monotonic() < deadline:
        st, out, err = podman("healthcheck", "run", name, check=False)
        if st == 0:
            return True
        out += err
        time.sleep(0.5)
    print(f"   podman healthcheck run {name}: {out.strip()}")
    return False


def start_extra(image, name, *args):
    extra_containers.append(name)
    podman("run", "-d", "--name", name, "--network", "none", *args, image, timeout=60)


def checks(port, image, redis_services):
    r = container("redlockd")
    masters = [container(s) for s in redis_services]

    # The README's curl examples, on the published port.
    readme_examples(sh, f"127.0.0.1:{port}")

    # A lock really lives on the five masters.
    st, body, _ = http("POST", port, "/locks/ct-probe", '{"ttl_ms": 20000}')
    check(st == 201, f"acquire ct-probe: {st} {body}")
    token = json.loads(body)["token"]
    for m in masters:
        out = podman("exec", m, "redis-cli", "GET", "lock:ct-probe")[1].strip()
        check(out == token, f"{m}: lock:ct-probe holds {out!r}, not the token")
    st, _, _ = http("DELETE", port, "/locks/ct-probe", headers={"Lock-Token": token})
    check(st == 204, f"release ct-probe: {st}")

    # The masters keep what they acknowledged.
    for m in masters:
        got = {}
        for key in ("maxmemory", "maxmemory-policy", "appendonly", "appendfsync"):
            out = podman("exec", m, "redis-cli", "CONFIG", "GET", key)[1].split()
            got[key] = out[1] if len(out) == 2 else out
        check(got["maxmemory-policy"] == "noeviction", f"{m}: maxmemory-policy {got['maxmemory-policy']}")
        check(got["appendfsync"] == "always", f"{m}: appendfsync {got['appendfsync']}")
        check(got["appendonly"] == "yes", f"{m}: appendonly {got['appendonly']}")
        check(str(got["maxmemory"]).isdigit() and int(got["maxmemory"]) > 0, f"{m}: maxmemory {got['maxmemory']}")

    # The redlock client ships in the image and works against its redlockd:
    # a held lock through `redlock run`, seen by `redlock status`.
    st, out, err = podman("exec", r, "redlock", "--url", "http://127.0.0.1:8080", "run", "--ttl", "5s",
                          "ct-cli", "--", "sh", "-c", 'redlock status --url http://127.0.0.1:8080 ct-cli && '
                          'test -n "$REDLOCK_TOKEN"', check=False)
    check(st == 0 and "held" in out, f"redlock run/status in the image: status {st}, {out!r} {err!r}")
    st, out, _ = podman("exec", r, "redlock", "--url", "http://127.0.0.1:8080", "ready", check=False)
    check(st == 0, f"redlock ready in the image: status {st}, {out!r}")

    # Non-root, with a user and a group entry.
    status = podman("exec", r, "cat", "/proc/1/status")[1]
    uid = re.search(r"^Uid:\s+(.*)$", status, re.M).group(1).split()
    gid = re.search(r"^Gid:\s+(.*)$", status, re.M).group(1).split()
    check(set(uid) == {"10001"} and set(gid) == {"10001"}, f"redlockd runs as uid {uid} gid {gid}")
    st, grp, _ = podman("exec", r, "getent", "group", "10001", check=False)
    check(st == 0 and grp.startswith("redlockd:"), "gid 10001 has no entry in the image's /etc/group")
    st, pw, _ = podman("exec", r, "getent", "passwd", "10001", check=False)
    check(st == 0 and pw.split(":")[3] == "10001", f"uid 10001's passwd entry: {pw.strip()!r}")

    # The image's HEALTHCHECK (redlockd --health-check) passes ...
    check(healthcheck_passes(r), "podman healthcheck run redlockd failed")
    # ... and the probe fails when pointed at a port nothing serves.
    st, out, _ = podman("exec", r, "/usr/local/bin/redlockd", "--health-check", "--listen", "127.0.0.1:9",
                        check=False)
    check(st == 1 and out.startswith("unhealthy:") and len(out.splitlines()) == 1,
          f"--health-check --listen 127.0.0.1:9: status {st}, {out!r}")
    # It follows REDLOCKD_LISTEN: a container serving on 9090 is healthy, and
    # the old probe's fixed 127.0.0.1:8080 would not have been.
    other = PROJECT + "-listen9090"
    start_extra(image, other, "-e", "REDLOCKD_LISTEN=0.0.0.0:9090", "-e", "REDLOCKD_MASTERS=127.0.0.1:6379")
    check(healthcheck_passes(other), "podman healthcheck run on a container with REDLOCKD_LISTEN=0.0.0.0:9090")
    st, out, _ = podman("exec", other, "/usr/local/bin/redlockd", "--health-check", "--listen",
                        "127.0.0.1:8080", check=False)
    check(st == 1, f"--health-check on 8080 where redlockd serves 9090: status {st}, {out!r}")
    # podman healthcheck run itself reports a failing probe.
    wrong = PROJECT + "-wrongprobe"
    start_extra(image, wrong, "--health-cmd", "/usr/local/bin/redlockd --health-check --listen 127.0.0.1:9",
                "-e", "REDLOCKD_MASTERS=127.0.0.1:6379")
    time.sleep(1)
    st, out, err = podman("healthcheck", "run", wrong, check=False)
    check(st != 0, f"podman healthcheck run passed with the probe on a wrong port: {out}{err}")
    return r


def stop(r, s):
    t0 = time.monotonic()
    podman("stop", "-t", "15", r, timeout=30)
    dt = time.monotonic() - t0
    code = podman("inspect", "--format", "{{.State.ExitCode}}", r)[1].strip()
    logs = podman("logs", r)
    s.note = f"(redlockd exited {code} after {dt:.1f} s)"
    check(code == "0", f"redlockd exited {code} on SIGTERM\n{tail(logs[1] + logs[2], 10)}")
    check(dt < STOP_LIMIT_S, f"podman stop took {dt:.1f} s (limit {STOP_LIMIT_S} s)")
    check('"event":"stopped"' in logs[1] + logs[2], "redlockd's log has no stopped event")


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


# ---------------------------------------------------------------- a bare Debian 12

def source_tar(path):
    """Writes the source tree as a user has it after a clone into the tar file
    path: git's tracked files with their working-tree contents (so an edit not
    yet committed is what runs); without git, the tree minus what .gitignore
    keeps out at the top (build directories, state) and .git."""
    import tarfile
    st, out, _ = run(["git", "-C", ROOT, "ls-files", "-z"], 60, check=False)
    if st == 0 and out:
        names = [n for n in out.split("\0") if n and os.path.lexists(os.path.join(ROOT, n))]
    else:
        names = []
        for d, dirs, files in os.walk(ROOT):
            rel = os.path.relpath(d, ROOT)
            dirs[:] = [x for x in dirs if x != ".git" and x != "node_modules"
                       and not (rel == "." and (x.startswith("build") or x == "state"))]
            names += [os.path.normpath(os.path.join(rel, f)) for f in files]
    with tarfile.open(path, "w") as t:
        for n in sorted(names):
            ti = t.gettarinfo(os.path.join(ROOT, n), "redlockd/" + n)
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = "root"
            if ti.isreg():
                with open(os.path.join(ROOT, n), "rb") as f:
                    t.addfile(ti, f)
            else:
                t.addfile(ti)
    return len(names)


# The script polled inside the container while run.sh runs: what it has got
# to (apt, build, serving), or how it ended.
BARE_POLL = r"""
if [ -f /tmp/run.rc ]; then echo "exited $(cat /tmp/run.rc)"; exit 0; fi
if command -v curl >/dev/null && r=$(curl -s -m 2 localhost:8080/readyz) && [ -n "$r" ]; then
    echo "serving $r"; exit 0; fi
if [ -e /src/redlockd/build/build.ninja ]; then echo building; exit 0; fi
echo installing
"""


def bare_bookworm():
    """The README's two steps on a bare Debian 12: a new container from the
    suite's debootstrap bookworm image (minbase: no compiler, no Redis, no
    curl), the source tree copied in, ./scripts/run.sh run as a user runs it
    (as root: it installs what it needs with apt-get from the mirror the image
    names, builds and starts five masters and redlockd on 127.0.0.1:8080),
    then the README's curl lines under "Using it" run inside the container as
    printed. Downloaded .deb files are kept in STATE/apt-archives for the next
    run (mounted as apt's archive cache; apt-get update and every install
    still run); the package lists are not kept."""
    name = PROJECT + "-bare"
    extra_containers.append(name)
    cache = os.path.join(STATE, "apt-archives")
    os.makedirs(os.path.join(cache, "partial"), exist_ok=True)
    import fcntl
    lockf = open(os.path.join(STATE, "apt-archives.lock"), "w")
    cached = False
    try:
        # Another run (another worktree) using the cache: go without it.
        fcntl.flock(lockf, fcntl.LOCK_EX | fcntl.LOCK_NB)
        mount = ["-v", cache + ":/var/cache/apt/archives"]
        cached = True
    except OSError:
        mount = []
    # dpkg without an fsync per file (force-unsafe-io, as Docker's images long
    # had): about 500 packages of many small files on overlayfs. It changes how
    # fast they are written, not what is installed.
    speedup = os.path.join(STATE, "dpkg-unsafe-io")
    with open(speedup, "w") as f:
        f.write("force-unsafe-io\n")
    mount += ["-v", speedup + ":/etc/dpkg/dpkg.cfg.d/redlockd-test-unsafe-io:ro"]
    try:
        with step("bare bookworm: copy the source tree in") as s:
            # The default network (a bridge made by netavark): the container
            # reaches the Debian mirror, and its loopback is its own, so run.sh's
            # fixed ports 6381-6385 and 8080 meet nothing of this machine's.
            podman("run", "-d", "--name", name, *mount, BASE, "sleep", "infinity", timeout=120)
            with tempfile.NamedTemporaryFile(dir=STATE, prefix="src.", suffix=".tar") as tf:
                n = source_tar(tf.name)
                with open(tf.name, "rb") as f:
                    run(["podman", "exec", "-i", name, "sh", "-c",
                         "mkdir -p /src && tar -x --no-same-owner -C /src"], 120, stdin=f,
                        what="copy the source tree into " + name)
            s.note = f"({n} files{'' if cached else '; apt cache busy, not used'})"
        with step("bare bookworm: ./scripts/run.sh until /readyz is ready") as s:
            podman("exec", "-d", name, "bash", "-c",
                   "cd /src/redlockd && { ./scripts/run.sh > /tmp/run.log 2>&1; echo $? > /tmp/run.rc; }")
            t0 = time.monotonic()
            deadline = t0 + BARE_DEADLINE_S
            seen, state, ready = {}, "", False
            while not ready:
                st, out, err = podman("exec", name, "bash", "-c", BARE_POLL, check=False, timeout=60)
                state = out.strip() if st == 0 else f"poll failed: {tail(err, 2)}"
                phase = state.split(" ", 1)[0]
                seen.setdefault(phase, time.monotonic() - t0)
                if phase == "exited":
                    break
                if phase == "serving":
                    try:
                        j = json.loads(state.split(" ", 1)[1])
                        ready = j.get("status") == "ready" and len(j["masters"]) == 5 and all(
                            m["up"] for m in j["masters"])
                    except (ValueError, KeyError, TypeError):
                        pass
                if not ready and time.monotonic() > deadline:
                    break
                if not ready:
                    time.sleep(3)
            log = podman("exec", name, "cat", "/tmp/run.log", check=False)[1]
            with open(os.path.join(OUT, "containers-bare-run.log"), "w") as f:
                f.write(log)
            b, v = seen.get("building"), seen.get("serving")
            if b is not None and v is not None:
                s.note = "(apt-get about %.0f s, then build and start about %.0f s)" % (b, v - b)
            elif b is not None:
                s.note = "(apt-get about %.0f s, then the build did not serve)" % b
            else:
                s.note = "(apt-get or meson setup did not finish)"
            check(ready, f"./scripts/run.sh on a bare bookworm: {state[:300]} after "
                  f"{time.monotonic() - t0:.0f} s (limit {BARE_DEADLINE_S} s); its output "
                  f"(containers-bare-run.log):\n{tail(log, 30)}")
        with step("bare bookworm: the README's curl lines"):
            readme_examples(lambda script, timeout: podman("exec", name, "bash", "-c", script,
                                                           check=False, timeout=timeout), "localhost:8080")
        if cached:
            # Drops .deb files that the mirror no longer has (newer versions came).
            podman("exec", name, "apt-get", "-qq", "autoclean", check=False, timeout=60)
    finally:
        podman("rm", "-f", "-t", "0", name, check=False, timeout=60)
        lockf.close()


# ---------------------------------------------------------------- teardown

def mine(name, project):
    return name.startswith(project + "_") or name.startswith(project + "-")


def teardown(project=None, compose=True):
    """Removes everything a run made: compose down -v, then whatever it
    missed (containers, pods, volumes, networks named after the project)."""
    project = project or PROJECT
    errors = []
    if compose:
        st, out, err = run(["podman-compose", "-p", project, "-f", COMPOSE, "down", "-v", "-t", "5"], 180,
                           check=False)
        if st != 0:
            errors.append("podman-compose down: " + tail(err, 3))
    _, out, _ = run(["podman", "ps", "-a", "--format", "{{.Names}}"], 30, check=False)
    for c in out.split():
        if mine(c, project):
            run(["podman", "rm", "-f", "-t", "2", c], 60, check=False)
    _, out, _ = run(["podman", "pod", "ls", "--format", "{{.Name}}"], 30, check=False)
    for p in out.split():
        if mine(p, project) or p == "pod_" + project:
            run(["podman", "pod", "rm", "-f", p], 60, check=False)
    for kind in ("volume", "network"):
        _, out, _ = run(["podman", kind, "ls", "--format", "{{.Name}}"], 30, check=False)
        for v in out.split():
            if mine(v, project):
                run(["podman", kind, "rm", "-f", v], 60, check=False)
    for d in os.listdir(STATE) if os.path.isdir(STATE) else []:
        if d.startswith(f"tls-{project}."):   # tls_masters()' certificates
            shutil.rmtree(os.path.join(STATE, d), ignore_errors=True)
    # Nothing of this run may be left.
    left = []
    for cmd in (["ps", "-a", "--format", "{{.Names}}"], ["volume", "ls", "--format", "{{.Name}}"],
                ["network", "ls", "--format", "{{.Name}}"]):
        left += [x for x in run(["podman", *cmd], 30, check=False)[1].split() if mine(x, project)]
    if left:
        errors.append("left behind: " + " ".join(left))
    return errors


def sweep_stale():
    """Tears down what earlier runs left when they were killed outright
    (a project rlct<pid> whose process is gone)."""
    names = set()
    for kind in ("ps -a", "volume ls", "network ls"):
        _, out, _ = run(["podman", *kind.split(), "--format", "{{.Names}}" if kind == "ps -a" else "{{.Name}}"],
                        30, check=False)
        names.update(m.group(1) for m in map(re.compile(r"^(rlct(\d+))[_-]").match, out.split()) if m)
    names.update(m.group(1) for m in map(re.compile(r"^tls-(rlct(\d+))\.").match,
                                         os.listdir(STATE) if os.path.isdir(STATE) else []) if m)
    for project in sorted(names):
        pid = int(project[4:])
        try:
            os.kill(pid, 0)
            if pid != os.getpid() and "containers.py" in open(f"/proc/{pid}/cmdline").read():
                continue   # another run, still going
        except (ProcessLookupError, FileNotFoundError, PermissionError):
            pass
        print(f"   removing what an earlier run ({project}) left behind", flush=True)
        teardown(project, compose=False)


def report(image_size):
    lines = ["| step | seconds | note |", "|---|---:|---|"]
    lines += [f"| {n} | {dt:.1f} | {note.strip()} |" for n, dt, note in steps]
    if image_size:
        lines.append(f"\nredlockd image: {image_size / 1e6:.1f} MB (podman image inspect .Size)")
    text = "\n".join(lines)
    print("\ncontainers suite:\n" + text, flush=True)
    try:
        with open(os.path.join(OUT, "containers-report.md"), "w") as f:
            f.write(text + "\n")
    except OSError:
        pass


def main():
    global compose_started

    def on_term(sig, frame):
        # meson sends SIGKILL half a second after SIGTERM: a detached copy of
        # this script does the teardown.
        global detached_teardown
        if (compose_started or extra_containers) and not detached_teardown:
            detached_teardown = True
            subprocess.Popen([sys.executable, os.path.abspath(__file__), ROOT, OUT, "--teardown", PROJECT],
                             start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        raise Fail(f"interrupted by signal {sig} (the suite's time limit?); teardown continues detached")
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    failure, image_size = None, 0
    t_all = time.monotonic()
    try:
        install()
        configure_podman()
        sweep_stale()
        steps.append(("install and configure podman", time.monotonic() - t_all, ""))
        redis_image, image, redis_services = compose_names()
        check(len(redis_services) == 5, f"five Redis services in the compose file, found {redis_services}")
        with step("base images debian:bookworm, bookworm-slim") as s:
            base_images(s)
        smoke()
        with step(f"Redis stand-in {redis_image}") as s:
            redis_standin(s, redis_image)
        with step("podman build -f deploy/Dockerfile") as s:
            old = image_id(image)
            st, out, err = run(["podman", "build", "--format", "docker", "--pull=never",
                                "-f", os.path.join(ROOT, "deploy", "Dockerfile"), "-t", image, ROOT],
                               900, check=False)
            with open(os.path.join(OUT, "containers-build.log"), "w") as f:
                f.write(out + err)
            check(st == 0, f"podman build failed (exit {st}):\n{tail(out + err, 40)}")
            drop_replaced(old, image)
            drop_stale_stages(out + err)
            s.note = "(%d of %d steps from the layer cache)" % (
                (out + err).count("--> Using cache"), len(re.findall(r"STEP \d+/\d+: (?!FROM)", out + err)))
            image_size = int(podman("image", "inspect", "--format", "{{.Size}}", image)[1].strip())
            hc = podman("image", "inspect", "--format", "{{json .HealthCheck}}", image)[1]
            check("--health-check" in hc, f"the image's HEALTHCHECK is not redlockd --health-check: {hc}")
        with step("podman-compose up, until /readyz shows 5 masters up"):
            with socket.socket() as so:
                so.bind(("127.0.0.1", 0))
                port = so.getsockname()[1]
            env = dict(os.environ, REDLOCKD_HOST_PORT=str(port))
            compose_started = True
            st, out, err = run(["podman-compose", "-p", PROJECT, "-f", COMPOSE, "up", "-d", "--no-build"],
                               300, check=False, env=env)
            with open(os.path.join(OUT, "containers-compose-up.log"), "w") as f:
                f.write(out + err)
            # podman-compose answers 0 even when a container failed: judge by /readyz.
            try:
                wait_ready(port, len(redis_services))
            except Fail as e:
                raise Fail(f"{e}\npodman-compose up said:\n{tail(out + err, 20)}") from None
        with step("checks"):
            r = checks(port, image, redis_services)
        with step("podman stop redlockd (SIGTERM)") as s:
            stop(r, s)
        tls_masters()
        bare_bookworm()
    except Cannot as e:
        print("containers: FAIL: cannot run containers on this machine: " + str(e), flush=True)
        sys.exit(1)
    except Fail as e:
        failure = str(e)
    except BaseException:
        if not detached_teardown:
            teardown()
        raise
    errors = []
    if not detached_teardown:
        with step("teardown (compose down -v, own containers)"):
            errors = teardown()
    steps.append(("total", time.monotonic() - t_all, ""))
    report(image_size)
    if failure or errors:
        print("containers: FAIL: " + (failure or "") + ("\n" if failure and errors else "")
              + "\n".join(errors), flush=True)
        sys.exit(1)
    print("containers: all checks passed", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[3] == "--teardown":   # the detached teardown of on_term
        PROJECT = sys.argv[4]
        os.environ["CONTAINERS_CONF"] = os.path.join(STATE, "containers.conf")
        teardown()
    else:
        main()
