"""The ``bcgd`` command line: thin typer commands over the library.

Each sub-module registers its commands on ``app``; library errors (:class:`BcgdError`) become a
one-line ``error:`` message and exit code 2, never a traceback.
"""

from __future__ import annotations

import os
import sys

import typer
from rich.console import Console

from bcg_deploy.errors import BcgdError

app = typer.Typer(
    name="bcgd",
    help="Train deployable G1 motion-imitation policies (SHAC + BCG), export them to ONNX, prove them in MuJoCo.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)


def _register() -> None:
    # Imported for their side effect of adding commands to ``app``.
    import importlib

    from bcg_deploy.cli import robot  # noqa: F401

    for name in ("motions", "train", "export", "sim2sim"):
        try:
            importlib.import_module(f"bcg_deploy.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"bcg_deploy.cli.{name}":
                raise


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


def main() -> None:
    _import_mujoco()
    _register()
    try:
        app()
    except BcgdError as exc:
        _fail(str(exc))
