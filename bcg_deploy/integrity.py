"""The content hash of an exported policy: a policy changed after ``bcgd export`` is refused, not run.

``bcgd export`` records ``bcgd.content_sha256`` in the ONNX ``metadata_props`` (a JSON string, as every
``bcgd.*`` value is JSON): the SHA-256 (hex) of the model serialised without that one entry (protobuf's
deterministic serialisation of the whole ``ModelProto``: graph, weights, opset, every other metadata entry;
the gains, action scale and reference clip that sim2sim and a deploy stack read are covered as much as the
weights). ``check_integrity`` recomputes it from
a file, bytes or a loaded model: a mismatch (a flipped bit, a zeroed block, a hand-edited gain) is a
one-line error. Parsing a file and serialising it again gives the bytes it was written from (protobuf
writes known fields in field order), so the check needs no copy of the original bytes.

An ONNX without the entry (another project's policy, or a bcgd export from before the hash) is not
refused for that: ``check_integrity`` returns ``NO_HASH_NOTE`` for the caller to show.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from bcg_deploy.errors import BcgdError

if TYPE_CHECKING:  # onnx is imported where it is used: ``bcgd --help`` does not pay for it
    import onnx

HASH_KEY = "bcgd.content_sha256"
NO_HASH_NOTE = "no bcgd content hash (not a bcgd export, or one from before content hashes): its integrity is unchecked"


def content_hash(model: onnx.ModelProto) -> str:
    """SHA-256 (hex) of ``model`` serialised deterministically without its ``HASH_KEY`` entry."""
    import onnx

    bare = onnx.ModelProto()
    bare.CopyFrom(model)
    props = [p for p in bare.metadata_props if p.key != HASH_KEY]
    del bare.metadata_props[:]
    bare.metadata_props.extend(props)
    return hashlib.sha256(bare.SerializeToString(deterministic=True)).hexdigest()


def seal(model: onnx.ModelProto) -> bytes:
    """Record ``content_hash(model)`` in ``model`` (replacing an earlier one); the bytes to write."""
    digest = content_hash(model)
    props = [p for p in model.metadata_props if p.key != HASH_KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(props)
    model.metadata_props.add(key=HASH_KEY, value=json.dumps(digest))
    return model.SerializeToString(deterministic=True)


def recorded_hash(model: onnx.ModelProto) -> str | None:
    """The content hash ``model`` records (hex), None when it records none."""
    value = next((p.value for p in model.metadata_props if p.key == HASH_KEY), None)
    if value is None:
        return None
    try:
        value = json.loads(value)
    except json.JSONDecodeError:
        pass  # a bare hex string: compared as it is
    return str(value).strip().lower()


def load_onnx(source: str | os.PathLike | bytes, what: str = "policy") -> onnx.ModelProto:
    """An ONNX model from a file or bytes; a one-line BcgdError when it is none (or cannot be read)."""
    import onnx

    label = f"{what} {source}" if not isinstance(source, bytes) else what
    try:
        data = source if isinstance(source, bytes) else Path(source).read_bytes()
    except OSError as exc:
        raise BcgdError(f"cannot read {label}: {exc.strerror or exc}") from None
    try:
        model = onnx.load_from_string(data)
    except Exception as exc:  # protobuf's DecodeError and friends
        first = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise BcgdError(f"{label} is not an ONNX model ({first})") from None
    if not model.graph.node and not model.graph.output:
        raise BcgdError(f"{label} is not an ONNX model (no graph)")
    return model


def check_integrity(source: str | os.PathLike | bytes | onnx.ModelProto, what: str = "policy") -> str | None:
    """Check a policy's content hash (see the module docstring); ``source``: a path, the file's bytes, or a
    loaded model.

    Raises a one-line BcgdError when the recorded hash does not match the content. Returns None when it
    matches, ``NO_HASH_NOTE`` when the file records none.
    """
    model = source if hasattr(source, "metadata_props") else load_onnx(source, what)
    stored = recorded_hash(model)
    if stored is None:
        return NO_HASH_NOTE
    actual = content_hash(model)
    if actual != stored:
        label = f"{what} {source}" if isinstance(source, (str, os.PathLike)) else what
        raise BcgdError(
            f"{label} was changed after bcgd export: its content hash is {actual[:12]}, the export recorded "
            f"{stored[:12]} ({HASH_KEY}); the file is damaged or edited, export it again"
        )
    return None


def describe_onnx(model: onnx.ModelProto) -> str:
    """The inputs and outputs of a graph in a few words: ``inputs obs [1, 47]; outputs actions [1, 12]``."""

    def io(values) -> str:  # noqa: ANN001 - protobuf repeated field
        out = []
        for v in values:
            dims = [d.dim_param or str(d.dim_value) for d in v.type.tensor_type.shape.dim]
            out.append(f"{v.name} [{', '.join(dims)}]")
        return ", ".join(out) or "none"

    initializers = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    return f"inputs {io(inputs)}; outputs {io(model.graph.output)}"


def onnx_summary(path: str | os.PathLike) -> str | None:
    """``describe_onnx`` of the file at ``path`` when it is an ONNX model (a graph with nodes and an opset),
    else None: for messages about a file given where another kind was expected."""
    try:
        model = load_onnx(path)
    except BcgdError:
        return None
    if model.ir_version <= 0 or not model.opset_import or not model.graph.node:
        return None
    return describe_onnx(model)
