"""The offline multi-agent teacher standing in for the paper's proprietary model.

No proprietary model is reachable here, so the "teacher" is a rule-based multi-agent system with
privileged access to the world's structure (it knows each question's relation chain and the
relation words documents may use, but must still find entities, aliases, facts and which word each
fact's document uses through the search tool):

- Decomposer: turns each hop of the question into a sub-query and searches;
- Repair: when a search returns the wrong document, diagnoses why (alias document, redirect
  document of a renamed entity, namesake, a relation word this fact's document does not use) and
  reformulates, up to the variant's repair budget;
- Protocol Synthesizer: turns the exploration trace into the five-field JSON protocol.

A *styled* protocol variant (``<teacher>_styled``) is the same exploration written by a
synthesizer that lets its narration into the free-form fields, as an LLM writing JSON does: a
note step with its opening line, its adverb inside every plan step ("search carefully a b
employer"), its failure remark before every partial finding. The schema accepts it (it checks
structure, not wording), so only the training signal can keep the style out of the student.

Three variants differ in strategy (first-query wording, repair budget, extra context, plan order)
and in style: each also writes a verbose natural-language trace with its own stylistic tics, the
training data of the trace-imitation baseline. Like a real LLM synthesizer, each variant sometimes
emits a malformed protocol; the schema rejects those with a reason.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from paperworks.protocol_distill.protocol import protocol_errors
from paperworks.protocol_distill.search import SearchTool
from paperworks.protocol_distill.world import DOC_FORMS, Question, World, redirect_target

# the plan step a protocol carries once its exploration met a redirect: the general repair rule, in
# words that name no entity, so a protocol of *another* question still states it (a strategy protocol)
REDIRECT_RULE = "on a see document , search the entity it names with the same relation"
REDIRECT_NOTE = "redirect"


@dataclass(frozen=True)
class TeacherStyle:
    name: str
    first_wording: str          # "canonical": the relation's first document word; "surface": the question's wording
    max_repairs: int            # reformulations allowed per hop
    extra_context: bool         # also looks up the first subject's birthplace (breadth-first habit)
    reverse_comparison: bool    # searches the second entity of a comparison first
    plan_verb: str
    opening: str
    before_search: str
    after_success: str
    after_failure: str
    closing: str
    defect: str                 # the kind of malformed protocol this variant sometimes writes
    defect_rate: float
    query_tic: str = ""         # the adverb the styled protocol variant puts into every plan step

    @property
    def tic_words(self) -> set[str]:
        # the styled protocols' query adverb is part of the style (it can reach outputs only through them)
        text = " ".join([self.opening, self.before_search, self.after_success, self.after_failure, self.closing, self.query_tic])
        return set(text.split())


TEACHERS: dict[str, TeacherStyle] = {
    "opus": TeacherStyle(
        "opus", "canonical", 3, False, False, "search",
        opening="certainly ! let me think step by step about this question .",
        before_search="first , i will carefully search :",
        after_success="excellent , this is clearly relevant .",
        after_failure="hmm , that did not work . let me rephrase the query .",
        closing="to summarize , having carefully verified everything , the answer is",
        defect="plan_not_list", defect_rate=0.03, query_tic="carefully"),
    "gpt": TeacherStyle(
        "gpt", "surface", 2, False, False, "lookup",
        opening="great question ! here is my plan .",
        before_search="next step , quick lookup :",
        after_success="got it . here is what i found .",
        after_failure="oops , no luck . trying again .",
        closing="in short , the final answer is",
        defect="missing_field", defect_rate=0.05, query_tic="quick"),
    "gemini": TeacherStyle(
        "gemini", "canonical", 2, True, True, "find",
        opening="interesting ! let us explore this from several angles .",
        before_search="digging deeper , i query :",
        after_success="fascinating , another piece of the puzzle .",
        after_failure="curious , an unexpected result . reconsidering the angle .",
        closing="all in all , weighing the evidence , the answer is",
        defect="unknown_task_type", defect_rate=0.04, query_tic="deeper"),
}


@dataclass
class Step:
    query: str
    result: str          # the returned document ("" for none)
    ok: bool
    note: str = ""       # the Repair agent's diagnosis of a failed search


@dataclass
class Exploration:
    steps: list[Step] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)
    successful_queries: list[str] = field(default_factory=list)
    answer: str | None = None
    redirects: int = 0   # searches that met a redirect document and were repaired by the general rule


def _decompose(world: World, q: Question, style: TeacherStyle) -> list[tuple[int, str, str]]:
    """Sub-queries as (hop index, entity mention, relation word); hop 0's mention is the question's."""
    order = list(range(len(q.chain)))
    if q.task_type == "comparison" and style.reverse_comparison:
        order.reverse()
    out = []
    for hop in order:
        subject, rel = q.chain[hop]
        if q.task_type == "comparison":
            mention = world.display(subject)
        else:
            mention = q.subject_mention if hop == 0 else ""  # later hops use the entity found before
        wording = rel if style.first_wording == "canonical" else q.surfaces[hop].split()[-1]
        out.append((hop, mention, wording))
    return out


def _repair(world: World, mention: str, wording: str, subject: str, rel: str, result: str,
            tried: set[str]) -> tuple[str, str, str]:
    """Diagnose a failed search and reformulate: alias → real name, redirect → the entity the redirect
    document names (read from the document: the general rule), namesake → qualifier, a relation word
    the document does not use → the next word documents use for that relation."""
    ent = world.entities[subject]
    if result.startswith(f"{mention} alias "):
        return ent.name, wording, f"{mention} is an alias of {ent.name}"
    target = redirect_target(result, mention)
    if target is not None:
        return target, wording, f"{REDIRECT_NOTE} : {mention} see {target} , search {target}"
    filed = world.filed_name(subject)
    if mention not in (ent.name, filed) and not result.startswith(f"{filed} "):
        return ent.name, wording, f"{mention} has a namesake , use {ent.name}"
    untried = [w for w in DOC_FORMS[rel] if w not in tried]
    if untried:
        return mention, untried[0], f"the document is not called {wording} , try {untried[0]}"
    return mention, wording, "no diagnosis"


def explore(world: World, tool: SearchTool, q: Question, style: TeacherStyle) -> Exploration:
    """Decomposer + Repair: run the sub-queries, repairing failed searches within the budget."""
    ex = Exploration()
    found: dict[int, str] = {}
    if (style.extra_context and q.task_type != "comparison" and not q.uses_alias
            and world.kind(q.chain[0][0]) == "person"):
        # breadth habit: one extra look at the first subject (its birthplace) before the chain
        subject = q.chain[0][0]
        query = f"{world.display(subject)} birthplace"
        res = tool.search(query)
        ok = res == (world.fact_doc(subject, "birthplace"),)
        ex.steps.append(Step(query, res[0] if res else "", ok))
        if ok:
            ex.facts.append(res[0])
            ex.successful_queries.append(query)
    for hop, mention, wording in _decompose(world, q, style):
        subject, rel = q.chain[hop]
        if not mention:
            if hop - 1 not in found:
                break  # the chain broke earlier: nothing to search from
            mention = world.display(found[hop - 1])
        expected = world.fact_doc(subject, rel)
        tried: set[str] = set()
        for attempt in range(style.max_repairs + 1):
            tried.add(wording)
            query = f"{mention} {wording}"
            res = tool.search(query)
            doc = res[0] if res else ""
            if doc == expected:
                ex.steps.append(Step(query, doc, True))
                ex.facts.append(doc)
                ex.successful_queries.append(query)
                found[hop] = world.facts[(subject, rel)]
                break
            if attempt == style.max_repairs:
                ex.steps.append(Step(query, doc, False, "repair budget spent"))
                break
            new_mention, new_wording, note = _repair(world, mention, wording, subject, rel, doc, tried)
            ex.steps.append(Step(query, doc, False, note))
            if note.endswith(f"alias of {world.entities[subject].name}"):
                # the alias document itself is evidence: keep the resolving lookup in the plan
                ex.facts.append(doc)
                ex.successful_queries.append(f"{mention} alias")
            elif note.startswith(REDIRECT_NOTE):
                # the search that met the redirect stays in the plan, so replaying the plan shows the
                # failure and its repair (the protocol-conditioned demonstrations are repaired episodes)
                ex.facts.append(doc)
                ex.successful_queries.append(query)
                ex.redirects += 1
            mention, wording = new_mention, new_wording
    if len(found) == len(q.chain):
        if q.task_type == "comparison":
            (pa, _), (pb, _) = q.chain
            ya, yb = int(found[0]), int(found[1])
            ex.answer = world.display(pa) if ya < yb else world.display(pb)
        else:
            ex.answer = world.display(found[len(q.chain) - 1])
    return ex


def synthesize(q: Question, ex: Exploration, style: TeacherStyle, rng: np.random.Generator, styled: bool = False) -> dict:
    """Protocol Synthesizer: the exploration trace → the five-field protocol (possibly malformed).
    ``styled``: the teacher's narration goes into the free-form fields (plan, partial findings)."""
    tic = f"{style.query_tic} " if styled and style.query_tic else ""
    plan = [f"{style.plan_verb} {tic}{qq}" for qq in ex.successful_queries]
    if q.task_type == "comparison":
        plan.append("compare born years , earlier wins")
    if ex.redirects:
        plan.append(REDIRECT_RULE)
    plan.append("answer with the last fact" if q.task_type != "comparison" else "answer with the earlier person")
    partial = [f"{s.query} gave {s.result or 'nothing'} : {s.note}" for s in ex.steps if not s.ok and s.note]
    if styled:
        plan = [f"note {style.opening}", *plan]
        partial = [f"{style.after_failure} {x}" for x in partial]
    verified = ex.answer is not None and any(ex.answer in f for f in ex.facts)
    protocol = {
        "task_type": q.task_type,
        "plan": plan,
        "grounding_facts": list(ex.facts),
        "partial_findings": partial,
        "answer_verified": bool(verified),
    }
    if rng.random() < style.defect_rate:  # the synthesizer's own slips, which the schema must catch
        if style.defect == "plan_not_list":
            protocol["plan"] = " then ".join(plan)
        elif style.defect == "missing_field":
            del protocol["answer_verified"]
        elif style.defect == "unknown_task_type":
            protocol["task_type"] = q.task_type.replace("_", "-")
    return protocol


