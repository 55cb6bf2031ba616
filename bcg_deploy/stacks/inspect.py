"""Which stack loads a file, and reading it the way that stack does (``inspect``); ``verify`` on top of it.

``verify`` checks, before anything runs, that the files a stack will load agree with each other and with the
stack: observation terms the stack can build and their total size against the ONNX input, joint order, action
scale and offsets, gains, control rate, motion file format and length, static shapes, opset; for a bcgd export
also that the stack's files agree with the ``bcgd.*`` record the policy was exported with. One line per
mismatch; the stack module docstrings cite the code each check comes from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bcg_deploy.errors import BcgdError
from bcg_deploy.integrity import check_integrity, describe_onnx
from bcg_deploy.robots import RobotSpec, load_robot
from bcg_deploy.stacks import holosoma, unitree
from bcg_deploy.stacks import motion_tracking_controller as mtc
from bcg_deploy.stacks.base import Findings, OnnxFacts, StackInfo, read_onnx

BCGD = "bcgd"
STACKS = (mtc.NAME, unitree.MJLAB, unitree.LAB, holosoma.NAME, BCGD)
"""``bcgd``: bcgd's own raw-state ONNX (no deploy stack; sim2sim's own runtime)."""
INFOS: dict[str, StackInfo] = {mtc.NAME: mtc.INFO, holosoma.NAME: holosoma.INFO, **unitree.INFO}
_PROFILE_STACK = {"beyondmimic": mtc.NAME, "beyondmimic_wose": mtc.NAME, "unitree": unitree.MJLAB,
                  "holosoma": holosoma.NAME}  # fmt: skip


@dataclass
class Inspection:
    """A policy read by one stack: the stack, what it found, and the stack's view of the files."""

    path: Path
    stack: str
    findings: Findings
    files: object = None  # UnitreeFiles | MtcFiles | HoloFiles
    onnx: OnnxFacts | None = None
    bcgd: dict | None = None  # the bcgd.* keys (JSON-decoded) of a bcgd export
    detected: str = ""

    @property
    def ok(self) -> bool:
        return not self.findings.mismatches

    def to_dict(self, given: str | Path | None = None) -> dict:
        """``bcgd verify --json``: the path as given (default ``path``), the stack, how it was chosen, the
        findings."""
        f = self.findings
        return {"path": str(self.path if given is None else given), "stack": self.stack, "chosen": self.detected,
                "ok": self.ok, "mismatches": f.mismatches, "notes": f.notes, "summary": f.summary}  # fmt: skip

    def lines(self) -> list[str]:
        """``verify``'s output: mismatches (one line each), then notes, then the summary."""
        f = self.findings
        head = f"{self.stack} ({self.detected})"
        out = [f"mismatch: {m}" for m in f.mismatches] + [f"note: {n}" for n in f.notes]
        if self.ok:
            out += [f"{s}" for s in f.summary]
            out.append(f"ok: {head} loads {self.path} as it was trained")
        else:
            out.append(f"{len(f.mismatches)} mismatch{'es' if len(f.mismatches) > 1 else ''}: {head} would not run "
                       f"{self.path} as it was trained")  # fmt: skip
        return out


def onnx_of(path: Path) -> Path:
    """The ONNX file of a policy path (a folder: ``exported/policy.onnx``)."""
    return path / "exported" / "policy.onnx" if path.is_dir() else path


def _bcgd_keys(o: OnnxFacts | None) -> dict | None:
    import json

    if o is None or not any(k.startswith("bcgd.") for k in o.metadata):
        return None
    out = {}
    for k, v in o.metadata.items():
        if k.startswith("bcgd."):
            try:
                out[k[5:]] = json.loads(v)
            except json.JSONDecodeError:
                out[k[5:]] = v
    return out


def detect(path: Path) -> tuple[str, str]:
    """The stack that loads ``path`` and why (a one-line reason); a ``BcgdError`` when no stack's layout fits."""
    path = Path(path)
    if not path.exists():
        raise BcgdError(f"{path}: no such file or folder")
    folder = unitree.policy_folder(path)
    if (folder / "params" / "deploy.yaml").is_file():
        exported = read_onnx(folder / "exported" / "policy.onnx", Findings())
        if _bcgd_keys(exported) is not None:  # bcgd export --profile unitree: both motions, mjlab's by default
            return unitree.MJLAB, "bcgd export, profile unitree (--stack unitree_rl_lab for its CSV)"
        entry = unitree.find_fsm_entry(folder)
        motion = str((entry[1] if entry else {}).get("motion_file", ""))
        if motion.endswith(".csv") or (not motion and not list((folder / "params").glob("*.npz"))
                                       and list((folder / "params").glob("*.csv"))):  # fmt: skip
            return unitree.LAB, "params/deploy.yaml with a CSV motion"
        return unitree.MJLAB, "params/deploy.yaml with an NPZ motion"
    if path.is_dir():
        raise BcgdError(
            f"{path}: a folder without params/deploy.yaml; expected a Unitree policy folder or an ONNX file"
        )
    f = Findings()
    o = read_onnx(path, f)
    if o is None:  # unreadable: bcgd's own loader names why
        return BCGD, f.mismatches[0]
    keys = _bcgd_keys(o)
    if "obs" not in o.inputs:
        return BCGD, "no obs input: bcgd's raw-state signature"
    if keys is not None:
        profile = keys.get("profile")
        if profile in _PROFILE_STACK:
            return _PROFILE_STACK[profile], f"bcgd export, profile {profile}"
        return BCGD, f"bcgd export, profile {profile}"
    if "robot_urdf" in o.metadata or "ref_quat_xyzw" in o.outputs:
        return holosoma.NAME, "robot_urdf metadata / ref_quat_xyzw output"
    if "anchor_body_name" in o.metadata or "body_pos_w" in o.outputs:
        return mtc.NAME, "anchor_body_name metadata / body_pos_w output"
    raise BcgdError(
        f"{path}: an ONNX model with no bcgd metadata, not written by bcgd export ({describe_onnx(o.proto)}), nor "
        f"with another stack's marks (robot_urdf, anchor_body_name): cannot tell which stack loads it; pass --stack "
        f"({', '.join(STACKS)})"
    )


