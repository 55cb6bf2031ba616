"""The ``bcgd`` typer application and what every command shares: the consoles and ``--json``.

Each command module (``robot``, ``motions``, ``train``, ``export``, ``sim2sim``) adds its commands to ``app``
when imported.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.console import Console

import bcg_deploy
from bcg_deploy.fileio import atomic_write_bytes

app = typer.Typer(
    name="bcgd",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)


def _flags_without_type() -> None:
    """Show flags as flags in ``--help``: typer's rich help prints ``<bool>`` beside on/off options."""
    try:
        from typer.core import TyperOption
    except ImportError:  # pragma: no cover - older typer: nothing to fix
        return
    show = getattr(TyperOption, "display_type_rich", None)
    if show is None or getattr(show, "_bcgd", False):
        return

    def display_type_rich(self, ctx):  # noqa: ANN001, ANN202 - typer's signature
        return None if self.is_flag or self.count else show(self, ctx)

    display_type_rich._bcgd = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich


_flags_without_type()


def _version(value: bool) -> None:
    if value:
        typer.echo(f"bcgd {bcg_deploy.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Train deployable G1 motion-imitation policies (SHAC + BCG), export them to ONNX, prove them in MuJoCo."""


def option(default, name: str, help: str, shown: str | None = None, panel: str | None = None, **kw):  # noqa: ANN001, ANN202
    """A typer option in one line: ``shown`` is the default as ``--help`` shows it (for an option whose None
    means "not given"), ``panel`` the help group it is listed in."""
    return typer.Option(default, name, help=help, show_default=shown or True, rich_help_panel=panel, **kw)


JSON_OPTION = typer.Option(None, "--json", help="Also write the result as JSON to this file ('-': stdout only).")


def json_out(text: str, path: str | os.PathLike | None, overwrite: bool = True, flag: str = "--force") -> None:
    """``--json PATH`` in every command: ``-`` prints the JSON to stdout, a path writes it atomically (only
    over a regular file; with ``overwrite=False`` only where none is, see ``fileio``)."""
    if path is None:
        return
    if str(path) == "-":
        typer.echo(text.rstrip("\n"))
        return
    written = atomic_write_bytes(path, (text.rstrip("\n") + "\n").encode(), "--json", overwrite, flag)
    link = f" (the file its link points to: {written})" if written != Path(path) else ""
    err_console.print(f"wrote {path}{link}", highlight=False)
