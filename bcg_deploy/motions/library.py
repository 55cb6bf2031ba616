"""The per-user clip library: LAFAN1 import, task resolution, built-in fallback, list and show.

``library_dir()`` (``$BCGD_HOME`` or ``~/.local/share/bcg-deploy``) holds ``library.json`` (the
registered LAFAN1 files: absolute path, sha256, rows; and the chosen task windows) and ``cache/``.
The CSV files themselves are never copied (LAFAN1 is CC BY-NC-ND): the library points at the
user's own folder and checks the sha256 before use.

Tasks ``run``, ``jump``, ``fight``, ``dance`` resolve to a 15 s window of a registered LAFAN1 file
(``run1_subject2``, ``jumps1_subject1``, ``fight1_subject2``, ``dance1_subject1``, or else the first
registered file whose name starts with ``run``, ``jumps``, ``fight``, ``dance``), the window chosen
by ``windows.choose_window`` at import; otherwise to the built-in synthetic clip of that name.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Literal

from bcg_deploy.errors import BcgdError
from bcg_deploy.fileio import file_sha256
from bcg_deploy.motions import cache
from bcg_deploy.motions.build import (
    CONTROL_FPS,
    LoadCfg,
    filtered_source_track,
    load_lafan1_csv,
    motion_from_track,
)
from bcg_deploy.motions.builtin import BUILTINS, generate_builtin
from bcg_deploy.motions.csv_io import CSV_FILE, read_lafan1_csv
from bcg_deploy.motions.metrics import summary
from bcg_deploy.motions.motion import Motion
from bcg_deploy.motions.paths import library_dir
from bcg_deploy.motions.windows import WindowCriterion, choose_window
from bcg_deploy.robots import RobotSpec, load_robot

LIBRARY_FILE = "library.json"
LIBRARY_VERSION = 1
TASK_DURATION_S = 15.0
Prefer = Literal["auto", "lafan1", "builtin"]


@dataclass(frozen=True)
class TaskDef:
    """A task name, the LAFAN1 file that defines it, and the file-name prefix of its fallbacks."""

    name: str
    preferred: str
    prefix: str


TASKS: dict[str, TaskDef] = {
    "run": TaskDef("run", "run1_subject2", "run"),
    "jump": TaskDef("jump", "jumps1_subject1", "jumps"),
    "fight": TaskDef("fight", "fight1_subject2", "fight"),
    "dance": TaskDef("dance", "dance1_subject1", "dance"),
}


def library_path() -> Path:
    return library_dir() / LIBRARY_FILE


def read_library() -> dict:
    """The library index (empty when none was imported yet)."""
    path = library_path()
    if not path.is_file():
        return {"version": LIBRARY_VERSION, "files": {}, "windows": {}}
    try:
        lib = json.loads(path.read_text())
    except (OSError, ValueError):
        raise BcgdError(
            f"{path}: unreadable library index; delete it and run `bcgd motions import DIR` again"
        ) from None
    if not isinstance(lib, dict) or lib.get("version") != LIBRARY_VERSION:
        raise BcgdError(
            f"{path}: library index version {lib.get('version') if isinstance(lib, dict) else '?'}, "
            f"expected {LIBRARY_VERSION}; delete it and run `bcgd motions import DIR` again"
        )
    lib.setdefault("files", {})
    lib.setdefault("windows", {})
    return lib


def _write_library(lib: dict) -> Path:
    path = library_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".library-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(lib, f, indent=2, sort_keys=True)
        os.replace(tmp, path)
    except OSError as exc:
        raise BcgdError(f"cannot write the library index {path}: {exc.strerror}") from None
    return path


def _task_file(task: TaskDef, files: dict) -> str | None:
    if task.preferred in files:
        return task.preferred
    matches = sorted(s for s in files if s.startswith(task.prefix))
    return matches[0] if matches else None


@dataclass
class ImportReport:
    """What ``import_lafan1_dir`` did: files registered, files skipped (with the reason), task windows."""

    directory: str
    library: str
    imported: list[dict] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    tasks: dict[str, dict] = field(default_factory=dict)


def import_lafan1_dir(
    directory: str | Path,
    robot: RobotSpec | None = None,
    skip_bad: bool = False,
    criterion: WindowCriterion | None = None,
) -> ImportReport:
    """Validate every ``*.csv`` of ``directory`` and register them (by path) in the library.

    All files are validated first; one bad file aborts the import (nothing is registered) unless
    ``skip_bad``. The task windows of the files that define run/jump/fight/dance are computed and
    stored. Raises BcgdError naming the folder, or the first bad file and row.
    """
    robot = robot or load_robot("g1")
    criterion = criterion or WindowCriterion(duration_s=TASK_DURATION_S)
    d = Path(directory).expanduser()
    if not d.exists():
        raise BcgdError(f"{d}: no such directory")
    if not d.is_dir():
        raise BcgdError(f"{d}: not a directory (expected a folder of LAFAN1 G1 CSV files)")
    d = d.resolve()
    files = sorted(p for p in d.glob("*.csv") if p.is_file())
    if not files:
        raise BcgdError(f"{d}: no .csv files (expected LAFAN1 G1 CSVs such as run1_subject2.csv)")
    report = ImportReport(directory=str(d), library=str(library_dir()))
    clips = {}
    for f in files:
        try:
            clip = read_lafan1_csv(f, robot)
        except BcgdError as exc:
            if not skip_bad:
                raise BcgdError(f"{exc} (nothing imported; fix or remove the file, or pass --skip-bad)") from None
            report.skipped.append(str(exc))
            continue
        clips[f.stem] = clip
        report.imported.append(
            {
                "name": f.stem,
                "path": str(f),
                "sha256": file_sha256(f, CSV_FILE),
                "rows": clip.num_frames,
                "duration_s": clip.duration,
            }
        )
    lib = read_library()
    for entry in report.imported:
        lib["files"][entry["name"]] = {k: v for k, v in entry.items() if k != "name"}
        lib["windows"].pop(entry["name"], None)
    for task in TASKS.values():
        stem = _task_file(task, lib["files"])
        if stem is None or stem not in clips:
            continue
        try:
            track, _ = filtered_source_track(clips[stem], robot, LoadCfg().spike_filter)
            choice = choose_window(track, robot, criterion, name=f"{stem}.csv")
        except BcgdError as exc:
            lib["windows"][stem] = {"error": str(exc), "sha256": lib["files"][stem]["sha256"]}
            report.skipped.append(f"{exc} (task {task.name} stays built-in)")
            continue
        lib["windows"][stem] = {
            **choice.as_dict(),
            "sha256": lib["files"][stem]["sha256"],
            "criterion": asdict(criterion),
        }
        report.tasks[task.name] = {"file": stem, **choice.as_dict()}
    _write_library(lib)
    return report


def resolve_task(name: str, prefer: Prefer = "auto") -> dict:
    """Where task ``name`` comes from, without loading it.

    Returns ``{"kind": "lafan1", "task", "file", "path", "sha256", "start_s", "duration_s", ...}`` or
    ``{"kind": "builtin", "task", "duration_s", "description"}``.
    """
    if name not in TASKS:
        raise BcgdError(f"unknown motion {name!r}: expected one of {', '.join(TASKS)}")
    if prefer not in ("auto", "lafan1", "builtin"):
        raise BcgdError(f"prefer={prefer!r}: expected auto, lafan1 or builtin")
    if prefer != "builtin":
        lib = read_library()
        stem = _task_file(TASKS[name], lib["files"])
        win = lib["windows"].get(stem) if stem is not None else None
        if stem is not None and win is not None and "error" in win:
            if prefer == "lafan1":
                raise BcgdError(f"motion {name!r}: {win['error']}")
        elif stem is not None:
            entry = lib["files"][stem]
            out = {"kind": "lafan1", "task": name, "file": stem, **entry, "duration_s": TASK_DURATION_S}
            if win is not None and win.get("sha256") == entry["sha256"]:
                out.update(start_s=win["start_s"], window=win)
            return out
        elif prefer == "lafan1":
            raise BcgdError(
                f"motion {name!r}: no LAFAN1 file for it in the library ({library_path()}); "
                f"run `bcgd motions import DIR` with a folder holding {TASKS[name].preferred}.csv"
            )
    clip = BUILTINS[name]
    return {"kind": "builtin", "task": name, "duration_s": clip.duration_s, "description": clip.description}


def load_builtin(name: str, robot: RobotSpec | None = None, use_cache: bool = True) -> Motion:
    """The built-in synthetic clip ``name`` (generated on first use, then cached)."""
    robot = robot or load_robot("g1")
    if name not in BUILTINS:
        raise BcgdError(f"unknown built-in clip {name!r}: expected one of {', '.join(BUILTINS)}")
    clip = BUILTINS[name]
    key = cache.cache_key({"kind": "builtin", "name": name, "fps": CONTROL_FPS, "model_hash": robot.model_hash})
    hit = cache.load_track(key) if use_cache else None
    track = hit[0] if hit is not None else generate_builtin(name, robot, CONTROL_FPS)
    if hit is None and use_cache:
        cache.save_track(key, track, {"kind": "builtin", "name": name})
    source = {
        "kind": "builtin",
        "generator": name,
        "synthetic": True,
        "description": clip.description,
        "start_s": 0.0,
        "duration_s": (len(track.root_pos) - 1) / track.fps,
        "code_version": cache.code_version(),
    }
    return motion_from_track(track, robot, name, source)


def load_task_motion(
    name: str, prefer: Prefer = "auto", robot: RobotSpec | None = None, use_cache: bool = True
) -> Motion:
    """The reference Motion of task ``name`` (run, jump, fight, dance) at 50 Hz.

    From the user's LAFAN1 library when it has the task's file (15 s window chosen at import),
    else the built-in synthetic clip; ``prefer`` forces one or the other.
    """
    robot = robot or load_robot("g1")
    src = resolve_task(name, prefer)
    if src["kind"] == "builtin":
        return load_builtin(name, robot, use_cache)
    path = _checked_file(src["file"], src)
    window = src.get("window")
    if window is None:  # index written without a window for this file: choose it now
        clip = read_lafan1_csv(path, robot)
        track, _ = filtered_source_track(clip, robot, LoadCfg().spike_filter)
        window = choose_window(track, robot, WindowCriterion(duration_s=TASK_DURATION_S), name=path.name).as_dict()
    motion = load_lafan1_csv(path, window["start_s"], TASK_DURATION_S, robot, LoadCfg(use_cache=use_cache), name=name)
    criterion = {k: window[k] for k in ("score", "root_height_min", "min_foot_height") if k in window}
    return replace(motion, source={**motion.source, "task": name, "window_criterion": criterion})


def _checked_file(stem: str, entry: dict) -> Path:
    """The registered file ``stem``'s path when it is still there and unchanged, else a one-line BcgdError."""
    path = Path(entry["path"])
    if not path.is_file():
        raise BcgdError(
            f"motion {stem!r}: registered file {path} is missing (was its folder moved?); run "
            f"`bcgd motions import DIR` on its new folder, or `bcgd motions remove {stem}` to forget it"
        )
    if file_sha256(path, CSV_FILE) != entry["sha256"]:
        raise BcgdError(f"{path.name} changed since it was imported; run `bcgd motions import {path.parent}` again")
    return path


