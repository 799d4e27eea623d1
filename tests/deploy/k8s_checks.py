#!/usr/bin/env python3
"""The deploy suite's checks of Kubernetes manifests that a schema check
cannot make, as functions of the parsed manifests (check_deploy.py runs
them on deploy/k8s and feeds each a broken copy too), and the schema check
itself: Kubernetes 1.22's typed models from Debian's python3-kubernetes."""
import json
import os
import re

from kubernetes import client as k8s


def k8s_bytes(v):
    """Kubernetes quantities: 512Mi, 1Gi, 500M, 1000."""
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|k|M|G|T)?", str(v or ""))
    if not m:
        return None
    unit = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
            "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    return int(m.group(1)) * unit[m.group(2)]



API = k8s.ApiClient()


class _Answer:   # what ApiClient.deserialize reads: a body in .data
    def __init__(self, doc):
        self.data = json.dumps(doc)


def _dropped(orig, back, where):
    if isinstance(orig, dict):
        if not isinstance(back, dict):
            return [where or "."]
        out = []
        for k, v in orig.items():
            if k not in back:
                if v is not None:
                    out.append(f"{where}.{k}")
            else:
                out += _dropped(v, back[k], f"{where}.{k}")
        return out
    if isinstance(orig, list):
        if not isinstance(back, list) or len(back) != len(orig):
            return [where]
        return [p for i, (x, y) in enumerate(zip(orig, back)) for p in _dropped(x, y, f"{where}[{i}]")]
    return []


def schema_problems(where, doc):
    """Deserialises doc into the typed model of its kind (Kubernetes 1.22's
    API, Debian's python3-kubernetes 22) and back: a field that did not
    survive is one the API does not have (misspelt or unknown)."""
    version = str(doc.get("apiVersion", "")).split("/")[-1]
    model = version[:1].upper() + version[1:] + str(doc.get("kind", ""))
    if not hasattr(k8s, model):
        return [f"{where}: no Kubernetes schema for {doc.get('apiVersion')} {doc.get('kind')}"]
    try:
        obj = API.deserialize(_Answer(doc), model)
    except (ValueError, TypeError, AttributeError) as e:
        return [f"{where}: not a valid {model}: {e}"]
    back = API.sanitize_for_serialization(obj)
    return [f"{where}: {doc['kind']} has no field {p} (misspelt or unknown)"
            for p in _dropped(doc, back, "")]


