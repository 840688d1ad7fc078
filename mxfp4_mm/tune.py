"""One tuner for every backend: times every candidate plan of every available backend per shape,
the harness's way, and rewrites the plan tables (mxfp4_mm/backends/<backend>/plans.py) with each
backend's fastest correct plan.

    python -m mxfp4_mm.tune [--shapes all] [--backends cuda,triton] [--reps 50] [--pool 4]
                            [--write] [--log tune.json]
    python -m mxfp4_mm.tune --static    # anywhere, no GPU: hip_plans.PLANS = the general rule,
                                        # annotated with the static model

Candidates are the ones the first-use tuner chooses from (tuner.candidate_list), each checked
on every input set of a pool, then timed (bench.sweep: L2 flushed, events around one call, fresh
input set per repetition, paths interleaved; median). Without --write nothing is rewritten.
A table keyed by kernel arch first (triton) gets the device's arch; shapes not tuned keep their entry.
"""

import argparse
import ast
import datetime
import importlib
import importlib.util
import json
import re
import sys
from pathlib import Path

import torch

from . import bench, dispatch
from .tuning import tuner

# each backend's plan table: `plans.py` in the backend's room, data and the rules beside it
TABLE_MODULES = {name: f"mxfp4_mm.backends.{name}.plans" for name in ("cuda", "triton", "hip")}
BEGIN, END = "# BEGIN PLANS", "# END PLANS"
STAMP = "measured by python -m mxfp4_mm.tune on "
STAMP_PREFIX = "# " + STAMP  # the stamp's line in a table, which a rewrite replaces
TASK_SHAPES = {"tests": bench.TEST_SHAPES, "benchmarks": bench.BENCHMARK_SHAPES}


# ---- writing a table --------------------------------------------------------------------------

def _is_plain_tuple(value) -> bool:
    return type(value) is tuple  # namedtuple plans are written as Plan(...)


def _leaf_values(plans):
    for value in plans.values():
        if isinstance(value, dict):
            yield from _leaf_values(value)
        else:
            yield value


def _without_trailing_defaults(plan) -> list:
    """The plan's fields, less trailing ones equal to the namedtuple's defaults (tables stay short
    and a re-run does not churn them). The first field stays: it may be the tag that tells a table's
    plan types apart (a DequantPlan is ("dq",), never ())."""
    fields = list(plan)
    defaults = getattr(type(plan), "_field_defaults", {})
    while len(fields) > 1 and defaults.get(plan._fields[len(fields) - 1], object()) == fields[-1]:
        fields.pop()
    return fields


def render_value(plan, as_tuple: bool) -> str:
    plan = _without_trailing_defaults(plan) if hasattr(plan, "_fields") else list(plan)
    fields = ", ".join(map(repr, plan))
    return f"({fields}{',' if len(plan) == 1 else ''})" if as_tuple else f"Plan({fields})"


def render_plans(plans, notes, as_tuple, header_lines=(), noted_arch=None, verbatim=None):
    """`PLANS = {...}` (one level, or keyed by arch first), an entry per line; `notes` ({shape: text})
    annotate the top level, or the `noted_arch` table; `verbatim` ({arch: source}) arch tables kept
    as the expression they were written as (e.g. a comprehension over a prior)."""
    verbatim = verbatim or {}
    lines = [f"# {line}" for line in header_lines] + ["PLANS = {"]

    def entries(table, indent, table_notes):
        for shape in sorted(table):
            note = table_notes.get(shape)
            lines.append(f"{indent}{shape!r}: {render_value(table[shape], as_tuple)},"
                         + (f"  # {note}" if note else ""))

    if any(isinstance(value, dict) for value in plans.values()):
        for arch, table in plans.items():
            if arch in verbatim:
                lines.append(f"    {arch!r}: {verbatim[arch]},")
                continue
            lines.append(f"    {arch!r}: {{")
            entries(table, " " * 8, notes if arch == noted_arch else {})
            lines.append("    },")
    else:
        entries(plans, " " * 4, notes)
    return "\n".join(lines + ["}"])


def replace_plans_text(text: str, rendered: str) -> str:
    """The module text with its PLANS assignment replaced: between the BEGIN/END marker lines when
    the file has them, else the assignment's own lines (found with ast)."""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        return f"{head}{BEGIN} (written by python -m mxfp4_mm.tune)\n{rendered}\n{END}{tail}"
    node = _plans_assignment(text)
    if node is None:
        raise ValueError("no PLANS assignment found")
    lines = text.splitlines(keepends=True)
    start = node.lineno - 1
    while start > 0 and lines[start - 1].startswith(STAMP_PREFIX):  # the previous write's stamp
        start -= 1
    return "".join(lines[:start]) + rendered + "\n" + "".join(lines[node.end_lineno:])


