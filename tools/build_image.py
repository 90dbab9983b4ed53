"""Build the chart's two images with podman from a Python base made here (make image).

No image registry is reachable from this machine, so `python:3.11-slim-bookworm` cannot be
pulled; Debian's archive can.  The base is Debian bookworm (minbase) with its python3
(3.11, what `requires-python` asks) and pip, made with debootstrap and imported into podman;
the Dockerfile is then built unchanged with `--build-arg PYTHON_IMAGE=<that base>`.  The
base provides what the Dockerfile uses of the public image: `pip` (installing into
/usr/local, as the public image's does), `groupadd`/`useradd`, and `apt-get` with
bookworm's sources for the spark stage.

Three caches, each keyed by a digest of what it is made from, so `make image` (and the image
tests) rebuild nothing that did not change:

- the base tarball, `.cache/image/base-<recipe>.tar`: the recipe below (suite, packages,
  finishing script).  Debian's security updates are taken when it is made; delete the
  tarball to take newer ones.
- the base image, tagged `localhost/dag-python:3.11-bookworm`, labelled with that digest.
- each target's image, tagged as `values.yaml` names it and labelled with a digest of the
  Dockerfile, the build context `.dockerignore` admits and the base's digest.

    python3 tools/build_image.py [--root DIR]

Podman runs with `tools/containers.conf` (runc, no default ulimits: this VM refuses crun's
and the default rlimits), which `podman_env()` points CONTAINERS_CONF at.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = ["python3", "python3-pip", "ca-certificates"]
BASE_TAG = "localhost/dag-python:3.11-bookworm"
LABEL = "dag.source-digest"
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"

# Run in the debootstrapped tree (chroot): the security and updates suites, their fixes,
# pip allowed to install into the image's own Python (the public image's is the image's
# own too), and no apt lists, caches, manuals or translations.  Copyright files are kept.
FINISH = r"""
set -eu
export DEBIAN_FRONTEND=noninteractive
cat > /etc/apt/sources.list <<EOF
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
apt-get update -qq
apt-get upgrade -y -qq
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt/* /var/log/dpkg.log
cat > /etc/dpkg/dpkg.cfg.d/slim <<EOF
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
# Files only: the directories stay, as in Debian's slim images (a package's postinst, the
# JRE's update-alternatives among them, may link into /usr/share/man/man1).
find /usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete
find /usr/share/man /usr/share/info /usr/share/locale -not -type d -delete
rm -f /usr/lib/python3.11/EXTERNALLY-MANAGED
find / -xdev -name __pycache__ -type d -prune -exec rm -rf {} +
"""
IMPORT_CHANGES = [
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["python3"]',
]


@dataclass(frozen=True)
class Target:
    """One stage of the Dockerfile and the tag the chart's values give its image."""

    stage: str
    tag: str


def podman_env() -> dict[str, str]:
    """The environment every podman call runs in: our containers.conf."""
    return {**os.environ, "CONTAINERS_CONF": str(ROOT / "tools" / "containers.conf")}


def podman(*args: str, check: bool = True, capture: bool = True) -> subprocess.CompletedProcess:
    """Run podman with our containers.conf; raise with its output when it fails."""
    result = subprocess.run(
        ["podman", *args], env=podman_env(), capture_output=capture, text=True, check=False
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)}: exit {result.returncode}\n{result.stderr}")
    return result


def targets(root: Path = ROOT) -> list[Target]:
    """The runtime and spark images, tagged as the chart's values.yaml names them."""
    chart = root / "charts" / "dag-replication"
    values = yaml.safe_load((chart / "values.yaml").read_text())
    version = yaml.safe_load((chart / "Chart.yaml").read_text())["appVersion"]
    runtime = f"{values['image']['repository']}:{values['image']['tag'] or version}"
    spark_image = values["sparkMetrics"]["image"]
    spark = f"{spark_image['repository']}:{spark_image['tag'] or version}"
    return [Target("runtime", runtime), Target("spark", spark)]


def local_name(tag: str) -> str:
    """The name podman gives an unqualified tag (dag-replication:0.1.0 is localhost/...)."""
    return tag if "/" in tag.split(":")[0] else f"localhost/{tag}"


def recipe_digest() -> str:
    """What the base is made from; a change makes a new base."""
    recipe = "\n".join([SUITE, MIRROR, *BASE_PACKAGES, FINISH, *IMPORT_CHANGES])
    return hashlib.sha256(recipe.encode()).hexdigest()[:16]


def context_files(root: Path) -> list[Path]:
    """The files the build context holds: what .dockerignore admits (deny all, then `!`)."""
    lines = [
        line.strip()
        for line in (root / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    allowed = [line[1:].rstrip("/") for line in lines if line.startswith("!")]
    ignored = [line.removeprefix("**/") for line in lines[1:] if not line.startswith("!")]
    files: list[Path] = []
    for name in allowed:
        path = root / name
        candidates = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for p in candidates:
            parts = p.relative_to(root).parts
            if not any(fnmatch.fnmatch(part, pat) for part in parts for pat in ignored):
                files.append(p)
    return files


