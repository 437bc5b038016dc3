"""The sources of the harness's cases: the spec vectors (:func:`find_vectors`,
:func:`load_vectors`) and the exhaustive sweeps of every bfloat16 and float16 pattern."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mxformats.formats import Format
from mxformats.testing.cases import (
    Blocks,
    float_dtype,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["find_vectors", "load_vectors"]


def _isnan(a: NDArray[Any]) -> NDArray[np.bool_]:
    with np.errstate(invalid="ignore"):
        result: NDArray[np.bool_] = np.isnan(a.astype(np.float64))
    return result



# -- spec vectors ---------------------------------------------------------------------------------


def find_vectors(profile: str, scheme: str = "mx") -> Path | None:
    """The spec vectors file of a profile, or None where it is not available.

    Looked for, in order: ``$MXFORMATS_SPEC_DIR/vectors/<scheme>/<profile>.json``, the
    package's own copy (``mxformats/spec/...``, where a wheel ships it) and the repository
    checkout (``spec/`` beside the ``mxformats`` folder).
    """
    name = Path("vectors", scheme, f"{profile}.json")
    here = Path(__file__).resolve().parent.parent
    roots = []
    if os.environ.get("MXFORMATS_SPEC_DIR"):
        roots.append(Path(os.environ["MXFORMATS_SPEC_DIR"]))
    roots += [here / "spec", here.parent / "spec"]
    for root in roots:
        if (root / name).is_file():
            return root / name
    return None


@functools.cache
def _generated_vectors() -> dict[str, str]:
    """Every ``vectors/mx/<profile>.json``, generated in memory by :mod:`mxformats.specgen.mx`:
    the bytes ``spec/`` holds (``python -m mxformats.specgen --check`` keeps them equal)."""
    from mxformats.specgen.mx import vector_files

    return vector_files()


def load_vectors(profile: str, scheme: str = "mx") -> tuple[str, Any] | None:
    """``(file name, parsed JSON)`` of a profile's spec vectors, or None where there are none.

    ``$MXFORMATS_SPEC_DIR/vectors/<scheme>/<profile>.json`` when that file exists (a spec
    under test); otherwise the vectors the spec generator computes, in memory, so that an
    installed package needs no ``spec/`` folder.
    """
    name = f"{profile}.json"
    if os.environ.get("MXFORMATS_SPEC_DIR"):
        path = Path(os.environ["MXFORMATS_SPEC_DIR"], "vectors", scheme, name)
        if path.is_file():
            return name, json.loads(path.read_text(encoding="utf-8"))
    text = _generated_vectors().get(f"vectors/{scheme}/{name}")
    return None if text is None else (name, json.loads(text))


def _parse_float(text: object) -> float:
    if isinstance(text, int | float):
        return float(text)
    if not isinstance(text, str):
        raise ValueError(f"not a number: {text!r}")
    t = text.strip().lower()
    if t in ("nan", "+nan"):
        return float("nan")
    if t == "-nan":
        return -float("nan")
    try:
        return float(t)
    except ValueError:
        return float.fromhex(t)


def _vector_cases(data: Any, section: str) -> list[Any]:
    """The cases of one section (``quantize`` or ``dequantize``) of a vectors document; a
    document with a plain ``cases`` list serves as quantize cases."""
    if isinstance(data, list):
        return data if section == "quantize" else []
    cases = data.get(section)
    if cases is None and section == "quantize":
        cases = data.get("cases", [])
    return list(cases or [])


def _case_name(case: dict[str, Any], number: int) -> str:
    name = str(case.get("vector", case.get("id", case.get("name", f"case {number}"))))
    title = case.get("title")
    return f"{name} ({title})" if title else name


def _wanted(case: object, elem: Format, dtype: str) -> bool:
    """Whether a vector case is for this element format and dtype (absent keys match)."""
    return (isinstance(case, dict) and case.get("elem", elem.name) == elem.name
            and case.get("dtype", dtype) == dtype)


def _vector_blocks(vectors: tuple[str, Any], elem: Format, block_size: int,
                   dtype: str) -> tuple[Blocks, int]:
    """The ``quantize`` vectors' input blocks for ``elem`` and ``dtype`` (a case's ``input``:
    hex floats, padded with +0.0 to whole blocks), and how many such cases were left out
    (values ``dtype`` does not hold exactly, or no input)."""
    np_dtype = float_dtype(dtype)
    rows: list[NDArray[Any]] = []
    labels: list[str] = []
    left_out = 0
    name, data = vectors
    for number, case in enumerate(_vector_cases(data, "quantize")):
        if not _wanted(case, elem, dtype):
            continue
        raw = case.get("input")
        try:
            values = np.asarray([_parse_float(v) for v in (raw if isinstance(raw, list)
                                                            else [raw])], dtype=np.float64)
        except ValueError:
            left_out += 1
            continue
        with np.errstate(over="ignore"):
            cast = values.astype(np_dtype)
        same = (cast.astype(np.float64) == values) | (np.isnan(values) & _isnan(cast))
        if not same.all():
            left_out += 1
            continue
        label = f"vectors: {name} {_case_name(case, number)}"
        padded = np.zeros(-(-max(values.size, 1) // block_size) * block_size, dtype=np_dtype)
        padded[: values.size] = cast
        for k, row in enumerate(padded.reshape(-1, block_size)):
            rows.append(row)
            labels.append(label + (f" block {k}" if k else ""))
    values_arr = np.stack(rows) if rows else np.zeros((0, block_size), dtype=np_dtype)
    return Blocks(values_arr, tuple(labels)), left_out


def _dequant_vector_blocks(vectors: tuple[str, Any], elem: Format, block_size: int, dtype: str
                           ) -> tuple[Blocks, NDArray[np.uint8], int]:
    """The ``dequantize`` vectors for ``elem`` and output ``dtype``: element codes (one block
    per case), their scale bytes, and how many cases were left out (not ``block_size``
    codes, or unreadable)."""
    rows: list[NDArray[np.int64]] = []
    scales: list[int] = []
    labels: list[str] = []
    left_out = 0
    name, data = vectors
    for number, case in enumerate(_vector_cases(data, "dequantize")):
        if not _wanted(case, elem, dtype):
            continue
        try:
            codes = np.asarray([int(str(c), 0) for c in case["codes"]], dtype=np.int64)
            scale = int(str(case["scale"]), 0)
        except (KeyError, TypeError, ValueError):
            left_out += 1
            continue
        if codes.size != block_size or not 0 <= scale <= 0xFF:
            left_out += 1
            continue
        rows.append(codes)
        scales.append(scale)
        labels.append(f"vectors: {name} {_case_name(case, number)}")
    codes_arr = np.stack(rows) if rows else np.zeros((0, block_size), dtype=np.int64)
    return Blocks(codes_arr, tuple(labels)), np.asarray(scales, dtype=np.uint8), left_out


# -- exhaustive sweeps ---------------------------------------------------------------------------


def _sweep_blocks(dtype: str, block_size: int) -> Iterator[tuple[str, Blocks]]:
    """Every 16-bit pattern that ``dtype`` holds exactly, as blocks, in two layouts."""
    patterns = {"bfloat16": ("bfloat16",), "float16": ("float16",),
                "float32": ("bfloat16", "float16")}[dtype]
    np_dtype = float_dtype(dtype)
    for pattern in patterns:
        bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
        src = bits.view(float_dtype(pattern))
        with np.errstate(invalid="ignore"):
            values = src.astype(np_dtype) if pattern != dtype else src
        count = -(-values.size // block_size)
        padded = np.zeros(count * block_size, dtype=np_dtype)
        padded[: values.size] = values
        consecutive = padded.reshape(count, block_size)
        strided = padded.reshape(block_size, count).T  # block i holds patterns i, i+count, ...
        yield (f"every {pattern} pattern, consecutive",
               Blocks(np.ascontiguousarray(consecutive),
                      tuple(f"sweep: {pattern} patterns 0x{i * block_size:04X}.."
                            f"0x{min(i * block_size + block_size, 1 << 16) - 1:04X}"
                            for i in range(count))))
        yield (f"every {pattern} pattern, strided",
               Blocks(np.ascontiguousarray(strided),
                      tuple(f"sweep: {pattern} patterns 0x{i:04X} + k·0x{count:04X}"
                            for i in range(count))))