def pod_specs(doc):
    """(name, pod spec) of a workload manifest."""
    spec = doc.get("spec") or {}
    if doc.get("kind") == "Pod":
        return [(doc["metadata"]["name"], spec)]
    tmpl = (spec.get("template") or {}).get("spec")
    if doc.get("kind") == "CronJob":
        tmpl = (((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}).get("spec")
    return [(f"{doc['kind']}/{doc['metadata']['name']}", tmpl)] if tmpl else []


def secret_read_problems(where, pod, secret_keys):
    """Every container that mounts a Secret can read each file of it. The
    kubelet writes the files owned by root, with the item's mode or the
    volume's defaultMode (0644 if unset); with fsGroup the group is fsGroup
    and the mode gains 0440 (volume.SetVolumeOwnership, read-only mask). A
    container reads a file as its runAsUser, with runAsGroup, fsGroup and
    supplementalGroups as its groups."""
    psc = pod.get("securityContext") or {}
    fs = psc.get("fsGroup")
    vols = {v["name"]: v for v in pod.get("volumes") or []}
    out = []
    for c in (pod.get("initContainers") or []) + (pod.get("containers") or []):
        csc = c.get("securityContext") or {}
        uid = csc.get("runAsUser", psc.get("runAsUser"))
        gid = csc.get("runAsGroup", psc.get("runAsGroup"))
        groups = {g for g in [gid, fs, *(psc.get("supplementalGroups") or [])] if g is not None}
        for m in c.get("volumeMounts") or []:
            sec = vols.get(m["name"], {}).get("secret")
            if sec is None:
                continue
            if uid is None:
                out.append(f"{where}: container {c['name']} mounts Secret {sec.get('secretName')} without "
                           "a runAsUser, so whether it can read it depends on the image")
                continue
            default = sec.get("defaultMode", 0o644)
            items = sec.get("items") or [{"key": k, "path": k} for k in
                                         secret_keys.get(sec.get("secretName"), ["*"])]
            for it in items:
                mode = it.get("mode", default) | (0o440 if fs is not None else 0)
                group = fs if fs is not None else 0
                ok = (uid == 0 and mode & 0o400) or (group in groups and mode & 0o040) or mode & 0o004
                if not ok:
                    out.append(f"{where}: container {c['name']} (uid {uid}, groups {sorted(groups)}) cannot "
                               f"read {m['mountPath']}/{it['path']}: owner 0, group {group}, mode {mode:04o}"
                               + ("" if fs is not None else " (no fsGroup)"))
    return out


SERVED_PATHS = {"/healthz", "/readyz", "/metrics"}


def listeners(c):
    """A redlockd container's listeners: (TCP ADDR:PORT list, Unix socket paths)."""
    envs = {e["name"]: e.get("value") for e in c.get("env") or []}
    ls = [x.strip() for x in (envs.get("REDLOCKD_LISTEN") or "127.0.0.1:8080").split(",") if x.strip()]
    return [x for x in ls if not x.startswith("unix:")], [x[len("unix:"):] for x in ls if x.startswith("unix:")]


def probe_problems(where, c):
    """A redlockd container's probes ask what it serves, where it listens:
    /healthz (or `redlockd --health-check`, which asks it on the first TCP
    listener, else the Unix socket) on a REDLOCKD_LISTEN port, never
    /readyz: a readiness on /readyz takes every application pod out of its
    Service while the masters lack a quorum, a liveness on it restarts
    sidecars that cannot help. The kubelet dials the pod's address: it
    cannot reach a loopback listener or a Unix socket."""
    tcp, _ = listeners(c)
    ports = {p.get("name"): p["containerPort"] for p in c.get("ports") or []}
    out = []
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        p = c.get(kind)
        if not p:
            if kind != "startupProbe":
                out.append(f"{where}: {c['name']} has no {kind}")
            continue
        if "exec" in p:
            cmd = [str(x) for x in (p["exec"] or {}).get("command") or []]
            if not (cmd and os.path.basename(cmd[0]) == "redlockd" and "--health-check" in cmd):
                out.append(f"{where}: {c['name']} {kind} runs {cmd}, not redlockd --health-check")
            continue
        probe = p.get("httpGet") or p.get("tcpSocket")
        if probe is None:
            out.append(f"{where}: {c['name']} {kind} is neither exec, httpGet nor tcpSocket")
            continue
        if not tcp:
            out.append(f"{where}: {c['name']} {kind}: redlockd listens on a Unix socket only, which the kubelet "
                       "cannot dial; use exec redlockd --health-check")
            continue
        pport = probe.get("port")
        pport = ports.get(pport, pport) if isinstance(pport, str) else pport
        served = [x for x in tcp if x.rsplit(":", 1)[1] == str(pport)]
        if not served:
            out.append(f"{where}: {c['name']} {kind} probes port {probe.get('port')}, redlockd listens on "
                       f"{', '.join(tcp)}")
            continue
        host = served[0].rsplit(":", 1)[0]
        if host.strip("[]") in ("127.0.0.1", "::1", "localhost"):
            out.append(f"{where}: {c['name']} {kind}: the kubelet cannot reach {served[0]} (loopback); "
                       "use exec redlockd --health-check")
        path = probe.get("path") if "httpGet" in p else "/healthz"
        if path not in SERVED_PATHS:
            out.append(f"{where}: {c['name']} {kind} asks {path}, which redlockd does not serve")
        elif path != "/healthz":
            out.append(f"{where}: {c['name']} {kind} on {path}: use /healthz; /readyz is for gating and alerts")
    return out


def identity(pod, c):
    """(uid, groups) the kubelet runs container c with: runAsUser and
    runAsGroup (the container's, else the pod's), fsGroup and
    supplementalGroups."""
    psc, csc = pod.get("securityContext") or {}, c.get("securityContext") or {}
    gid = csc.get("runAsGroup", psc.get("runAsGroup"))
    groups = {g for g in [gid, psc.get("fsGroup"), *(psc.get("supplementalGroups") or [])] if g is not None}
    return csc.get("runAsUser", psc.get("runAsUser")), gid, groups


def socket_problems(where, pod, c):
    """A Unix socket listener of a sidecar is reachable by the pod's other
    containers: its directory is an emptyDir that redlockd mounts writable
    and another container mounts too, and each container that mounts it
    may connect. The socket is redlockd's user's, with the group of the
    directory, which with fsGroup is fsGroup (the kubelet gives an emptyDir
    fsGroup and the setgid bit), else redlockd's own group; its mode is
    REDLOCKD_LISTEN_MODE (default 0660); connecting needs write permission
    on it."""
    _, socks = listeners(c)
    envs = {e["name"]: e.get("value") for e in c.get("env") or []}
    try:
        mode = int(envs.get("REDLOCKD_LISTEN_MODE") or "0660", 8)
    except ValueError:
        return [f"{where}: REDLOCKD_LISTEN_MODE {envs.get('REDLOCKD_LISTEN_MODE')!r} is not octal"]
    vols = {v["name"]: v for v in pod.get("volumes") or []}
    fs = (pod.get("securityContext") or {}).get("fsGroup")
    uid, gid, _ = identity(pod, c)
    owner, group = uid, fs if fs is not None else gid
    out = []
    for sock in socks:
        d = os.path.dirname(sock)
        m = next((m for m in c.get("volumeMounts") or [] if m["mountPath"].rstrip("/") == d), None)
        if not m or "emptyDir" not in vols.get(m["name"], {}):
            out.append(f"{where}: the socket's directory {d} is not an emptyDir redlockd mounts: the other "
                       "containers cannot see the socket")
            continue
        if m.get("readOnly"):
            out.append(f"{where}: redlockd mounts {d} read-only and cannot make its socket there")
        others = [(o, om) for o in pod.get("containers") or [] if o is not c
                  for om in o.get("volumeMounts") or [] if om["name"] == m["name"]]
        if not others:
            out.append(f"{where}: no other container mounts {m['name']}, the socket's emptyDir")
        for o, om in others:
            ouid, _, ogroups = identity(pod, o)
            ok = (ouid is not None and ouid == owner and mode & 0o200) or \
                 (group is not None and group in ogroups and mode & 0o020) or mode & 0o002
            if not ok:
                out.append(f"{where}: container {o['name']} (uid {ouid}, groups {sorted(ogroups)}) cannot connect "
                           f"to {om['mountPath']}/{os.path.basename(sock)}: owner {owner}, group {group}, "
                           f"mode {mode:04o}" + ("" if fs is not None else " (no fsGroup)"))
    return out


FILE_VARS = ("REDLOCKD_AUTH_TOKEN_FILE", "REDLOCKD_ADMIN_TOKEN_FILE", "REDLOCKD_PRINCIPALS_FILE",
             "REDLOCKD_TLS_CERT_FILE", "REDLOCKD_TLS_KEY_FILE", "REDLOCKD_TLS_CLIENT_CA_FILE",
             "REDLOCKD_REDIS_TLS_CA_FILE", "REDLOCKD_REDIS_TLS_CERT_FILE", "REDLOCKD_REDIS_TLS_KEY_FILE")


def file_problems(where, pod, c, secret_keys):
    """Every file a redlockd container is handed (token, principals,
    certificates) comes from a Secret it mounts, by a key that Secret has
    where the manifests define it: the image holds none of them, and its
    root is read-only."""
    vols = {v["name"]: v for v in pod.get("volumes") or []}
    out = []
    for e in c.get("env") or []:
        if e["name"] not in FILE_VARS or not e.get("value"):
            continue
        f = e["value"]
        m = next((m for m in c.get("volumeMounts") or [] if f.startswith(m["mountPath"].rstrip("/") + "/")), None)
        sec = vols.get(m["name"], {}).get("secret") if m else None
        if sec is None:
            out.append(f"{where}: {e['name']}={f} is not in a Secret {c['name']} mounts")
            continue
        rel = f[len(m["mountPath"].rstrip("/")) + 1:]
        keys = [it["path"] for it in sec["items"]] if sec.get("items") else secret_keys.get(sec.get("secretName"))
        if keys is not None and rel not in keys:
            out.append(f"{where}: {e['name']}={f}: Secret {sec.get('secretName')} has no {rel} (it has {keys})")
    return out


def service_problems(where, dep, c, services):
    """A redlockd serving other pods: a Service selects its pods and sends
    to a port it serves, over HTTPS (client certificates or tokens cross the
    network), and it knows its callers (a principals or token file)."""
    labels = dep["spec"]["template"].get("metadata", {}).get("labels") or {}
    tcp, _ = listeners(c)
    envs = {e["name"]: e.get("value") for e in c.get("env") or []}
    ports = {p.get("name"): p["containerPort"] for p in c.get("ports") or []}
    out = []
    mine = [s for s in services if (s["spec"].get("selector") or {}) and
            all(labels.get(k) == v for k, v in s["spec"]["selector"].items())]
    if not mine:
        out.append(f"{where}: no Service selects its pods ({labels})")
    for s in mine:
        for sp in s["spec"].get("ports") or []:
            t = sp.get("targetPort", sp.get("port"))
            t = ports.get(t) if isinstance(t, str) else t
            if not any(x.rsplit(":", 1)[1] == str(t) and x.rsplit(":", 1)[0].strip("[]") not in
                       ("127.0.0.1", "::1", "localhost") for x in tcp):
                out.append(f"{where}: Service/{s['metadata']['name']} sends port {sp.get('port')} to "
                           f"{sp.get('targetPort')}, which no non-loopback REDLOCKD_LISTEN serves ({tcp})")
    if not (envs.get("REDLOCKD_TLS_CERT_FILE") and envs.get("REDLOCKD_TLS_KEY_FILE")):
        out.append(f"{where}: reached through a Service without HTTPS (REDLOCKD_TLS_CERT_FILE, _KEY_FILE)")
    if not (envs.get("REDLOCKD_PRINCIPALS_FILE") or envs.get("REDLOCKD_AUTH_TOKEN_FILE")):
        out.append(f"{where}: reached through a Service with no principals or token file: open to every pod")
    return out
