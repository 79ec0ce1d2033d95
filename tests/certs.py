"""Test certificates made at test time with the `openssl` command (nothing private is committed).

`cryptography` is not a dependency of the project, and the openssl CLI is on every CI image we use;
tests that need certificates skip when neither is available.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

OPENSSL = shutil.which("openssl")


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path

    def read(self) -> tuple[bytes, bytes]:
        return self.cert.read_bytes(), self.key.read_bytes()


def _run(*args: str) -> None:
    assert OPENSSL is not None
    subprocess.run([OPENSSL, *args], check=True, capture_output=True)


def make_ca(folder: Path, name: str) -> Pair:
    pair = Pair(folder / f"{name}.crt", folder / f"{name}.key")
    _run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", str(pair.key), "-out", str(pair.cert), "-days", "2", "-subj", f"/CN={name}",
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return pair


def make_leaf(folder: Path, name: str, ca: Pair, *, server: bool, san: str | None = None) -> Pair:
    """A certificate signed by `ca`: for a server (SAN `san`, by default localhost and 127.0.0.1) or a
    client (`san`, e.g. "DNS:keda-operator.keda.svc", when given)."""
    pair = Pair(folder / f"{name}.crt", folder / f"{name}.key")
    csr = folder / f"{name}.csr"
    ext = folder / f"{name}.ext"
    usage = "serverAuth" if server else "clientAuth"
    lines = ["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature", f"extendedKeyUsage={usage}"]
    if server:
        lines.append(f"subjectAltName={san or 'DNS:localhost,IP:127.0.0.1'}")
    elif san:
        lines.append(f"subjectAltName={san}")
    ext.write_text("\n".join(lines) + "\n")
    _run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(pair.key),
         "-out", str(csr), "-subj", f"/CN={name}")
    _run("x509", "-req", "-in", str(csr), "-CA", str(ca.cert), "-CAkey", str(ca.key), "-CAcreateserial",
         "-out", str(pair.cert), "-days", "2", "-extfile", str(ext))
    return pair


def install(pair: Pair, folder: Path) -> Pair:
    """Copy a pair where a server reads it (as a Secret volume is mounted), replacing what was there the way
    the kubelet does: write aside, then rename over."""
    folder.mkdir(parents=True, exist_ok=True)
    out = Pair(folder / "tls.crt", folder / "tls.key")
    for src, dst in ((pair.cert, out.cert), (pair.key, out.key)):
        tmp = dst.with_suffix(".new")
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    return out
