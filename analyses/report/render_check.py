"""Render a report in headless Chromium and check that its figures show up (not just its text)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from probes.core.errors import MechprobeError

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
]


def find_chromium() -> str | None:
    """Path of a Chromium/Chrome binary, or None (install Debian's package: apt-get install chromium)."""
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def screenshot(html_path: str | Path, png_path: str | Path, *, width: int = 1200, height: int = 4000,
               timeout: float = 120.0) -> Path:
    """Screenshot ``html_path`` (a local file) into ``png_path`` with headless Chromium."""
    binary = find_chromium()
    if binary is None:
        raise MechprobeError("No Chromium found; install it (apt-get install chromium) to screenshot reports.")
    png_path = Path(png_path).resolve()
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
             f"--screenshot={png_path}", Path(html_path).resolve().as_uri()],
            check=True, capture_output=True, timeout=timeout,
        )
    if not png_path.is_file():
        raise MechprobeError(f"Chromium ran but wrote no screenshot to {png_path}.")
    return png_path


def colourful_fraction(png_path: str | Path, saturation: float = 0.25) -> float:
    """Fraction of pixels whose HSV saturation exceeds ``saturation``.

    Report text and tables are black, grey and white; only rendered figures (heatmaps, coloured
    lines) add saturated pixels, so a report whose images failed to load scores ~0.
    """
    import matplotlib.image as mpimg

    image = mpimg.imread(str(png_path))[..., :3].astype(np.float64)
    high, low = image.max(axis=-1), image.min(axis=-1)
    chroma = np.where(high > 0, (high - low) / np.maximum(high, 1e-9), 0.0)
    return float((chroma > saturation).mean())


def dump_dom(html_path: str | Path, *, timeout: float = 120.0, budget_ms: int = 5000) -> str:
    """The DOM of ``html_path`` after its scripts ran, from headless Chromium (``--dump-dom``)."""
    binary = find_chromium()
    if binary is None:
        raise MechprobeError("No Chromium found; install it (apt-get install chromium) to check interactive views.")
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}",
             "--dump-dom", Path(html_path).resolve().as_uri()],
            check=True, capture_output=True, text=True, timeout=timeout,
        )
    return done.stdout
