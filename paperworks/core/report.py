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
CLAIMS_START, CLAIMS_END = "<!-- claims:start -->", "<!-- claims:end -->"
TRACK_PAGES = Path("docs/tracks")


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
        sign = "+" if signed else ""
        if abs(x) >= 1e6:  # counted FLOPs and the like: four significant digits, not 13 of them
            return f"{x:{sign}.4g}"
        return f"{x:{sign}.3f}" if abs(x) < 100 else f"{x:{sign}.1f}"
    return str(x)


def _preconditions_cell(record: dict) -> str:
    pre = record["preconditions"]
    if not pre:
        return "none declared"
    failed = [p["name"] for p in pre if not p["passed"]]
    if failed:
        return "✗ " + "; ".join(failed)
    return f"✓ {len(pre)} met"


def verdict_cell(record: dict) -> str:
    """The verdict in bold; a claim that was not tested names the preconditions that *failed*, since
    the bare names ("not tested: warm start converged") read as if they held."""
    v = record["verdict"]
    if v.startswith("not tested: "):
        return f"**not tested** (failed: {v[len('not tested: '):]})"
    return f"**{v}**"


def claim_row(record: dict) -> list[str]:
    """The cells every claims table shows (README and track pages render the same fields)."""
    r = record
    kind = r["kind"].replace("_", "-") + (f" (margin {r['margin']:g})" if r.get("margin") else "")
    means = f"{r['method']} {_fmt(r['method_mean'])} vs {r['baseline']} {_fmt(r['baseline_mean'])}"
    diff = "–" if r["diff"] is None else f"{_fmt(r['diff'], True)} [{_fmt(r['ci_low'], True)}, {_fmt(r['ci_high'], True)}]"
    return [r["role"], r["statement"], f"{r['metric']} ({r['direction']})", kind, means, diff, r["units"]["label"],
            r["interval_method"] or "–", _preconditions_cell(r), verdict_cell(r)]


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


# The README's table is for scanning: one row per headline claim (the ≤ 3 a track stakes its
# result on), the columns a reader needs to judge it, and one row per track counting the
# exploratory claims, whose full records (metric, means, interval method, preconditions) are on
# the track page, which keeps every column (claims_markdown above).
SCAN_COLUMNS = ["track", "profile", "claim", "better", "kind", "difference [95% CI]", "clusters × units", "verdict"]


def scan_row(track: str, profile: str, r: dict) -> list[str]:
    kind = r["kind"].replace("_", "-") + (f" ±{r['margin']:g}" if r.get("margin") else "")
    diff = "–" if r["diff"] is None else f"{_fmt(r['diff'], True)} [{_fmt(r['ci_low'], True)}, {_fmt(r['ci_high'], True)}]"
    better = "higher ↑" if r["direction"].startswith("higher") else "lower ↓"
    return [track, profile, r["statement"], better, kind, diff, r["units"]["label"], verdict_cell(r)]


def exploratory_row(track: str, profile: str, records: list[dict]) -> list[str] | None:
    if not records:
        return None
    counts: dict[str, int] = {}
    for r in records:
        verdict = "not tested" if r["verdict"].startswith("not tested") else r["verdict"]
        counts[verdict] = counts.get(verdict, 0) + 1
    said = ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return [track, profile, f"+ {len(records)} exploratory claim{'s' * (len(records) != 1)}: "
            f"[docs/tracks/{track}.md](docs/tracks/{track}.md)", "", "", "", "", said]


def results_table(metrics_dir: Path | str = "metrics") -> str:
    """The README's results table: per track its headline claims, then one row counting the rest."""
    lines = []
    for path in sorted(Path(metrics_dir).glob("*.json")):
        metrics = json.loads(path.read_text())
        claims = metrics.get("claims", [])
        if not claims:
            continue
        track, profile = path.stem, str(metrics.get("profile", "?"))
        rows = [scan_row(track, profile, r) for r in claims if r["role"] == "headline"]
        rows.append(exploratory_row(track, profile, [r for r in claims if r["role"] != "headline"]))
        lines += ["| " + " | ".join(row) + " |" for row in rows if row is not None]
    if not lines:
        return "_No metrics yet: run `make run`._\n"
    head = ["| " + " | ".join(SCAN_COLUMNS) + " |", "|" + " --- |" * len(SCAN_COLUMNS)]
    return "\n".join(head + lines) + "\n"


def inject(readme_text: str, table: str, start: str = START, end: str = END) -> str:
    if start not in readme_text or end not in readme_text:
        raise ValueError(f"document lacks the {start} … {end} markers")
    before, rest = readme_text.split(start, 1)
    _, after = rest.split(end, 1)
    return f"{before}{start}\n{table}{end}{after}"


def track_claims_block(metrics: dict, track: str) -> str:
    """The claims section of a track page: the table, every precondition, how the run was restated."""
    lines = [f"_Generated by `make report` from `metrics/{track}.json` (profile **{metrics.get('profile', '?')}**); "
             f"per-unit values in `metrics/units/{track}/`._", "", claims_markdown(metrics["claims"]),
             "Preconditions, as measured:", "", *precondition_lines(metrics)]
    ev = metrics.get("evidence")
    if ev:
        lines += ["", f"Verdicts: Holm-adjusted p < {ev['alpha']} within the headline and the exploratory family; intervals are "
                      f"unadjusted {ev['confidence']:.0%}, over clusters (t below {ev['small_sample_clusters']} clusters, two-level "
                      f"bootstrap with {ev['bootstrap_resamples']} resamples from there on)."]
    r = metrics.get("restated")
    if r:
        lines += ["", f"Restated by `{r['by']}` from {r['run']}: {r['note']} (sources: {', '.join(f'`{x}`' for x in r['from'])})."]
    return "\n".join(lines) + "\n"


def track_pages(metrics_dir: Path | str = "metrics", pages: Path | str = TRACK_PAGES) -> dict[Path, str]:
    """Every track page with a claims block, rewritten from its metrics file."""
    out = {}
    for path in sorted(Path(metrics_dir).glob("*.json")):
        page = Path(pages) / f"{path.stem}.md"
        metrics = json.loads(path.read_text())
        if page.exists() and metrics.get("claims") and CLAIMS_START in page.read_text():
            out[page] = inject(page.read_text(), track_claims_block(metrics, path.stem), CLAIMS_START, CLAIMS_END)
    return out


def recompute_all(metrics_dir: Path | str = "metrics", root: Path | str = ".") -> list[str]:
    """Redo every claim from the committed per-unit tables; return the differences (none: identical)."""
    from paperworks.core.claims import recompute

    problems = []
    for path in sorted(Path(metrics_dir).glob("*.json")):
        metrics = json.loads(path.read_text())
        if not metrics.get("claims"):
            continue
        fresh = recompute(metrics, root)
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
    targets = {readme: inject(readme.read_text(), table), **track_pages(args.metrics)}
    if args.check:
        stale = [str(p) for p, text in targets.items() if text != p.read_text()]
        if stale:
            print(f"stale claims tables in {', '.join(stale)}; run `make report`", file=sys.stderr)
            return 1
        print(f"{', '.join(str(p) for p in targets)}: claims tables match metrics/")
        return 0
    for path, text in targets.items():
        write_text(path, text)
    print(f"{', '.join(str(p) for p in targets)}: claims tables updated from {args.metrics}/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
