"""Export identity: one checkpoint exported by two source trees gives the same files.

    python bench/export_identity.py CHECKPOINT --before-tree DIR [--after-tree DIR] [--profile P] [--inputs obs]
        [--keep DIR]

Each tree exports CHECKPOINT in its own process (``PYTHONPATH=TREE python -m bcg_deploy.cli export ...``; the
after tree defaults to this checkout), into its own folder. The two ONNX files are then compared part by part:
the graph (the model with its initializer data and metadata removed, serialised), every initializer's bytes,
and every metadata key (JSON values with the fields that record when the export was made, ``WHEN_KEYS``,
masked). Side files (``--profile unitree``: params/deploy.yaml and the motion NPZ) are compared byte for byte.
Prints ``export_identity.<part>: same|DIFFERENT`` lines and exits 1 on any difference.

Used to show that a refactoring leaves the exported policy alone: export with the tree before the change and
with the tree after it, same checkpoint, same settings.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx

WHEN_KEYS = frozenset({"exported_at", "created_at", "timestamp", "date", "time"})
"""JSON fields (at any depth of a metadata value) that record when an export was made: masked."""


def export_with(tree: Path, checkpoint: Path, out_dir: Path, extra: list[str]) -> Path:
    """Export ``checkpoint`` with the package of ``tree`` into ``out_dir/exported/policy.onnx``."""
    out = out_dir / "exported" / "policy.onnx"
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-m", "bcg_deploy.cli", "export", str(checkpoint), "-o", str(out), *extra]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"error: export with {tree} failed ({res.returncode}): {res.stderr.strip()[-400:]}")
    return out


def _masked(value: object) -> object:
    if isinstance(value, dict):
        return {k: ("<masked>" if k in WHEN_KEYS else _masked(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return value


def metadata(model: onnx.ModelProto) -> dict[str, object]:
    """Metadata key -> value, JSON values parsed and their ``WHEN_KEYS`` masked."""
    out: dict[str, object] = {}
    for p in model.metadata_props:
        try:
            out[p.key] = _masked(json.loads(p.value))
        except json.JSONDecodeError:
            out[p.key] = p.value
    return out


def graph_bytes(model: onnx.ModelProto) -> bytes:
    """The model serialised without its metadata and without the initializers' data (names, types and shapes
    stay): the graph's structure, node by node."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.metadata_props[:]
    for t in m.graph.initializer:
        t.ClearField("raw_data")
        for field in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data"):
            t.ClearField(field)
    return m.SerializeToString(deterministic=True)


def compare(before: Path, after: Path) -> dict[str, list[str]]:
    """Part -> the names that differ (empty list: identical): ``graph``, ``initializers``, ``metadata``."""
    a, b = onnx.load(str(before)), onnx.load(str(after))
    diff: dict[str, list[str]] = {"graph": [] if graph_bytes(a) == graph_bytes(b) else ["graph"]}
    ia = {t.name: t.SerializeToString(deterministic=True) for t in a.graph.initializer}
    ib = {t.name: t.SerializeToString(deterministic=True) for t in b.graph.initializer}
    diff["initializers"] = sorted(n for n in ia.keys() | ib.keys() if ia.get(n) != ib.get(n))
    ma, mb = metadata(a), metadata(b)
    diff["metadata"] = sorted(k for k in ma.keys() | mb.keys() if ma.get(k) != mb.get(k))
    return diff


def side_files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` except the ONNX itself, by relative path."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and p.suffix != ".onnx"
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--before-tree", type=Path, required=True, help="Source tree (holding bcg_deploy/) before.")
    ap.add_argument("--after-tree", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--profile", default=None)
    ap.add_argument("--inputs", default=None)
    ap.add_argument("--keep", type=Path, default=None, help="Keep both exports under this folder.")
    args = ap.parse_args()
    extra = [*(["--profile", args.profile] if args.profile else [])]
    extra += ["--inputs", args.inputs] if args.inputs else []
    root = args.keep or Path(tempfile.mkdtemp(prefix="bcgd_export_identity_"))
    paths = {}
    for side, tree in (("before", args.before_tree), ("after", args.after_tree)):
        paths[side] = export_with(tree.resolve(), args.checkpoint.resolve(), root / side, extra)
    diff = compare(paths["before"], paths["after"])
    sa, sb = side_files(root / "before"), side_files(root / "after")
    diff["side_files"] = sorted(k for k in sa.keys() | sb.keys() if sa.get(k) != sb.get(k))
    for part, names in diff.items():
        print(f"export_identity.{part}: {'same' if not names else 'DIFFERENT ' + ', '.join(names)}")
    same_bytes = paths["before"].read_bytes() == paths["after"].read_bytes()
    print(f"export_identity.onnx_bytes: {'same' if same_bytes else 'different (see the parts above)'}")
    print(f"export_identity.files: {paths['before']} {paths['after']} ({len(sa)} side files)")
    return 1 if any(diff.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
