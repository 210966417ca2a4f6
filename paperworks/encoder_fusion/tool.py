"""A callable segmentation tool: a specialist's dense head → region masks → region text.

The paper's agentic layer calls external specialist models (e.g. organ segmentation) and feeds what
they return back to the language model. Here the tool is the modality's specialist (``models.Specialist``:
its encoder at full resolution and the 1 × 1-conv dense head trained on per-cell lesion labels):

1. per cell of the g × g grid, the dense head's class (none, or a (type, size) pair — the world's
   ``cls = 1 + 2·type + (size == "large")``);
2. per named region (the 2 × 2 quadrants of the grid, region r = 2·row + col) a boolean mask of its
   lesion cells;
3. per region with lesion cells a finding: the type and size of the class covering most of its cells
   (ties: the larger summed probability), and one canonical sentence per finding, the wording the
   report grammar (``reports.sentence``, no paraphrase) and the finding tagger already know.

The tool can run on images (:meth:`SegmentationTool.__call__`) or on the specialist's cached token grid
(:meth:`SegmentationTool.from_tokens`: the dense head is a 1 × 1 conv, so on N × g² × C tokens it is the
same linear map — a test checks both paths agree).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from paperworks.core.vision.encoders import frames_to_tensor
from paperworks.encoder_fusion.models import Specialist
from paperworks.encoder_fusion.reports import sentence
from paperworks.encoder_fusion.world import N_DENSE, REGIONS, SIZES, TYPES, Finding, severity

TOOL_PREFIX = "Segmentation tool:"
NO_FINDING = "no lesion segmented."


def class_finding(cls: int) -> tuple[int, str]:
    """Dense class (1 … N_DENSE − 1) → (type index, size)."""
    if not 1 <= cls < N_DENSE:
        raise ValueError(f"dense class {cls}: lesion classes are 1 … {N_DENSE - 1}")
    t, large = divmod(cls - 1, 2)
    return t, SIZES[large]


def region_cells(grid: int) -> list[np.ndarray]:
    """Per region (2 × 2 quadrants, r = 2·row + col): the flat indices of its cells in a row-major g × g grid."""
    ys, xs = np.divmod(np.arange(grid * grid), grid)
    r = (ys * 2 // grid) * 2 + xs * 2 // grid
    return [np.flatnonzero(r == k) for k in range(4)]


@dataclass(frozen=True)
class ToolResult:
    """One case: the per-cell class map (g × g), the per-region lesion masks (4 × g × g), findings and text."""

    classes: np.ndarray
    masks: np.ndarray
    findings: tuple[Finding, ...]
    text: str


def region_text(findings: tuple[Finding, ...] | list[Finding], modality: str) -> str:
    """The tool's answer as text: one canonical sentence per segmented finding, region order."""
    if not findings:
        return f"{TOOL_PREFIX} {NO_FINDING}"
    rng = np.random.default_rng(0)  # paraphrase rate 0: the canonical wording, the rng is never drawn from
    return f"{TOOL_PREFIX} " + " ".join(sentence(f, f.region, rng, 0.0) for f in findings)


def findings_from_probs(probs: np.ndarray, modality: str) -> tuple[np.ndarray, np.ndarray, tuple[Finding, ...]]:
    """``probs``: g² × N_DENSE class probabilities of one case → (classes g × g, masks 4 × g × g, findings)."""
    g = int(round(probs.shape[0] ** 0.5))
    if g * g != probs.shape[0] or probs.shape[1] != N_DENSE:
        raise ValueError(f"probabilities of shape {probs.shape}: expected g² × {N_DENSE}")
    classes = probs.argmax(1)
    masks = np.zeros((4, g * g), dtype=bool)
    findings = []
    for r, cells in enumerate(region_cells(g)):
        lesion = cells[classes[cells] > 0]
        masks[r, lesion] = True
        if not len(lesion):
            continue
        counts = np.bincount(classes[lesion], minlength=N_DENSE)
        mass = probs[lesion].sum(0)
        cls = max(range(1, N_DENSE), key=lambda c: (counts[c], mass[c]))
        t, size = class_finding(cls)
        findings.append(Finding(REGIONS[modality][r], TYPES[modality][t], size, severity(t, size)))
    return classes.reshape(g, g), masks.reshape(4, g, g), tuple(findings)


class SegmentationTool:
    """``tool(images)`` → one :class:`ToolResult` per image, from a trained specialist of ``modality``."""

    def __init__(self, specialist: Specialist, modality: str) -> None:
        if modality not in REGIONS:
            raise ValueError(f"modality '{modality}': allowed {', '.join(REGIONS)}")
        self.specialist = specialist.eval()
        self.modality = modality

    def _results(self, probs: torch.Tensor) -> list[ToolResult]:
        out = []
        for p in probs.numpy():
            classes, masks, findings = findings_from_probs(p, self.modality)
            out.append(ToolResult(classes, masks, findings, region_text(findings, self.modality)))
        return out

    @torch.no_grad()
    def __call__(self, images: np.ndarray) -> list[ToolResult]:
        """``images``: N × S × S × 3 uint8 (the modality's full-resolution view)."""
        logits = self.specialist(frames_to_tensor(images))                  # N × N_DENSE × g × g
        return self._results(F.softmax(logits.flatten(2).transpose(1, 2), dim=-1))

    @torch.no_grad()
    def from_tokens(self, tokens: torch.Tensor) -> list[ToolResult]:
        """``tokens``: the specialist's cached N × g² × C token grid (``models.token_grid``)."""
        w = self.specialist.dense.weight[:, :, 0, 0]                        # N_DENSE × C
        logits = tokens @ w.T + self.specialist.dense.bias
        return self._results(F.softmax(logits, dim=-1))
