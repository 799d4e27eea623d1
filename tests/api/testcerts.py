"""Certificates for the Python test suites, made by the openssl CLI (as an
operator makes them, docs/deployment.md): a CA, leaves it signs (a
server's with its SANs, clients named by CN or by DNS SAN), and one dated
in the past. EC keys (P-256): quick to make. Each certificate is valid for
two days. Shared by tests/listen and tests/tenants."""
import os
import subprocess

KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
SERVER_SAN = "subjectAltName=IP:127.0.0.1,DNS:localhost"   # what the suites dial


def openssl(*args):
    """Runs openssl with args; raises RuntimeError with its output when it
    fails."""
    r = subprocess.run(["openssl", *args], capture_output=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)}: {(r.stdout + r.stderr).decode(errors='replace')}")


def make_ca(d, name, cn):
    """A self-signed CA in d: (name.crt, name.key)."""
    crt, key = os.path.join(d, f"{name}.crt"), os.path.join(d, f"{name}.key")
    openssl("req", "-x509", *KEY, "-keyout", key, "-out", crt, "-days", "2", "-subj", f"/CN={cn}")
    return crt, key


def make_leaf(d, name, subj, ca, ext=None):
    """A certificate for subj (e.g. "/CN=billing") signed by ca (its
    (crt, key)), with the extension line ext (e.g. SERVER_SAN) if given:
    (name.crt, name.key) in d."""
    key, csr, crt = (os.path.join(d, f"{name}.{x}") for x in ("key", "csr", "crt"))
    openssl("req", *KEY, "-keyout", key, "-out", csr, "-subj", subj)
    args = ["x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial", "-out", crt, "-days", "2"]
    if ext:
        extf = os.path.join(d, f"{name}.ext")
        with open(extf, "w") as f:
            f.write(ext + "\n")
        args += ["-extfile", extf]
    openssl(*args)
    return crt, key


def make_expired(d, name, subj, ca):
    """A certificate for subj signed by ca that expired in 2020: (crt, key).
    `openssl x509` cannot date a certificate in the past, `openssl ca` can."""
    db = os.path.join(d, f"{name}.db")
    os.makedirs(db, exist_ok=True)
    open(os.path.join(db, "index.txt"), "w").close()
    with open(os.path.join(db, "serial"), "w") as f:
        f.write("1000\n")
    cnf = os.path.join(d, f"{name}.cnf")
    with open(cnf, "w") as f:
        f.write(f"[ca]\ndefault_ca = d\n[d]\ndatabase = {db}/index.txt\nserial = {db}/serial\n"
                f"new_certs_dir = {db}\ndefault_md = sha256\npolicy = p\n[p]\ncommonName = supplied\n")
    key, csr, crt = (os.path.join(d, f"{name}.{x}") for x in ("key", "csr", "crt"))
    openssl("req", *KEY, "-keyout", key, "-out", csr, "-subj", subj)
    openssl("ca", "-batch", "-config", cnf, "-cert", ca[0], "-keyfile", ca[1], "-in", csr, "-out", crt,
            "-startdate", "20200101000000Z", "-enddate", "20200102000000Z", "-notext")
    return crt, key


def add(paths, name, pair):
    """paths[name.crt], paths[name.key] = pair; returns paths."""
    paths[f"{name}.crt"], paths[f"{name}.key"] = pair
    return paths
