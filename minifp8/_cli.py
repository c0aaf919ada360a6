"""What every ``python -m minifp8...`` command does alike: parse flags with one-line errors (`Parser`),
and stop quietly when its reader goes away.

``python -m minifp8.bench | head -3`` closes the pipe after three lines. A process that writes to
it then gets SIGPIPE and ends with status 128 + 13 = 141, silently; Python ignores SIGPIPE, so the
write raises BrokenPipeError instead, which would print a traceback. The commands catch it and end
as SIGPIPE would have ended them. Output to a pipe is buffered, so the write that finds it closed
may be the flush at exit, after ``main`` has returned: the commands flush before they return.

Any other failure to write stdout (a full disk, a file-size limit: ``nohup cmd > log``) ends a
command with one line on stderr and status 2 (`StdoutError`), not a traceback, and is never taken
for a failure to write a file the command was asked to write.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any, Callable, NoReturn

SIGPIPE_STATUS = 141  # 128 + SIGPIPE (13): how a shell reports a process that SIGPIPE ended
STDOUT_ERROR_STATUS = 2  # stdout could not be written (as a results file that cannot be written)


class StdoutError(Exception):
    """A write to stdout failed for another reason than a closed pipe (its OSError is the cause).

    Not an OSError, so that no handler of a results file's OSError reports it as that file's."""


class _GuardedStdout:
    """A stdout whose ``write`` and ``flush`` raise `StdoutError` for an OSError other than
    BrokenPipeError; everything else is the wrapped stream's."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def _call(self, name: str, *args):
        try:
            return getattr(self._stream, name)(*args)
        except BrokenPipeError:
            raise
        except OSError as error:
            raise StdoutError(error) from error

    def write(self, text: str) -> int:
        return self._call("write", text)

    def flush(self) -> None:
        self._call("flush")

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def guarded_stdout():
    """Within the block, stdout raises `StdoutError` where writing it fails (`_GuardedStdout`)."""
    stream = sys.stdout
    if stream is None or isinstance(stream, _GuardedStdout):
        yield
        return
    sys.stdout = _GuardedStdout(stream)
    try:
        yield
    finally:
        if isinstance(sys.stdout, _GuardedStdout) and sys.stdout._stream is stream:
            sys.stdout = stream


def report_stdout_error(prog: str, error: StdoutError) -> int:
    """Say on stderr, in one line, that ``prog`` could not write its output, stop writing stdout
    (its buffer would fail again at exit) and return `STDOUT_ERROR_STATUS`."""
    silence_stdout()
    cause = error.__cause__ if error.__cause__ is not None else error
    with contextlib.suppress(OSError):
        print(one_line(f"{prog}: error: cannot write the output (stdout): {cause}"), file=sys.stderr)
    return STDOUT_ERROR_STATUS


def silence_stdout() -> None:
    """Point stdout's file descriptor at the null device, so that flushing it at exit cannot raise
    BrokenPipeError again (a captured stdout with no file descriptor is left as it is)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def flush_stdout() -> None:
    """Flush stdout, where there is one (None when fd 1 was closed at start, or under pythonw)."""
    if sys.stdout is not None:
        sys.stdout.flush()


def escape_unencodable_stdout() -> None:
    """Print what stdout's encoding cannot hold as backslash escapes, as stderr already does: a path
    the commands echo may hold characters that an ASCII or Windows code-page stdout cannot encode,
    or lone surrogates (a file name that is not UTF-8, as ``os.fsdecode`` gives it back)."""
    reconfigure = getattr(sys.stdout, "reconfigure", None)  # (a replaced sys.stdout may have none)
    if reconfigure is not None:
        reconfigure(errors="backslashreplace")


def line_buffered_stdout() -> None:
    """Flush stdout at every line, as a terminal does, also where it is a file or a pipe (``nohup ... >
    log``, ``| tee log``): progress shows as it comes, in order with the errors on stderr, and a Ctrl-C
    loses none of it (block-buffered, a whole run's lines came at its end, after its errors)."""
    reconfigure = getattr(sys.stdout, "reconfigure", None)  # (a replaced sys.stdout may have none)
    if reconfigure is not None:
        reconfigure(line_buffering=True)


_LINE_BREAKS = {ord(c): repr(c)[1:-1] for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}


def one_line(message: str) -> str:
    """``message`` with its line breaks (those ``str.splitlines`` splits at) as backslash escapes: an
    error that echoes an argument holding a newline (argparse's "unrecognized arguments: ...")
    stays the one line the commands promise."""
    return message.translate(_LINE_BREAKS)


def brief(error: BaseException, limit: int = 160) -> str:
    """``"TypeName: message"`` of an error raised while parsing a file's bytes, for a one-line error
    that wraps it: its message's whitespace (line breaks too) collapsed, and cut to ``limit``
    characters (a parser may quote much of what it read)."""
    message = " ".join(str(error).split())
    message = message if len(message) <= limit else message[:limit - 3] + "..."
    return f"{type(error).__name__}: {message}"


def exit_status_of(main: Callable[[], int]) -> int:
    """``main()``'s exit status, or `SIGPIPE_STATUS` (and nothing printed) if its output was closed,
    or `STDOUT_ERROR_STATUS` (and one line on stderr) if it could not be written. Characters stdout
    cannot encode print as escapes (`escape_unencodable_stdout`)."""
    escape_unencodable_stdout()
    try:
        with guarded_stdout():
            try:
                return main()
            finally:  # (else the buffered write that meets a closed pipe comes at exit, uncaught: --help too)
                flush_stdout()
    except BrokenPipeError:
        silence_stdout()
        return SIGPIPE_STATUS
    except StdoutError as error:
        spec = getattr(main, "__globals__", {}).get("__spec__")  # (run with -m, __module__ is "__main__")
        module = spec.name if spec is not None else main.__module__
        return report_stdout_error(f"python -m {module.removesuffix('.__main__')}", error)


class ListFlag(argparse.Action):
    """argparse's ``store`` for a flag that takes a comma-separated list, refusing the flag given
    twice (with `Parser`): argparse keeps the last value without a word, and ``--recipe fp32
    --recipe fp8``, which reads as both, trained fp8 alone. Other flags keep argparse's rule, the
    last one wins, so that a command line can override a flag it holds already (``$BASE --steps 10``)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        given = getattr(parser, "_given", None)  # (set by Parser.parse_known_args)
        if given is not None:
            if self.dest in given:
                parser.error(f"{option_string} is given twice ({given[self.dest]!r}, then {values!r}); give one "
                             f"comma-separated list")
            given[self.dest] = values
        setattr(namespace, self.dest, values)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (not the many-line usage), exiting with status 2,
    and which refuses a `ListFlag` given twice."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._given: dict[str, Any] | None = None

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._given = {}
        try:
            return super().parse_known_args(args, namespace)
        finally:
            self._given = None

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see -h)\n")
