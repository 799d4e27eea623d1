#!/usr/bin/env python3
"""The containers suite's run of the Kubernetes sidecar's Unix socket
(containers.py runs it): deploy/k8s/app-with-sidecar.yaml's pod, made with
podman from the values the manifest itself holds, so that the manifest and
this test cannot drift apart.

No cluster runs here, so what the kubelet would do is written out, as
Kubernetes 1.22 to 1.31 do it (pkg/volume: emptyDir, SetVolumeOwnership):

* the pod: a podman pod on the compose project's network (its containers
  share one network namespace, as a pod's do), with the five StatefulSet
  names of REDLOCKD_MASTERS mapped to the compose masters' addresses
  (--add-host), so that the manifest's REDLOCKD_MASTERS is used as written;
* an emptyDir: a directory made 0777 root:root, then, with fsGroup, group
  fsGroup and the setgid bit (2777);
* a Secret volume: its keys (those of the manifest's Secret, with values
  made anew) as files owned by root with the volume's defaultMode, and with
  fsGroup group fsGroup and mode | 0440; always mounted read-only;
* a container: runAsUser/runAsGroup (the container's, else the pod's), with
  fsGroup and supplementalGroups added to its groups; its env values;
  command and args (replacing the image's entrypoint and command);
  readOnlyRootFilesystem (a read-only root, no tmpfs added), capabilities
  dropped, no new privileges, the memory and CPU limits; its volumeMounts
  (readOnly as written);
* a probe: its exec command, run in the container (podman exec) within its
  timeoutSeconds.

Then what a user would see: the readiness probe passes over the socket; the
socket has the manifest's mode, redlockd's user as owner and the pod's
fsGroup as group; the app, running its script from the manifest as its own
user, takes and releases its lock over the socket; from the app's
container, a lock is taken (201), refused to a second taker (409), released
(204), and refused without the token (401), nothing answers on TCP (there is
no TCP listener), and the socket's directory is read-only; the `redlock`
client (the redlockd image's) runs a command under a lock over the socket;
a user of neither the socket's owner nor its group cannot connect
(Permission denied: negative control), and can once given the fsGroup; a
redlockd killed (SIGKILL, as an OOM kill or a failed liveness probe would)
leaves its socket in the emptyDir, and when it starts again it replaces the
stale socket and serves; a stop (SIGTERM) exits 0 and removes the socket.
"""
import stat
from http.client import HTTPConnection

from containers_setup import *  # noqa: F401,F403
from containers_checks import *  # noqa: F401,F403

SIDECAR = os.path.join(ROOT, "deploy", "k8s", "app-with-sidecar.yaml")
KUSTOMIZATION = os.path.join(ROOT, "deploy", "k8s", "kustomization.yaml")
PROBE_DEADLINE_S = 30     # redlockd's readiness probe passing after a start
APP_DEADLINE_S = 30       # the app's first lock taken and released


class UnixHTTP(HTTPConnection):
    """HTTP over a Unix socket, from this machine (as root)."""

    def __init__(self, path, timeout=5):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def unix_get(path, url):
    c = UnixHTTP(path)
    try:
        c.request("GET", url)
        r = c.getresponse()
        return r.status, r.read().decode()
    finally:
        c.close()


def k8s_bytes(v):
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|k|M|G)?", str(v))
    return int(m.group(1)) * {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 10**3, "M": 10**6,
                              "G": 10**9}[m.group(2)]


def k8s_cpus(v):
    v = str(v)
    return int(v[:-1]) / 1000 if v.endswith("m") else float(v)


