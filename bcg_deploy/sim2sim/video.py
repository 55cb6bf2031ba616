"""MP4 from an offscreen camera that follows the robot, and the interactive viewer.

Offscreen rendering needs an OpenGL context without a window: EGL (``apt-get install libegl1``, plus a
GPU driver or Mesa's software renderer ``libegl-mesa0``) or OSMesa (``apt-get install libosmesa6``).
The backend is ``$MUJOCO_GL`` when set, else GLFW with a display, else EGL then OSMesa. Note that
MuJoCo itself fails at ``import mujoco`` when ``MUJOCO_GL=osmesa`` is set and libOSMesa is missing.
Encoding uses imageio with its ffmpeg plugin (``pip install "bcg-deploy[video]"``). Shadows and
reflections are off (a software renderer draws a 640x480 frame in ~0.1 s instead of ~0.5 s).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import mujoco
import numpy as np

from bcg_deploy.errors import BcgdError

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
            tried.append(f"{be}: {str(exc).splitlines()[0][:80] if str(exc) else type(exc).__name__}")
    raise BcgdError(NO_GL.format(tried=_plain("; ".join(tried))))


class VideoRecorder:
    """``on_control_step(run, k, m, d)`` hook that renders run ``run_index`` to an MP4 at the control rate.

    The camera tracks the pelvis. Frames go to a temporary file beside ``path``; :meth:`close` renames it.
    """

    def __init__(self, path: str | Path, fps: float, width: int = 640, height: int = 480, run_index: int = 0):
        try:
            import imageio.v2 as imageio
        except ImportError:
            raise BcgdError("--video needs imageio and imageio-ffmpeg: pip install imageio imageio-ffmpeg") from None
        self.path = Path(path)
        self.fps, self.width, self.height, self.run_index = fps, width, height, run_index
        self._imageio = imageio
        self._writer = None
        self._ctx = self._con = self._scene = None
        self.frames = 0
        self.backend = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BcgdError(f"cannot write {self.path}: {exc.strerror}") from None
        fd, self._tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.stem}.", suffix=".mp4")
        os.close(fd)

    def _start(self, m: mujoco.MjModel) -> None:
        self._ctx, self.backend = gl_context(self.width, self.height)
        m.vis.global_.offwidth = max(m.vis.global_.offwidth, self.width)
        m.vis.global_.offheight = max(m.vis.global_.offheight, self.height)
        self._scene = mujoco.MjvScene(m, maxgeom=2000)
        # Shadows and floor reflection cost ~5x the frame time on a software (Mesa llvmpipe) renderer.
        self._scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = False
        self._scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = False
        self._con = mujoco.MjrContext(m, mujoco.mjtFontScale.mjFONTSCALE_100)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._con)
        self._cam = mujoco.MjvCamera()
        self._cam.type = mujoco.mjtCamera.mjCAMERA_TRACKING
        self._cam.trackbodyid = 1
        self._cam.distance, self._cam.elevation, self._cam.azimuth = 3.0, -15.0, 120.0
        self._opt = mujoco.MjvOption()
        self._rect = mujoco.MjrRect(0, 0, self.width, self.height)
        self._rgb = np.empty((self.height, self.width, 3), dtype=np.uint8)
        self._writer = self._imageio.get_writer(
            self._tmp, format="FFMPEG", fps=self.fps, codec="libx264", quality=7, macro_block_size=1
        )

    def __call__(self, run: int, k: int, m: mujoco.MjModel, d: mujoco.MjData) -> None:
        if run != self.run_index:
            return
        if self._writer is None:
            self._start(m)
        self._ctx.make_current()
        mujoco.mjv_updateScene(m, d, self._opt, None, self._cam, mujoco.mjtCatBit.mjCAT_ALL, self._scene)
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
                os.replace(self._tmp, self.path)
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
