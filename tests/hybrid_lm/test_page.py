"""The track page's generated results block states what the metrics say (chance from the profile's corpus)."""
from __future__ import annotations

from paperworks.hybrid_lm.page import results_block


def metrics(chance: float) -> dict:
    row = {"active_params": 257472, "heldout_loss": 0.8, "mqar_ctx1_acc": 0.99, "mqar_ctx8_acc": 0.9, "mqar_pairs16_acc": 0.95}
    return {"profile": "default", "claims": [], "summary": {"hybrid": row},
            "grid": {"variants": ["hybrid"], "seeds": [0, 1], "tokens_per_run": 2048000, "kda_head_capacity": 32,
                     "recall_chance": chance}}


def test_results_block_states_the_profiles_chance_and_columns():
    block = results_block(metrics(1 / 32), None)
    assert "chance 1/n_values = 0.031" in block and "0.016" not in block
    assert "| MQAR 8× |" in block and "| MQAR 16 pairs |" in block and "2,048,000 training tokens per run" in block
    assert "chance 1/n_values = 0.004" in results_block(metrics(1 / 256), None)
