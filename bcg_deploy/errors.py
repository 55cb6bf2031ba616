"""User-facing errors: one line naming the thing and what was expected; the CLI exits non-zero."""

import sys
from collections.abc import Callable


class BcgdError(Exception):
    """Bad user input (file, metadata, value). The CLI prints ``error: <message>`` and exits 2."""


def run_script(main: Callable[[], None]) -> None:
    """Run a script's ``main`` (the benchmarks under bench/) the way the CLI runs a command: a
    :class:`BcgdError` is one ``error: <message>`` line on stderr and exit code 2, not a traceback."""
    try:
        main()
    except BcgdError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
