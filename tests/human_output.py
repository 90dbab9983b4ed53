"""What a command line prints for a person (issue 48): words, never a Python repr of a list,
a tuple, a dict or None.  `reprs(text)` finds them; the tests of each command line run it
over every human output they make."""

from __future__ import annotations

import re

# A list, tuple or dict of strings or numbers as Python prints them, and the constants.
_REPR = re.compile(r"""\[\]|\[['"\d]|\(['"]|\{['"]|\bNone\b|\bTrue\b|\bFalse\b""")


def reprs(text: str) -> list[str]:
    """The lines of `text` holding a Python repr, each as it was printed."""
    return [line for line in text.splitlines() if _REPR.search(line)]
