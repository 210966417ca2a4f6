"""Findings reports and the region-grounded (RoI) report metric, usable on its own.

- :func:`realise` writes a report from findings with paraphrase (templates, synonyms, order) and
  normal-region negations, at a stated rate.
- :class:`FindingTagger` is the finding extractor: four logistic regressions over word 1–2-grams
  (polarity, region, type, size), *trained* on a separate annotated set of sentences — never the
  generator's truth for the reports it scores.
- :func:`score` is the RoI metric: ``score(report, reference, roi, tagger)`` → matched / missed /
  hallucinated findings (matched on region + type) and a GREEN-like score
  W(matched) / (W(matched) + W(missed) + W(hallucinated)), an error inside the RoI weighing
  ``roi_weight`` (3 by default), any other 1.
- Baselines on the same pair: BLEU-4 (smoothed, own code), ROUGE-L F1 (LCS, own code),
  entity-F1 (RadGraph-like: F1 of extracted (region, type, size) tuples, no RoI) and label-F1
  (CheXbert-like: F1 of the finding types present, no regions). MiniLM cosine lives in the panel stage.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.linear_model import LogisticRegression

from paperworks.encoder_fusion.world import REGIONS, SIZES, TYPES, Finding, severity

REGION_SYNONYMS = {r: (r, r.replace("zone", "lung")) for r in REGIONS["xray"]} | \
                  {r: (r, r.replace("upper", "top").replace("lower", "bottom")) for r in REGIONS["path"]}
TYPE_SYNONYMS = {"nodule": ("nodule", "nodular lesion"), "opacity": ("opacity", "airspace opacity"),
                 "atypical nuclei": ("atypical nuclei", "nuclear atypia"), "necrosis": ("necrosis", "necrotic focus")}
SIZE_SYNONYMS = {"small": ("small", "tiny"), "large": ("large", "sizeable")}
POSITIVE = ("{size} {type} in the {region}.", "The {region} shows a {size} {type}.",
            "There is a {size} {type} in the {region}.", "{region}: {size} {type}.")
NEGATIVE = ("No lesion in the {region}.", "The {region} is clear.", "No abnormality seen in the {region}.")


def _pick(options: tuple[str, ...], rng: np.random.Generator, paraphrase_rate: float) -> str:
    """The canonical (first) option, or with probability ``paraphrase_rate`` one of the others."""
    if len(options) > 1 and rng.random() < paraphrase_rate:
        return options[1 + int(rng.integers(0, len(options) - 1))]
    return options[0]


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def sentence(f: Finding | None, region: str, rng: np.random.Generator, paraphrase_rate: float) -> str:
    """One sentence: a finding, or (``f`` None) the negation for a normal region."""
    reg = _pick(REGION_SYNONYMS[region], rng, paraphrase_rate)
    if f is None:
        return _cap(_pick(NEGATIVE, rng, paraphrase_rate).format(region=reg))
    return _cap(_pick(POSITIVE, rng, paraphrase_rate).format(
        region=reg, type=_pick(TYPE_SYNONYMS[f.type], rng, paraphrase_rate), size=_pick(SIZE_SYNONYMS[f.size], rng, paraphrase_rate)))


def realise(findings: tuple[Finding, ...] | list[Finding], modality: str, rng: np.random.Generator, paraphrase_rate: float,
            negations: int = 1) -> str:
    """A report: one sentence per finding, ``negations`` normal regions stated clear, order shuffled at the paraphrase rate."""
    taken = {f.region for f in findings}
    normal = [r for r in REGIONS[modality] if r not in taken]
    chosen = [normal[i] for i in sorted(rng.choice(len(normal), size=min(negations, len(normal)), replace=False))] if normal else []
    parts = [sentence(f, f.region, rng, paraphrase_rate) for f in findings] + [sentence(None, r, rng, paraphrase_rate) for r in chosen]
    if rng.random() < paraphrase_rate:
        parts = [parts[i] for i in rng.permutation(len(parts))]
    return " ".join(parts) if parts else "No abnormality seen."


def split_sentences(report: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=\.)\s+", report.strip()) if s.strip()]


# ------------------------------------------------------------------ the finding tagger
def annotated_sentences(n: int, seed: int, paraphrase_rate: float = 0.5) -> tuple[list[str], list[dict]]:
    """A separate annotated set: random single sentences with their labels (polarity, region, type, size)."""
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for _ in range(n):
        m = ("xray", "path")[int(rng.integers(0, 2))]
        region = REGIONS[m][int(rng.integers(0, 4))]
        if rng.random() < 0.3:
            texts.append(sentence(None, region, rng, paraphrase_rate))
            labels.append({"polarity": "negative", "region": region, "type": "none", "size": "none"})
        else:
            t = int(rng.integers(0, 2))
            size = SIZES[int(rng.integers(0, 2))]
            f = Finding(region, TYPES[m][t], size, severity(t, size))
            texts.append(sentence(f, region, rng, paraphrase_rate))
            labels.append({"polarity": "positive", "region": region, "type": f.type, "size": size})
    return texts, labels


FIELDS = ("polarity", "region", "type", "size")


class FindingTagger:
    """Sentence → Finding or None: one logistic regression per field over binary word 1–2-grams."""

    def __init__(self) -> None:
        self.vectorizer = CountVectorizer(ngram_range=(1, 2), binary=True, lowercase=True, token_pattern=r"[a-z]+")
        self.models: dict[str, LogisticRegression] = {}

    def fit(self, texts: list[str], labels: list[dict]) -> "FindingTagger":
        x = self.vectorizer.fit_transform(texts)
        for k in FIELDS:
            y = [lab[k] for lab in labels]
            if len(set(y)) < 2:
                raise ValueError(f"tagger field '{k}': the annotated set has a single label {set(y)}")
            self.models[k] = LogisticRegression(max_iter=2000, C=10.0).fit(x, y)
        return self

    def tag(self, sentences: list[str]) -> list[dict]:
        if not sentences:
            return []
        x = self.vectorizer.transform(sentences)
        cols = {k: self.models[k].predict(x) for k in FIELDS}
        return [{k: str(cols[k][i]) for k in FIELDS} for i in range(len(sentences))]

    def extract(self, report: str) -> list[Finding]:
        """The positive findings of a report (one per region + type; the first wins)."""
        out, seen = [], set()
        for lab in self.tag(split_sentences(report)):
            if lab["polarity"] != "positive" or lab["type"] == "none" or lab["size"] == "none":
                continue
            if (lab["region"], lab["type"]) not in seen:
                seen.add((lab["region"], lab["type"]))
                out.append(Finding(lab["region"], lab["type"], lab["size"], 0))
        return out

    def field_accuracy(self, texts: list[str], labels: list[dict]) -> float:
        """Share of sentences whose four fields are all right (negations: polarity and region)."""
        pred = self.tag(texts)
        ok = [p["polarity"] == t["polarity"] and p["region"] == t["region"]
              and (t["polarity"] == "negative" or (p["type"] == t["type"] and p["size"] == t["size"])) for p, t in zip(pred, labels)]
        return float(np.mean(ok)) if ok else float("nan")


# ------------------------------------------------------------------ the RoI metric
@dataclass(frozen=True)
class RoIScore:
    matched: list[Finding] = field(default_factory=list)       # in the report and the reference (region + type)
    missed: list[Finding] = field(default_factory=list)        # in the reference only
    hallucinated: list[Finding] = field(default_factory=list)  # in the report only
    score: float = 1.0


def score_findings(report: list[Finding], reference: list[Finding], roi: str, roi_weight: float = 3.0) -> RoIScore:
    """The RoI metric on extracted findings (see the module docstring)."""
    ref = {f.key(): f for f in reference}
    rep = {f.key(): f for f in report}
    matched = [rep[k] for k in rep if k in ref]
    missed = [ref[k] for k in ref if k not in rep]
    halluc = [rep[k] for k in rep if k not in ref]

    def w(fs: list[Finding]) -> float:
        return sum(roi_weight if f.region == roi else 1.0 for f in fs)

    total = w(matched) + w(missed) + w(halluc)
    return RoIScore(matched, missed, halluc, 1.0 if total == 0 else w(matched) / total)


def score(report: str, reference: str, roi: str, tagger: FindingTagger, roi_weight: float = 3.0) -> RoIScore:
    """``score(report, reference, roi)`` → matched / missed / hallucinated findings and the RoI-weighted score."""
    return score_findings(tagger.extract(report), tagger.extract(reference), roi, roi_weight)


# ------------------------------------------------------------------ baselines
def _tokens(s: str) -> list[str]:
    return re.findall(r"[a-z]+", s.lower())


def bleu(candidate: str, reference: str, max_n: int = 4) -> float:
    """Sentence BLEU-4 with add-one smoothing of the n-gram precisions (Lin & Och) and the brevity penalty."""
    c, r = _tokens(candidate), _tokens(reference)
    if not c:
        return 0.0
    logs = []
    for n in range(1, max_n + 1):
        cn = Counter(tuple(c[i:i + n]) for i in range(len(c) - n + 1))
        rn = Counter(tuple(r[i:i + n]) for i in range(len(r) - n + 1))
        overlap = sum(min(v, rn[g]) for g, v in cn.items())
        total = max(sum(cn.values()), 0)
        logs.append(math.log((overlap + (n > 1)) / (total + (n > 1))) if overlap + (n > 1) > 0 else -math.inf)
    if any(v == -math.inf for v in logs):
        return 0.0
    bp = 1.0 if len(c) > len(r) else math.exp(1 - len(r) / len(c))
    return bp * math.exp(sum(logs) / max_n)


def rouge_l(candidate: str, reference: str) -> float:
    """ROUGE-L F1 over word tokens (longest common subsequence)."""
    c, r = _tokens(candidate), _tokens(reference)
    if not c or not r:
        return 0.0
    prev = [0] * (len(r) + 1)
    for a in c:
        cur = [0]
        for j, b in enumerate(r):
            cur.append(prev[j] + 1 if a == b else max(prev[j + 1], cur[j]))
        prev = cur
    lcs = prev[-1]
    if lcs == 0:
        return 0.0
    p, rec = lcs / len(c), lcs / len(r)
    return 2 * p * rec / (p + rec)


def _f1(a: set, b: set) -> float:
    if not a and not b:
        return 1.0
    tp = len(a & b)
    return 0.0 if tp == 0 else 2 * tp / (len(a) + len(b))


def entity_f1(report: list[Finding], reference: list[Finding]) -> float:
    """RadGraph-like stand-in: F1 of the (region, type, size) tuples, every region alike."""
    return _f1({(f.region, f.type, f.size) for f in report}, {(f.region, f.type, f.size) for f in reference})


def label_f1(report: list[Finding], reference: list[Finding]) -> float:
    """CheXbert-like stand-in: F1 of the finding types present, regions ignored."""
    return _f1({f.type for f in report}, {f.type for f in reference})
