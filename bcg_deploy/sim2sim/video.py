"""MP4 from an offscreen camera that follows the robot, and the interactive viewer.

Offscreen rendering needs an OpenGL context without a window: EGL (``apt-get install libegl1``, plus a
GPU driver or Mesa's software renderer ``libegl-mesa0``) or OSMesa (``apt-get install libosmesa6``).
The backend is ``$MUJOCO_GL`` when set, else GLFW with a display, else EGL then OSMesa. Note that
MuJoCo itself fails at ``import mujoco`` when ``MUJOCO_GL=osmesa`` is set and libOSMesa is missing.
Encoding uses imageio: MP4 with its ffmpeg plugin, GIF with Pillow (``pip install "bcg-deploy[video]"``). Shadows and
reflections are off (a software renderer draws a 640x480 frame in ~0.1 s instead of ~0.5 s).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import mujoco
import numpy as np

from bcg_deploy.errors import BcgdError
from bcg_deploy.fileio import check_writable, commit_file, output_target, temp_path
from bcg_deploy.sim2sim.reference import root_state

NO_GL = (
    "--video needs an offscreen OpenGL context and none could be created ({tried}); install EGL "
    "(apt-get install libegl1 libegl-mesa0) or OSMesa (apt-get install libosmesa6) and set MUJOCO_GL=egl|osmesa"
)


def _plain(text: str) -> str:
    """Library messages without square brackets (the CLI prints errors as rich markup)."""
    return text.replace("[", "(").replace("]", ")")


def gl_context(width: int, height: int):
    """Create and make current an offscreen GL context; returns (context, backend name)."""
    env = os.environ.get("MUJOCO_GL", "").lower().strip()
    has_display = bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    if env == "glfw" and sys.platform.startswith("linux") and not has_display:
        raise BcgdError(
            "--video with MUJOCO_GL=glfw needs a display ($DISPLAY is not set); set MUJOCO_GL=egl or osmesa "
            "(apt-get install libegl1 or libosmesa6) to render offscreen"
        )
    if env in ("egl", "osmesa", "glfw"):
        candidates = [env]
    elif sys.platform.startswith("linux"):
        candidates = (["glfw"] if os.environ.get("DISPLAY") else []) + ["egl", "osmesa"]
    else:
        candidates = ["glfw"]
    tried = []
    for be in candidates:
        try:
            if be == "egl":
                from mujoco.egl import GLContext
            elif be == "osmesa":
                from mujoco.osmesa import GLContext
            else:
                from mujoco.glfw import GLContext
            ctx = GLContext(width, height)
            ctx.make_current()
            return ctx, be
        except Exception as exc:  # each backend fails differently (ImportError, RuntimeError, GLError)
            tried.append(f"{be}: {_first_line(exc)}")
    raise BcgdError(NO_GL.format(tried=_plain("; ".join(tried))))


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:80] if str(exc) else type(exc).__name__


FORMATS = {".mp4": "FFMPEG", ".gif": "GIF"}
GIF_EVERY = 2
"""A GIF keeps every 2nd control frame (25 fps for a 50 Hz policy): GIF frame times are whole 10 ms."""
ROBOT_RGBA = {"torso": (0.25, 0.28, 0.33, 1.0), "limb": (0.78, 0.79, 0.82, 1.0), "joint": (0.45, 0.47, 0.52, 1.0)}
GHOST_RGBA = (0.2, 0.75, 0.35, 0.28)
"""The reference ghost: translucent green."""


def check_video_path(path: str | Path) -> tuple[Path, str]:
    """The video file and its imageio format from its extension (.mp4 or .gif), else a one-line BcgdError."""
    path = Path(path)
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise BcgdError(f"--video {path}: expected a file name ending in .mp4 or .gif")
    return path, fmt


def render_model(m: mujoco.MjModel) -> mujoco.MjModel:
    """A copy of ``m`` for drawing only: the body-sized collision shapes (group 3, hidden by default) made
    opaque (torso, pelvis and head dark, limbs light), the tiny foot contact spheres hidden. The
    simulation never sees this copy."""
    import copy

    r = copy.deepcopy(m)
    for g in range(r.ngeom):
        name = r.geom(g).name or ""
        if r.geom_group[g] != 3:
            if r.geom_bodyid[g] != 0:
                r.geom_rgba[g] = ROBOT_RGBA["joint"]
            continue
        if "_foot_contact_" in name:
            r.geom_rgba[g, 3] = 0.0
        elif any(k in name for k in ("torso", "pelvis", "head")):
            r.geom_rgba[g] = ROBOT_RGBA["torso"]
        else:
            r.geom_rgba[g] = ROBOT_RGBA["limb"]
    return r


class VideoRecorder:
    """``on_control_step(run, k, m, d)`` hook that renders run ``run_index`` to an MP4 or a GIF.

    A tracking camera follows the pelvis; the robot is drawn with its body-sized shapes, the reference
    (``ghost``, the reference ``Motion``) as a translucent green figure at the
    frame the control step is compared with. Frames go to a temporary file beside ``path`` (created
    with the permissions of any other output, umask applied); :meth:`close` renames it into place, only over
    a regular file and, without ``overwrite``, only where none is (``fileio.commit_file``).
    """

    def __init__(
        self,
        path: str | Path,
        fps: float,
        width: int = 640,
        height: int = 480,
        run_index: int = 0,
        ghost=None,  # noqa: ANN001 - a sim2sim Reference
        overwrite: bool = True,
        flag: str = "--overwrite",
    ):
        self.path, self.format = check_video_path(path)
        if not (16 <= width <= 4096 and 16 <= height <= 4096):
            raise BcgdError(f"--width {width} --height {height}: expected 16 to 4096 pixels each")
        self.overwrite, self._flag = overwrite, flag
        check_writable(self.path, "--video", overwrite=overwrite, flag=flag)
        try:
            import imageio.v2 as imageio

            if self.format == "FFMPEG":
                import imageio_ffmpeg  # noqa: F401
        except ImportError:
            raise BcgdError(
                '--video needs imageio and imageio-ffmpeg: pip install "bcg-deploy[video]" '
                "(or pip install imageio imageio-ffmpeg)"
            ) from None
        self.fps, self.width, self.height, self.run_index = fps, width, height, run_index
        self.ghost = ghost
        self._imageio = imageio
        self._writer = None
        self._ctx = self._con = self._scene = None
        self.frames = 0
        self.backend = None
        self._tmp = temp_path(output_target(self.path, "--video"), self.path.suffix)

    def _start(self, m: mujoco.MjModel) -> None:
        self._ctx, self.backend = gl_context(self.width, self.height)
        self._model = render_model(m)
        r = self._model
        r.vis.global_.offwidth = max(r.vis.global_.offwidth, self.width)
        r.vis.global_.offheight = max(r.vis.global_.offheight, self.height)
        self._scene = mujoco.MjvScene(r, maxgeom=4000)
        # Shadows and floor reflection cost ~5x the frame time on a software (Mesa llvmpipe) renderer.
        self._scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = False
        self._scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = False
        try:
            self._con = mujoco.MjrContext(r, mujoco.mjtFontScale.mjFONTSCALE_100)
        except Exception as exc:  # mujoco.FatalError when the platform GL library is not usable
            raise BcgdError(NO_GL.format(tried=_plain(f"{self.backend}: {_first_line(exc)}"))) from None
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._con)
        self._cam = mujoco.MjvCamera()
        self._cam.type = mujoco.mjtCamera.mjCAMERA_TRACKING
        self._cam.trackbodyid = 1
        self._cam.distance, self._cam.elevation, self._cam.azimuth = 3.2, -12.0, 135.0
        self._opt = mujoco.MjvOption()
        self._opt.geomgroup[:] = 0
        self._opt.geomgroup[[0, 2, 3]] = 1  # floor, visual shapes, body-sized collision shapes
        self._pert = mujoco.MjvPerturb()
        self._ghost_data = mujoco.MjData(r) if self.ghost is not None else None
        self._rect = mujoco.MjrRect(0, 0, self.width, self.height)
        self._rgb = np.empty((self.height, self.width, 3), dtype=np.uint8)
        if self.format == "GIF":
            ms = int(round(1000.0 * GIF_EVERY / self.fps / 10.0)) * 10
            self._writer = self._imageio.get_writer(self._tmp, format="GIF", mode="I", duration=ms, loop=0)
        else:
            self._writer = self._imageio.get_writer(
                self._tmp, format="FFMPEG", fps=self.fps, codec="libx264", quality=7, macro_block_size=1
            )

    def _add_ghost(self, k: int) -> None:
        ref, gd, r = self.ghost, self._ghost_data, self._model
        f = min(k + 1, ref.num_frames - 1)
        gd.qpos[:7] = root_state(ref, f)[0]
        gd.qpos[7:] = ref.joint_pos[f]
        mujoco.mj_kinematics(r, gd)
        first = self._scene.ngeom
        cat = mujoco.mjtCatBit.mjCAT_DYNAMIC
        mujoco.mjv_addGeoms(r, gd, self._opt, self._pert, cat, self._scene)
        for i in range(first, self._scene.ngeom):
            g = self._scene.geoms[i]
            if g.rgba[3] > 0:
                g.rgba[:] = GHOST_RGBA

    def __call__(self, run: int, k: int, m: mujoco.MjModel, d: mujoco.MjData) -> None:
        if run != self.run_index:
            return
        if self._writer is None:
            self._start(m)
        if self.format == "GIF" and k % GIF_EVERY:
            return
        self._ctx.make_current()
        mujoco.mjv_updateScene(self._model, d, self._opt, None, self._cam, mujoco.mjtCatBit.mjCAT_ALL, self._scene)
        if self.ghost is not None:
            self._add_ghost(k)
        mujoco.mjr_render(self._rect, self._scene, self._con)
        mujoco.mjr_readPixels(self._rgb, None, self._rect, self._con)
        self._writer.append_data(np.flipud(self._rgb))
        self.frames += 1

    def close(self) -> Path | None:
        """Finish the file (renamed into place); None when nothing was rendered."""
        if self._writer is not None:
            self._writer.close()
            self._con.free()
            self._ctx.free()
            self._writer = None
            if self.frames:
                commit_file(self._tmp, self.path, "--video", self.overwrite, self._flag)
                return self.path
        if os.path.exists(self._tmp):
            os.unlink(self._tmp)
        return None


def check_display() -> None:
    """Raise a one-line BcgdError when the interactive viewer cannot open a window."""
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise BcgdError("--viewer needs a display ($DISPLAY is not set); use --video PATH to record an MP4 instead")


class ViewerHook:
    """``on_control_step`` hook showing run ``run_index`` in MuJoCo's passive viewer, paced to real time."""

    def __init__(self, control_dt: float, run_index: int = 0):
        check_display()
        self.control_dt, self.run_index = control_dt, run_index
        self._viewer = None
        self._t0 = 0.0

    def __call__(self, run: int, k: int, m: mujoco.MjModel, d: mujoco.MjData) -> None:
        if run != self.run_index:
            return
        if self._viewer is None:
            import mujoco.viewer

            try:
                self._viewer = mujoco.viewer.launch_passive(m, d)
            except Exception as exc:
                msg = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
                raise BcgdError(f"--viewer could not open a window: {_plain(msg)}") from None
            self._t0 = time.perf_counter() - k * self.control_dt
        if not self._viewer.is_running():
            return
        self._viewer.sync()
        lag = self._t0 + (k + 1) * self.control_dt - time.perf_counter()
        if lag > 0:
            time.sleep(lag)

    def close(self) -> None:
        if self._viewer is not None:
            self._viewer.close()
            self._viewer = None
