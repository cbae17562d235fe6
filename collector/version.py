"""The installed distribution's version, read once from its metadata (pyproject.toml is the one
place it is written), for `ctxprec_build_info` and exported telemetry."""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    VERSION = version("ctxprec")
except PackageNotFoundError:  # running from a source tree that was never installed
    VERSION = "0+unknown"
