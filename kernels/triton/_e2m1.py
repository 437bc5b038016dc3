"""The E2M1 rounding the Triton quantizers share (MXFP4's fast path and NVFP4): one correctly
rounded float32 addition (PTX ``add.rn.f32``: IEEE 754 round to nearest even) rounds a
float32 magnitude to E2M1, and the sum's bits are the code. Its numpy mirror, and the check of
it against the reference for every MX factor, are
:func:`mxformats.kernels.mx_plan.addition_code` and
:func:`~mxformats.kernels.mx_plan.fast_k_limit`, whose constants these are.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .. import mx_plan as plans

__all__ = ["E2M1_SIX_BITS", "e2m1_magnitude_code"]

F32_INF_BITS = tl.constexpr(plans.F32_INF_BITS)
E2M1_ONE_BITS = tl.constexpr(plans.E2M1_ONE_BITS)
E2M1_SIX_BITS = tl.constexpr(plans.E2M1_SIX_BITS)
E2M1_ADDEND_OFFSET = tl.constexpr(plans.E2M1_ADDEND_OFFSET)
E2M1_HALF_STEP_BELOW_ADDEND = tl.constexpr(plans.E2M1_HALF_STEP_BELOW_ADDEND)


@triton.jit
def e2m1_magnitude_code(a: tl.tensor, ROUND_AWAY: tl.constexpr) -> tl.tensor:
    """The E2M1 magnitude code (0 to 7) of ``a``, the bits (int32) of a float32 magnitude in
    ``[+0, 6.0]`` (callers clamp): the nearest E2M1 value, ties to the even code (with
    ``ROUND_AWAY``, ties up).

    ``a`` plus ``M = 2**(e + 22)``, ``e`` its binade (0 below 1), is rounded to a multiple of
    ``ulp(M) = 2**(e - 1)``: E2M1's spacing in that binade, 0.5 below 1. So the sum is
    ``M + k ulp(M)``, ``k`` from 0 to 4 the nearest multiple (the even one of a tie, which is
    the even code), and the code is ``k + 2e``. The addend is ``M + 6 ulp(M)`` (even, so ties
    still go to even ``k``): then the sum's bits ``t``, whose exponent field is ``e + 149``,
    give ``k + 2e = (t + (t >> 22)) mod 8``, ``6 + 2 x 149`` being a multiple of 8. With
    ``ROUND_AWAY``, a tie the addition rounded down is one where ``a`` exceeds ``k ulp(M) =
    sum - addend`` by exactly ``ulp(M) / 2``; both subtractions are exact (Sterbenz), and the
    code goes one up."""
    addend = tl.maximum(a & F32_INF_BITS, E2M1_ONE_BITS) + E2M1_ADDEND_OFFSET
    total = a.to(tl.float32, bitcast=True) + addend.to(tl.float32, bitcast=True)
    bits = total.to(tl.int32, bitcast=True)
    code = (bits + (bits >> 22)) & 7
    if ROUND_AWAY:
        excess = a.to(tl.float32, bitcast=True) - (total - addend.to(tl.float32, bitcast=True))
        half_step = (addend - E2M1_HALF_STEP_BELOW_ADDEND).to(tl.float32, bitcast=True)
        code += (excess == half_step).to(tl.int32)
    return code
