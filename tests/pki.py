"""Test certificates, made with the `openssl` command line: a CA, and certificates it
issues with the extensions a test names."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def openssl(*args: str | Path) -> None:
    binary = shutil.which("openssl")
    assert binary, "openssl is needed to make test certificates"
    subprocess.run([binary, *map(str, args)], check=True, capture_output=True)


def make_ca(d: Path, name: str) -> tuple[Path, Path]:
    """A self-signed CA: (certificate, key) as `d/<name>.pem`, `d/<name>.key`."""
    cert, key = d / f"{name}.pem", d / f"{name}.key"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", f"/CN={name}", "-keyout", key, "-out", cert)  # fmt: skip
    return cert, key


def issue(d: Path, name: str, ca: tuple[Path, Path], extensions: str) -> tuple[Path, Path]:
    """A certificate for CN=`name` signed by `ca`, with `extensions` (openssl's x509v3
    config lines): (certificate, key) as `d/<name>.pem`, `d/<name>.key`."""
    cert, key, csr, ext = (d / f"{name}{s}" for s in (".pem", ".key", ".csr", ".ext"))
    ext.write_text(extensions)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
            "-keyout", key, "-out", csr)  # fmt: skip
    openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial",
            "-days", "1", "-extfile", ext, "-out", cert)  # fmt: skip
    return cert, key
