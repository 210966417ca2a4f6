"""Track hybrid_lm (paper 08): KDA + gated MLA hybrid vs dense attention, per-channel vs per-head
gating, Quantile Balancing vs an auxiliary loss, on a corpus with known structure."""
from pathlib import Path

DATA = Path("data/hybrid_lm")
MODELS = Path("models/hybrid_lm")
PLOTS = Path("plots/hybrid_lm")
METRICS = Path("metrics/hybrid_lm.json")
