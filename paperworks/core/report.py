"""The results table: generated from every ``metrics/*.json``'s ``claims``, never typed by hand.

``python -m paperworks.core.report --readme README.md`` rewrites the block between
``<!-- results:start -->`` and ``<!-- results:end -->``; ``--check`` fails when the README
is out of date with the metrics files (CI runs it).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from paperworks.core.io import write_text

START, END = "<!-- results:start -->", "<!-- results:end -->"


def flatten_metrics(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested metrics → ``{"a.b.c": value}`` (lists of scalars kept as they are)."""
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten_metrics(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, list) and obj and all(isinstance(v, dict) for v in obj):
        for i, v in enumerate(obj):
            out.update(flatten_metrics(v, f"{prefix}.{i}"))
    else:
        out[prefix] = obj
    return out


def _fmt(x: Any) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        if not math.isfinite(x):
            return "–"
        return f"{x:.3f}" if abs(x) < 100 else f"{x:.1f}"
    return str(x)


def results_table(metrics_dir: Path | str = "metrics") -> str:
    rows = []
    for path in sorted(Path(metrics_dir).glob("*.json")):
        metrics = json.loads(path.read_text())
        for c in metrics.get("claims", []):
            lo, hi = (c.get("diff_ci95") or [None, None])[:2]
            rows.append(
                f"| {path.stem} | {c['statement']} | {c['metric']} | {c['method']}: {_fmt(c['method_mean'])} "
                f"| {c['baseline']}: {_fmt(c['baseline_mean'])} | {_fmt(c['diff'])} [{_fmt(lo)}, {_fmt(hi)}] "
                f"| {c['n']} {c.get('unit', '')} | **{c['verdict']}** |"
            )
    if not rows:
        return "_No metrics yet: run `make run`._\n"
    head = (
        "| track | claim | metric | method | baseline | difference [95% CI] | n | verdict |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- |\n"
    )
    return head + "\n".join(rows) + "\n"


def inject(readme_text: str, table: str) -> str:
    if START not in readme_text or END not in readme_text:
        raise ValueError(f"README lacks the {START} … {END} markers")
    before, rest = readme_text.split(START, 1)
    _, after = rest.split(END, 1)
    return f"{before}{START}\n{table}{END}{after}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--metrics", default="metrics")
    ap.add_argument("--readme", help="rewrite the results block of this README")
    ap.add_argument("--check", action="store_true", help="with --readme: fail if the block is stale")
    args = ap.parse_args(argv)
    table = results_table(args.metrics)
    if not args.readme:
        sys.stdout.write(table)
        return 0
    readme = Path(args.readme)
    new = inject(readme.read_text(), table)
    if args.check:
        if new != readme.read_text():
            print(f"{readme}: results table is stale; run `make report`", file=sys.stderr)
            return 1
        print(f"{readme}: results table matches metrics/")
        return 0
    write_text(readme, new)
    print(f"{readme}: results table updated from {args.metrics}/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
