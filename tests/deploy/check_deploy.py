#!/usr/bin/env python3
"""Engine-free checks of the deployment files (no Docker engine or cluster
runs here; the `containers` suite runs the image and compose file for real):
docker-compose validates the compose file; every Kubernetes manifest is
checked against the API schema (Debian's python3-kubernetes models: a field
they drop on a round trip is misspelt or unknown) and for what a schema cannot
see (every container that mounts the Secret can read it, probes point at what
redlockd serves, a sidecar's Unix socket is in an emptyDir its application
mounts and may connect to, every file redlockd is handed comes from a
Secret's key, a shared service is behind a Service that reaches it, over
HTTPS, with principals, the masters keep what they acknowledged); `systemd-analyze
verify` checks the unit with the binary installed at its path in a temporary
root; and every flag or REDLOCKD_* variable that compose, the Dockerfile, the
manifests and the systemd unit hand to redlockd is one that `redlockd --help`
lists. Each check of a property a schema cannot see is also fed a
deliberately broken copy (a negative control) and must catch it.

usage: check_deploy.py SOURCE_ROOT REDLOCKD_BINARY
"""
import copy
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

try:
    from kubernetes import client as k8s
except ImportError:
    print("deployment checks failed: python3-kubernetes is missing (apt-get install python3-kubernetes; "
          "it is Debian's /usr/bin/python3 that has it)")
    sys.exit(1)

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from k8s_checks import (file_problems, k8s_bytes, listeners, pod_specs, probe_problems,  # noqa: E402
                        schema_problems, secret_read_problems, service_problems, socket_problems)

ROOT, BIN = sys.argv[1], sys.argv[2]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def path(*p):
    return os.path.join(ROOT, *p)


help_text = subprocess.run([BIN, "--help"], capture_output=True, text=True, check=True).stdout
known_flags = set(re.findall(r"--([a-z][a-z-]+)", help_text))
known_vars = set(re.findall(r"\b(REDLOCKD_[A-Z_]+)\b", help_text))
check("quarantine" in known_flags and "REDLOCKD_MASTERS" in known_vars, "redlockd --help lists its flags")
used = []   # (where, flag-or-variable)


def note_args(where, args):
    for a in args:
        m = re.match(r"--([a-z][a-z-]+)", str(a))
        if m:
            used.append((where, "--" + m.group(1)))


# ---- checks a schema cannot make, as functions of the parsed files, so that
# ---- the negative controls at the end can feed each a broken copy ----
# (Kubernetes': k8s_checks.py, beside this file)

def redis_bytes(v):
    """Redis's memory units: 256mb = 256 MiB, 256m = 256 MB."""
    m = re.fullmatch(r"(\d+)(b|k|kb|m|mb|g|gb)?", str(v or "").lower())
    if not m:
        return None
    unit = {None: 1, "b": 1, "k": 1000, "kb": 1024, "m": 10**6, "mb": 2**20, "g": 10**9, "gb": 2**30}
    return int(m.group(1)) * unit[m.group(2)]


def redis_args_problems(where, args, mem_limit=None):
    """A master keeps every lock it acknowledged: appendonly with appendfsync
    always, no replication, and noeviction under a maxmemory below the
    container's memory limit (any other policy may evict lock keys)."""
    a = [str(x) for x in args]

    def val(flag):
        return a[a.index(flag) + 1] if flag in a[:-1] else None
    out = []
    if val("--appendonly") != "yes":
        out.append(f"{where}: --appendonly yes")
    if val("--appendfsync") != "always":
        out.append(f"{where}: --appendfsync always (then a restarted master votes at once), "
                   f"found {val('--appendfsync')}")
    if val("--maxmemory-policy") != "noeviction":
        out.append(f"{where}: --maxmemory-policy noeviction (others can evict lock keys), "
                   f"found {val('--maxmemory-policy')}")
    mm = redis_bytes(val("--maxmemory"))
    if not mm:
        out.append(f"{where}: --maxmemory set (without it a master grows until the OOM killer)")
    elif mem_limit and mm >= mem_limit:
        out.append(f"{where}: --maxmemory {val('--maxmemory')} is not below the memory limit")
    if "--replicaof" in a or "--slaveof" in a:
        out.append(f"{where}: no replication")
    return out


