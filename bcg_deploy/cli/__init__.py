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
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)

# Options that take a value but may also be given bare (``--noise`` alone = ``--noise 1``): typer has no
# optional-value options, so ``main`` supplies the value before parsing. command -> {option: bare value}.
BARE_VALUES: dict[str, dict[str, str]] = {"sim2sim": {"--noise": "1"}}


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
        import bcg_deploy

        typer.echo(f"bcgd {bcg_deploy.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Train deployable G1 motion-imitation policies (SHAC + BCG), export them to ONNX, prove them in MuJoCo."""


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


JSON_OPTION = typer.Option(None, "--json", help="Also write the result as JSON to this file ('-': stdout only).")


def json_out(text: str, path: str | os.PathLike | None) -> None:
    """``--json PATH`` in every command: ``-`` prints the JSON to stdout, a path writes it atomically."""
    from bcg_deploy.fileio import atomic_write_bytes

    if path is None:
        return
    if str(path) == "-":
        typer.echo(text.rstrip("\n"))
        return
    written = atomic_write_bytes(path, (text.rstrip("\n") + "\n").encode())
    err_console.print(f"wrote {written}", highlight=False)


def _register() -> None:
    # Imported for their side effect of adding commands to ``app``.
    import importlib

    from bcg_deploy.cli import robot  # noqa: F401

    for name in ("motions", "train", "export", "sim2sim", "verify"):
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
        app(args=fill_bare_values(sys.argv[1:]), prog_name="bcgd")
    except BcgdError as exc:
        _fail(str(exc))
