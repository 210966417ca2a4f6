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


def _fmt(x: Any, signed: bool = False) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        if not math.isfinite(x):
            return "–"
        if signed:
            return f"{x:+.3f}" if abs(x) < 100 else f"{x:+.1f}"
        return f"{x:.3f}" if abs(x) < 100 else f"{x:.1f}"
    return str(x)


def _preconditions_cell(record: dict) -> str:
    pre = record["preconditions"]
    if not pre:
        return "none declared"
    failed = [p["name"] for p in pre if not p["passed"]]
    if failed:
        return "✗ " + "; ".join(failed)
    return f"✓ {len(pre)} met"


def claim_row(record: dict) -> list[str]:
    """The cells every claims table shows (README and track pages render the same fields)."""
    r = record
    kind = r["kind"].replace("_", "-") + (f" (margin {r['margin']:g})" if r.get("margin") else "")
    means = f"{r['method']} {_fmt(r['method_mean'])} vs {r['baseline']} {_fmt(r['baseline_mean'])}"
    diff = "–" if r["diff"] is None else f"{_fmt(r['diff'], True)} [{_fmt(r['ci_low'], True)}, {_fmt(r['ci_high'], True)}]"
    return [r["role"], r["statement"], f"{r['metric']} ({r['direction']})", kind, means, diff, r["units"]["label"],
            r["interval_method"] or "–", _preconditions_cell(r), f"**{r['verdict']}**"]


CLAIM_COLUMNS = ["role", "claim", "metric", "kind", "method vs baseline (means)", "difference [95% CI]", "units",
                 "interval", "preconditions", "verdict"]


def claims_markdown(records: list[dict], with_track: str | None = None) -> str:
    """A markdown table of claim records (the one renderer; track pages call it too)."""
    cols = (["track", "profile"] if with_track is not None else []) + CLAIM_COLUMNS
    lines = ["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    for r in records:
        lead = with_track.split("|") if with_track is not None else []
        lines.append("| " + " | ".join(lead + claim_row(r)) + " |")
    return "\n".join(lines) + "\n"


def precondition_lines(metrics: dict) -> list[str]:
    """Every precondition record of a track, measured value and threshold, one bullet each."""
    seen, out = set(), []
    for r in metrics.get("claims", []):
        for p in r["preconditions"]:
            if p["name"] in seen:
                continue
            seen.add(p["name"])
            mark = "met" if p["passed"] else "**failed**"
            detail = p["detail"] or f"value {p['value']}, threshold {p['threshold']}"
            out.append(f"- {p['name']}: {mark} — {detail}")
    return out


def results_table(metrics_dir: Path | str = "metrics") -> str:
    rows = []
    for path in sorted(Path(metrics_dir).glob("*.json")):
        metrics = json.loads(path.read_text())
        claims = metrics.get("claims", [])
        if claims:
            rows.append(claims_markdown(claims, with_track=f"{path.stem}|{metrics.get('profile', '?')}").splitlines()[2:])
    if not rows:
        return "_No metrics yet: run `make run`._\n"
    head = claims_markdown([], with_track="").splitlines()
    return "\n".join(head + [line for block in rows for line in block]) + "\n"


def inject(readme_text: str, table: str) -> str:
    if START not in readme_text or END not in readme_text:
        raise ValueError(f"README lacks the {START} … {END} markers")
    before, rest = readme_text.split(START, 1)
    _, after = rest.split(END, 1)
    return f"{before}{START}\n{table}{END}{after}"


def recompute_all(metrics_dir: Path | str = "metrics", root: Path | str = ".") -> list[str]:
    """Redo every claim from the committed per-unit tables; return the differences (none: identical)."""
    from paperworks.core.claims import recompute

    problems = []
    for path in sorted(Path(metrics_dir).glob("*.json")):
        metrics = json.loads(path.read_text())
        if not metrics.get("claims"):
            continue
        fresh = json.loads(json.dumps(recompute(metrics, root), default=float))
        stored = metrics["claims"]
        for new, old in zip(fresh, stored):
            for key in ("diff", "ci_low", "ci_high", "p_value", "p_holm", "verdict"):
                a, b = new.get(key), old.get(key)
                same = a == b or (isinstance(a, float) and isinstance(b, float) and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12))
                if not same:
                    problems.append(f"{path.name}: claim {old['id']}: {key} stored {b!r}, recomputed {a!r}")
        if len(fresh) != len(stored):
            problems.append(f"{path.name}: {len(stored)} claims stored, {len(fresh)} recomputed")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--metrics", default="metrics")
    ap.add_argument("--readme", help="rewrite the results block of this README")
    ap.add_argument("--check", action="store_true", help="with --readme: fail if the block is stale")
    ap.add_argument("--recompute", action="store_true",
                    help="first redo every interval and verdict from metrics/units/ and fail if any differs")
    args = ap.parse_args(argv)
    if args.recompute:
        problems = recompute_all(args.metrics)
        if problems:
            print("claims differ from a recomputation from their per-unit tables:\n  " + "\n  ".join(problems), file=sys.stderr)
            return 1
        n = sum(len(json.loads(p.read_text()).get("claims", [])) for p in Path(args.metrics).glob("*.json"))
        print(f"{n} claims recomputed from {args.metrics}/units: every interval and verdict identical")
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