def dockerfile_user_problems(text):
    """The runtime stage's USER uid:gid both have entries: useradd --system
    alone makes a group with another gid, and the process then runs with a
    gid that has no name."""
    final = text[text.rindex("\nFROM"):]
    m = re.search(r"^USER\s+(\d+):(\d+)\s*$", final, re.M)
    if not m:
        return ["runtime stage: USER uid:gid, numeric (so that runAsNonRoot can check it)"]
    uid, gid = m.groups()
    out = []
    if not re.search(r"groupadd\b[^\n]*--gid\s+%s\b" % gid, final):
        out.append(f"runtime stage: groupadd --gid {gid} for USER {uid}:{gid}")
    if not re.search(r"useradd\b[^\n\\]*(\\\n[^\n\\]*)*--uid\s+%s\b" % uid, final) or \
            not re.search(r"useradd\b[^\n\\]*(\\\n[^\n\\]*)*--gid\s+%s\b" % gid, final):
        out.append(f"runtime stage: useradd --uid {uid} --gid {gid}")
    hc = re.search(r"^HEALTHCHECK\b.*?CMD\s+(.*)$", final, re.M | re.S)
    if not hc or "--health-check" not in hc.group(1).splitlines()[0]:
        out.append("runtime stage: HEALTHCHECK runs redlockd --health-check (it follows REDLOCKD_LISTEN)")
    return out


def systemd_problems(unit_text, binary):
    """`systemd-analyze verify` in a temporary root that holds the unit, the
    system's own units and, if given, the binary at the path ExecStart names.
    Any output (an unknown key is only a warning) counts as a problem."""
    sa = shutil.which("systemd-analyze")
    units = next((d for d in ("/usr/lib/systemd/system", "/lib/systemd/system") if os.path.isdir(d)), None)
    if not sa or not units:
        return ["systemd-analyze or the system's units are missing (Debian package systemd)"]
    exe = re.search(r"^ExecStart=[-@:+!]*(\S+)", unit_text, re.M).group(1)
    with tempfile.TemporaryDirectory(prefix="redlockd-systemd.") as root:
        shutil.copytree(units, root + "/usr/lib/systemd/system", symlinks=True)
        os.makedirs(root + "/etc/systemd/system")
        with open(root + "/etc/systemd/system/redlockd.service", "w") as f:
            f.write(unit_text)
        if binary:
            os.makedirs(os.path.dirname(root + exe), exist_ok=True)
            shutil.copy(binary, root + exe)
            os.chmod(root + exe, 0o755)
        r = subprocess.run([sa, "verify", "--root=" + root, "redlockd.service"], capture_output=True,
                           text=True, timeout=60)
    said = (r.stderr + r.stdout).strip()
    if r.returncode != 0 or said:
        return ["systemd-analyze verify redlockd.service (exit %d): %s" % (r.returncode, said)]
    return []


# ---- docker-compose.yml, validated by docker-compose itself ----
res = subprocess.run(["docker-compose", "-f", path("docker-compose.yml"), "config"],
                     capture_output=True, text=True, cwd=ROOT)
check(res.returncode == 0, "docker-compose config failed: " + res.stderr.strip())
compose = yaml.safe_load(res.stdout) if res.returncode == 0 else {"services": {}}
services = compose["services"]
redis = {n: s for n, s in services.items() if "redis" in str(s.get("image", ""))}
check(len(redis) == 5, "compose has five Redis services, found %d" % len(redis))
volumes_seen = set()
for name, s in redis.items():
    failures.extend(redis_args_problems(f"docker-compose.yml {name}", (s.get("command") or [])[1:]))
    check("ports" not in s, f"{name}: not published (protected mode is off)")
    check("healthcheck" in s, f"{name}: healthcheck")
    check(str(s.get("image", "")).startswith("redis:7"), f"{name}: Redis 7")
    vols = [v.split(":")[0] if isinstance(v, str) else v.get("source") for v in s.get("volumes", [])]
    check(len(vols) == 1 and vols[0] not in volumes_seen, f"{name}: its own volume")
    volumes_seen.update(vols)
