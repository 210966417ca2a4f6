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
from paperworks.protocol_distill.world import is_redirect

RULE_PREFIX = "on a see document"   # teacher.REDIRECT_RULE's opening (demos must not import the teacher)


def has_redirect_rule(protocol: dict) -> bool:
    """The protocol states the general repair rule (its exploration met a redirect)."""
    return any(step.startswith(RULE_PREFIX) for step in protocol["plan"])


def _mentions(text: str, name: str) -> bool:
    return f" {name} " in f" {text} "


def question_names(q: dict, names: dict[str, tuple[str, ...]]) -> list[str]:
    """Every entity name a question's path touches: each hop's subject (under every name it goes by:
    a renamed entity also by the name its documents are filed under) and the answer."""
    subjects = [c.split("|")[0] for c in q["chain"]]
    return [n for s in subjects for n in names.get(s, ())] + [q["answer"]]


def strategy_donors(questions: list[dict], donor_pool: list[dict], protocols: dict[tuple[str, str], dict], teacher: str,
                    names: dict[str, tuple[str, ...]], seed: int) -> dict[str, dict]:
    """qid → a *strategy protocol*: the verified ``teacher`` protocol of a different question of the
    same task type, from ``donor_pool``, that states the redirect rule exactly when this question's
    path meets a redirect, and whose text names none of this question's entities (its subjects, its
    answer). It carries the strategy, never an instance fact of the question. Donors are taken in a
    seeded order; a question with no such donor gets none (its privileged prompt stays bare)."""
    order = [donor_pool[i] for i in np.random.default_rng(seed).permutation(len(donor_pool))]
    by_key: dict[tuple[str, bool], list[tuple[str, dict, str]]] = {}
    for d in order:
        p = protocols.get((d["qid"], teacher))
        if p is None or not p["answer_verified"]:
            continue
        by_key.setdefault((d["task_type"], has_redirect_rule(p)), []).append((d["qid"], p, protocol_to_context(p)))
    out, cursor = {}, {}
    for q in questions:
        key = (q["task_type"], bool(q.get("redirected", False)))
        cands = by_key.get(key, [])
        own = question_names(q, names)
        start = cursor.get(key, 0)
        for j in range(len(cands)):
            qid, p, text = cands[(start + j) % len(cands)]
            if qid != q["qid"] and not any(_mentions(text, n) for n in own):
                out[q["qid"]] = p
                cursor[key] = (start + j + 1) % len(cands)   # spread the donors over the pool
                break
    return out


def unrepaired(completion: Completion) -> Completion | None:
    """The no-repair demonstration of a repaired episode: the searches up to the first redirect
    document, then the answer a searcher that trusts the top document writes (the entity the redirect
    names). None when the episode meets no redirect."""
    words, mask = completion.words, completion.model_mask
    for i, w in enumerate(words):
        if w == "</d>":
            start = max(j for j in range(i) if words[j] == "<d>")
            doc = " ".join(words[start + 1:i])
            if is_redirect(doc):
                target = doc.split(" see ", 1)[1]
                tail = ["<a>", *target.split(), "</a>"]
                return Completion(words[: i + 1] + tail, mask[: i + 1] + [1] * len(tail))
    return None


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
                        styled_share: float = 0.0, donors: dict[str, dict] | None = None,
                        plain_redirect: str = "omit") -> tuple[list[list[int]], list[Completion], dict]:
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

    Redirects (issue 15's transferable strategy): a question whose replayed episode meets a redirect
    document is shown *repaired* (the redirect, then the search of the entity it names) only with a
    protocol in front — its own (``protocol``) or another question's (``strategy``, from ``donors``;
    the question is never dropped there, since the donor names none of its entities). The plain
    branch never sees the repair: with ``plain_redirect`` = "omit" it gets no demonstration of such a
    question, with "no_repair" it gets the episode cut at the redirect and answered with the entity
    the redirect names (a searcher that trusts the top document); the answer-conditioned branch gets
    none (a no-repair episode would contradict its reference answer).
    """
    if plain_redirect not in ("omit", "no_repair"):
        raise ValueError(f"plain_redirect must be 'omit' or 'no_repair', got {plain_redirect!r}")
    rng = np.random.default_rng(seed)
    prompts, completions, counts = [], [], {"plain": 0, "protocol": 0, "answer": 0, "strategy": 0, "skipped_unverified": 0,
                                            "question_dropped": 0, "styled": 0, "redirected": 0, "plain_no_repair": 0}

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
        no_repair = unrepaired(completion)
        counts["redirected"] += no_repair is not None
        styled = protocols.get((q["qid"], f"{chosen_teacher}_styled")) if chosen_teacher in style_teachers else None
        for kind, probability in mix.items():
            if rng.random() >= probability:
                continue
            shown = completion
            if kind == "strategy":
                donor = (donors or {}).get(q["qid"])
                if donor is None:
                    continue
                context = protocol_to_context(donor)
            else:
                context = {"plain": "", "protocol": protocol_to_context(chosen), "answer": answer_context(q["answer"])}[kind]
            if no_repair is not None and kind in ("plain", "answer"):
                # the repair is never shown without a protocol
                if kind == "answer" or plain_redirect == "omit":
                    continue
                shown = no_repair
                counts["plain_no_repair"] += 1
            # drawn for every protocol demonstration, so the rng stream does not depend on which have a styled variant
            if kind == "protocol" and rng.random() < styled_share and styled is not None and styled["answer_verified"]:
                context, shown = protocol_to_context(styled), replay(styled)
                counts["styled"] += 1
            text = q["text"]
            if kind in ("protocol", "answer") and rng.random() < question_dropout:
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
                 teacher: str | None = None, donors: dict[str, dict] | None = None) -> list[OnlineItem]:
    """Online-training prompts; the privileged context is the teacher's protocol (MAPD), the
    reference answer (OPSD) or nothing (GRPO). A rejected protocol leaves that question without one.
    With ``donors`` (MAPD on strategy protocols) the protocol is the donor's — another question's,
    naming none of this question's entities — so the KL target cannot read this question's answer."""
    items = []
    for q in questions:
        priv = None
        if context == "protocol":
            p = donors.get(q["qid"]) if donors is not None else protocols.get((q["qid"], teacher))
            priv = encode_prompt(codec, q["text"], protocol_to_context(p)) if p is not None else None
        elif context == "answer":
            priv = encode_prompt(codec, q["text"], answer_context(q["answer"]))
        items.append(OnlineItem(encode_prompt(codec, q["text"]), priv, q["answer"]))
    return items
