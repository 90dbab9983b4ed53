"""One runner for every command line of the project: parse, run, and turn what went wrong
into one `error:` line and the exit code (`ExitCode`).

    0  ok
    1  the operation failed: a refused or failed call, a node or service unreachable, a
       failure of this project's own (any DagError not named bad input), an interruption
    2  bad input: bad arguments (BadArgument, argparse's own), a bad config (ConfigError),
       what it would take held by another process (InUse), or an error the command names

A traceback is never printed: an unexpected exception is a bug, said in one line; the
traceback goes to the debug log (`--verbose`, where a command has it).

A command line starts in the time an operator does not notice (issue 48): this module
imports nothing but the standard library and the ground floor's plain-Python modules, and a
command's module, which brings aiohttp, pydantic, the config and the rest, is imported only
when that command is chosen (`Lazy`, `Group`, `add_commands`), so `--help` and a mistyped command
answer at once.  `tests/dag_common/test_cli_help.py` holds every console script to it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import logging
import os
import sys
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from dag_common.credentials import CREDENTIAL_FILE_ENV, TOKEN_ENV
from dag_common.durations import parse_duration
from dag_common.echo import quoted
from dag_common.errors import BadArgument, BadInput, ConfigError, DagError, InUse, TokenRefused
from dag_common.tls_on_use import defer_aiohttp_tls

if TYPE_CHECKING:
    from dag_common.config import ClusterConfig, DatabaseConfig, TransportNode

logger = logging.getLogger(__name__)

Command = Callable[[argparse.Namespace], int]


class ExitCode(IntEnum):
    """Exit codes of every command line tool (this module's docstring says when each)."""

    OK = 0
    FAILED = 1
    BAD_INPUT = 2


@dataclass(frozen=True, slots=True)
class Lazy:
    """A subcommand known by its name and one-line help, its module imported only when it is
    chosen (or its help asked): `build` names the function, "package.module:function", that
    adds the subcommand's arguments and its `func` to the parser made for it."""

    name: str
    help: str
    build: str

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        module, _, function = self.build.partition(":")
        getattr(importlib.import_module(module), function)(parser)


@dataclass(frozen=True, slots=True)
class Group:
    """A subcommand that only chooses among its own `commands` (the one chosen named in
    `dest`), each module imported only when its command is chosen."""

    name: str
    help: str
    dest: str
    commands: tuple[Lazy | Group, ...]

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        add_commands(parser, self.dest, self.commands)


class _Parsers(dict[str, argparse.ArgumentParser]):
    """The subcommands' parsers by name, each built by its `Lazy` or `Group` the first time
    it is looked up: argparse looks up only the one chosen, and its listing of the commands
    reads the names and helps alone.  A reader of every parser (the reference's pages, the
    help tests) walks `items()`, which builds them all."""

    def __init__(self) -> None:
        super().__init__()
        self.builders: dict[str, Lazy | Group] = {}

    def __getitem__(self, name: str) -> argparse.ArgumentParser:
        parser = super().__getitem__(name)
        command = self.builders.pop(name, None)
        if command is not None:
            command.add_to(parser)
        return parser

    def values(self) -> list[argparse.ArgumentParser]:  # type: ignore[override]
        return [self[name] for name in self]

    def items(self) -> list[tuple[str, argparse.ArgumentParser]]:  # type: ignore[override]
        return [(name, self[name]) for name in self]


class _LazySubParsers(argparse._SubParsersAction):  # type: ignore[type-arg]
    """argparse's subcommands, their parsers built when looked up (`_Parsers`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._name_parser_map = self.choices = _Parsers()


def add_commands(
    parser: argparse.ArgumentParser, dest: str, commands: Iterable[Lazy | Group]
) -> None:
    """Add `commands` to `parser` as its subcommands (one must be given), each module
    imported only when its command is chosen."""
    sub = parser.add_subparsers(dest=dest, required=True, action=_LazySubParsers)
    for command in commands:
        sub.add_parser(command.name, help=command.help)
        sub.choices.builders[command.name] = command


def command_line(prog: str, commands: Iterable[Lazy | Group], **kw: Any) -> argparse.ArgumentParser:
    """A console script's parser: `prog`, its `--version`, and its `commands` (one must be
    chosen; `args.command` names it), each command's module imported only when it is chosen.
    `kw`: argparse.ArgumentParser's own (description, formatter_class)."""
    parser = argparse.ArgumentParser(prog=prog, **kw)
    add_version(parser)
    add_commands(parser, "command", commands)
    return parser


@dataclass(frozen=True, slots=True)
class Script:
    """A console script: its parser (`command_line` of `prog`, `commands` and `parser`'s
    ArgumentParser arguments), run by `run` with `bad_input` and `before`.  Its module names
    `main` (in-process callers, tests) and `entry` (the console script, `exit_now`)."""

    prog: str
    commands: tuple[Lazy | Group, ...]
    description: str
    formatter_class: type[argparse.HelpFormatter] = argparse.HelpFormatter
    bad_input: tuple[type[BaseException], ...] = ()
    before: Callable[[argparse.Namespace], None] | None = None

    def parser(self) -> argparse.ArgumentParser:
        return command_line(
            self.prog, self.commands, description=self.description,
            formatter_class=self.formatter_class,
        )  # fmt: skip

    def main(self, argv: list[str] | None = None) -> int:
        """Run the command `argv` names (None: the process's arguments); its exit code."""
        return run(self.parser(), argv, bad_input=self.bad_input, before=self.before)

    def entry(self) -> NoReturn:
        """The console script: `main`, then the process ends (`exit_now`)."""
        exit_now(self.main)


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