r = services.get("redlockd", {})
check(r.get("build", {}).get("dockerfile") == "deploy/Dockerfile", "redlockd built from deploy/Dockerfile")
check(r.get("ports") and all(str(p).startswith("127.0.0.1:") for p in r["ports"]),
      "redlockd publishes its port on 127.0.0.1 only")
hc = (r.get("healthcheck") or {}).get("test") or []
check("--health-check" in hc, "compose: redlockd's healthcheck is redlockd --health-check")
note_args("docker-compose.yml", hc)
deps = r.get("depends_on", {})
check(set(deps) == set(redis) and all(d.get("condition") == "service_healthy" for d in deps.values()),
      "redlockd starts after all five masters are healthy")
env = r.get("environment", {})
masters = env.get("REDLOCKD_MASTERS", "").split(",")
check(len(masters) == 5 and all(m.split(":")[0] in redis for m in masters),
      "REDLOCKD_MASTERS names the five compose masters")
for k in env:
    used.append(("docker-compose.yml", k))
note_args("docker-compose.yml", r.get("command", []) or [])

# ---- deploy/compose.tls.yml (TLS-only, ACL-only masters), validated by docker-compose ----
res = subprocess.run(["docker-compose", "-f", path("deploy/compose.tls.yml"), "config"], capture_output=True,
                     text=True, cwd=ROOT, env=dict(os.environ, REDLOCKD_REDIS_PASSWORD="x", REDLOCKD_TLS_DIR="/t"))  # any values: config only
check(res.returncode == 0, "docker-compose config of deploy/compose.tls.yml failed: " + res.stderr.strip())
tls = yaml.safe_load(res.stdout)["services"] if res.returncode == 0 else {}
tls_redis = {n: s for n, s in tls.items() if "redis" in str(s.get("image", ""))}
check(len(tls_redis) == 5, "compose.tls.yml has five Redis services, found %d" % len(tls_redis))
for name, s in tls_redis.items():
    a = [str(x) for x in s.get("command") or []]
    failures.extend(redis_args_problems(f"deploy/compose.tls.yml {name}", a[1:]))
    for flag, want in (("--port", "0"), ("--tls-port", "6380"), ("--tls-auth-clients", "yes"),
                       ("--aclfile", "/tls/users.acl")):
        check(flag in a[:-1] and a[a.index(flag) + 1] == want, f"compose.tls.yml {name}: {flag} {want}")
    check("ports" not in s, f"compose.tls.yml {name}: not published")
    check(all(str(v).endswith(":ro") for v in s.get("volumes", []) if "/tls/" in str(v)),
          f"compose.tls.yml {name}: certificates mounted read-only")
    check(not any("client.key" in str(v) or "ca.key" in str(v) for v in s.get("volumes", [])),
          f"compose.tls.yml {name}: no client or CA key on a master")
tr = tls.get("redlockd", {})
tenv = tr.get("environment", {})
check(tenv.get("REDLOCKD_MASTERS", "").split(",") == [f"rediss://{n}:6380" for n in sorted(tls_redis)],
      "compose.tls.yml: REDLOCKD_MASTERS names the five masters with rediss://")
check(tenv.get("REDLOCKD_REDIS_PASSWORD") == "x", "compose.tls.yml: the password from REDLOCKD_REDIS_PASSWORD")
check(not any("ca.key" in str(v) or "redis.key" in str(v) for v in tr.get("volumes", [])),
      "compose.tls.yml: no CA or master key in redlockd")
for k in tenv:
    used.append(("deploy/compose.tls.yml", k))

