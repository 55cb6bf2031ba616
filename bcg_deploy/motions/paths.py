"""Where the per-user motion library and cache live."""

from __future__ import annotations

import os
from pathlib import Path

ENV_HOME = "BCGD_HOME"


def library_dir() -> Path:
    """The per-user data dir: ``$BCGD_HOME``, else ``$XDG_DATA_HOME/bcg-deploy``, else ``~/.local/share/bcg-deploy``.

    Not created here; writers create it.
    """
    env = os.environ.get(ENV_HOME)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "bcg-deploy"


def cache_dir() -> Path:
    """Where cached clips (npz) are written: ``library_dir() / "cache"``."""
    return library_dir() / "cache"
