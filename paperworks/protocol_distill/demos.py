"""Training material built from the teachers' output: warm-start demonstrations, trace-imitation
examples and the online items with their privileged contexts. Pure functions of their inputs."""
from __future__ import annotations

import numpy as np

from paperworks.protocol_distill.episode import (
    Codec, Completion, answer_context, completion_from_text, demonstration_text, plan_queries, prompt_text,
)
from paperworks.protocol_distill.protocol import ProtocolError, parse_protocol, protocol_to_context
from paperworks.protocol_distill.search import SearchTool
from paperworks.protocol_distill.train import OnlineItem


def valid_protocols(protocol_rows: list[dict]) -> dict[tuple[str, str], dict]:
    """(qid, teacher) → parsed protocol, for rows whose JSON passes the schema (re-checked here:
    a malformed protocol never reaches training even if an upstream flag were wrong)."""
    out = {}
    for r in protocol_rows:
        try:
            out[(r["qid"], r["teacher"])] = parse_protocol(r["protocol_json"])
        except ProtocolError:
            continue
    return out


def encode_prompt(codec: Codec, question: str, context: str = "") -> list[int]:
    return [codec.bos] + codec.encode(prompt_text(question, context))


QUESTION_DROPPED = "what is ?"


def split_heldout(questions: list[dict], n_questions: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(training questions, held-out questions): ``n_questions`` drawn with ``seed``, disjoint from
    the rest, both in their original order. The held-out questions' examples never reach training,
    so their loss measures what transfers to unseen questions (what the convergence check reads)."""
    if not 0 < n_questions < len(questions):
        raise ValueError(f"split_heldout: {n_questions} held-out questions out of {len(questions)}")
    held = set(np.random.default_rng(seed).choice(len(questions), size=n_questions, replace=False).tolist())
    return ([q for i, q in enumerate(questions) if i not in held], [q for i, q in enumerate(questions) if i in held])


def warm_start_examples(codec: Codec, tool: SearchTool, questions: list[dict], protocols: dict[tuple[str, str], dict],
                        teachers: list[str], mix: dict[str, float], seed: int,
                        question_dropout: float = 0.0, style_teachers: tuple[str, ...] = (),
                        styled_share: float = 0.0) -> tuple[list[list[int]], list[Completion], dict]:
    """Episode-format demonstrations for the warm-start questions.

    Each question gets one verified protocol (teachers taken in turn); its plan's searches are
    replayed through the tool to make the demonstration. The same demonstration is shown with no
    context, with the protocol, or with the reference answer, each with the inclusion probability
    in ``mix`` — a model trained from scratch cannot use a context it was never shown.

    ``question_dropout``: in that share of the context-conditioned demonstrations the question is
    replaced by a placeholder, so the completion can only be predicted from the context. Without
    it a from-scratch model learns to ignore the context (it can copy the same path from the
    question), and the privileged branch ends up no better than the student.

    ``styled_share``: when the chosen protocol's teacher is in ``style_teachers`` and its styled
    variant (``<teacher>_styled``) passed the schema, that share of its protocol-conditioned
    demonstrations shows the styled protocol, and the completion replays the styled plan's own
    queries (the adverb included) through the tool — as an LLM reading a styled protocol would copy
    its steps. The plain and answer-conditioned demonstrations always use the unstyled plan, so
    the student branch is never taught a tic; only the KL target can carry one to it.
    """
    rng = np.random.default_rng(seed)
    prompts, completions, counts = [], [], {"plain": 0, "protocol": 0, "answer": 0, "skipped_unverified": 0, "question_dropped": 0,
                                            "styled": 0}

    def replay(protocol: dict) -> Completion:
        queries = plan_queries(protocol)
        docs = [(tool.search(qq) or ("",))[0] for qq in queries]
        return completion_from_text(demonstration_text(queries, docs, q["answer"]))

    for k, q in enumerate(questions):
        chosen, chosen_teacher = None, ""
        for j in range(len(teachers)):
            t = teachers[(k + j) % len(teachers)]
            p = protocols.get((q["qid"], t))
            if p is not None and p["answer_verified"]:
                chosen, chosen_teacher = p, t
                break
        if chosen is None:
            counts["skipped_unverified"] += 1
            continue
        completion = replay(chosen)
        styled = protocols.get((q["qid"], f"{chosen_teacher}_styled")) if chosen_teacher in style_teachers else None
        for kind, probability in mix.items():
            if rng.random() >= probability:
                continue
            context = {"plain": "", "protocol": protocol_to_context(chosen), "answer": answer_context(q["answer"])}[kind]
            shown = completion
            # drawn for every protocol demonstration, so the rng stream does not depend on which have a styled variant
            if kind == "protocol" and rng.random() < styled_share and styled is not None and styled["answer_verified"]:
                context, shown = protocol_to_context(styled), replay(styled)
                counts["styled"] += 1
            text = q["text"]
            if kind != "plain" and rng.random() < question_dropout:
                text = QUESTION_DROPPED
                counts["question_dropped"] += 1
            prompts.append(encode_prompt(codec, text, context))
            completions.append(shown)
            counts[kind] += 1
    return prompts, completions, counts


def trace_examples(codec: Codec, questions: list[dict], protocol_rows: list[dict], teachers: list[str]) -> tuple[list[list[int]], list[Completion]]:
    """Trace imitation: the teachers' raw natural-language traces as completions (docs masked)."""
    by_key = {(r["qid"], r["teacher"]): r for r in protocol_rows}
    prompts, completions = [], []
    for q in questions:
        for t in teachers:
            r = by_key.get((q["qid"], t))
            if r is None or not r["teacher_correct"]:
                continue
            prompts.append(encode_prompt(codec, q["text"]))
            completions.append(completion_from_text(r["trace"]))
    return prompts, completions


def online_items(codec: Codec, questions: list[dict], protocols: dict[tuple[str, str], dict], context: str,
                 teacher: str | None = None) -> list[OnlineItem]:
    """Online-training prompts; the privileged context is the teacher's protocol (MAPD), the
    reference answer (OPSD) or nothing (GRPO). A rejected protocol leaves that question without one."""
    items = []
    for q in questions:
        priv = None
        if context == "protocol":
            p = protocols.get((q["qid"], teacher))
            priv = encode_prompt(codec, q["text"], protocol_to_context(p)) if p is not None else None
        elif context == "answer":
            priv = encode_prompt(codec, q["text"], answer_context(q["answer"]))
        items.append(OnlineItem(encode_prompt(codec, q["text"]), priv, q["answer"]))
    return items