# ---- deploy/Dockerfile ----
dockerfile = open(path("deploy", "Dockerfile")).read()
stages = re.findall(r"^FROM\s+(\S+)", dockerfile, re.M)
check(len(stages) >= 2 and all("bookworm" in s for s in stages), "multi-stage from Debian bookworm")
final = dockerfile[dockerfile.rindex("\nFROM"):]
check(re.search(r"^USER\s+(?!root|0\b)\S+", final, re.M), "runtime stage runs as non-root")
failures.extend("deploy/Dockerfile: " + p for p in dockerfile_user_problems(dockerfile))
check(re.search(r"^EXPOSE\s+8080", final, re.M), "EXPOSE 8080")
check("-dev" not in re.sub(r"#.*", "", final), "runtime stage installs no -dev packages")
check("STOPSIGNAL SIGTERM" in final, "stops with SIGTERM")
for v in re.findall(r"\b(REDLOCKD_[A-Z_]+)=", dockerfile):
    used.append(("deploy/Dockerfile", v))
for m in re.findall(r"^\s*(?:CMD|ENTRYPOINT)\s+(\[.*\])", dockerfile, re.M):   # HEALTHCHECK's too
    note_args("deploy/Dockerfile", yaml.safe_load(m))

# ---- deploy/k8s ----
kust = yaml.safe_load(open(path("deploy", "k8s", "kustomization.yaml")))
check(kust.get("kind") == "Kustomization" and set(kust) <= {"apiVersion", "kind", "resources"},
      "kustomization.yaml: only apiVersion, kind, resources")
# shared-service.yaml is applied on its own (kubectl apply -f), beside
# redis-masters.yaml; every manifest of the folder is checked.
k8s_files = kust["resources"] + ["shared-service.yaml"]
check(set(k8s_files) == {f for f in os.listdir(path("deploy", "k8s")) if f.endswith(".yaml")} - {"kustomization.yaml"},
      f"deploy/k8s: every manifest is in kustomization.yaml or shared-service.yaml, checked: {sorted(k8s_files)}")
docs = []
for res_file in k8s_files:
    check(os.path.exists(path("deploy", "k8s", res_file)), f"kustomization lists a missing {res_file}")
    docs += [(res_file, d) for d in yaml.safe_load_all(open(path("deploy", "k8s", res_file))) if d]
kinds = {}
for res_file, d in docs:
    check(all(k in d for k in ("apiVersion", "kind", "metadata")), "every manifest has apiVersion, kind, metadata")
    failures.extend(schema_problems(f"deploy/k8s/{res_file}: {d.get('kind')}/{d['metadata'].get('name')}", d))
    kinds.setdefault(d["kind"], []).append(d)
check(len(docs) >= 4, "deploy/k8s: the manifests were read (%d)" % len(docs))
secret_keys = {x["metadata"]["name"]: sorted({**(x.get("data") or {}), **(x.get("stringData") or {})})
               for x in kinds.get("Secret", [])}
pods = [(name, pod) for _, d in docs for name, pod in pod_specs(d)]
for name, pod in pods:
    failures.extend(secret_read_problems("deploy/k8s " + name, pod, secret_keys))
sts = kinds.get("StatefulSet", [])
check(sum(s["spec"]["replicas"] for s in sts) == 5, "five Redis masters in StatefulSets")
for s in sts:
    check(s["spec"].get("volumeClaimTemplates"), "each master has a PersistentVolumeClaim")
    svc = [v for v in kinds.get("Service", []) if v["metadata"]["name"] == s["spec"]["serviceName"]]
    check(svc and svc[0]["spec"].get("clusterIP") == "None", "headless Service for stable per-pod DNS")
    c = s["spec"]["template"]["spec"]["containers"][0]
    limit = k8s_bytes(((c.get("resources") or {}).get("limits") or {}).get("memory"))
    check(limit, f"StatefulSet/{s['metadata']['name']}: a memory limit")
    failures.extend(redis_args_problems(f"deploy/k8s StatefulSet/{s['metadata']['name']}", c.get("args", []), limit))