def entry_notes(text: str, arch=None) -> dict:
    """{shape: note} of the table's entry lines (`    (m, n, k): plan,  # note`), in `arch`'s table
    when the table is keyed by arch: a rewrite keeps the notes of the entries it does not touch."""
    notes, current = {}, None
    for line in text.splitlines():
        opened = re.match(r"^    '([^']+)': \{$", line)
        if opened:
            current = opened.group(1)
            continue
        entry = re.match(r"^\s+\((\d+), (\d+), (\d+)\): .*,  # (.*)$", line)
        if entry and current == arch:
            notes[tuple(int(v) for v in entry.groups()[:3])] = entry.group(4)
    return notes


def _plans_assignment(text: str):
    """The module's top-level `PLANS = ...` statement (ast), or None."""
    return next((node for node in ast.parse(text).body if isinstance(node, ast.Assign)
                 and any(getattr(t, "id", None) == "PLANS" for t in node.targets)), None)


def computed_arch_tables(text: str) -> dict:
    """{arch: source} of the module's PLANS entries that are not dict literals (computed tables)."""
    node = _plans_assignment(text)
    if node is None or not isinstance(node.value, ast.Dict):
        return {}
    return {key.value: ast.get_source_segment(text, value) for key, value in zip(node.value.keys, node.value.values)
            if isinstance(key, ast.Constant) and not isinstance(value, ast.Dict)}


def table_path(backend) -> Path:
    return Path(importlib.util.find_spec(TABLE_MODULES[backend]).origin)


def write_table(backend, chosen, notes, header_lines, arch=None, path=None):
    """Merge {shape: plan} into the backend's PLANS (under `arch` when the table is keyed by arch)
    and rewrite its text."""
    module = importlib.import_module(TABLE_MODULES[backend])
    plans = {key: dict(value) if isinstance(value, dict) else value for key, value in module.PLANS.items()}
    by_arch = any(isinstance(value, dict) for value in plans.values())
    (plans.setdefault(arch, {}) if by_arch else plans).update(chosen)
    existing = list(_leaf_values(module.PLANS))
    as_tuple = all(map(_is_plain_tuple, existing)) if existing else not hasattr(module, "Plan")
    path = path or table_path(backend)
    text = path.read_text()
    notes = {**entry_notes(text, arch if by_arch else None), **notes}
    keep = {a: source for a, source in computed_arch_tables(text).items() if a != arch} if by_arch else {}
    rendered = render_plans(plans, notes, as_tuple, header_lines, noted_arch=arch, verbatim=keep)
    path.write_text(replace_plans_text(text, rendered))
    return path


# ---- the HIP static model (no GPU) ------------------------------------------------------------

