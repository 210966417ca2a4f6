"""What a pipeline run shows while it works.

* A progress line after every stage: stages done / total, the stage(s) running, elapsed time,
  and an estimate of the time left from the costs recorded by earlier runs
  (``logs/stage_costs.jsonl``, see :mod:`flows.costs`), scheduled on the run's lanes.
* Progress bars inside stages thinned to a periodic log line: tqdm redraws a bar in place
  with carriage returns, and read from a pipe (a Prefect task log, CI) every redraw becomes a
  line of its own; :class:`BarThrottle` keeps one line per bar every ``every_s`` seconds and
  the bar's final line.
"""
from __future__ import annotations

import heapq
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

# tqdm's default format: "<desc>: <pct>%|<bar>| <n>/<total> [<elapsed><<eta>, <rate>]"
TQDM_LINE = re.compile(r"^(?P<desc>.*?):\s+(?P<pct>\d+)%\|.*\|\s*(?P<n>\d+)/(?P<total>\d+)\s*\[")


@dataclass
class BarThrottle:
    """Keep a tqdm line when its bar was not shown for ``every_s`` seconds, or when it completes.

    tqdm prints a finished bar twice (last update, then close): the repeat is dropped. A bar that
    starts again under the same description after finishing counts as a new bar.
    """

    every_s: float = 30.0
    clock: Callable[[], float] = time.monotonic
    _shown: dict[str, tuple[float, bool]] = field(default_factory=dict)  # desc → (last shown, finished)

    def keep(self, line: str) -> bool:
        m = TQDM_LINE.match(line.strip())
        if m is None:
            return True  # not a progress bar: every other line of a stage's output is kept
        desc, now = m["desc"], self.clock()
        finished = m["n"] == m["total"]
        last_shown, was_finished = self._shown.get(desc, (None, False))
        if was_finished:
            if finished:
                return False  # the same final line again
            last_shown = None  # a new bar under the same description
        if finished or last_shown is None or now - last_shown >= self.every_s:
            self._shown[desc] = (now, finished)
            return True
        return False


def with_sibling_costs(stages: Sequence[str], cost: Mapping[str, float]) -> tuple[dict[str, float], set[str]]:
    """``cost`` plus an estimate for each matrix item of ``stages`` that has no record of its own.

    A new item of a ``matrix:`` stage (``warmstart@tiny-3`` after the seeds grew from 3 to 5) has
    no recorded run, but its siblings (``warmstart@tiny-0`` …, the same name before ``@``) usually
    do, and they do the same work on other values. Counting such an item as 0 s made the
    critical-path order start it last: the run of 2026-12-03 ran thirteen 40-s online stages
    before the two 350-s warm starts they did not depend on, and the lanes then idled. The
    estimate is the median of the siblings' recorded costs. Returns the costs and the names
    that were estimated this way (they are not counted as unknown).
    """
    filled = dict(cost)
    estimated: set[str] = set()
    siblings: dict[str, list[float]] = {}
    for name, seconds in cost.items():
        if "@" in name:
            siblings.setdefault(name.split("@", 1)[0], []).append(seconds)
    for s in stages:
        if s in filled or "@" not in s:
            continue
        known = sorted(siblings.get(s.split("@", 1)[0], []))
        if known:
            mid = len(known) // 2
            filled[s] = known[mid] if len(known) % 2 else (known[mid - 1] + known[mid]) / 2
            estimated.add(s)
    return filled, estimated


def critical_path_order(stages: Sequence[str], dag: Mapping[str, Sequence[str]],
                        cost: Mapping[str, float]) -> list[str]:
    """``stages`` (topological order) sorted by the longest recorded-cost path from each to the end.

    List scheduling on parallel lanes finishes soonest when a free lane takes the ready stage that
    heads the longest remaining chain (its own cost plus its longest chain of downstream stages
    among ``stages``), not whichever comes first in the file: started last, a long training
    stage leaves the other lane idle at the end. ``dag`` maps a stage to its upstream stages; a
    stage without a recorded cost counts as 0 s. Ties keep the topological order, so without
    costs the order is unchanged.
    """
    wanted = set(stages)
    downstream: dict[str, list[str]] = {s: [] for s in stages}
    for s in stages:
        for u in dag.get(s, ()):
            if u in wanted:
                downstream[u].append(s)
    chain: dict[str, float] = {}
    for s in reversed(stages):  # every downstream stage comes later in topological order
        chain[s] = cost.get(s, 0.0) + max((chain[d] for d in downstream[s]), default=0.0)
    position = {s: i for i, s in enumerate(stages)}
    return sorted(stages, key=lambda s: (-chain[s], position[s]))


def estimate_left(pending: Sequence[str], running: Mapping[str, float], dag: Mapping[str, Sequence[str]],
                  cost: Mapping[str, float], lanes: int) -> tuple[float, int]:
    """Seconds until the last of ``pending`` finishes if stages take their recorded wall time.

    ``pending`` is in the order a free lane picks from (topological, or :func:`critical_path_order`);
    ``running`` maps each running stage to the seconds it has
    run. The stages are list-scheduled on ``lanes`` (the flow's parallelism): a stage starts once
    its upstream stages are done and a lane is free. A stage without a recorded cost counts as
    0 s, so with any of them (the second return value) the estimate is a lower bound; a running
    stage past its recorded time counts as about to finish.
    """
    lanes = max(1, lanes)
    unknown = sum(1 for s in [*pending, *running] if s not in cost)
    finish: dict[str, float] = {}
    busy: list[tuple[float, str]] = []  # (time the lane frees, stage)
    for stage, elapsed in running.items():
        t = max(cost.get(stage, 0.0) - elapsed, 0.0)
        heapq.heappush(busy, (t, stage))
        finish[stage] = t
    now = 0.0
    waiting = list(pending)
    while waiting:
        while len(busy) >= lanes:  # wait for a lane
            now = max(now, heapq.heappop(busy)[0])
        ready = next((s for s in waiting if all(u in finish and finish[u] <= now for u in dag.get(s, ()) if u in finish or u in waiting)), None)
        if ready is None:  # every waiting stage needs one still running: jump to the next finish
            if not busy:  # cannot happen for a DAG; never loop forever on a bad one
                raise ValueError(f"stages wait on each other: {waiting}")
            now = max(now, heapq.heappop(busy)[0])
            continue
        waiting.remove(ready)
        finish[ready] = now + cost.get(ready, 0.0)
        heapq.heappush(busy, (finish[ready], ready))
    return max(finish.values(), default=0.0), unknown


def clock_text(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def progress_line(done: int, total: int, running: Mapping[str, float], elapsed: float,
                  left: tuple[float, int] | None) -> str:
    """``3/20 stages done · running a (1:02), b (0:10) · elapsed 4:10 · left ≈ 12:30``."""
    parts = [f"{done}/{total} stages done"]
    if running:
        parts.append("running " + ", ".join(f"{s} ({clock_text(t)})" for s, t in running.items()))
    parts.append(f"elapsed {clock_text(elapsed)}")
    if left is not None:
        seconds, unknown = left
        note = f" ({unknown} stage{'s' if unknown != 1 else ''} without a recorded cost)" if unknown else ""
        if unknown and seconds == 0:  # nothing known to add up: a bound of 0:00 would read as "done"
            parts.append(f"left unknown{note}")
        else:
            parts.append(f"left {'≥ ' if unknown else '≈ '}{clock_text(seconds)}{note}")
    return " · ".join(parts)