secrets = set(secret_keys)
sidecars = shared = 0
for dep in kinds.get("Deployment", []):
    pod = dep["spec"]["template"]["spec"]
    where = f"deploy/k8s Deployment/{dep['metadata']['name']}"
    for c in pod["containers"]:
        if not str(c.get("image", "")).startswith("redlockd"):
            continue
        failures.extend(probe_problems(where, c))
        failures.extend(file_problems(where, pod, c, secret_keys))
        for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
            note_args("deploy/k8s", ((c.get(kind) or {}).get("exec") or {}).get("command") or [])
        check(c.get("resources", {}).get("requests") and c["resources"].get("limits"), "requests and limits")
        sc = c.get("securityContext", {})
        check(sc.get("readOnlyRootFilesystem") is True, "read-only root filesystem")
        check(sc.get("runAsNonRoot") is True or pod.get("securityContext", {}).get("runAsNonRoot") is True,
              "non-root")
        envs = {e["name"]: e.get("value") for e in c.get("env", [])}
        check(len(envs.get("REDLOCKD_MASTERS", "").split(",")) == 5, f"{where}: five masters")
        if len(pod["containers"]) >= 2:
            # A sidecar: its application reaches it over the Unix socket.
            sidecars += 1
            check(listeners(c)[1], f"{where}: the sidecar serves its application on a Unix socket")
            failures.extend(socket_problems(where, pod, c))
            check(envs.get("REDLOCKD_AUTH_TOKEN_FILE"), f"{where}: the sidecar wants a token")
        else:
            shared += 1
            failures.extend(service_problems(where, dep, c, kinds.get("Service", [])))
        for k in envs:
            used.append(("deploy/k8s", k))
        note_args("deploy/k8s", c.get("args", []) + c.get("command", []))
check(shared >= 1, "a Deployment of redlockd as a shared service")
check(sidecars >= 1, "an example Deployment with a redlockd sidecar")

# ---- deploy/systemd ----
unit = open(path("deploy", "systemd", "redlockd.service")).read()
for opt in ("NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateTmp=yes", "DynamicUser=yes",
            "KillSignal=SIGTERM", "RestrictAddressFamilies="):
    check(opt in unit, f"systemd unit sets {opt}")
exec_start = re.search(r"^ExecStart=(.*)$", unit, re.M).group(1).split()
note_args("deploy/systemd/redlockd.service", exec_start[1:])
for v in re.findall(r"^Environment=\"?(REDLOCKD_[A-Z_]+)=", unit, re.M):
    used.append(("deploy/systemd/redlockd.service", v))
for v in re.findall(r"^#?\s*(REDLOCKD_[A-Z_]+)=", open(path("deploy", "systemd", "redlockd.env")).read(), re.M):
    used.append(("deploy/systemd/redlockd.env", v))
failures.extend(systemd_problems(unit, BIN))

# ---- every setting handed to redlockd exists ----
check(len(used) >= 10, "found the settings the deployment files pass (%d)" % len(used))
for where, name in used:
    if name.startswith("--"):
        check(name[2:] in known_flags, f"{where}: {name} is not a redlockd flag")
    else:
        check(name in known_vars, f"{where}: {name} is not a redlockd variable")

# ---- negative controls: each check above must catch a deliberately broken copy ----
controls = 0


def control(what, problems, must_mention=""):
    global controls
    controls += 1
    check(problems and must_mention in " ".join(problems), f"negative control not caught: {what}")


