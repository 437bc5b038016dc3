"""One planted bug of the firing matrix's audit (``tests/audit_conditions.py``): the
:class:`Switch` record and the matrix's test ids, shared by the audit and its per-group switch
tables (``tests/audit_files.py``, ``audit_index.py``, ``audit_layout.py``, ``audit_coverage.py``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

TEST = "tests/test_check_firing.py::test_each_condition_fires_on_each_format"
LOADER = "mxformats/validate/loader.py"
LAYOUT = "mxformats/validate/layout.py"
COVERAGE = "mxformats/validate/coverage.py"


def case_id(check: str, condition: str, fmt: str) -> str:
    """The matrix's test id of (check, condition, format) (as its parametrization names it):
    the condition's words joined by ``_``, a sign spelled out (``+Inf``: ``plus_Inf``)."""
    words = condition.replace("+", " plus ").replace("-", " minus ")
    return f"{check}-{re.sub(r'[^A-Za-z0-9]+', '_', words).strip('_')}-{fmt}"


@dataclass(frozen=True)
class Switch:
    """One planted bug: ``old`` replaced by ``new`` (once) in ``path``; ``kind``: the class of
    condition it switches off (a sign, a value class, a format, a tensor role, a field);
    ``conditions``: the declared (check, condition) it switches off; ``catches``: the matrix
    cases (check, condition, format) that must go red."""

    name: str
    kind: str
    what: str
    path: str
    old: str
    new: str
    conditions: tuple[tuple[str, str], ...]
    catches: tuple[tuple[str, str, str], ...]

    def selections(self) -> list[str]:
        return [f"{TEST}[{case_id(*c)}]" for c in self.catches]


def one(name: str, kind: str, what: str, path: str, old: str, new: str, check: str,
         condition: str, *fmts: str) -> Switch:
    """A switch of one condition, caught on each of ``fmts``."""
    return Switch(name, kind, what, path, old, new, ((check, condition),),
                  tuple((check, condition, fmt) for fmt in fmts))


#: The formats the switches name most (matrix format ids).
MX, W4, CTI, CTN, MON = ("quark-mxfp4", "quark-w4a8", "compressed-tensors-int4",
                         "compressed-tensors-nvfp4", "modelopt-nvfp4")


def off(name: str, kind: str, what: str, path: str, old: str, check: str, condition: str,
        fmt: str, guard: str = " and False") -> Switch:
    """A switch of one condition: ``old``, an ``if ...:`` line of ``path``, made never true
    (or ``guard`` added to it), caught on ``fmt``."""
    return one(name, kind, what, path, old, old[:-1] + guard + ":", check, condition, fmt)
