"""The deployment targets the validator knows: one table for ``--target``, the deployment
check, the preflight grid, ``inspect`` and the descriptors' engine paths.

Each target is the GPU a serving engine runs the checkpoint on: its vendor (``cuda`` or
``rocm``, the platform vLLM's ``current_platform`` reports), its arch (``sm90``, ``gfx942``,
... as the descriptors' :class:`~mxformats.validate.descriptors.base.EnginePath` rules name
them) and whether its FP8 is the ``e4m3fnuz`` variant (MI300X: vLLM's
``current_platform.is_fp8_fnuz()``, ``vllm/platforms/rocm.py``).
"""

from __future__ import annotations

__all__ = ["TARGETS", "TARGET_NAMES"]

#: Target -> (vendor, arch, fnuz).
TARGETS: dict[str, tuple[str, str, bool]] = {
    "mi300x": ("rocm", "gfx942", True),
    "mi355x": ("rocm", "gfx950", False),
    "h200": ("cuda", "sm90", False),
    "b200": ("cuda", "sm100", False),
}

#: The preflight's display name -> the :data:`TARGETS` key whose arch it stands for.
TARGET_NAMES = {"H100/H200": "h200", "B200/GB200": "b200", "MI300X": "mi300x",
                "MI355X": "mi355x"}
