"""How the firing matrix plants one condition (``tests/test_check_firing.py``): the
:class:`Mutation` record, shared by the matrix and the per-group fault tables
(``tests/firing_files.py``, ``firing_index.py``, ``firing_layout.py``, ``firing_coverage.py``,
``firing_manifest.py``, ``firing_resume.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mxformats.validate.findings import Level

Change = Callable[[np.ndarray], None]


@dataclass(frozen=True)
class Mutation:
    """How one condition is planted: ``change`` edits a copy of the chosen tensor (flat, in
    place; ``by_role``: another change for the tensors of that role; ``first_row``: the change
    edits the tensor's first row alone; None: the tensor is deleted, or relabelled: ``retype``
    maps its dtype's width in bytes to the dtype its header then claims, its bytes kept); the
    tensor is the first (by name) of the role whose name holds ``where``; ``also``: changes to
    the same module's tensors of other roles (where it has one), e.g. its scales; ``config``:
    an edit of config.json; ``edit``: one of the folder (a corpus edit); ``pair``: the
    finding may be on either module of the fused pair ``where`` names (an expert's gate_proj
    and up_proj); ``found_on``: the finding is on the module's tensor of one of these roles,
    not on the planted one; ``anywhere``: on any tensor or none (a finding of the whole
    checkpoint); ``source``: validated with ``--source``, the fixture's BF16 source beside
    it; ``skip``: the (format, role, dtype) the condition cannot be planted in (``""``: any),
    each with the reason (a check of the module's own that pre-empts it, a dtype that cannot
    hold it); ``severity`` the finding's (None: the check's, or :func:`expected_severity`'s);
    ``options`` extra :class:`Options` the check needs to run (the clean fixture's too);
    ``fault``: options that are the condition (the planted copy's alone); ``source_edit``: an
    edit of a copy of the source (the folder, the planted module), which the planted copy is
    validated with; ``source_fault``: the source given to the planted copy alone (it is the
    condition); ``file_option``: (an option, a path under the case's folder) naming a file of
    the planted run's own, which ``file_edit`` (the planted checkpoint, the file, the level)
    writes before each level's validation (None: no file there), e.g. ``--manifest``."""

    change: Change | None
    where: str = ""
    pair: bool = False
    retype: dict[int, str] = field(default_factory=dict)
    severity: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    fault: dict[str, Any] = field(default_factory=dict)
    source_edit: Callable[[Path, str], None] | None = None
    source_fault: bool = False
    by_role: dict[str, Change] = field(default_factory=dict)
    first_row: bool = False
    also: dict[str, Change] = field(default_factory=dict)
    config: Callable[[dict[str, Any]], None] | None = None
    edit: Callable[[Path], None] | None = None
    found_on: tuple[str, ...] = ()
    anywhere: bool = False
    source: bool = False
    skip: dict[tuple[str, str, str], str] = field(default_factory=dict)
    file_option: tuple[str, str] | None = None
    file_edit: Callable[[Path, Path, Level], None] | None = None

    def skips(self, fmt: str, role: str, dtype: str) -> bool:
        """Whether :attr:`skip` leaves out the tensor of ``role`` in ``dtype`` of ``fmt``."""
        return any(f in ("", fmt) and r in ("", role) and d in ("", dtype)
                   for f, r, d in self.skip)
