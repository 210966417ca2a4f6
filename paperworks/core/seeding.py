"""Seeding: one global seed, stable per-stage seeds derived from it."""
from __future__ import annotations

import hashlib
import os
import random
import sys

import numpy as np


def derive_seed(global_seed: int, *parts: object) -> int:
    """A stable 31-bit seed for (global seed, stage, item...) — independent of Python's hash salt."""
    key = "/".join([str(global_seed), *map(str, parts)]).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:4], "little") & 0x7FFFFFFF


def seed_everything(seed: int) -> np.random.Generator:
    """Seed random, numpy and torch (deterministic kernels where available); return a numpy Generator."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    try:
        import torch

        torch.manual_seed(seed)
        # The same switch as torch.use_deterministic_algorithms(True, warn_only=True), minus its
        # `import torch._inductor.config` (≈ 1.1 s in every stage process) made only to set a
        # torch.compile flag; nothing here compiles. Set that flag too when inductor is loaded.
        torch._C._set_deterministic_algorithms(True, warn_only=True)
        inductor_config = sys.modules.get("torch._inductor.config")
        if inductor_config is not None:
            inductor_config.deterministic = True
    except ImportError:  # torch is a hard dependency, but seeding data-only code should not need it
        pass
    return np.random.default_rng(seed)
