"""The evaluate stage's checked inputs from the tools and planner stages (kept apart from ``artifacts``, which every
stage of the track imports, so that these checks do not make the upstream stages stale)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from paperworks.core.io import ArtifactError, read_json
from paperworks.eval_agent.artifacts import TOOLS


ACTION_KEYS = ("records", "decisions", "invalid", "retried_ok", "fallbacks", "refusals", "invalid_log")


def read_actions(rollouts: pd.DataFrame, root: Path) -> dict:
    """The planner stage's action record, checked against the rollouts: its totals must be the per-session counts' sums
    and its refusals per kind must add up to the invalid first tries (first try) and the fallbacks (refused retries)."""
    path = root / "actions.json"
    a = read_json(path)
    missing = [k for k in ACTION_KEYS if not isinstance(a, dict) or k not in a]
    if missing:
        raise ArtifactError(f"{path}: missing keys {missing} (expected {list(ACTION_KEYS)}); rerun eval_agent_planner")
    for key in ("decisions", "invalid", "retried_ok", "fallbacks"):
        if a[key] != int(rollouts[key].sum()):
            raise ArtifactError(f"{path}: {key} = {a[key]} but rollouts.parquet counts {int(rollouts[key].sum())}; "
                                f"the two files come from different runs — rerun eval_agent_planner")
    try:
        first = sum(int(v["first_try"]) for v in a["refusals"].values())
        retry = sum(int(v["retry"]) for v in a["refusals"].values())
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise ArtifactError(f"{path}: refusals is not a {{kind: {{first_try, retry}}}} table ({e!r})") from None
    if first != a["invalid"] or retry != a["fallbacks"]:
        raise ArtifactError(f"{path}: refusals count {first} first tries / {retry} retries, but invalid = {a['invalid']}, "
                            f"fallbacks = {a['fallbacks']}")
    return a


def read_tool_accuracy(root: Path = TOOLS) -> dict:
    """Per family and head: the tools' accuracy on renders of generators they never saw (families A, B, C)."""
    path = root / "accuracy.json"
    a = read_json(path)
    fams = a.get("per_family") if isinstance(a, dict) else None
    if not isinstance(fams, dict) or not fams or not all(isinstance(v, dict) and all(isinstance(x, (int, float)) and 0 <= x <= 1
                                                                                     for x in v.values()) for v in fams.values()):
        raise ArtifactError(f"{path}: per_family must map each family to its heads' accuracies in [0, 1]; rerun eval_agent_tools")
    return a