side_dep = next(d for d in kinds["Deployment"] if len(d["spec"]["template"]["spec"]["containers"]) >= 2)
shared_dep = next(d for d in kinds["Deployment"] if len(d["spec"]["template"]["spec"]["containers"]) == 1)
dep = copy.deepcopy(side_dep)
pod = dep["spec"]["template"]["spec"]
pod["securityContex"] = pod.pop("securityContext")
control("a misspelt securityContext", schema_problems("control", dep), "securityContex")
dep = copy.deepcopy(side_dep)
dep["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
control("an unknown container field", schema_problems("control", dep), "volumeMount")
sts0 = copy.deepcopy(kinds["StatefulSet"][0])
sts0["spec"]["replica"] = sts0["spec"].pop("replicas")
control("a misspelt StatefulSet replicas", schema_problems("control", sts0), "replica")
dep = copy.deepcopy(side_dep)
del dep["spec"]["template"]["spec"]["containers"][0]["name"]
control("a container without a name", schema_problems("control", dep))

pod = copy.deepcopy(side_dep["spec"]["template"]["spec"])
pod["securityContext"].pop("fsGroup", None)
control("the Secret with no fsGroup", secret_read_problems("control", pod, secret_keys), "no fsGroup")
pod = copy.deepcopy(side_dep["spec"]["template"]["spec"])
pod["securityContext"].update(runAsUser=10002, runAsGroup=10002)
pod["securityContext"].pop("fsGroup", None)
control("another uid without fsGroup", secret_read_problems("control", pod, secret_keys), "uid 10002")
pod = copy.deepcopy(side_dep["spec"]["template"]["spec"])
pod["securityContext"].pop("runAsUser", None)
control("no runAsUser", secret_read_problems("control", pod, secret_keys), "without a runAsUser")

side = next(c for c in side_dep["spec"]["template"]["spec"]["containers"]
            if str(c.get("image", "")).startswith("redlockd"))


def probe_variant(listen, **probes):
    c = copy.deepcopy(side)
    c["env"] = [e for e in c["env"] if e["name"] != "REDLOCKD_LISTEN"] + [{"name": "REDLOCKD_LISTEN", "value": listen}]
    c["ports"] = [{"name": "http", "containerPort": 8080}]
    c.update(probes)
    return probe_problems("control", c)


http = lambda p, port="http": {"httpGet": {"path": p, "port": port}}   # noqa: E731
control("readiness on /readyz", probe_variant("0.0.0.0:8080", readinessProbe=http("/readyz")), "/readyz")
control("a probe on an unserved path", probe_variant("0.0.0.0:8080", livenessProbe=http("/health")), "/health")
control("a probe on another port", probe_variant("0.0.0.0:8080", livenessProbe=http("/healthz", 9090)), "9090")
control("an httpGet probe of a loopback listener", probe_variant("127.0.0.1:8080", livenessProbe=http("/healthz")),
        "loopback")
control("an exec probe that is not --health-check",
        probe_variant("127.0.0.1:8080", livenessProbe={"exec": {"command": ["redlockd", "--version"]}}), "--version")
check(not probe_variant("0.0.0.0:8080", livenessProbe=http("/healthz"), readinessProbe=http("/healthz")),
      "probe check: httpGet /healthz on the served port is fine")

control("a probe over HTTP of a Unix socket",
        probe_variant("unix:/run/redlockd/redlockd.sock", livenessProbe=http("/healthz")), "Unix socket only")


def socket_variant(change):
    """socket_problems of a changed copy of the sidecar's pod."""
    pod = copy.deepcopy(side_dep["spec"]["template"]["spec"])
    change(pod, next(c for c in pod["containers"] if str(c.get("image", "")).startswith("redlockd")),
           next(c for c in pod["containers"] if not str(c.get("image", "")).startswith("redlockd")))
    r = next(c for c in pod["containers"] if str(c.get("image", "")).startswith("redlockd"))
    return socket_problems("control", pod, r)


def set_env(c, name, value):
    c["env"] = [e for e in c["env"] if e["name"] != name] + [{"name": name, "value": value}]


check(not socket_variant(lambda pod, r, app: None), "socket check: the sidecar as shipped is fine")
control("the app outside the socket's group (no fsGroup)",
        socket_variant(lambda pod, r, app: pod["securityContext"].pop("fsGroup")), "no fsGroup")
control("a socket mode only its owner may use",
        socket_variant(lambda pod, r, app: set_env(r, "REDLOCKD_LISTEN_MODE", "0600")), "mode 0600")
control("the socket outside the shared volume",
        socket_variant(lambda pod, r, app: set_env(r, "REDLOCKD_LISTEN", "unix:/tmp/redlockd.sock")),
        "not an emptyDir")


def drop_socket_mount(pod, r, app):
    empty = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    app["volumeMounts"] = [m for m in app["volumeMounts"] if m["name"] not in empty]


control("the app not mounting the socket's volume", socket_variant(drop_socket_mount), "no other container")

shared_pod = shared_dep["spec"]["template"]["spec"]
shared_c = shared_pod["containers"][0]


def file_variant(change):
    c = copy.deepcopy(shared_c)
    change(c)
    return file_problems("control", shared_pod, c, secret_keys)


control("a principals file under no mount",
        file_variant(lambda c: set_env(c, "REDLOCKD_PRINCIPALS_FILE", "/etc/principals")), "not in a Secret")
control("a key the principals Secret lacks",
        file_variant(lambda c: set_env(c, "REDLOCKD_PRINCIPALS_FILE", "/etc/redlockd/principals/principal")),
        "has no principal")


def service_variant(change_c=None, change_svc=None):
    c, svcs = copy.deepcopy(shared_c), copy.deepcopy(kinds["Service"])
    if change_c:
        change_c(c)
    if change_svc:
        for v in svcs:
            change_svc(v)
    return service_problems("control", shared_dep, c, svcs)


check(not service_variant(), "service check: the shared service as shipped is fine")
control("a Service to a port redlockd does not serve",
        service_variant(change_svc=lambda v: [p.update(targetPort=9999) for p in v["spec"]["ports"]]), "9999")
control("a shared service without HTTPS",
        service_variant(lambda c: c.update(env=[e for e in c["env"] if "TLS_CERT" not in e["name"]])), "HTTPS")
control("a shared service that knows no caller",
        service_variant(lambda c: c.update(env=[e for e in c["env"] if "PRINCIPALS" not in e["name"]])), "open")
control("a Service selecting other pods",
        service_variant(change_svc=lambda v: v["spec"].update(selector={"app": "other"})), "no Service")

margs = kinds["StatefulSet"][0]["spec"]["template"]["spec"]["containers"][0]["args"]
swap = lambda a, b: [b if x == a else x for x in margs]   # noqa: E731
control("appendfsync everysec", redis_args_problems("control", swap("always", "everysec")), "appendfsync")
control("an evicting policy", redis_args_problems("control", swap("noeviction", "volatile-lru")), "noeviction")
control("maxmemory above the limit", redis_args_problems("control", margs, k8s_bytes("200Mi")), "not below")
i = margs.index("--maxmemory") if "--maxmemory" in margs else len(margs)
control("no maxmemory", redis_args_problems("control", margs[:i] + margs[i + 2:]), "--maxmemory set")

old = re.sub(r" *&& groupadd[^\n]*\n", "", dockerfile).replace(" --gid 10001", "")
control("a Dockerfile user without its group", dockerfile_user_problems(old), "groupadd")
old = re.sub(r'CMD \["/usr/local/bin/redlockd", "--health-check"\]',
             """CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8080"]""", dockerfile)
control("a HEALTHCHECK with a fixed address", dockerfile_user_problems(old), "HEALTHCHECK")

control("a misspelt systemd key", systemd_problems(unit.replace("DynamicUser=", "DynamicUzer="), BIN),
        "DynamicUzer")
control("no binary at ExecStart's path", systemd_problems(unit, None), "not executable")
check("no-such-flag" not in known_flags and "health-check" in known_flags,
      "the flag list is redlockd's: --health-check in it, --no-such-flag not")

if failures:
    print("deployment checks failed:")
    for f in failures:
        print("  -", f)
    sys.exit(1)
print("deployment checks passed: %d manifests against the Kubernetes 1.22 schema, %d settings against "
      "redlockd --help, systemd-analyze verify, %d negative controls caught" % (len(docs), len(used), controls))
