"""Run the ``bcgd`` command line of this checkout in a child process, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]


def bcgd(*args: object, cwd: Path | None = None, env: dict | None = None, timeout: float = 300):
    """``bcgd ARGS`` (this checkout's code, whatever is installed) -> CompletedProcess with text output."""
    e = {**os.environ, **(env or {})}
    e["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [e.get("PYTHONPATH")])])
    e.setdefault("COLUMNS", "80")
    cmd = [sys.executable, "-m", "bcg_deploy.cli", *map(str, args)]
    return subprocess.run(cmd, cwd=cwd, env=e, capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(proc, needle: str) -> str:
    """Exit code 2, stderr exactly one ``error:`` line containing ``needle``, no traceback; returns it."""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    assert needle in lines[0], lines[0]
    return lines[0]


def bcgd_here(*args: object, capsys) -> SimpleNamespace:  # noqa: ANN001 - pytest's capsys
    """``bcgd ARGS`` run in this process (no start-up cost: for the quick refusals) -> an object with
    ``returncode``, ``stdout`` and ``stderr`` like ``bcgd``'s."""
    from bcg_deploy.cli import main

    capsys.readouterr()
    old = sys.argv
    sys.argv = ["bcgd", *map(str, args)]
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = old
    out = capsys.readouterr()
    return SimpleNamespace(returncode=code, stdout=out.out, stderr=out.err)