def registered_file(name: str) -> Path:
    """The path of the LAFAN1 file registered as ``name``, checked present and unchanged."""
    files = read_library()["files"]
    if name not in files:
        known = ", ".join(sorted(files)) or "none registered yet (bcgd motions import DIR)"
        raise BcgdError(f"unknown motion {name!r}: expected a registered LAFAN1 file ({known})")
    return _checked_file(name, files[name])


def file_status(entry: dict) -> str:
    """``ok``, ``missing`` or ``changed`` (sha256 differs from the imported file's) for a library entry."""
    path = Path(entry["path"])
    if not path.is_file():
        return "missing"
    return "ok" if file_sha256(path, CSV_FILE) == entry["sha256"] else "changed"


def remove_motions(names: list[str]) -> list[str]:
    """Forget the registered files ``names`` (the CSV files themselves are untouched); returns them.

    A task whose file is removed resolves to the next registered file of its prefix, else to its built-in clip.
    """
    lib = read_library()
    unknown = [n for n in names if n not in lib["files"]]
    if unknown:
        known = ", ".join(sorted(lib["files"])) or "none"
        raise BcgdError(f"unknown motion {unknown[0]!r}: expected a registered LAFAN1 file ({known})")
    for n in names:
        del lib["files"][n]
        lib["windows"].pop(n, None)
    _write_library(lib)
    return list(names)