def add_count(
    parser: argparse.ArgumentParser, flag: str, *, least: int, of: str, default: int, help: str
) -> None:
    """A whole-number option (`--limit 50`): `least` or more `of` (`whole_number`); its help
    says its default."""
    parser.add_argument(
        flag,
        type=whole_number(least, of),
        default=default,
        metavar="N",
        help=f"{help}; default {default}",
    )


def add_timeout(
    parser: argparse.ArgumentParser, default: str, *, waits: str = "each node's answer"
) -> None:
    """`--timeout`: how long the command waits for each answer it asks for; the callee is
    told it as the call's deadline, and starts nothing of a call it reads later."""
    add_duration(
        parser,
        "--timeout",
        default=default,
        help=f"how long to wait for {waits}; a call it reads later is not carried out, "
        "one it began in time may be",
    )


def package_version() -> str:
    """This project's version, as installed."""
    # importlib.metadata costs more than the rest of a `--help`: read only when asked
    from importlib import metadata

    try:
        return metadata.version("dag-replication")
    except metadata.PackageNotFoundError:
        return "unknown"


class _VersionAction(argparse._VersionAction):
    """`--version`: the installed version, looked up only when asked."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        self.version = f"%(prog)s {package_version()}"
        super().__call__(parser, *args, **kwargs)


def add_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--version", action=_VersionAction, help="print the installed version and exit"
    )


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


def in_words(value: object) -> str:
    """A value as a table for a person shows it: a list as its items, nothing as "-", a
    flag as yes or no; never Python's repr (`['alice']`, `None`)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(in_words(v) for v in value) or "-"
    if isinstance(value, dict):
        return ", ".join(f"{k} {in_words(v)}" for k, v in value.items()) or "-"
    return str(value)


def add_json(parser: argparse.ArgumentParser, what: str = "print JSON for scripts") -> None:
    parser.add_argument("--json", action="store_true", help=what)


def exit_now(main: Callable[[], int]) -> NoReturn:
    """A console script's entry: run `main`, flush what it wrote, and end the process without
    the interpreter's teardown.  Freeing the modules a command imports (aiohttp, grpc,
    pydantic) takes about 90 ms after the command's work is done: its stores and sessions
    are closed by then (each command closes what it opens), so only the streams and the
    log handlers are left to flush.  An exception escaping `main` (a bug) takes the normal
    way out, with its traceback.  In-process callers (tests) call `main` itself.

    Before `main`, what a command line need not pay at its start (issue 48): aiohttp's
    default TLS contexts read the system's CAs when first used, not as it is imported
    (`tls_on_use`), and pydantic looks for no plugins (its own switch,
    PYDANTIC_DISABLE_PLUGINS, unless the environment sets it otherwise): a search of every
    installed package's entry points as the first model is built, for plugins this project
    neither ships nor uses."""
    defer_aiohttp_tls()
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
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


def transport_named(config: ClusterConfig, name: str, source: object) -> TransportNode:
    """The transport `name` of `config` (read from `source`, a path); ConfigError (bad
    input, exit 2, one line) if it has none."""
    try:
        return config.transport_node(name)
    except KeyError:
        raise ConfigError(f"no transport {quoted(name)} in {source}") from None


def error(message: str) -> None:
    """Say one error line on stderr."""
    print(f"error: {message}", file=sys.stderr)


def _os_error(exc: OSError) -> str:
    if exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    said = exc.strerror or str(exc) or type(exc).__name__
    # No file named: say which call failed, or "error: Invalid argument" is all there is
    # (a node under libfaketime once exited with only that, and it was never seen again).
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return said
    last = frames[-1]
    return f"{said} (in {last.name}, {Path(last.filename).name}:{last.lineno})"


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


def _client_error(exc: Exception) -> str | None:
    """An HTTP client's failure, in words, if `exc` is one: a call no command turned into
    a sentence naming whom it called.  aiohttp is only looked at when a command imported it
    (an error of a library never imported cannot have been raised)."""
    aiohttp = sys.modules.get("aiohttp")
    if aiohttp is None or not isinstance(exc, aiohttp.ClientError):
        return None
    from dag_common.node_status import client_failure  # aiohttp is imported already

    return client_failure(exc)


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
    except TimeoutError:
        error("a call got no answer in time")
        return ExitCode.FAILED
    except OSError as exc:
        logger.debug("OS error", exc_info=True)
        error(_os_error(exc))
        return ExitCode.FAILED
    except Exception as exc:  # a bug (or a call's failure no command said): one line
        said = _client_error(exc)
        if said is not None:
            error(f"a call failed: {said}")
            return ExitCode.FAILED
        logger.debug("unexpected error", exc_info=True)
        hint = "; --verbose shows where" if hasattr(args, "verbose") else ""
        error(f"unexpected {type(exc).__name__}: {exc} (a bug{hint})")
        return ExitCode.FAILED
