"""A YAML file read whole, as the cluster config and the IMAP front's users file are: one
sentence when it cannot be read or is not YAML (the file, and the line and column where it
stops being YAML), raised as the caller's own error."""

from __future__ import annotations

from pathlib import Path

import yaml


def read_yaml(file: Path, what: str, error: type[Exception]) -> object:
    """The document in `file` (`what` it is, as the sentence names it: "config"); `error`
    with one sentence when it cannot be read or is not YAML."""
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"cannot read {what} {file}: {exc.strerror or exc}") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{file}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(file)
        problem = getattr(exc, "problem", None) or str(exc)
        raise error(f"{where}: not valid YAML: {problem}") from exc
