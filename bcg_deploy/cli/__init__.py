"""The ``bcgd`` command line: thin typer commands over the library.

Each command module adds its commands to ``app`` (``cli.app``); library errors (:class:`BcgdError`) become
a one-line ``error:`` message and exit code 2, never a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys

from bcg_deploy.cli.app import app as app
from bcg_deploy.cli.app import console as console
from bcg_deploy.cli.app import err_console as err_console
from bcg_deploy.errors import BcgdError

# Options that take a value but may also be given bare (``--noise`` alone = ``--noise 1``): typer has no
# optional-value options, so ``main`` supplies the value before parsing. command -> {option: bare value}.
BARE_VALUES: dict[str, dict[str, str]] = {"sim2sim": {"--noise": "1"}}


def fill_bare_values(argv: list[str]) -> list[str]:
    """``argv`` with the value of a bare optional-value option filled in (see ``BARE_VALUES``).

    The option is bare when it is last, or when the next word is not a number (another option or the
    positional POLICY); ``--noise=0.5`` and ``--noise 0.5`` are left alone.
    """
    if not argv:
        return argv
    bare = BARE_VALUES.get(argv[0], {})
    out: list[str] = []
    for i, word in enumerate(argv):
        out.append(word)
        if word in bare:
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is None or not _is_number(nxt):
                out.append(bare[word])
    return out


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _register() -> None:
    """Add every command to ``app``. Called by ``main`` (and tests), not at import: the command modules load
    torch and the training configuration, which ``fill_bare_values`` and the consoles do not need."""
    from bcg_deploy.cli import export, motions, robot, sim2sim, train, verify  # noqa: F401 - each registers its commands


def _fail(message: str) -> None:
    err_console.print("[bold red]error:[/] ", end="", highlight=False)
    err_console.print(message, markup=False, highlight=False, soft_wrap=True)
    sys.exit(2)


def _import_mujoco() -> None:
    """Import MuJoCo up front so that a broken ``MUJOCO_GL`` set-up is one clear line, not a traceback."""
    try:
        import mujoco  # noqa: F401
    except Exception as exc:  # mujoco raises AttributeError/RuntimeError/ImportError for GL problems
        gl = os.environ.get("MUJOCO_GL")
        if gl is None:
            raise
        _fail(
            f"MuJoCo cannot start with MUJOCO_GL={gl} ({type(exc).__name__}: {exc}); install the GL library "
            "(apt-get install libegl1 for egl, libosmesa6 for osmesa) or unset MUJOCO_GL"
        )


WRITE_ERRORS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EIO, errno.EPIPE}
"""Errors of a write that ran out of room (disk full, file too large, quota), failed, or lost its reader."""


def _stream_failed(exc: OSError) -> None:
    """A write to standard output failed (``bcgd ... --json - > /dev/full``, a closed pipe): one line, exit 2.
    Standard output goes to /dev/null for the rest, so that Python's own flush at exit fails no more."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    if exc.errno == errno.EPIPE:  # the reader went away (``| head``): nothing more to say
        sys.exit(2)
    _fail(f"cannot write {exc.filename or 'to standard output'}: {exc.strerror or exc}")


def main() -> None:
    _import_mujoco()
    _register()
    try:
        try:
            app(args=fill_bare_values(sys.argv[1:]), prog_name="bcgd")
        finally:
            sys.stdout.flush()  # here, not at interpreter exit, where a failure is a traceback
    except BcgdError as exc:
        _fail(str(exc))
    except OSError as exc:
        if exc.errno not in WRITE_ERRORS:
            raise
        _stream_failed(exc)
