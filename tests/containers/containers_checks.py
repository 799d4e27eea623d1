#!/usr/bin/env python3
"""The containers suite's checks of a running compose project
(containers.py runs them): /readyz, the README's examples, health checks,
locks through the image, and a stop that exits 0."""
from containers_setup import *  # noqa: F401,F403


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
