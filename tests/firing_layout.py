"""The firing matrix's cases (``tests/test_check_firing.py``) for the checks of the quantization
layout: exclude lists, quantized tensors, their dtypes and shapes
(mxformats/validate/layout.py): how each declared condition is planted, and the (check,
condition, format) no fixture can carry."""

from __future__ import annotations

from firing_mutation import Mutation

#: (check, condition) -> how it is planted.
MUTATIONS: dict[tuple[str, str], Mutation] = {}

#: (check, condition, format) no fixture can carry -> the reason.
NOT_PLANTED: dict[tuple[str, str, str], str] = {}
