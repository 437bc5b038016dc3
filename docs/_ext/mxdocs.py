"""Build-time pieces of the mxformats docs (a Sphinx extension, loaded by ``docs/conf.py``).

On ``builder-inited`` it writes ``docs/_generated/`` (git-ignored, rebuilt on every build):

- ``grid-<format>.png``: the value grid of every element format (code -> value);
- ``mx-error.png`` and ``mx-error.md``: the quantization error of every MX producer profile
  (its scale rule) on a normal and a heavy-tailed (Student-t, 3 degrees of freedom) sample,
  seeded, so the numbers are the same on every build;
- ``benchmarks.png``: the throughput column of ``docs/benchmarks.md``'s results, as bars;
- ``scale.png``: ``docs/benchmarks.md``'s validator-at-scale table, GB/s against workers;
- ``validate-*.txt`` / ``.json``: the real output of ``mxformats validate`` and
  ``mxformats demo`` on the demo checkpoints, captured by running the CLI.

On ``doctree-read`` (and ``missing-reference``) it resolves the names the docstrings write the
short way: annotation aliases (``NDArray``, ``np.uint8``, ``Path``) to their full names in the
vendored intersphinx inventories, and mxformats names (``mxformats.quantize_mx``,
``check_quantizer`` inside ``mxformats.testing``) to the module that defines and documents them.

On ``autodoc-process-docstring`` (after napoleon) it splits a Google ``Attributes:`` entry that
names several fields (``library, version, function: the source``) into one ``:ivar:`` per
field: Sphinx would otherwise read all names but the last as a type and link them.

On ``include-read`` it rewrites the spec pages' links to their vectors (``vectors/...``,
relative to ``spec/``) so that they resolve from ``docs/spec/``, where the pages are included:
the files in ``spec/`` stay exactly as ``python -m mxformats.specgen`` writes them.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

DOCS = Path(__file__).resolve().parent.parent
GENERATED = DOCS / "_generated"

#: Seed and size of the samples behind the scale-rule error plot.
SEED = 20260
SAMPLE_SIZE = 1 << 16
STUDENT_T_DOF = 3


def rewrite_spec_links(text: str) -> str:
    """Point a spec page's ``vectors/...`` links at the repository's ``spec/vectors/``.

    The included page is rendered as ``docs/spec/<page>``, two levels below the repository root,
    so ``vectors/x`` becomes ``../../spec/vectors/x`` (a download link to the committed file).
    Links between spec pages stay: ``docs/spec/`` mirrors ``spec/`` page for page.
    """
    return re.sub(r"\]\(vectors/", "](../../spec/vectors/", text)


def _on_include_read(
    app: Any, relative_path: Path, parent_docname: str, content: list[str]
) -> None:
    if Path(relative_path).parent == Path("..", "spec"):
        content[0] = rewrite_spec_links(content[0])


#: Short names used in annotations and docstrings -> the full name the inventories hold.
SHORT_NAMES = {
    "NDArray": "numpy.typing.NDArray",
    "ArrayLike": "numpy.typing.ArrayLike",
    "DTypeLike": "numpy.typing.DTypeLike",
    "Path": "pathlib.Path",
    "Table": "rich.table.Table",
}
#: Module prefixes written short (``np.uint8``).
SHORT_PREFIXES = {"np.": "numpy.", "npt.": "numpy.typing."}


def full_name(target: str) -> str:
    """``target`` with a short alias or module prefix expanded (unchanged when it has none)."""
    if target in SHORT_NAMES:
        return SHORT_NAMES[target]
    for short, full in SHORT_PREFIXES.items():
        if target.startswith(short):
            return full + target[len(short):]
    return target


@functools.cache
def _from_imports(module: str) -> dict[str, tuple[str, ...]]:
    """Each name ``module`` imports with ``from package import name`` -> ``package.name``,
    including the imports under ``if TYPE_CHECKING:`` that annotations rely on."""
    import ast
    import inspect

    try:
        tree = ast.parse(inspect.getsource(importlib.import_module(module)))
    except (ImportError, OSError, TypeError):
        return {}
    imports: dict[str, tuple[str, ...]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                name = alias.asname or alias.name
                imports[name] = (*imports.get(name, ()), f"{node.module}.{alias.name}")
    return imports


def _lookup(dotted: str) -> Any:
    """The mxformats object ``dotted`` names (a module's attribute, or a class's), or None."""
    parts = dotted.split(".")
    if parts[0] != "mxformats":
        return None
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attr in parts[split:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


@functools.cache
def defining_name(target: str, module: str | None) -> str | None:
    """Where an mxformats object referred to as ``target`` (from ``module``'s docstrings) is
    defined: ``mxformats.quantize_mx`` -> ``mxformats.schemes.mx.quantize_mx``. None if it is not an
    mxformats class or function."""
    candidates = [target]
    if module:
        # ``Report.ran`` in a module that imports ``Report``: the class's own module.
        head, dot, rest = target.partition(".")
        candidates[:0] = [f"{module}.{target}",
                          *(full + dot + rest for full in _from_imports(module).get(head, ()))]
    for dotted in candidates:
        obj = _lookup(dotted)
        if obj is None:
            continue
        defined_in = getattr(obj, "__module__", None)
        qualname = getattr(obj, "__qualname__", None)
        # A type alias (``Encoder = Callable[...]``) reports its origin's module: not ours.
        if (isinstance(defined_in, str) and defined_in.startswith("mxformats")
                and isinstance(qualname, str)):
            return f"{defined_in}.{qualname}"
    return None


def _module_of(node: Any) -> str | None:
    """The Python module a reference is written in: its own context, or (for the types
    autodoc adds to a description) the module of the object it describes."""
    from sphinx.addnodes import desc, desc_signature

    if node.get("py:module"):
        return str(node["py:module"])
    parent = node.parent
    while parent is not None:
        if isinstance(parent, desc):
            for signature in parent.findall(desc_signature):
                if signature.get("module"):
                    return str(signature["module"])
        parent = parent.parent
    return None


def _on_doctree_read(app: Any, doctree: Any) -> None:
    """Point short Python references at their full names before Sphinx resolves them, so an
    annotation ``Format`` in :mod:`mxformats.codec` means :class:`mxformats.formats.Format`
    (not any class called ``Format``) and ``np.uint8`` finds ``numpy.uint8`` in the inventory."""
    from sphinx.addnodes import pending_xref

    for node in doctree.findall(pending_xref):
        if node.get("refdomain") != "py":
            continue
        target = node["reftarget"]
        better = full_name(target)
        if better == target:
            better = defining_name(target, _module_of(node)) or target
        if better != target:
            node["reftarget"] = better
            node["refspecific"] = False


def _on_missing_reference(app: Any, env: Any, node: Any, contnode: Any) -> Any:
    """Resolve a bare name (``CHECKS``) that is documented exactly once in mxformats under some
    module: data objects have no ``__module__`` to find them by."""
    if node.get("refdomain") != "py" or "." in node["reftarget"]:
        return None
    suffix = "." + node["reftarget"]
    matches = [name for name in env.domains["py"].objects
               if name.startswith("mxformats.") and name.endswith(suffix)]
    if len(matches) != 1:
        return None
    return env.domains["py"].resolve_xref(
        env, node["refdoc"], app.builder, node["reftype"], matches[0], node, contnode
    )


def plot_value_grids(out: Path) -> list[Path]:
    """One PNG per element format: every code's value, the NaN/Inf codes marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mxformats import FORMATS

    written = [_plot_e8m0(out, plt)]
    for fmt in FORMATS.values():
        if fmt.name == "e8m0":
            continue
        codes = np.arange(1 << fmt.bits)
        values = np.asarray(fmt.values, dtype=np.float64)
        finite = np.isfinite(values)
        fig, (by_code, line) = plt.subplots(
            2, 1, figsize=(7.5, 4.2), gridspec_kw={"height_ratios": [3, 1]}, layout="constrained"
        )
        by_code.plot(codes[finite], values[finite], ".", markersize=4 if fmt.bits > 6 else 7)
        special = codes[~finite]
        for code in special:
            by_code.axvline(code, color="tab:red", alpha=0.25, linewidth=1)
        by_code.set_xlabel("code")
        by_code.set_ylabel("value")
        by_code.set_title(
            f"{fmt.name}: {int(finite.sum())} finite codes"
            + (f", {special.size} NaN/Inf (red)" if special.size else "")
        )
        positive = np.unique(values[finite & (values > 0)])
        if fmt.name == "e8m0" or fmt.max > 64:
            by_code.set_yscale("symlog" if fmt.name != "e8m0" else "log", base=2,
                               **({"linthresh": float(positive.min())} if fmt.name != "e8m0"
                                  else {}))
            line.set_xscale("log", base=2)
        line.plot(positive, np.zeros_like(positive), "|", markersize=12)
        line.set_yticks([])
        line.set_xlabel("the positive values on a number line")
        path = out / f"grid-{fmt.name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


#: The float types a decoded E8M0 scale lands in, with their smallest and largest power of two
#: (subnormals included): where a consumer's scale type runs out of binades.
E8M0_RANGES = (("float16", -24, 15), ("bfloat16", -133, 127), ("float32", -149, 127))


def _plot_e8m0(out: Path, plt: Any) -> Path:
    """E8M0: each code is one binade, value ``2**(code - 127)``: the exponent against the code
    (a log2 axis), with marks at every 16th binade, the special codes labelled, and the range
    of powers of two each float type can hold, which is where a consumer that decodes the
    scale into that type clamps or flushes (quark-hip-fp16: float16)."""
    codes = np.arange(255)
    fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
    ax.plot(codes, codes - 127, ".", markersize=3, label="2^(code - 127)")
    for i, (name, low, high) in enumerate(E8M0_RANGES):  # bars right of the codes
        ax.bar(268 + 12 * i, high - low, bottom=low, width=9, alpha=0.45, color=f"C{i + 1}",
               label=f"{name} holds 2^{low} .. 2^{high}")
    for code, text, dx in ((0x00, "0x00 = 2^-127 (not zero)", 6), (0x7F, "0x7F = 1", 6),
                           (0xFE, "0xFE = 2^127", -70)):
        ax.annotate(text, (code, code - 127), textcoords="offset points", xytext=(dx, -12),
                    fontsize=8)
    ax.axvline(0xFF, color="tab:red", alpha=0.4)
    ax.annotate("0xFF = NaN", (0xFF, -100), textcoords="offset points", xytext=(-58, 0),
                fontsize=8, color="tab:red")
    ax.set_xlim(-6, 300)
    ax.set_xticks(range(0, 256, 32), [f"0x{c:02X}" for c in range(0, 256, 32)])
    ax.set_xticks(range(0, 256, 16), minor=True)
    ax.set_yticks(range(-128, 129, 32), [f"2^{e}" for e in range(-128, 129, 32)])
    ax.set_yticks(range(-128, 129, 16), minor=True)
    ax.grid(which="both", alpha=0.3)
    ax.set_xlabel("code (one binade each; grid every 16)")
    ax.set_ylabel("value (log2 axis)")
    ax.set_title("e8m0: 255 powers of two, 2^-127 .. 2^127, and NaN")
    ax.legend(loc="upper left", fontsize=8)
    path = out / "grid-e8m0.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def benchmark_rows(page: Path = DOCS / "benchmarks.md") -> list[tuple[str, str, float]]:
    """``(operation, implementation, GB/s)`` of every timed row of the results table in
    ``docs/benchmarks.md`` (the committed numbers of one run)."""
    rows = []
    for line in page.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and re.fullmatch(r"\d+(\.\d+)?", cells[3]):
            rows.append((cells[0], cells[1].strip("*"), float(cells[3])))
    return rows


def plot_benchmarks(out: Path) -> list[Path]:
    """``benchmarks.png``: the GB/s of every benchmarked row, grouped by operation, ours blue."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = benchmark_rows()
    if not rows:
        raise RuntimeError("docs/benchmarks.md has no results table to plot")
    copy = next(gbs for op, _, gbs in rows if op == "memory copy")
    rows = [r for r in rows if r[0] != "memory copy"]
    fig, ax = plt.subplots(figsize=(9, 0.28 * len(rows) + 1.2), layout="constrained")
    labels = [f"{op}: {impl}" for op, impl, _ in rows]
    colors = ["tab:blue" if impl.startswith("mxformats") else "0.6" for _, impl, _ in rows]
    ax.barh(range(len(rows)), [gbs for _, _, gbs in rows], color=colors)
    ax.axvline(copy, color="k", linestyle="--", linewidth=1, label=f"memory copy {copy} GB/s")
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("GB/s of float32 input (higher is faster)")
    ax.legend(loc="lower right", fontsize=8)
    path = out / "benchmarks.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def scale_rows(page: Path = DOCS / "benchmarks.md") -> list[tuple[int, list[float]]]:
    """``(workers, [reproduction, its plain read, full scan, its plain read] GB/s)`` of every
    row of ``docs/benchmarks.md``'s validator-at-scale table (seven cells, the first a worker
    count; the ratio cells are not read)."""
    rows = []
    for line in page.read_text(encoding="utf-8").splitlines():
        cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0].isdigit():
            rows.append((int(cells[0]), [float(cells[i]) for i in (1, 2, 4, 5)]))
    return rows


def plot_scale(out: Path) -> list[Path]:
    """``scale.png``: reproduction and full-scan GB/s against workers, each beside the plain
    read of the same bytes (dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = scale_rows()
    if not rows:
        raise RuntimeError("docs/benchmarks.md has no validator-at-scale table to plot")
    workers = [w for w, _ in rows]
    fig, ax = plt.subplots(figsize=(6, 3.4), layout="constrained")
    series = [("--source reproduction", "tab:blue"), ("plain read of its bytes", "tab:blue"),
              ("--level full scan", "tab:orange"), ("plain read of its bytes", "tab:orange")]
    for i, (label, color) in enumerate(series):
        ax.plot(workers, [v[i] for _, v in rows], marker="o", color=color, label=label,
                linestyle="--" if i % 2 else "-")
    ax.set_xticks(workers)
    ax.set_xlabel("workers (processes)")
    ax.set_ylabel("GB/s read (higher is faster)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    path = out / "scale.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def scale_rule_errors() -> tuple[list[str], dict[str, list[float]]]:
    """Relative RMS error of quantize_mx -> dequantize_mx (E2M1, blocks of 32) per producer
    profile on two seeded samples: a standard normal and a Student-t (heavy-tailed). The
    samples are bfloat16 values, given as bfloat16 or, to a profile that refuses that dtype,
    widened exactly to float32: every profile sees the same numbers."""
    import ml_dtypes

    from mxformats import E2M1, dequantize_mx, profiles, quantize_mx

    rng = np.random.default_rng(SEED)
    samples = {
        "normal": rng.standard_normal(SAMPLE_SIZE),
        f"Student-t ({STUDENT_T_DOF} dof)": rng.standard_t(STUDENT_T_DOF, SAMPLE_SIZE),
    }
    names = [p.name for p in profiles() if p.scheme == "mx" and p.kind == "producer"]
    errors: dict[str, list[float]] = {}
    for label, sample in samples.items():
        x = sample.astype(ml_dtypes.bfloat16)
        reference = x.astype(np.float64)
        errors[label] = []
        for name in names:
            try:
                codes, scales = quantize_mx(x, E2M1, profile=name)
            except ValueError:
                codes, scales = quantize_mx(x.astype(np.float32), E2M1, profile=name)
            restored = np.asarray(dequantize_mx(codes, scales), dtype=np.float64)
            rms = np.sqrt(np.mean((restored - reference) ** 2) / np.mean(reference**2))
            errors[label].append(float(rms))
    return names, errors


def plot_scale_rule_errors(out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, errors = scale_rule_errors()
    fig, ax = plt.subplots(figsize=(7.5, 4.8), layout="constrained")
    y = np.arange(len(names))
    height = 0.8 / len(errors)
    for i, (label, values) in enumerate(errors.items()):
        ax.barh(y + i * height, values, height, label=label)
    ax.set_yticks(y + height * (len(errors) - 1) / 2, names)
    ax.invert_yaxis()
    ax.set_xlabel("relative RMS error of MXFP4 (E2M1, 32-element blocks)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncols=len(errors))
    figure = out / "mx-error.png"
    fig.savefig(figure, dpi=110)
    plt.close(fig)

    labels = list(errors)
    lines = [
        "| producer profile | " + " | ".join(labels) + " |",
        "|---|" + "---|" * len(labels),
    ]
    for row, name in enumerate(names):
        cells = " | ".join(f"{errors[label][row]:.4f}" for label in labels)
        lines.append(f"| `{name}` | {cells} |")
    table = out / "mx-error.md"
    table.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [figure, table]


#: The temporary folders ``mxformats demo`` writes to, as they appear in its output.
DEMO_FOLDER = re.compile(r"(?:/[^\s/]+)*/mxformats-demo-[^/\s]+/")


def _mxformats(args: list[str], cwd: Path) -> tuple[int, str]:
    """Run the CLI as a user would (``python -m mxformats.cli``); its exit code and stdout."""
    env = dict(os.environ, COLUMNS="100", NO_COLOR="1", TERM="dumb")
    done = subprocess.run(
        [sys.executable, "-m", "mxformats.cli", *args],
        cwd=cwd, env=env, capture_output=True, text=True, check=False,
    )
    if done.returncode not in (0, 1):
        raise RuntimeError(f"mxformats {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done.returncode, done.stdout


#: What the validator guide shows: captured file -> (``mxformats`` arguments, the exit code the
#: guide's text explains), run in the folder holding the demo checkpoints.
VALIDATOR_RUNS: dict[str, tuple[list[str], int]] = {
    "validate-demo.txt": (["demo"], 0),
    "inspect-good.txt": (["inspect", "kimi-k2-mxfp4-quark"], 0),
    "validate-good.txt": (["validate", "kimi-k2-mxfp4-quark"], 0),
    "validate-broken.txt": (
        ["validate", "broken-k25-mxfp4-bare-lm-head", "--level", "full"], 1),
    "validate-broken.json": (
        ["validate", "broken-k25-mxfp4-bare-lm-head", "--level", "full", "--format", "json"], 1),
    "validate-broken.github.txt": (
        ["validate", "broken-k25-mxfp4-bare-lm-head", "--level", "full", "--format", "github"],
        1),
}


def capture_validator_output(out: Path) -> list[Path]:
    """Write the demo checkpoints (as ``mxformats demo`` does) to a temporary folder and capture
    each command of :data:`VALIDATOR_RUNS` there, so the paths in the output are the short
    checkpoint names. Text captures end with the exit code; the JSON one must parse. Any exit
    code other than the one the guide explains fails the build."""
    import io

    from mxformats.validate.commands import demo

    written = []
    with tempfile.TemporaryDirectory(prefix="mxformats-docs-") as tmp:
        folder = Path(tmp)
        if demo(folder, out=io.StringIO()) != 0:
            raise RuntimeError("the demo checkpoints do not validate as the demo expects")
        for name, (args, expected_code) in VALIDATOR_RUNS.items():
            code, text = _mxformats(args, folder)
            if code != expected_code:
                raise RuntimeError(f"mxformats {' '.join(args)} exited {code}, the guide "
                                   f"explains exit {expected_code}:\n{text}")
            text = DEMO_FOLDER.sub("", text)
            if name.endswith(".json"):
                json.loads(text)
            else:
                text += f"[exit {code}]\n"
            (out / name).write_text(text, encoding="utf-8")
            written.append(out / name)
    return written


def generate(out: Path = GENERATED) -> list[Path]:
    """Write every build-time page piece into ``out``; return the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    return (plot_value_grids(out) + plot_scale_rule_errors(out) + plot_benchmarks(out)
            + plot_scale(out) + capture_validator_output(out))


_SHARED_IVAR = re.compile(r"(?P<indent>\s*):ivar (?P<names>\w+(?:, \w+)+): ?(?P<text>.*)")


def split_shared_ivars(lines: list[str]) -> list[str]:
    """Napoleon's ``:ivar a, b: text`` (with its indented continuation lines) as one
    ``:ivar a: text`` and one ``:ivar b: text``; every other line unchanged."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        match = _SHARED_IVAR.fullmatch(lines[i])
        i += 1
        if match is None:
            out.append(lines[i - 1])
            continue
        indent = match["indent"]
        body = []
        while i < len(lines) and lines[i].startswith(indent + " ") and lines[i].strip():
            body.append(lines[i])
            i += 1
        for name in match["names"].split(", "):
            out += [f"{indent}:ivar {name}: {match['text']}".rstrip(), *body]
    return out


def _on_process_docstring(
    app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    lines[:] = split_shared_ivars(lines)


def _on_builder_inited(app: Any) -> None:
    generate()


#: What napoleon took for an attribute's type but is prose (``#: the sizes: ...``): words with
#: spaces, no ``|`` or brackets of a type expression.
_PROSE_TYPE = re.compile(r"^:type: ([A-Za-z][\w'.,() -]* [\w'.,() -]*)$")


def restore_prose_prefix(lines: list[str]) -> list[str]:
    """Undo napoleon's reading of an attribute comment ``prose: more`` as type ``prose``."""
    for k, line in enumerate(lines):
        m = _PROSE_TYPE.match(line)
        if m and lines:
            rest = [x for j, x in enumerate(lines) if j != k]
            while rest and not rest[-1].strip():
                rest.pop()
            return [f"{m.group(1)}: {rest[0]}", *rest[1:]] if rest else [m.group(1)]
    return lines


def _after_napoleon(app: Any, what: str, name: str, obj: Any, options: Any,
                    lines: list[str]) -> None:
    if what in ("attribute", "data", "property"):
        lines[:] = restore_prose_prefix(lines)


def setup(app: Any) -> dict[str, Any]:
    # After napoleon (priority 500), which turns the Google sections into fields.
    app.connect("autodoc-process-docstring", _after_napoleon, priority=600)
    app.connect("builder-inited", _on_builder_inited)
    app.connect("include-read", _on_include_read)
    app.connect("doctree-read", _on_doctree_read)
    app.connect("missing-reference", _on_missing_reference)
    # After napoleon (priority 500), which turns ``Attributes:`` into ``:ivar:`` fields.
    app.connect("autodoc-process-docstring", _on_process_docstring, priority=600)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