def mfma_count(m, n, k, variant):
    """Scaled MFMA instructions of the whole launch (the K tail chunk issues fewer steps)."""
    from .backends.hip import plans as hip_plans
    groups = 64 // variant.mfma                      # K slices of 32 per MFMA step
    slices = k // 32
    steps = (slices // 8) * (8 // groups) + -(-(slices % 8) // groups)
    per_tile = (variant.tile_m // variant.mfma) * (variant.tile_n // variant.mfma) * steps
    return hip_plans.grid_blocks(m, n, variant) * per_tile


def hbm_bytes(m, n, k, split_k):
    from .backends.hip import plans as hip_plans
    return n * k // 2 + n * k // 32 + m * k * 2 + m * n * 2 + hip_plans.partial_bytes(m, n, split_k)


def why_rule(m, n, k, variant, split_k):
    from .backends.hip import plans as hip_plans
    blocks = hip_plans.grid_blocks(m, n, variant)
    if blocks >= hip_plans.TARGET_BLOCKS:
        tile = f"least L2 traffic of the tiles with >= {hip_plans.TARGET_BLOCKS} blocks"
    else:
        tile = f"no tile reaches {hip_plans.TARGET_BLOCKS} blocks: the most blocks"
    unsplit = hip_plans.chain(k, variant, 1)
    if split_k == 1:
        split = f"no split (chain {unsplit} <= 2)" if unsplit <= 2 else "no split fits the CUs"
    else:
        split = f"split {split_k}: chain {unsplit} -> {hip_plans.chain(k, variant, split_k)}"
    return f"{tile}; {split}"


def static_model(m, n, k, plan):
    from .backends import hip
    from .backends.hip import plans as hip_plans
    v = hip.kernel_variants()[plan.variant]
    blocks = hip_plans.grid_blocks(m, n, v) * plan.split_k
    return (f"hbm {hbm_bytes(m, n, k, plan.split_k) / 1e6:.2f} MB, "
            f"l2 {hip_plans.cache_read_bytes(m, n, k, v) / 1e6:.1f} MB, "
            f"{mfma_count(m, n, k, v)} mfma{v.mfma}, {blocks} blocks / {hip_plans.COMPUTE_UNITS} CUs, "
            f"chain {hip_plans.chain(k, v, plan.split_k)}")


def rule_plan(m, n, k):
    from .backends import hip
    from .backends.hip import plans as hip_plans
    return hip_plans.general_plan(m, n, k, [v for v in hip.kernel_variants().values() if v.b_shuffled])


def static_plans(shapes):
    """({shape: the rule's plan}, {shape: why})."""
    from .backends import hip
    chosen, why = {}, {}
    for shape in shapes:
        chosen[shape] = rule_plan(*shape)
        why[shape] = why_rule(*shape, hip.kernel_variants()[chosen[shape].variant], chosen[shape].split_k)
    return chosen, why


def render_static_hip(chosen, why, source_line):
    """hip_plans' PLANS block: test shapes, then benchmark shapes with their static model and reason."""
    lines = [f"# {source_line}", "PLANS = {"]
    for group, shapes in TASK_SHAPES.items():
        lines.append(f"    # {group}")
        for shape in shapes:
            plan = chosen[shape]
            if group == "benchmarks":
                lines.append(f"    # {static_model(*shape, plan)}")
                lines.append(f"    #   {why[shape]}")
            lines.append(f"    {shape!r}: {render_value(plan, as_tuple=False)},")
    extra = sorted(set(chosen) - {s for shapes in TASK_SHAPES.values() for s in shapes})
    lines += [f"    {shape!r}: {render_value(chosen[shape], as_tuple=False)},  # {why[shape]}" for shape in extra]
    return "\n".join(lines + ["}"])


def write_static_hip(path=None):
    path = path or table_path("hip")
    chosen, why = static_plans(bench.TEST_SHAPES + bench.BENCHMARK_SHAPES)
    rendered = render_static_hip(chosen, why, "static model (python -m mxfp4_mm.tune --static); not measured")
    path.write_text(replace_plans_text(path.read_text(), rendered))
    return path


# ---- the measured sweep -----------------------------------------------------------------------

def best_per_backend(rows, candidates):
    """{backend: (plan, median µs)} of the fastest correct candidate with a plan of its own."""
    best = {}
    for candidate in candidates:
        row = rows.get(f"{candidate.backend}:{candidate.label}")
        if candidate.plan is None or not row or not row["correct"]:
            continue
        if candidate.backend not in best or row["median_us"] < best[candidate.backend][1]:
            best[candidate.backend] = (candidate.plan, row["median_us"])
    return best


def tune_shapes(shapes, backends, reps, pool, device, progress=sys.stderr):
    """({backend: {shape: (plan, µs)}}, {shape key: every row})."""
    timer = bench.Timer(device)
    chosen, log = {}, {}
    for index, shape in enumerate(shapes):
        available = [(name, module) for name, module in dispatch.available_backends(device)
                     if not backends or name in backends]
        candidates = tuner.candidate_list(available, *shape, device)[0]
        case = bench.Case(*shape, 3000 + index, pool, device)
        rows = bench.sweep(case, candidates, timer, reps)
        log[bench.shape_key(shape)] = rows
        for backend, (plan, us) in best_per_backend(rows, candidates).items():
            chosen.setdefault(backend, {})[shape] = (plan, us)
            print(f"[{index + 1}/{len(shapes)}] {bench.shape_key(shape)} {backend}: "
                  f"{tuner.label_of(dispatch.load_backend(backend), plan)} {us:.2f} µs "
                  f"({len(candidates)} candidates, {sum(not r['correct'] for r in rows.values())} wrong)",
                  file=progress, flush=True)
    return chosen, log


def write_measured(chosen, device):
    from .dispatch import kernel_arch
    device_name, today = bench.device_description(device), datetime.date.today().isoformat()
    stamp = f"{STAMP}{device_name}, torch {torch.__version__}, {today} (or as an entry notes)"
    where = f"{device_name}, {today}"
    written = []
    for backend, per_shape in chosen.items():
        if backend not in TABLE_MODULES:
            continue
        plans = {shape: plan for shape, (plan, _) in per_shape.items()}
        notes = {shape: f"{us:.2f} us, {where}" for shape, (_, us) in per_shape.items()}
        written.append(write_table(backend, plans, notes, [stamp], arch=kernel_arch(device)))
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="all", help="all | bench | test | 'm,n,k;m,n,k'")
    parser.add_argument("--backends", help="comma-separated backend names (default: every available one)")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--pool", type=int, default=4)
    parser.add_argument("--write", action="store_true", help="rewrite the plan tables")
    parser.add_argument("--log", type=Path, help="every candidate's row as JSON")
    parser.add_argument("--static", action="store_true", help="write hip_plans.PLANS from the static model")
    args = parser.parse_args(argv)
    if args.static:
        print(f"wrote {write_static_hip()} from the general rule")
        return 0
    if not torch.cuda.is_available():
        sys.exit("tuning measures on a GPU; none here (--static needs none)")
    device = torch.device("cuda", torch.cuda.current_device())
    backends = set(args.backends.split(",")) if args.backends else None
    chosen, log = tune_shapes(bench.parse_shapes(args.shapes), backends, args.reps, args.pool, device)
    if args.log:
        args.log.write_text(json.dumps({"device": bench.device_description(device), "rows": log}, indent=1))
    if args.write:
        for path in write_measured(chosen, device):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
