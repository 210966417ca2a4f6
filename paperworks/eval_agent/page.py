"""The example sessions and the measured block of docs/tracks/eval_agent.md, rendered from the evaluate stage's
records and metrics (never typed by hand):

    python -m paperworks.eval_agent.page      # after a run: rewrites the blocks between the examples and measured markers

For each example session of ``plots/eval_agent/example_sessions.json`` (chosen by rule in
``report.pick_examples``: one that stopped early, one at the round cap, one on the held-out family,
one whose level missed): the query, the rounds (allocation over the sub-aspects, the running estimate
with its interval, the levels the interval spans, the decision), a contact sheet of every sample read
(one row per round, failing samples framed red), the prompts and the tools' reading of the failing
samples beside what was drawn, the answer against the full benchmark, and the trained planner's answer
on the same session with its refused actions.

Images are not stored by the pipeline: each sample is drawn again from its benchmark seed (run ``b``)
and read again by the fitted tools. A sample whose re-read verdict differs from the recorded one is
flagged; more than ``MAX_REREAD_MISMATCH`` of them means the artifacts no longer belong together
(an ``ArtifactError``: rerun the pipeline).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from paperworks.core.io import ArtifactError, read_json
from paperworks.core.render.scene import COLOURS, SHAPES

PAGE = Path("docs/tracks/eval_agent.md")
IMAGES = Path("docs/tracks/eval_agent")
EXAMPLES = Path("plots/eval_agent/example_sessions.json")
START, END = "<!-- examples:start -->", "<!-- examples:end -->"
MEASURED_START, MEASURED_END = "<!-- measured:start -->", "<!-- measured:end -->"
METRICS = Path("metrics/eval_agent.json")
MAX_REREAD_MISMATCH = 0.05
PASS, FAIL, DISAGREE = (40, 160, 40), (220, 30, 30), (255, 150, 0)
LEVELS = ("Very Low", "Low", "Medium", "High", "Very High")


def slug(e: dict) -> str:
    return re.sub(r"[^a-z0-9]+", "_", f"{e['kind']}_{e['model']}_{e['dim']}_r{e['repeat']}".lower()).strip("_")


def describe(parse) -> str:
    """A reading (``world.Parse``) as text: per shape its count, colour and centre; the noise std."""
    parts = []
    for s, name in enumerate(SHAPES):
        if parse.count[s] > 0:
            colour = COLOURS[parse.colour[s]] if parse.colour[s] >= 0 else "?"
            parts.append(f"{parse.count[s]}× {colour} {name} @({parse.x[s]:.2f}, {parse.y[s]:.2f})")
    return "; ".join(parts or ["nothing"]) + f"; noise {parse.noise:.1f}"


def check_reread(recorded: list[int], reread: list[int], what: str) -> int:
    """Number of samples whose re-read tool verdict differs from the recorded one; too many → ``ArtifactError``."""
    if len(recorded) != len(reread):
        raise ArtifactError(f"{what}: {len(reread)} re-read samples for {len(recorded)} recorded")
    bad = int(sum(a != b for a, b in zip(recorded, reread)))
    if recorded and bad / len(recorded) > MAX_REREAD_MISMATCH:
        raise ArtifactError(f"{what}: {bad} of {len(recorded)} re-drawn samples read to another verdict than the benchmark "
                            f"recorded (limit {MAX_REREAD_MISMATCH:.0%}): params.yaml, the zoo, the tools and the benchmark are "
                            f"not from one run — rerun the pipeline before the page")
    return bad


def _interval_text(lo: float, hi: float) -> str:
    return f"[{lo:.2f}, {hi:.2f}]"


def level_table(edges: list[float]) -> str:
    cells = [f"{name} [{edges[i]:.2f}, {edges[i + 1]:.2f})" for i, name in enumerate(LEVELS)]
    return "Levels (population quintiles): " + " · ".join(cells)


def stop_text(e: dict) -> str:
    last = e["rounds"][-1]
    lo, hi = last["levels"]
    if e["stop"] == "interval inside one level":
        return (f"stopped after round {last['round']} of at most {e.get('max_rounds', '?')}: the interval "
                f"{_interval_text(last['low'], last['high'])} lies inside **{e['level']}**")
    what = "the round cap" if e["stop"] == "cap" else e["stop"]
    return (f"{what} after round {last['round']}: the interval {_interval_text(last['low'], last['high'])} still spans "
            f"{lo} – {hi}; the answer is the estimate's level, **{e['level']}**")


def example_block(e: dict, sheet_link: str | None, readings: dict[tuple[int, int], tuple[str, str]], mismatches: int) -> list[str]:
    """Markdown for one example session (``readings``: (prompt, sample) → (prompt text, tools' reading, what was drawn))."""
    share = e["samples"] / e["full_samples"]
    lines = [f"### {e['kind']}: {e['model']} (family {e['family']}) on {e['dim']}, repeat {e['repeat']}", "",
             f"Query: _how good is {e['model']} on {e['dim']}?_ Sub-aspects: {', '.join(e['aspects'])}. "
             + level_table(e["edges"]) + ".", "",
             f"**Answer: {e['level']}** — {e['explanation']}; interval {_interval_text(*e['interval'])}; "
             f"{e['samples']} of the full benchmark's {e['full_samples']} samples ({share:.0%}). Stop: {stop_text(e)}. "
             f"Full benchmark (run a, the truth): {e['truth_score']:.3f}, **{e['truth_level']}**.", ""]
    if "planner" in e:
        pl = e["planner"]
        refused = (f"; {pl['invalid']} of {pl['decisions']} actions refused at the first try "
                   f"({pl['retried_ok']} fixed by the retry, {pl['fallbacks']} fell back to the neutral rule)") if pl["invalid"] else \
            f"; all {pl['decisions']} actions valid at the first try"
        lines += [f"Trained planner on the same session (same pool, seed and sample queues): **{pl['level']}** after "
                  f"{pl['samples']} samples in {pl['rounds']} rounds ({pl['stop']}){refused}.", ""]
        for r in pl["refused"][:3]:
            lines.append(f"- refused at step {r['step']}: `{_code(r['text'])}` — {r['why']}; retry `{_code(r['retry'])}` — "
                         f"{r['retry_why'] or 'valid'}; applied `{r['applied']}`")
        if pl["refused"]:
            lines.append("")
    lines += ["| round | samples per sub-aspect | read | passed (tools) | estimate | interval | levels spanned | decision |",
              "| ---: | --- | ---: | ---: | ---: | --- | --- | --- |"]
    for r in e["rounds"]:
        passed = sum(s["tool"] for s in r["samples"])
        alloc = ", ".join(f"{k}" for k in r["allocation"])
        span = r["levels"][0] if r["levels"][0] == r["levels"][1] else f"{r['levels'][0]} – {r['levels'][1]}"
        lines.append(f"| {r['round']} | {alloc} | {r['n']} | +{passed} of {len(r['samples'])} | {r['estimate']:.3f} | "
                     f"{_interval_text(r['low'], r['high'])} | {span} | {r['decision']} |")
    lines.append("")
    if sheet_link:
        lines += [f"![{e['kind']}: contact sheet]({sheet_link})", "",
                  "_Contact sheet: one row per round, every sample the agent read (prompt #.sample); frame green = passes, "
                  "red = fails by the tools' reading, orange = the tools and the renderer's truth disagree._", ""]
    fails = [(r["round"], s) for r in e["rounds"] for s in r["samples"] if s["tool"] == 0 or s["tool"] != s["renderer"]]
    if fails:
        lines += [f"Failing samples (evidence; {len(fails)} in all, the first 6):", "",
                  "| round | prompt #.sample | sub-aspect | prompt | tools read | drawn (renderer) | tools | renderer |",
                  "| ---: | --- | --- | --- | --- | --- | --- | --- |"]
        for rnd, s in fails[:6]:
            text, tool_read, drawn = readings.get((s["prompt"], s["sample"]), ("?", "?", "?"))
            lines.append(f"| {rnd} | {s['prompt']}.{s['sample']} | {s['aspect']} | {text} | {tool_read} | {drawn} | "
                         f"{'pass' if s['tool'] else 'fail'} | {'pass' if s['renderer'] else 'fail'} |")
        lines.append("")
    if mismatches:
        lines += [f"_{mismatches} re-drawn sample(s) read to another verdict than the benchmark recorded "
                  f"(the page's tool pass vs the stage's batch; within the {MAX_REREAD_MISMATCH:.0%} tolerance)._", ""]
    return lines


def _code(text: str) -> str:
    return " ".join(str(text).split()).replace("`", "'").replace("|", "/")[:80]


def examples_block(examples: list[dict], links: dict[str, str], readings: dict, mismatches: dict[str, int]) -> str:
    lines = [f"<!-- generated by `python -m paperworks.eval_agent.page` from {EXAMPLES} -->",
             "Sessions chosen by rule (`report.pick_examples`), not by hand; samples drawn again from their benchmark seeds "
             "and read again by the fitted tools. Everything shown is synthetic.", ""]
    for e in examples:
        key = slug(e)
        lines += example_block(e, links.get(key), readings.get(key, {}), mismatches.get(key, 0))
    return "\n".join(lines).rstrip() + "\n"


def contact_sheet_for(e: dict, images: dict[tuple[int, int], np.ndarray]):
    """One row per round: the round's samples with a green (pass) / red (fail) / orange (tools ≠ renderer) frame."""
    from paperworks.core.render.sheet import contact_sheet

    rows, captions, borders, labels = [], [], [], []
    for r in e["rounds"]:
        rows.append([images[(s["prompt"], s["sample"])] for s in r["samples"]])
        borders.append([DISAGREE if s["tool"] != s["renderer"] else PASS if s["tool"] else FAIL for s in r["samples"]])
        labels.append([f"#{s['prompt']}.{s['sample']} {'pass' if s['tool'] else 'FAIL'}" for s in r["samples"]])
        span = r["levels"][0] if r["levels"][0] == r["levels"][1] else f"{r['levels'][0]}-{r['levels'][1]}"
        captions.append(f"round {r['round']}: +{len(r['samples'])} ({', '.join(map(str, r['allocation']))}) n={r['n']}; "
                        f"est {r['estimate']:.2f} [{r['low']:.2f}, {r['high']:.2f}] = {span}; {r['decision']}")
    scale = 2 if max(len(r) for r in rows) <= 4 else 1  # default batches of 8: 64-px tiles keep the PNG small
    return contact_sheet(rows, captions, borders, labels, scale=scale, caption_width=230)


def _f(v, digits: int = 3) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def measured_block(m: dict, open_record: dict | None = None) -> str:
    """The run's arms, stops, calibration, modes and planner refusals from metrics/eval_agent.json (never typed by hand)."""
    s = m["summary"]
    lines = [f"<!-- generated by `python -m paperworks.eval_agent.page` from {METRICS} (profile: {m['profile']}) -->", "",
             "| role / arm | exact | within one | abs. error | samples | share of the full benchmark |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for key, row in s.items():
        if "/" in key:
            lines.append(f"| {key} | {_f(row['exact'])} | {_f(row['within_one'])} | {_f(row['abs_error'])} | "
                         f"{row['samples']:.1f} | {row['sample_share']:.1%} |")
    stops = ", ".join(f"{k}: {v}" for k, v in sorted(s["agent_stops"].items()))
    lines += ["", f"Agent stops (all sessions): {stops}. Level moved by the tools' verdicts instead of the renderer's: "
                  + ", ".join(f"{k} {v:.1%}" for k, v in s["tool_level_shift"].items()) + "."]
    cal = s.get("calibration")
    if cal:
        lines += ["", f"Calibration (each look's interval at {cal['look_confidence']:.3f}; an interval stop states its level at "
                      f"{cal['family_confidence']:g}):", "",
                  "| role | sessions | interval covers the pool's score | … the truth's score | interval stops | their level = truth | = full rerun's |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for role in ("in_family", "held_out"):
            c = cal[role]
            lines.append(f"| {role} | {c['sessions']} | {_f(c['covers_pool_score'])} | {_f(c['covers_truth_score'])} | "
                         f"{c['stated_level_sessions']} | {_f(c['stated_level_is_truth'])} | {_f(c['stated_level_is_rerun_level'])} |")
    modes = m.get("modes")
    if modes:
        lines += ["", f"Modes (in-family; recommendation: {modes['needs_per_repeat']} weight vectors per repeat):", "",
                  "| arm | pairwise comparison accuracy | recommendation top-1 hit | recommendation regret |", "| --- | ---: | ---: | ---: |"]
        for arm, row in modes.items():
            if isinstance(row, dict):
                lines.append(f"| {arm} | {_f(row['comparison_accuracy'])} | {_f(row['recommendation_hit'])} | "
                             f"{_f(row['recommendation_regret'], 4)} |")
    lines += open_query_lines(m.get("open_queries"), open_record or {})
    cs = m.get("calibration")
    if cs:
        lines += ["", f"Stated confidence (claim `calibration_stated_level`: a level stated at {cs['stated_confidence']:g} should be "
                      f"the truth's at least {cs['stated_confidence'] - cs['margin']:g} of the time):", "",
                  "| role | levels stated (interval stops) | = truth (run a) | = the pool's full level (run b) |", "| --- | ---: | ---: | ---: |"]
        for role in ("in_family", "held_out"):
            c = cs[role]
            lines.append(f"| {role} | {c['stated']} | {_f(c['level_is_truth'])} | {_f(c['level_is_pool_level'])} |")
    at = m.get("attribution")
    if at:
        seed_note = f" (trained planner: training draw seed {at['planner_seed']})" if "planner_seed" in at else ""
        lines += ["", f"Errors (level ≠ the renderer's full-benchmark level) and who made them{seed_note} — sequential: trained planner "
                      "(the scripted one is right on the same tool verdicts) → tools (the scripted one replayed with the "
                      "renderer's verdicts is right) → sampling and stopping (still wrong):", "",
                  "| role | planner | sessions | right | trained planner | tools | sampling and stopping |", "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
        for role in ("in_family", "held_out"):
            a = at[role]
            for who in ("scripted", "trained"):
                if who in a:
                    c = a[who]
                    lines.append(f"| {role} | {who} | {a['sessions']} | {c['right']} | {c.get('trained planner', '–')} | "
                                 f"{c['tools']} | {c['sampling and stopping']} |")
    pl = m.get("planner", {})
    if pl.get("refusals") is not None:
        kinds = "; ".join(f"{k} {v['first_try']} first tries / {v['retry']} retries" for k, v in pl["refusals"].items()) or "none"
        draws = f" of its {pl['draws']} training draws" if pl.get("draws") else ""
        lines += ["", f"Trained planner's refused actions by kind (every session{draws}): {kinds}."]
    return "\n".join(lines) + "\n"


OPEN_QUERIES = Path("plots/eval_agent/open_queries.json")


def read_open_queries(path: Path = OPEN_QUERIES) -> dict:
    """The evaluate stage's per-query record (absent before a run that has open queries: an empty record)."""
    if not path.exists():
        return {}
    rec = read_json(path)
    if not isinstance(rec, dict) or not isinstance(rec.get("queries"), dict):
        raise ArtifactError(f"{path}: no 'queries' table; rerun eval_agent_evaluate")
    return rec


def open_query_lines(summary: dict | None, record: dict) -> list[str]:
    """Open-ended queries: the arms on every slice, and per query its slice, levels and the agent's agreement."""
    if not summary:
        return []
    lines = ["", "Open-ended queries (each a slice of one dimension's prompt file; truth = the full benchmark on the slice):", "",
             "| role / arm | exact | within one | abs. error | samples |", "| --- | ---: | ---: | ---: | ---: |"]
    for key, row in summary.items():
        if "/" in key:
            lines.append(f"| {key} | {_f(row['exact'])} | {_f(row['within_one'])} | {_f(row['abs_error'])} | {row['samples']:.1f} |")
    ev = [(r, summary.get(f"evidence_{r}")) for r in ("in_family", "held_out")]
    ev = [f"{r} {e['renderer_also_fails']} of {e['failing_shown']} ({_f(e['precision'])})" for r, e in ev if e and e["failing_shown"]]
    if ev:
        lines += ["", "Evidence precision (failing samples the agent shows that the renderer's truth also fails): " + ", ".join(ev) + "."]
    qs, per = record.get("queries", {}), record.get("per_query", {})
    if qs:
        lines += ["", "| query | slice | prompts | samples per run | levels (population quintiles) | agent exact (in-family) | within one | agent samples |",
                  "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: |"]
        for key, q in qs.items():
            if q.get("prompts", 0) == 0:
                lines.append(f"| {q['query']} | {key} | 0 | – | {q.get('skipped', '')} | – | – | – |")
                continue
            r = per.get(key, {})
            edges = " · ".join(f"{e:.2f}" for e in q["edges"][1:-1])
            lines.append(f"| {q['query']} | {key} | {q['prompts']} | {q['samples']} | {edges} | {_f(r.get('agent_exact'))} | "
                         f"{_f(r.get('agent_within_one'))} | {r.get('samples', '–')} |")
    return lines


def inject_between(text: str, block: str, start: str, end: str) -> str:
    if start not in text or end not in text:
        raise ValueError(f"{PAGE}: markers {start} … {end} not found")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{block}{end}{tail}"


def inject(text: str, block: str) -> str:
    return inject_between(text, block, START, END)


def main() -> None:
    import torch

    from paperworks.core.io import load_safetensors
    from paperworks.core.params import global_seed, load_section, read_params_file
    from paperworks.core.seeding import derive_seed
    from paperworks.eval_agent.artifacts import TOOL_WEIGHTS, read_zoo
    from paperworks.eval_agent.params import Params
    from paperworks.eval_agent.tools import ToolHeads, read_images
    from paperworks.eval_agent.world import check, draw

    torch.set_num_threads(1)
    p = load_section("eval_agent", Params)
    raw = read_params_file()
    seed = global_seed(raw)
    record = read_json(EXAMPLES)
    examples = record.get("sessions") if isinstance(record, dict) else None
    if not isinstance(examples, list) or not all(isinstance(e, dict) and "rounds" in e for e in examples or [None]):
        raise ArtifactError(f"{EXAMPLES}: no example sessions with rounds; rerun eval_agent_evaluate")
    metrics = read_json(METRICS)
    if metrics.get("profile") != raw.get("profile"):
        raise ArtifactError(f"metrics/eval_agent.json is from profile {metrics.get('profile')!r} but params.yaml is "
                            f"{raw.get('profile')!r}: switch the profile back or rerun")
    zoo, prompts = read_zoo()
    gens = {g.name: g for g in zoo}
    by_key = {(b.dim, b.index): b for b in prompts}
    model = ToolHeads(p.tools.hidden)
    model.load_state_dict(load_safetensors(TOOL_WEIGHTS, {k: tuple(v.shape) for k, v in model.state_dict().items()}))
    model.eval()
    nm, qt = p.zoo.noise_max, p.zoo.quality_threshold
    IMAGES.mkdir(parents=True, exist_ok=True)
    links, readings, mismatches = {}, {}, {}
    for e in examples:
        e.setdefault("max_rounds", p.agent.max_rounds)
        key, g = slug(e), gens.get(e["model"])
        if g is None:
            raise ArtifactError(f"{EXAMPLES}: model {e['model']!r} is not in the zoo; rerun the pipeline")
        samples = [s for r in e["rounds"] for s in r["samples"]]
        images, reads, recorded, reread = {}, {}, [], []
        drawn = []
        for s in samples:
            b = by_key.get((e["dim"], s["prompt"]))
            if b is None:
                raise ArtifactError(f"{EXAMPLES}: prompt {e['dim']}/{s['prompt']} is not in the zoo's prompt file")
            img, truth = draw(g, e["dim"], b.prompt, derive_seed(seed, "eval_agent", "bench", g.name, e["run"], e["dim"], b.index,
                                                                 s["sample"]), nm, p.zoo.image_size)
            images[(s["prompt"], s["sample"])] = img
            drawn.append((b, s, truth))
        parses = read_images(model, [images[(s["prompt"], s["sample"])] for s in samples], nm)
        for (b, s, truth), q in zip(drawn, parses):
            recorded.append(s["tool"])
            reread.append(int(check(e["dim"], b.prompt, q, qt)))
            reads[(s["prompt"], s["sample"])] = (b.prompt.text(), describe(q), describe(truth))
        mismatches[key] = check_reread(recorded, reread, f"{EXAMPLES}: {key}")
        readings[key] = reads
        contact_sheet_for(e, images).save(IMAGES / f"{key}.png", format="PNG")
        links[key] = f"eval_agent/{key}.png"
    # sheets from an earlier run (another profile or seed picks other sessions) would sit beside the
    # page unlinked; the page shows exactly this run's examples
    for stale in set(IMAGES.glob("*.png")) - {IMAGES / f"{k}.png" for k in links}:
        stale.unlink()
    text = inject(PAGE.read_text(), examples_block(examples, links, readings, mismatches))
    PAGE.write_text(inject_between(text, measured_block(metrics, read_open_queries()), MEASURED_START, MEASURED_END))
    print(f"{PAGE}: {len(examples)} example sessions ({', '.join(e['kind'] for e in examples)}); "
          f"re-read mismatches {sum(mismatches.values())}")


if __name__ == "__main__":
    main()
