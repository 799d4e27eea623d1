#!/usr/bin/env python3
"""Engine-free checks of the deployment files (no Docker engine or cluster
runs here): docker-compose validates the compose file, the Kubernetes YAML
parses and has the shape the README promises, and every flag or REDLOCKD_*
variable that compose, the Dockerfile, the manifests and the systemd unit
hand to redlockd is one that `redlockd --help` lists.

usage: check_deploy.py SOURCE_ROOT REDLOCKD_BINARY
"""
import os
import re
import subprocess
import sys

import yaml

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
    cmd = " ".join(s.get("command", []))
    check("--appendonly yes" in cmd, f"{name}: appendonly yes")
    check("replicaof" not in cmd and "slaveof" not in cmd, f"{name}: no replication")
    check("ports" not in s, f"{name}: not published (protected mode is off)")
    check("healthcheck" in s, f"{name}: healthcheck")
    check(str(s.get("image", "")).startswith("redis:7"), f"{name}: Redis 7")
    vols = [v.split(":")[0] if isinstance(v, str) else v.get("source") for v in s.get("volumes", [])]
    check(len(vols) == 1 and vols[0] not in volumes_seen, f"{name}: its own volume")
    volumes_seen.update(vols)
r = services.get("redlockd", {})
check(r.get("build", {}).get("dockerfile") == "deploy/Dockerfile", "redlockd built from deploy/Dockerfile")
check(r.get("ports"), "redlockd publishes its port")
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

# ---- deploy/Dockerfile ----
dockerfile = open(path("deploy", "Dockerfile")).read()
stages = re.findall(r"^FROM\s+(\S+)", dockerfile, re.M)
check(len(stages) >= 2 and all("bookworm" in s for s in stages), "multi-stage from Debian bookworm")
final = dockerfile[dockerfile.rindex("\nFROM"):]
check(re.search(r"^USER\s+(?!root|0\b)\S+", final, re.M), "runtime stage runs as non-root")
check("HEALTHCHECK" in final and "/healthz" in final, "HEALTHCHECK on /healthz")
check(re.search(r"^EXPOSE\s+8080", final, re.M), "EXPOSE 8080")
check("-dev" not in re.sub(r"#.*", "", final), "runtime stage installs no -dev packages")
check("STOPSIGNAL SIGTERM" in final, "stops with SIGTERM")
for v in re.findall(r"\b(REDLOCKD_[A-Z_]+)=", dockerfile):
    used.append(("deploy/Dockerfile", v))
for m in re.findall(r"^(?:CMD|ENTRYPOINT)\s+(\[.*\])", dockerfile, re.M):
    note_args("deploy/Dockerfile", yaml.safe_load(m))

# ---- deploy/k8s ----
kust = yaml.safe_load(open(path("deploy", "k8s", "kustomization.yaml")))
docs = []
for res_file in kust["resources"]:
    check(os.path.exists(path("deploy", "k8s", res_file)), f"kustomization lists a missing {res_file}")
    docs += [d for d in yaml.safe_load_all(open(path("deploy", "k8s", res_file))) if d]
kinds = {}
for d in docs:
    check(all(k in d for k in ("apiVersion", "kind", "metadata")), "every manifest has apiVersion, kind, metadata")
    kinds.setdefault(d["kind"], []).append(d)
sts = kinds.get("StatefulSet", [])
check(sum(s["spec"]["replicas"] for s in sts) == 5, "five Redis masters in StatefulSets")
for s in sts:
    check(s["spec"].get("volumeClaimTemplates"), "each master has a PersistentVolumeClaim")
    svc = [v for v in kinds.get("Service", []) if v["metadata"]["name"] == s["spec"]["serviceName"]]
    check(svc and svc[0]["spec"].get("clusterIP") == "None", "headless Service for stable per-pod DNS")
    args = " ".join(s["spec"]["template"]["spec"]["containers"][0].get("args", []))
    check("--appendonly yes" in args and "replicaof" not in args, "masters: appendonly, no replication")
secrets = {x["metadata"]["name"] for x in kinds.get("Secret", [])}
sidecars = 0
for dep in kinds.get("Deployment", []):
    pod = dep["spec"]["template"]["spec"]
    for c in pod["containers"]:
        if not str(c.get("image", "")).startswith("redlockd"):
            continue
        sidecars += 1
        check(len(pod["containers"]) >= 2, "redlockd runs beside an application container")
        check(c.get("livenessProbe", {}).get("httpGet", {}).get("path") == "/healthz", "liveness on /healthz")
        check(c.get("readinessProbe", {}).get("httpGet", {}).get("path") == "/readyz", "readiness on /readyz")
        check(c.get("resources", {}).get("requests") and c["resources"].get("limits"), "requests and limits")
        sc = c.get("securityContext", {})
        check(sc.get("readOnlyRootFilesystem") is True, "read-only root filesystem")
        check(sc.get("runAsNonRoot") is True or pod.get("securityContext", {}).get("runAsNonRoot") is True,
              "non-root")
        envs = {e["name"]: e.get("value") for e in c.get("env", [])}
        tok = envs.get("REDLOCKD_AUTH_TOKEN_FILE", "")
        mounts = [m for m in c.get("volumeMounts", []) if tok.startswith(m["mountPath"])]
        vols = {v["name"]: v for v in pod.get("volumes", [])}
        check(mounts and vols.get(mounts[0]["name"], {}).get("secret", {}).get("secretName") in secrets,
              "the auth token comes from a Secret")
        check(len(envs.get("REDLOCKD_MASTERS", "").split(",")) == 5, "sidecar names five masters")
        for k in envs:
            used.append(("deploy/k8s", k))
        note_args("deploy/k8s", c.get("args", []) + c.get("command", []))
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

# ---- every setting handed to redlockd exists ----
check(len(used) >= 10, "found the settings the deployment files pass (%d)" % len(used))
for where, name in used:
    if name.startswith("--"):
        check(name[2:] in known_flags, f"{where}: {name} is not a redlockd flag")
    else:
        check(name in known_vars, f"{where}: {name} is not a redlockd variable")

if failures:
    print("deployment checks failed:")
    for f in failures:
        print("  -", f)
    sys.exit(1)
print("deployment checks passed: %d settings checked against redlockd --help" % len(used))
