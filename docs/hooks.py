"""The MkDocs hook that adds the generated reference pages (docs/gen_reference.py) to the
site at every build: they are made from the code, never committed, so they cannot drift.
A page that cannot be made (a route without its line, say) fails the build."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files


def _generator() -> Any:
    path = Path(__file__).with_name("gen_reference.py")
    spec = importlib.util.spec_from_file_location("gen_reference", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def on_files(files: Files, config: Any) -> Files:
    """Add each generated page, as if it were a file under docs/."""
    for path, text in _generator().generate().items():
        files.append(File.generated(config, path, content=text))
    return files