def task_source_text(src: dict) -> str:
    """One line naming where a task resolves (``resolve_task``'s dict): the LAFAN1 file and window, or the
    built-in synthetic clip."""
    if src["kind"] == "lafan1":
        return motion_source_text({**src, "file": f"{src['file']}.csv", "duration_s": TASK_DURATION_S})
    return motion_source_text(src)


def motion_source_text(source: dict) -> str:
    """One line naming a loaded clip's source (``Motion.source``, as run.pt stores it): the LAFAN1 file and
    window, or the built-in synthetic clip."""
    if source.get("kind") == "lafan1":
        start, dur = source.get("start_s"), source.get("duration_s")
        window = f" [{start:.1f} s, +{dur:g} s]" if start is not None and dur is not None else ""
        return f"LAFAN1 {source.get('file', source.get('name', '?'))}{window}"
    return "built-in (synthetic)"


def list_motions() -> dict:
    """The library folder, the registered files (with their state) and, for every task, where it resolves."""
    lib = read_library()
    rows = []
    for name in TASKS:
        src = resolve_task(name)
        where = task_source_text(src)
        rows.append({"name": name, "kind": src["kind"], "source": where, "duration_s": src["duration_s"]})
    files = [
        {
            "name": stem,
            "path": e["path"],
            "duration_s": e.get("duration_s"),
            "status": file_status(e),
            "tasks": [t.name for t in TASKS.values() if _task_file(t, lib["files"]) == stem],
        }
        for stem, e in sorted(lib["files"].items())
    ]
    return {"library": str(library_dir()), "files": files, "motions": rows}


