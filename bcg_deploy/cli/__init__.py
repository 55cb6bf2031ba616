"""The ``bcgd`` command line: thin typer commands over the library.

Each sub-module registers its commands on ``app``; library errors (:class:`BcgdError`) become a
one-line ``error:`` message and exit code 2, never a traceback.
"""

from __future__ import annotations

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


def main() -> None:
    _register()
    try:
        app()
    except BcgdError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)