def nl_trace(ex: Exploration, style: TeacherStyle) -> str:
    """The verbose natural-language trace in episode format (search calls and inserted documents)."""
    parts = [style.opening]
    for s in ex.steps:
        parts.append(f"{style.before_search} <s> {s.query} </s> <d> {s.result or 'none'} </d>")
        parts.append(style.after_success if s.ok else style.after_failure)
    parts.append(f"{style.closing} <a> {ex.answer or 'unknown'} </a>")
    return " ".join(parts)


def run_teacher(world: World, tool: SearchTool, questions: list[Question], style: TeacherStyle, seed: int,
                styled: bool = False) -> list[dict]:
    """One record per question: protocol JSON text, validity + reason, NL trace, teacher answer.
    ``styled``: the same explorations, written as the styled protocol variant ``<name>_styled``."""
    rng = np.random.default_rng(seed)
    rows = []
    for q in questions:
        ex = explore(world, tool, q, style)
        protocol = synthesize(q, ex, style, rng, styled)
        errors = protocol_errors(protocol)
        rows.append({
            "qid": q.qid, "teacher": f"{style.name}_styled" if styled else style.name,
            "protocol_json": json.dumps(protocol, sort_keys=True),
            "valid": not errors, "reject_reason": "; ".join(errors),
            "trace": nl_trace(ex, style),
            "teacher_answer": ex.answer or "",
            "teacher_correct": ex.answer == q.answer,
            "n_searches": len(ex.steps),
            "n_repairs": sum(1 for s in ex.steps if not s.ok),
        })
    return rows