@dataclass(frozen=True)
class MotionQuery:
    """What to load for ``bcgd motions show``: a task ``name`` OR a ``csv`` file window.

    Attributes:
        name: task name (run, jump, fight, dance) or the name of a registered LAFAN1 file.
        csv: a LAFAN1 G1 CSV file to load (and validate) directly.
        start_s: window start (s) for a file; ignored for tasks.
        duration_s: window length (s) for a file, None for the rest of the file.
        prefer: for tasks, ``auto`` (library, else built-in), ``lafan1`` or ``builtin``.
        use_cache: read/write the npz cache.
    """

    name: str | None = None
    csv: str | None = None
    start_s: float = 0.0
    duration_s: float | None = None
    prefer: Prefer = "auto"
    use_cache: bool = True


def load_query(q: MotionQuery, robot: RobotSpec | None = None) -> Motion:
    robot = robot or load_robot("g1")
    if (q.name is None) == (q.csv is None):
        raise BcgdError("give a motion NAME or --csv FILE (exactly one)")
    cfg = LoadCfg(use_cache=q.use_cache)
    if q.csv is not None:
        return load_lafan1_csv(q.csv, q.start_s, q.duration_s, robot, cfg)
    if q.name in TASKS:
        return load_task_motion(q.name, q.prefer, robot, q.use_cache)
    files = read_library()["files"]
    if q.name in files:
        return load_lafan1_csv(_checked_file(q.name, files[q.name]), q.start_s, q.duration_s, robot, cfg, name=q.name)
    known = list(TASKS) + sorted(files)
    raise BcgdError(f"unknown motion {q.name!r}: expected one of {', '.join(known)} (or --csv FILE)")


def show_motion(q: MotionQuery, robot: RobotSpec | None = None) -> dict:
    """Load what ``q`` names and return its figures (``metrics.summary``) for display."""
    robot = robot or load_robot("g1")
    return summary(load_query(q, robot), robot)
