"""The detector half of the tools (no learning) and the artifact readers' checks."""
import json

import numpy as np
import pandas as pd
import pytest

from paperworks.core.io import ArtifactError, write_json, write_parquet
from paperworks.core.render.scene import PromptItem, ScenePrompt
from paperworks.eval_agent.artifacts import OUTCOME_SCHEMA, PROMPT_SCHEMA, read_outcomes, read_zoo
from paperworks.eval_agent.tools import components, head_accuracy
from paperworks.eval_agent.world import Generator, draw

CLEAN = Generator("g", "A", "in_family", 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0)


@pytest.mark.parametrize("family", ["A", "B", "C"])
def test_detector_finds_each_object_at_its_place(family):
    g = Generator(**{**CLEAN.__dict__, "family": family, "noise_mean": 8.0, "noise_spread": 2.0})
    prompt = ScenePrompt(items=(PromptItem(shape="circle", colour="red", count=3, size="large"),
                                PromptItem(shape="square", colour="blue", size="large")))
    for seed in range(3):
        img, truth, objects = draw(g, "count", prompt, seed, 28.0, with_objects=True)
        comps, _, _ = components(img)
        assert len(comps) == 4
        for o in objects:  # every object has a component centred within 3 % of the picture
            assert min(np.hypot(c["x"] - o.x, c["y"] - o.y) for c in comps) < 0.03


def test_head_accuracy_of_the_truth_is_one_and_drops_with_a_wrong_count():
    g = Generator(**{**CLEAN.__dict__, "noise_mean": 5.0})
    prompt = ScenePrompt(items=(PromptItem(shape="circle", colour="red", size="large"), PromptItem(shape="cross", colour="green", size="large")))
    truths = [draw(g, "colour", prompt, s, 28.0)[1] for s in range(4)]
    assert head_accuracy(truths, truths, 12.0) == {"count": 1.0, "colour": 1.0, "relation": 1.0, "quality": 1.0}
    wrong = [type(t)(t.count + np.eye(5, dtype=np.int64)[2], t.colour, t.x, t.y, t.noise) for t in truths]
    assert head_accuracy(wrong, truths, 12.0)["count"] == 0.0


def test_corrupted_artifacts_fail_naming_the_file(tmp_path):
    write_json(tmp_path / "generators.json", {"generators": [{"name": "g"}]})
    write_parquet(tmp_path / "prompts.parquet", pd.DataFrame(columns=PROMPT_SCHEMA.names), PROMPT_SCHEMA)
    with pytest.raises(ArtifactError, match="generators.json"):
        read_zoo(tmp_path)
    write_json(tmp_path / "generators.json", {"generators": [CLEAN.__dict__]})
    bad = pd.DataFrame([{"dim": "colour", "index": 0, "stratum": 0, "prompt": json.dumps({"items": []}), "text": ""}])
    write_parquet(tmp_path / "prompts.parquet", bad, PROMPT_SCHEMA)
    with pytest.raises(ArtifactError, match="prompt colour/0"):
        read_zoo(tmp_path)
    rows = pd.DataFrame([("g", "A", "in_family", "a", "colour", 0, 0, 0, 2, 1)], columns=OUTCOME_SCHEMA.names).astype({"tool": "int8", "truth": "int8"})
    write_parquet(tmp_path / "outcomes.parquet", rows, OUTCOME_SCHEMA)
    with pytest.raises(ArtifactError, match="not 0/1"):
        read_outcomes(tmp_path)