def sidecar_plan():
    """What the manifest says, and what this test relies on it saying."""
    docs = [d for d in yaml.safe_load_all(open(SIDECAR)) if d]
    deps = [d for d in docs if d.get("kind") == "Deployment"]
    check(len(deps) == 1, f"app-with-sidecar.yaml: one Deployment, found {len(deps)}")
    pod = deps[0]["spec"]["template"]["spec"]
    side = [c for c in pod["containers"] if str(c.get("image", "")).startswith("redlockd")]
    check(len(side) == 1, "app-with-sidecar.yaml: one redlockd container")
    r = side[0]
    apps = [c for c in pod["containers"] if c is not r]
    check(apps, "app-with-sidecar.yaml: an application container beside redlockd")
    env = {e["name"]: e.get("value") for e in r.get("env") or []}
    listen = [x.strip() for x in (env.get("REDLOCKD_LISTEN") or "").split(",") if x.strip()]
    socks = [x[len("unix:"):] for x in listen if x.startswith("unix:")]
    check(len(socks) == 1, f"app-with-sidecar.yaml: REDLOCKD_LISTEN has one unix: listener, found {listen}")
    sock = socks[0]
    vols = {v["name"]: v for v in pod.get("volumes") or []}
    mount = next((m for m in r.get("volumeMounts") or [] if m["mountPath"].rstrip("/") == os.path.dirname(sock)),
                 None)
    check(mount and "emptyDir" in vols.get(mount["name"], {}),
          f"app-with-sidecar.yaml: the socket's directory {os.path.dirname(sock)} is an emptyDir redlockd mounts")
    app_mounts = [(c, m) for c in apps for m in c.get("volumeMounts") or [] if m["name"] == mount["name"]]
    check(len(app_mounts) == 1, "app-with-sidecar.yaml: the application container mounts the socket's emptyDir")
    app, app_mount = app_mounts[0]
    app_sock = os.path.join(app_mount["mountPath"], os.path.basename(sock))
    script = " ".join(str(x) for x in (app.get("command") or []) + (app.get("args") or []))
    check(app_sock in script, f"app-with-sidecar.yaml: the app's script names the socket {app_sock}")
    # The Secrets' keys, from the manifests kubectl apply -k applies.
    secret_keys = {}
    for res in yaml.safe_load(open(KUSTOMIZATION))["resources"]:
        for d in yaml.safe_load_all(open(os.path.join(ROOT, "deploy", "k8s", res))):
            if d and d.get("kind") == "Secret":
                secret_keys[d["metadata"]["name"]] = sorted({**(d.get("data") or {}), **(d.get("stringData") or {})})
    for c in pod["containers"]:
        for m in c.get("volumeMounts") or []:
            sec = vols.get(m["name"], {}).get("secret")
            check(sec is None or sec.get("secretName") in secret_keys,
                  f"app-with-sidecar.yaml: Secret {sec and sec.get('secretName')} is in the kustomization")
    return dict(pod=pod, redlockd=r, app=app, env=env, listen=listen, sock=sock, app_sock=app_sock,
                mode=int(env.get("REDLOCKD_LISTEN_MODE") or "0660", 8), volume=mount["name"], vols=vols,
                secret_keys=secret_keys)


def identity(pod, c):
    """(uid, gid, extra groups) the kubelet gives container c."""
    psc, csc = pod.get("securityContext") or {}, c.get("securityContext") or {}
    uid = csc.get("runAsUser", psc.get("runAsUser"))
    gid = csc.get("runAsGroup", psc.get("runAsGroup"))
    check(uid is not None and gid is not None, f"app-with-sidecar.yaml: {c['name']} has runAsUser and runAsGroup")
    extra = [g for g in [psc.get("fsGroup"), *(psc.get("supplementalGroups") or [])] if g is not None]
    return uid, gid, extra


def make_volumes(plan, base):
    """The pod's volumes as the kubelet makes them (module docstring), under
    base; returns {volume name: host directory}."""
    pod = plan["pod"]
    fs = (pod.get("securityContext") or {}).get("fsGroup")
    out = {}
    for name, v in plan["vols"].items():
        d = os.path.join(base, name)
        os.mkdir(d)
        if "emptyDir" in v:
            os.chmod(d, 0o777)
        elif "secret" in v:
            sec = v["secret"]
            items = sec.get("items") or [{"key": k, "path": k} for k in plan["secret_keys"][sec["secretName"]]]
            for it in items:
                f = os.path.join(d, it["path"])
                with open(f, "w") as fh:
                    fh.write(secrets.token_hex(24))
                mode = it.get("mode", sec.get("defaultMode", 0o644))
                if fs is not None:
                    os.chown(f, 0, fs)
                    mode |= 0o440
                os.chmod(f, mode)
            os.chmod(d, 0o755)
        else:
            raise Fail(f"app-with-sidecar.yaml: volume {name}: only emptyDir and secret are made here")
        if fs is not None:
            os.chown(d, 0, fs)
            os.chmod(d, stat.S_IMODE(os.stat(d).st_mode) | 0o2110 | (0o440 if "secret" in v else 0o660))
        out[name] = d
    return out