def source_digest(root: Path, base: str) -> str:
    """The Dockerfile, .dockerignore, the context and the base: what an image is built from."""
    h = hashlib.sha256(base.encode())
    for p in [root / "Dockerfile", root / ".dockerignore", *context_files(root)]:
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def trust_args() -> list[str]:
    """The host's CA bundle over the image's, for the build's RUN steps only (a bind mount
    is not committed to a layer): where PyPI is reached through a TLS-inspecting proxy, the
    host trusts its CA and so must pip in the build, but the images must not carry it."""
    bundle = Path(HOST_CA_BUNDLE)
    return ["--volume", f"{bundle}:{bundle}:ro"] if bundle.is_file() else []


def image_label(tag: str) -> str | None:
    """The source digest an image was built from, or None when there is no such image."""
    result = podman(
        "image", "inspect", "--format", f'{{{{index .Labels "{LABEL}"}}}}', tag, check=False
    )
    return result.stdout.strip() if result.returncode == 0 else None


def prune_leftovers() -> None:
    """Remove the dangling images of our builds (labelled `LABEL`, tagged no more, used by
    no container): the images a build moved a tag off, and what an interrupted build, or one
    by an older version of this script, left.  Each image of the spark target is 1.5 GB."""
    podman("image", "prune", "--force", "--filter", f"label={LABEL}")


def make_base_tarball(cache: Path, digest: str) -> Path:
    """debootstrap bookworm with python3 and pip, finished and packed; kept in `cache`."""
    tarball = cache / f"base-{digest}.tar"
    if tarball.is_file():
        return tarball
    if shutil.which("debootstrap") is None:
        raise RuntimeError("no debootstrap: apt-get install debootstrap")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        tree = Path(tmp) / "root"
        print(f"debootstrap {SUITE} ({', '.join(BASE_PACKAGES)}) ...", flush=True)
        subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
             SUITE, str(tree), MIRROR],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        subprocess.run(["chroot", str(tree), "/bin/sh", "-c", FINISH], check=True)
        part = Path(tmp) / "base.tar"
        subprocess.run(["tar", "-C", str(tree), "--numeric-owner", "-cf", str(part), "."],
                       check=True)  # fmt: skip
        os.replace(part, tarball)
    for old in cache.glob("base-*.tar"):
        if old != tarball:
            old.unlink()
    return tarball


def ensure_base(cache: Path) -> str:
    """The base image, imported from its tarball unless already there with this recipe."""
    digest = recipe_digest()
    if image_label(BASE_TAG) == digest:
        return digest
    tarball = make_base_tarball(cache, digest)
    changes = [*IMPORT_CHANGES, f"LABEL {LABEL}={digest}"]
    podman("import", *[arg for c in changes for arg in ("--change", c)], str(tarball), BASE_TAG)
    return digest


