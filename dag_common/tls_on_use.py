"""aiohttp imported without the TLS work it does at import, for a command line's start
(issue 48).

As it is imported, aiohttp builds two default TLS contexts (`aiohttp.connector`: one that
verifies with the system's CAs, one that does not), and each reads the system's CA bundle:
about 20 ms apiece, 40 of a status read's 300, paid by every command that imports aiohttp,
though no call of a cluster uses them (a cluster with `tls:` gives every session a context
of its own, `http_client.client_ssl`; one without speaks http://).

`defer_aiohttp_tls()`, called by a console script before its command is chosen, makes that
load happen when it is needed: while `aiohttp.connector` is imported (and only then), a
context asked to read the system's CAs (`set_default_verify_paths`) reads them the first
time it wraps a connection (`wrap_bio`, as asyncio's TLS does, or `wrap_socket`), or when
its CAs are looked at.  So an https:// call on aiohttp's default context verifies the
server as it always did; a command that makes none never reads the bundle.  Nothing else
of aiohttp is changed, and it is imported as before when nothing calls this (a service
started in-process, the tests).

aiohttp reads the CAs at import on purpose: a first https call on its default context
then does not block a running event loop for those 20 ms.  A command line makes a few calls
and ends; a service that calls peers over TLS uses the cluster's own context, loaded at its
start.
"""

from __future__ import annotations

import functools
import sys
import threading
from importlib.machinery import PathFinder
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ssl

_MODULE = "aiohttp.connector"
_lock = threading.Lock()


@functools.cache
def _on_first_use() -> type[ssl.SSLContext]:
    """The class of a context whose system CAs are read the first time it is used (made
    when aiohttp is imported: `ssl` is not imported by a command that needs no TLS)."""
    import ssl

    class CAsOnFirstUse(ssl.SSLContext):
        def _read_cas(self) -> None:
            with _lock:
                if self.__dict__.pop("_cas_pending", False):
                    ssl.SSLContext.set_default_verify_paths(self)

        def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:
            self._read_cas()
            return super().wrap_bio(*args, **kwargs)

        def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
            self._read_cas()
            return super().wrap_socket(*args, **kwargs)

        def get_ca_certs(self, *args: Any, **kwargs: Any) -> Any:
            self._read_cas()
            return super().get_ca_certs(*args, **kwargs)

        def cert_store_stats(self) -> dict[str, int]:
            self._read_cas()
            return super().cert_store_stats()

    return CAsOnFirstUse


def _later(context: ssl.SSLContext) -> None:
    """`set_default_verify_paths` while aiohttp.connector is imported: on first use."""
    import ssl

    if type(context) is ssl.SSLContext:
        context.__class__ = _on_first_use()
        context._cas_pending = True  # type: ignore[attr-defined]
    else:  # someone else's subclass: as ever
        ssl.SSLContext.set_default_verify_paths(context)


class _Loader:
    """aiohttp.connector's own loader, run with `_later` in place of
    `SSLContext.set_default_verify_paths`."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        import ssl

        assert "set_default_verify_paths" not in vars(ssl.SSLContext)  # _ssl's, inherited
        ssl.SSLContext.set_default_verify_paths = _later  # type: ignore[method-assign,assignment]
        try:
            self.loader.exec_module(module)
        finally:
            del ssl.SSLContext.set_default_verify_paths


class _Finder:
    """Finds aiohttp.connector as the path finder does, with `_Loader` to run it."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> Any:
        if name != _MODULE:
            return None
        spec = PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def defer_aiohttp_tls() -> None:
    """Have aiohttp, when it is imported, read the system's CAs on first use (this module's
    docstring); nothing if it is imported already."""
    if _MODULE not in sys.modules and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
