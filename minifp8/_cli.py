"""What every ``python -m minifp8...`` command does alike: stop quietly when its reader goes away.

``python -m minifp8.bench | head -3`` closes the pipe after three lines. A process that writes to
it then gets SIGPIPE and ends with status 128 + 13 = 141, silently; Python ignores SIGPIPE, so the
write raises BrokenPipeError instead, which would print a traceback. The commands catch it and end
as SIGPIPE would have ended them. Output to a pipe is buffered, so the write that finds it closed
may be the flush at exit, after ``main`` has returned: the commands flush before they return.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Callable

SIGPIPE_STATUS = 141  # 128 + SIGPIPE (13): how a shell reports a process that SIGPIPE ended


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
    """``main()``'s exit status, or `SIGPIPE_STATUS` (and nothing printed) if its output was closed.
    Characters stdout cannot encode print as escapes (`escape_unencodable_stdout`)."""
    escape_unencodable_stdout()
    try:
        try:
            return main()
        finally:  # (else the buffered write that meets a closed pipe comes at exit, uncaught: --help too)
            flush_stdout()
    except BrokenPipeError:
        silence_stdout()
        return SIGPIPE_STATUS