def container_args(plan, c, dirs):
    """podman run's arguments for container c of the pod (module docstring)."""
    pod = plan["pod"]
    uid, gid, extra = identity(pod, c)
    psc, csc = pod.get("securityContext") or {}, c.get("securityContext") or {}
    if csc.get("runAsNonRoot", psc.get("runAsNonRoot")):
        check(uid != 0, f"app-with-sidecar.yaml: {c['name']}: runAsNonRoot with runAsUser 0")
    a = ["--user", f"{uid}:{gid}"]
    for g in extra:
        a += ["--group-add", str(g)]
    if csc.get("readOnlyRootFilesystem"):
        a += ["--read-only", "--read-only-tmpfs=false"]
    if "ALL" in ((csc.get("capabilities") or {}).get("drop") or []):
        a += ["--cap-drop", "all"]
    if csc.get("allowPrivilegeEscalation") is False:
        a += ["--security-opt", "no-new-privileges"]
    limits = (c.get("resources") or {}).get("limits") or {}
    if "memory" in limits:
        a += ["--memory", str(k8s_bytes(limits["memory"]))]
    if "cpu" in limits:
        a += ["--cpus", str(k8s_cpus(limits["cpu"]))]
    for e in c.get("env") or []:
        check("value" in e, f"app-with-sidecar.yaml: {c['name']}: env {e['name']} without a value")
        a += ["-e", f"{e['name']}={e['value']}"]
    for m in c.get("volumeMounts") or []:
        ro = m.get("readOnly") or "secret" in plan["vols"][m["name"]]
        a += ["-v", f"{dirs[m['name']]}:{m['mountPath']}" + (":ro" if ro else "")]
    if c.get("command"):
        a += ["--entrypoint", json.dumps(c["command"])]
    return a, [str(x) for x in c.get("args") or []]


def probe(name, p, deadline_s):
    """Runs exec probe p in container name until it passes; its last output."""
    cmd = [str(x) for x in p["exec"]["command"]]
    deadline = time.monotonic() + deadline_s
    out = ""
    while time.monotonic() < deadline:
        st, o, e = podman("exec", name, *cmd, check=False, timeout=30)
        out = (o + e).strip()
        if st == 0:
            return out
        time.sleep(0.5)
    raise Fail(f"{name}: the probe {cmd} did not pass within {deadline_s} s; last: {out!r}")


