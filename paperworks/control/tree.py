"""The distilled policy: Pole Urgency features and a regression tree kept as plain arrays.

Trees are saved as JSON arrays (sklearn's ``tree_``), never pickled, and predicted with
a small numpy walk (much faster per single state than ``sklearn.predict``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from paperworks.control.policies import OBS_NAMES
from paperworks.core.io import ArtifactError, read_json, write_json


def pole_urgency(obs: np.ndarray, kd: float) -> np.ndarray:
    """P_urgency = θ + Kd·θ̇ (paper §III-C): a PD-like combination of pole angle and rate."""
    obs = np.asarray(obs, dtype=np.float64)
    return obs[..., 1] + kd * obs[..., 3]


def tree_features(obs: np.ndarray, kd: float | None) -> np.ndarray:
    """Raw state, plus Pole Urgency as a fifth column when ``kd`` is not None."""
    obs = np.atleast_2d(np.asarray(obs, dtype=np.float64))
    if kd is None:
        return obs
    return np.column_stack([obs, pole_urgency(obs, kd)])


def feature_names(kd: float | None) -> list[str]:
    return list(OBS_NAMES) + ([f"urgency(kd={kd:g})"] if kd is not None else [])



@dataclass(frozen=True)
class TreePolicy:
    """A fitted regression tree as plain arrays (sklearn's ``tree_``), no pickle.

    Splits compare float32 features, as sklearn does, so predictions match exactly.
    """

    left: np.ndarray
    right: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    value: np.ndarray
    kd: float | None
    depth: int

    @classmethod
    def from_sklearn(cls, reg, kd: float | None) -> "TreePolicy":
        t = reg.tree_
        return cls(
            left=t.children_left.astype(np.int64), right=t.children_right.astype(np.int64),
            feature=t.feature.astype(np.int64), threshold=t.threshold.astype(np.float64),
            value=t.value[:, 0, 0].astype(np.float64), kd=kd, depth=int(reg.get_depth()),
        )

    @property
    def n_leaves(self) -> int:
        return int((self.left == -1).sum())

    def leaf(self, x32: np.ndarray) -> int:
        node = 0
        left, right, feature, threshold = self.left, self.right, self.feature, self.threshold
        while left[node] != -1:
            node = left[node] if x32[feature[node]] <= threshold[node] else right[node]
        return node

    def __call__(self, obs: np.ndarray) -> float:
        x32 = tree_features(obs, self.kd)[0].astype(np.float32)
        return float(self.value[self.leaf(x32)])

    def batch(self, obs: np.ndarray) -> np.ndarray:
        X = tree_features(obs, self.kd).astype(np.float32)
        return np.array([self.value[self.leaf(x)] for x in X])

    def to_dict(self) -> dict:
        return {
            "kd": self.kd, "depth": self.depth,
            "children_left": self.left.tolist(), "children_right": self.right.tolist(),
            "feature": self.feature.tolist(), "threshold": self.threshold.tolist(), "value": self.value.tolist(),
        }

    @classmethod
    def from_dict(cls, d: dict, source: str = "tree") -> "TreePolicy":
        keys = ("children_left", "children_right", "feature", "threshold", "value", "kd", "depth")
        missing = [k for k in keys if k not in d]
        if missing:
            raise ArtifactError(f"{source}: tree misses {missing}")
        arrays = [np.asarray(d[k]) for k in keys[:5]]
        if len({len(a) for a in arrays}) != 1 or len(arrays[0]) == 0:
            raise ArtifactError(f"{source}: tree arrays differ in length {[len(a) for a in arrays]}")
        n = len(arrays[0])
        left, right, feature = (a.astype(np.int64) for a in arrays[:3])
        # sklearn numbers children after their parent: checking that rules out cycles and
        # out-of-range jumps before any walk can loop or index past the arrays
        nodes = np.arange(n)
        inner = left != -1
        if np.any(inner != (right != -1)):
            raise ArtifactError(f"{source}: a node has one child (a leaf needs -1 on both sides)")
        for name, child in (("children_left", left), ("children_right", right)):
            if np.any((child[inner] <= nodes[inner]) | (child[inner] >= n)) or np.any(child[~inner] != -1):
                raise ArtifactError(f"{source}: {name} has a child index outside (its parent, {n})")
        n_features = 4 + (d["kd"] is not None)
        if np.any((feature[inner] < 0) | (feature[inner] >= n_features)):
            raise ArtifactError(f"{source}: feature index outside [0, {n_features}) at a split")
        return cls(left, right, feature, arrays[3].astype(np.float64), arrays[4].astype(np.float64), d["kd"],
                   int(d["depth"]))

    def save(self, path: Path | str) -> None:
        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: Path | str) -> "TreePolicy":
        return cls.from_dict(read_json(path), str(path))

    def rules(self, names: list[str] | None = None) -> str:
        """The tree as nested IF-THEN text (one line per split / leaf)."""
        names = names or feature_names(self.kd)
        lines: list[str] = []

        def walk(node: int, indent: int) -> None:
            pad = "    " * indent
            if self.left[node] == -1:
                lines.append(f"{pad}torque = {self.value[node]:+.3f}")
                return
            cond = f"{names[self.feature[node]]} <= {self.threshold[node]:.4f}"
            lines.append(f"{pad}IF {cond}:")
            walk(int(self.left[node]), indent + 1)
            lines.append(f"{pad}ELSE:  # {names[self.feature[node]]} > {self.threshold[node]:.4f}")
            walk(int(self.right[node]), indent + 1)

        walk(0, 0)
        return "\n".join(lines)


def tree_json_dumps(tree: TreePolicy) -> str:
    return json.dumps(tree.to_dict(), sort_keys=True)
