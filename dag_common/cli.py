"""One runner for every command line of the project: parse, run, and turn what went wrong
into one `error:` line and the exit code (dag_common.model.ExitCode).

    0  ok
    1  the operation failed: a refused or failed call, a node or service unreachable, a
       failure of this project's own (any DagError not named bad input), an interruption
    2  bad input: bad arguments (BadArgument, argparse's own), a bad config (ConfigError),
       what it would take held by another process (InUse), or an error the command names

A traceback is never printed: an unexpected exception is a bug, said in one line; the
traceback goes to the debug log (`--verbose`, where a command has it).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import io
import logging
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

import aiohttp

from dag_common.config import CREDENTIAL_FILE_ENV, TOKEN_ENV
from dag_common.durations import parse_duration
from dag_common.echo import quoted
from dag_common.errors import BadArgument, BadInput, ConfigError, DagError, InUse, TokenRefused
from dag_common.model import ExitCode

if TYPE_CHECKING:
    from dag_common.config import ClusterConfig, DatabaseConfig

logger = logging.getLogger(__name__)

Command = Callable[[argparse.Namespace], int]


DURATION = "a duration: a number and a unit (ms, s, m, h, d), e.g. 500ms, 30s, 5m"


class DurationAction(argparse.Action):
    """Parses a duration option's value into a timedelta as the command line is read: a
    value that is not a duration is `BadArgument` naming the option (one `error:` line from
    `run`, exit 2), never a ValueError out of the command."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        try:
            value = parse_duration(values)
        except ValueError as exc:
            raise BadArgument(f"{option_string or self.dest}: {exc}") from None
        setattr(namespace, self.dest, value)


def add_duration(
    parser: argparse.ArgumentParser,
    flag: str,
    *,
    default: str | None,
    help: str,
    dest: str | None = None,
) -> None:
    """A duration option (`--stall-limit 2s`): its value a timedelta, its default (written
    as a duration, or None) too; its help says how a duration is written."""
    parser.add_argument(
        flag,
        action=DurationAction,
        default=parse_duration(default) if default is not None else None,
        metavar="DURATION",
        help=f"{help}; {DURATION}" + (f"; default {default}" if default is not None else ""),
        dest=dest,
    )


def package_version() -> str:
    """This project's version, as installed."""
    try:
        return importlib.metadata.version("dag-replication")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def add_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")


def add_config(parser: argparse.ArgumentParser, type: Callable[[str], object] = str) -> None:
    """The cluster config option every command takes, and the credential it presents."""
    parser.add_argument(
        "--config",
        required=True,
        metavar="FILE",
        help="the cluster config (YAML); relative paths in it resolve against its directory",
        type=type,
    )
    parser.add_argument(
        "--credential-file",
        metavar="FILE",
        help=f"the credential to present (its first line; ${CREDENTIAL_FILE_ENV} does the "
        f"same; default: the cluster token, ${TOKEN_ENV} or auth_token_file)",
    )


def whole_number(least: int, of: str) -> Callable[[str], int]:
    """An argparse type: a whole number of `of`, `least` or more."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = least - 1
        if value < least:
            raise argparse.ArgumentTypeError(
                f"{quoted(text)} is not a whole number of {of} ({least} or more)"
            )
        return value

    return parse


def add_json(parser: argparse.ArgumentParser, what: str = "print JSON for scripts") -> None:
    parser.add_argument("--json", action="store_true", help=what)


def exit_now(main: Callable[[], int]) -> NoReturn:
    """A console script's entry: run `main`, flush what it wrote, and end the process without
    the interpreter's teardown.  Freeing the modules a command imports (aiohttp, grpc,
    pydantic) takes about 90 ms after the command's work is done: its stores and sessions
    are closed by then (each command closes what it opens), so only the streams and the
    log handlers are left to flush.  An exception escaping `main` (a bug) takes the normal
    way out, with its traceback.  In-process callers (tests) call `main` itself."""
    code = main()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        # a reader that went away, a stream closed already: nothing more can be said
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def database_named(config: ClusterConfig, name: str, source: object) -> DatabaseConfig:
    """The database `name` of `config` (read from `source`, a path); ConfigError (bad input,
    exit 2, one line) if it has none."""
    try:
        return config.database(name)
    except KeyError:
        raise ConfigError(f"no database {quoted(name)} in {source}") from None


def error(message: str) -> None:
    """Say one error line on stderr."""
    print(f"error: {message}", file=sys.stderr)


def _os_error(exc: OSError) -> str:
    if exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return exc.strerror or str(exc) or type(exc).__name__


def _stdout_to_devnull() -> None:
    """Point stdout at /dev/null: nothing more can be written to a reader that is gone, and
    the interpreter's flush at exit would say so in a traceback (exit 120)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):  # not a file: replace the object
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - kept open to the end
    finally:
        os.close(devnull)


def run(
    parser: argparse.ArgumentParser,
    argv: list[str] | None,
    *,
    bad_input: tuple[type[BaseException], ...] = (),
    before: Callable[[argparse.Namespace], None] | None = None,
) -> int:
    """Parse `argv` with `parser` and run the command it chose (`args.func`).

    `bad_input`: the command's own errors that mean bad input (exit 2) beside ConfigError.
    `before`: run after parsing, outside the error mapping's reach (e.g. logging setup)."""
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse said why already; --help exits 0
        return ExitCode.OK if exc.code in (0, None) else ExitCode.BAD_INPUT
    except BadArgument as exc:  # a value an option's action refused (a duration)
        error(str(exc))
        return ExitCode.BAD_INPUT
    if getattr(args, "credential_file", None):  # what load_token presents from now on
        os.environ[CREDENTIAL_FILE_ENV] = args.credential_file
    if before is not None:
        before(args)
    func: Command = args.func
    try:
        code = int(func(args))
        sys.stdout.flush()  # a reader gone away is met here, not in the flush at exit
        return code
    except (ConfigError, InUse, TokenRefused, BadArgument, BadInput, *bad_input) as exc:
        error(str(exc))
        return ExitCode.BAD_INPUT
    except DagError as exc:
        error(str(exc))
        return ExitCode.FAILED
    except KeyboardInterrupt:
        return ExitCode.FAILED
    except BrokenPipeError:  # the reader went away (`… status | head -1`)
        _stdout_to_devnull()  # what is still buffered must not fail again at exit
        return ExitCode.FAILED
    except (TimeoutError, aiohttp.ClientError) as exc:
        error(f"a call failed: {type(exc).__name__}: {exc}".rstrip(": "))
        return ExitCode.FAILED
    except OSError as exc:
        error(_os_error(exc))
        return ExitCode.FAILED
    except Exception as exc:  # a bug: one line, never a traceback
        logger.debug("unexpected error", exc_info=True)
        hint = "; --verbose shows where" if hasattr(args, "verbose") else ""
        error(f"unexpected {type(exc).__name__}: {exc} (a bug{hint})")
        return ExitCode.FAILED