def sidecar_socket(image, redis_services):
    """Runs the sidecar's pod (module docstring) beside the compose project's
    masters, which must be up. Removes what it made, also on failure."""
    plan = sidecar_plan()
    pod_name = PROJECT + "-sidecar"
    r_name, app_name = pod_name + "-redlockd", pod_name + "-app"
    app_image = plan["app"]["image"]
    base = tempfile.mkdtemp(dir=STATE, prefix=f"sidecar-{PROJECT}.")
    os.chmod(base, 0o755)
    try:
        with step(f"sidecar: stand-in {app_image}") as s:
            standin(s, app_image, "curl-standin.Containerfile", SLIM)
        with step("sidecar: the pod of deploy/k8s/app-with-sidecar.yaml, until its readiness probe passes") as s:
            dirs = make_volumes(plan, base)
            host_sock = os.path.join(dirs[plan["volume"]], os.path.basename(plan["sock"]))
            # The compose masters under the StatefulSet's names.
            masters = [container(sv) for sv in redis_services]
            net = podman("inspect", "--format", "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}",
                         masters[0])[1].split()[0]
            ips = [podman("inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                          m)[1].strip() for m in masters]
            names = [a.rsplit(":", 1)[0] for a in plan["env"]["REDLOCKD_MASTERS"].split(",")]
            check(len(names) == len(ips) == 5, f"five masters: the manifest names {names}, compose runs {masters}")
            hosts = [x for n, ip in zip(names, ips) for x in ("--add-host", f"{n}:{ip}")]
            podman("pod", "create", "--name", pod_name, "--network", net, *hosts, timeout=60)
            extra_containers.append(pod_name)
            args, cmd = container_args(plan, plan["redlockd"], dirs)
            podman("run", "-d", "--pod", pod_name, "--name", r_name, *args, image, *cmd, timeout=60)
            out = probe(r_name, plan["redlockd"]["readinessProbe"], PROBE_DEADLINE_S)
            check(f"unix:{plan['sock']}" in out, f"the probe did not ask the socket: {out!r}")
            s.note = f"({out})"
        with step("sidecar: checks") as s:
            uid, gid, extra = identity(plan["pod"], plan["redlockd"])
            fs = (plan["pod"].get("securityContext") or {}).get("fsGroup")
            st = os.stat(host_sock)
            group = fs if fs is not None else gid
            check(stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == plan["mode"]
                  and st.st_uid == uid and st.st_gid == group,
                  f"the socket: mode {stat.S_IMODE(st.st_mode):04o} owner {st.st_uid}:{st.st_gid}, expected "
                  f"a socket {plan['mode']:04o} {uid}:{group}")
            # The masters: a quorum before the app starts.
            deadline, last = time.monotonic() + READY_DEADLINE_S, ""
            while time.monotonic() < deadline:
                try:
                    code, last = unix_get(host_sock, "/readyz")
                    if code == 200 and json.loads(last)["masters"] and all(m["up"] for m in json.loads(last)["masters"]):
                        break
                except (OSError, ValueError, KeyError) as e:
                    last = repr(e)
                time.sleep(0.5)
            else:
                raise Fail(f"sidecar: /readyz on the socket did not show five masters up: {last[:400]}")

            # The app, its script as the manifest writes it.
            args, cmd = container_args(plan, plan["app"], dirs)
            podman("run", "-d", "--pod", pod_name, "--name", app_name, *args, app_image, *cmd, timeout=60)
            deadline, logs = time.monotonic() + APP_DEADLINE_S, ""
            while time.monotonic() < deadline:
                o, e = podman("logs", app_name)[1:]
                logs = o + e
                if "released example-job: 204" in logs:
                    break
                time.sleep(0.5)
            else:
                raise Fail(f"sidecar: the app did not take and release example-job within {APP_DEADLINE_S} s; "
                           f"its log: {tail(logs, 10)!r}")
            check("took example-job" in logs, f"sidecar: the app's log: {tail(logs, 5)!r}")
            _, metrics = unix_get(host_sock, "/metrics")
            for m in ("redlockd_grants_total", "redlockd_releases_total"):
                v = re.search(r"^%s(?:\{[^}]*\})? (\d+)" % m, metrics, re.M)
                check(v and int(v.group(1)) >= 1, f"sidecar: {m} after the app's lock: {v and v.group(0)}")

            # From the app's container, as its user.
            a_uid, a_gid, a_extra = identity(plan["pod"], plan["app"])
            ids = podman("exec", app_name, "id", "-u")[1].strip(), podman("exec", app_name, "id", "-G")[1].split()
            check(ids[0] == str(a_uid) and all(str(g) in ids[1] for g in [a_gid, *a_extra]),
                  f"sidecar: the app runs as {ids}, expected {a_uid} with groups {[a_gid, *a_extra]}")
            tok_var = plan["env"]["REDLOCKD_AUTH_TOKEN_FILE"]
            tok_mount = next(m for m in plan["redlockd"]["volumeMounts"] if tok_var.startswith(m["mountPath"] + "/"))
            app_tok = next(m["mountPath"] for m in plan["app"]["volumeMounts"] if m["name"] == tok_mount["name"]) \
                + tok_var[len(tok_mount["mountPath"]):]
            sock = plan["app_sock"]
            script = f'''
auth="Authorization: Bearer $(cat {app_tok})"
tok=$(curl -s --unix-socket {sock} -X POST -H "$auth" -d '{{"ttl_ms":20000}}' http://localhost/locks/ct-sidecar \
  | sed -n 's/.*"token":"\\([^"]*\\)".*/\\1/p')
echo "token ${{#tok}}"
curl -s --unix-socket {sock} -o /dev/null -w 'again %{{http_code}}\\n' -X POST -H "$auth" http://localhost/locks/ct-sidecar
curl -s --unix-socket {sock} -o /dev/null -w 'release %{{http_code}}\\n' -X DELETE -H "$auth" -H "Lock-Token: $tok" \
  http://localhost/locks/ct-sidecar
curl -s --unix-socket {sock} -o /dev/null -w 'no-token %{{http_code}}\\n' -X POST http://localhost/locks/ct-sidecar
curl -s -o /dev/null http://127.0.0.1:8080/healthz; echo "tcp $?"
touch {os.path.dirname(sock)}/x 2>/dev/null; echo "touch $?"
rm -f {sock} 2>/dev/null; echo "rm $?"
'''
            out = podman("exec", app_name, "sh", "-c", script, timeout=60)[1]
            got = dict(l.split(" ", 1) for l in out.strip().splitlines() if " " in l)
            check(int(got.get("token", "0")) >= 20, f"sidecar: the app's acquire over the socket: {out!r}")
            check(got.get("again") == "409" and got.get("release") == "204" and got.get("no-token") == "401",
                  f"sidecar: from the app: second acquire 409, release 204, no token 401; got {got}")
            tcp = [x for x in plan["listen"] if not x.startswith("unix:")]
            if not tcp:
                check(got.get("tcp") == "7", f"sidecar: something answers on TCP 127.0.0.1:8080 in the pod: {got}")
            if next(m for m in plan["app"]["volumeMounts"] if m["name"] == plan["volume"]).get("readOnly"):
                check(got.get("touch") != "0" and got.get("rm") != "0" and stat.S_ISSOCK(os.stat(host_sock).st_mode),
                      f"sidecar: the app could write the socket's directory: {got}")

            # The redlock client (the redlockd image's) over the socket, as the app's user.
            cli = pod_name + "-cli"
            extra_containers.append(cli)
            st_, o, e = podman("run", "--rm", "--pod", pod_name, "--name", cli, *container_args(plan, plan["app"], dirs)[0],
                               "-e", f"REDLOCK_URL=unix:{sock}", "--entrypoint", '["redlock"]', image,
                               "--auth-token-file", app_tok, "run", "--ttl", "5s", "ct-sidecar-cli", "--",
                               "redlock", "--auth-token-file", app_tok, "status", "ct-sidecar-cli",
                               check=False, timeout=60)
            extra_containers.remove(cli)
            check(st_ == 0 and "held" in o, f"sidecar: redlock run/status over the socket: {st_} {o!r} {e!r}")

            # Negative control: a user outside the socket's group cannot
            # connect; the same user given the pod's fsGroup can.
            outsider = ["--user", "65534:65534", "-v", f"{dirs[plan['volume']]}:{os.path.dirname(sock)}:ro"]
            probe_cmd = ["curl", "-sSv", "--unix-socket", sock, "-o", "/dev/null", "-w", "%{http_code}",
                         "http://localhost/healthz"]
            st_, o, e = podman("run", "--rm", "--pod", pod_name, *outsider, app_image, *probe_cmd, check=False)
            check(st_ == 7 and "Permission denied" in e,
                  f"sidecar: uid 65534 without the socket's group connected: {st_} {o!r} {e!r}")
            st_, o, e = podman("run", "--rm", "--pod", pod_name, *outsider, "--group-add", str(group), app_image,
                               *probe_cmd, check=False)
            check(st_ == 0 and o == "200", f"sidecar: uid 65534 with group {group}: {st_} {o!r} {e!r}")

            # Killed: the socket stays; started again: replaced, served.
            podman("kill", "--signal", "KILL", r_name)
            podman("wait", r_name, timeout=30)
            check(stat.S_ISSOCK(os.stat(host_sock).st_mode), "sidecar: the socket is gone after SIGKILL")
            podman("start", r_name)
            probe(r_name, plan["redlockd"]["livenessProbe"], PROBE_DEADLINE_S)
            out = podman("exec", app_name, "sh", "-c", script, timeout=60)[1]
            got = dict(l.split(" ", 1) for l in out.strip().splitlines() if " " in l)
            check(int(got.get("token", "0")) >= 20 and got.get("release") == "204",
                  f"sidecar: the app after redlockd's restart: {got}")

            # Stopped: exit 0, the socket removed.
            t0 = time.monotonic()
            podman("stop", "-t", "15", r_name, timeout=30)
            dt = time.monotonic() - t0
            code = podman("inspect", "--format", "{{.State.ExitCode}}", r_name)[1].strip()
            check(code == "0" and dt < STOP_LIMIT_S, f"sidecar: redlockd exited {code} after {dt:.1f} s on SIGTERM")
            check(not os.path.exists(host_sock), "sidecar: the socket is still there after the stop")
            s.note = "(socket %04o %d:%d; app %d:%d)" % (plan["mode"], uid, group, a_uid, a_gid)
    finally:
        with step("sidecar: teardown (pod, volumes)") as s:
            if pod_name in extra_containers:
                st_, _, err = podman("pod", "rm", "-f", "-t", "2", pod_name, check=False, timeout=60)
                extra_containers.remove(pod_name)
                if st_ != 0:
                    s.note = "(podman pod rm: %s)" % tail(err, 2)
            shutil.rmtree(base, ignore_errors=True)
