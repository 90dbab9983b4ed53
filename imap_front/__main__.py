"""`python -m imap_front …`."""

from imap_front.cli import entry

entry()