def inspect(
    path: str | Path, stack: str | None = None, spec: RobotSpec | None = None, motion: str | Path | None = None
) -> Inspection:
    """Read ``path`` as ``stack`` (detected when None) reads it. ``motion``: the motion file a Unitree stack
    loads, when no ``config/config.yaml`` names it."""
    path = Path(path)
    spec = spec or load_robot("g1")
    found, why = detect(path)
    if stack is None:
        stack = found
    elif stack not in STACKS:
        raise BcgdError(f"--stack {stack}: expected one of {', '.join(STACKS)}")
    else:
        why = f"--stack (the files look like {found})"
    f = Findings()
    ins = Inspection(path, stack, f, detected=why)
    if stack in (unitree.MJLAB, unitree.LAB):
        if not (unitree.policy_folder(path) / "params" / "deploy.yaml").is_file():
            raise BcgdError(f"--stack {stack}: {path} is not a policy folder with params/deploy.yaml")
        ins.files = unitree.read_folder(path, stack, spec, f, None if motion is None else Path(motion))
        ins.onnx = ins.files.onnx
    elif stack == BCGD:
        ins.onnx = read_onnx(onnx_of(path), f)
    else:
        ins.onnx = read_onnx(onnx_of(path), f)
        if ins.onnx is not None:
            reader = mtc.read if stack == mtc.NAME else holosoma.read
            ins.files = reader(ins.onnx, spec, f)
    ins.bcgd = _bcgd_keys(ins.onnx)
    if ins.bcgd is not None:
        _check_content(ins)
    if ins.bcgd is not None and stack != BCGD:
        _check_against_bcgd(ins, spec)
    return ins


def verify(path: str | Path, stack: str | None = None, motion: str | Path | None = None) -> Inspection:
    """``bcgd verify``: :func:`inspect`, whose findings are the verdict (``Inspection.lines``, ``.ok``)."""
    return inspect(path, stack, motion=motion)


def _check_content(ins: Inspection) -> None:
    """A bcgd export changed after its export (its content hash, ``bcg_deploy.integrity``) is a mismatch; one
    that records no hash gets a note. Other projects' files record none by design: nothing to say."""
    try:
        note = check_integrity(ins.onnx.proto, f"policy {ins.onnx.path}")
    except BcgdError as exc:
        ins.findings.bad(str(exc))
        return
    if note:
        ins.findings.note(note)


def _check_against_bcgd(ins: Inspection, spec: RobotSpec) -> None:
    """A bcgd export: the stack's files must say what the export recorded (sidecar drift, wrong profile)."""
    f, b, files = ins.findings, ins.bcgd, ins.files
    if files is None:
        return
    kp = getattr(files, "kp", None)
    perm = getattr(files, "perm", None)
    if isinstance(files, unitree.UnitreeFiles):
        perm = None
    if kp is not None:
        mine = kp[perm] if perm is not None else kp
        want = np.asarray(spec.kp)
        if mine.shape == want.shape and not np.allclose(mine, want, rtol=1e-6):
            i = int(np.argmax(np.abs(mine - want)))
            f.bad(f"stiffness of {spec.joint_names[i]} is {mine[i]:g} in the {ins.stack} files, {want[i]:g} in the "
                  "robot the policy was exported for")  # fmt: skip
    control_dt = b.get("control_dt")
    step = getattr(files, "step_dt", None)
    if isinstance(control_dt, (int, float)) and step is not None and abs(step - control_dt) > 1e-9:
        f.bad(f"deploy.yaml step_dt {step:g} s, the policy was trained at {control_dt:g} s")
    frames = (b.get("motion") or {}).get("num_frames") if isinstance(b.get("motion"), dict) else None
    have = None
    if isinstance(files, unitree.UnitreeFiles) and files.joint_pos is not None and files.stack == unitree.MJLAB:
        have = files.joint_pos.shape[0]
    elif getattr(files, "num_frames", None) is not None:
        have = files.num_frames
    if isinstance(frames, int) and have is not None and have != frames:
        f.bad(f"the {ins.stack} motion has {have} frames, the policy was trained on {frames}")
    obs = b.get("observation")
    if isinstance(obs, list) and isinstance(files, unitree.UnitreeFiles) and files.terms:
        want_terms = [str(t.get("name")) for t in obs]
        have_terms = [t.name for t in files.terms]
        if want_terms != have_terms:
            f.bad(f"deploy.yaml observations {','.join(have_terms)} differ from the trained {','.join(want_terms)}")


def behaviours(stack: str) -> list[dict]:
    """The runtime behaviours of ``stack`` with their sources and whether sim2sim models them."""
    return INFOS[stack].table() if stack in INFOS else []