def build_target(context: Path, target: Target, digest: str, base: str = BASE_TAG) -> None:
    """Build `target` from `context` on `base`, labelled with `digest`, and tag it; the store
    then holds that image and nothing else of the build.

    Without the layer cache: buildah 1.28 (bookworm's) mounts an empty directory for
    `RUN --mount=from=<stage>` when every step of that stage came from the cache, so a build
    that reuses the wheels stage but reruns an install would install nothing; and the
    install step's cache key does not include the mounted wheels, so a cached build took the
    install layer of an older source (the runtime image of an earlier build, the day's
    first, ran a config model without the newest field: CI on a machine whose store held
    both).  Built uncached, every stage is whole and the source's own (pip's own cache is a
    cache mount, kept: no wheel is downloaded again).  And without layers: podman commits an
    image per step by default, `--no-cache` included, so every build left its build stage
    (the wheels, ~1.45 GB) as a dangling image and each step as an untagged one, which no
    later build reads; with `--layers=false` only the target is committed.  The image the
    tag named before is removed (`prune_leftovers`)."""
    podman(
        "build", "--format", "docker", "--no-cache", "--layers=false", "--target", target.stage,
        "--build-arg", f"PYTHON_IMAGE={base}", "--label", f"{LABEL}={digest}",
        *trust_args(), "--tag", target.tag, str(context),
        capture=False,
    )  # fmt: skip
    prune_leftovers()


def ensure_images(root: Path = ROOT) -> list[Target]:
    """Both targets built and tagged, each rebuilt only when what it is built from changed."""
    if shutil.which("podman") is None:
        raise RuntimeError("no podman: apt-get install podman buildah runc")
    base = ensure_base(root / ".cache" / "image")
    digest = source_digest(root, base)
    built = targets(root)
    stale = [t for t in built if image_label(t.tag) != digest]
    for target in built:
        if target not in stale:
            print(f"{target.tag}: up to date ({LABEL} {digest})", flush=True)
    for target in sorted(stale, key=lambda t: t != built[-1]):
        print(f"{target.tag}: building target {target.stage} ...", flush=True)
        build_target(root, target, digest)
    prune_leftovers()
    return built


def write_sbom(target: Target, cache: Path) -> Path:
    """The image's packages with their versions (Debian's and Python's), as JSON beside the
    build: what a scanner needs, here where no vulnerability database is reachable (PyPI's
    JSON API, OSV and Debian's security tracker are not).  `pip-audit -r` and `debsecan
    --status` read it on a machine that reaches them (bench/README.md, Images)."""
    script = (
        "dpkg-query -W -f '${Package}\\t${Version}\\n'; echo ---; "
        "python3 -m pip list --format json --disable-pip-version-check"
    )
    out = podman("run", "--rm", "--network", "none", "--entrypoint", "sh", target.tag, "-c",
                 script).stdout  # fmt: skip
    debian, python = out.split("---\n")
    sbom = {
        "image": target.tag,
        "digest": image_label(target.tag),
        "debian": dict(line.split("\t") for line in debian.splitlines() if line),
        "python": {p["name"]: p["version"] for p in json.loads(python)},
    }
    # The cache directory may not exist yet: a checkout that found the base and both images
    # already in podman's store (another clone of the same tree built them) made nothing.
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{target.stage}-packages.json"
    path.write_text(json.dumps(sbom, indent=1, sort_keys=True) + "\n")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to build")
    args = parser.parse_args()
    try:
        root = args.root.resolve()
        for target in ensure_images(root):
            size = podman("image", "inspect", "--format", "{{.Size}}", target.tag).stdout
            sbom = write_sbom(target, root / ".cache" / "image")
            print(f"{target.tag} ({target.stage}): {int(size) / 1e6:.0f} MB; packages: {sbom}")
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        print(f"make image: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
