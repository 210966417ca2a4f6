"""Format instructions for the report decoder (a MedIF-like constraint check, synthetic).

Three kinds, each a prompt the decoder reads and a format its report must follow, checkable from the
text alone (the content is scored elsewhere, by the RoI scorer):

- ``header``:  the report begins with ``FINDINGS:``;
- ``bullets``: every sentence is a bullet (``- `` before it);
- ``count``:   the first sentence states how many findings the report names (``2 findings.``,
  ``1 finding.``, ``0 findings.``), and that number equals the findings the tagger-free count of
  positive sentences gives (the sentences after it that are not negations).

:func:`render` turns a plain report into the report that complies; :func:`complies` checks a
generated text. ``render(kind, r)`` always complies (a test checks it on many reports) and the plain
report never does.
"""
from __future__ import annotations

import re

from paperworks.encoder_fusion.reports import NEGATIVE, split_sentences

KINDS: tuple[str, ...] = ("header", "bullets", "count")
PROMPTS: dict[str, str] = {
    "header": "Instruction: begin the report with FINDINGS.",
    "bullets": "Instruction: write every sentence as a bullet.",
    "count": "Instruction: first state the number of findings.",
}
HEADER = "FINDINGS:"
BULLET = "- "
_NEG = tuple(re.compile("^" + ".+".join(re.escape(part.lower()) for part in t.split("{region}")) + "$") for t in NEGATIVE)
_COUNT = re.compile(r"^(\d+) findings?\.$")


def _check(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"instruction kind '{kind}': allowed {', '.join(KINDS)}")


def is_negation(s: str) -> bool:
    """A sentence of the report grammar that states a region clear (``NEGATIVE`` templates)."""
    low = s.strip().lower()
    if low.startswith(BULLET):
        low = low[len(BULLET):]
    return any(p.match(low) for p in _NEG)


def positive_count(report: str) -> int:
    """Sentences of a plain report that are not negations (the global "No abnormality seen." counts 0)."""
    return sum(1 for s in split_sentences(report) if not is_negation(s) and s.strip().lower() != "no abnormality seen.")


def render(kind: str, report: str) -> str:
    """The plain ``report`` rewritten to follow instruction ``kind``."""
    _check(kind)
    if kind == "header":
        return f"{HEADER} {report}"
    if kind == "bullets":
        return " ".join(BULLET + s for s in split_sentences(report))
    n = positive_count(report)
    return f"{n} finding{'s' if n != 1 else ''}. {report}"


def complies(kind: str, text: str) -> bool:
    """Does ``text`` follow instruction ``kind``? (Format only, from the text alone.)"""
    _check(kind)
    text = text.strip()
    if not text:
        return False
    if kind == "header":
        return text.startswith(HEADER) and len(text) > len(HEADER) + 1
    sents = split_sentences(text)
    if kind == "bullets":
        return bool(sents) and all(s.startswith(BULLET) and len(s) > len(BULLET) for s in sents)
    m = _COUNT.match(sents[0]) if sents else None
    if m is None or len(sents) < 2:
        return False
    n = int(m.group(1))
    if sents[0] != f"{n} finding{'s' if n != 1 else ''}.":
        return False
    return n == positive_count(" ".join(sents[1:]))
