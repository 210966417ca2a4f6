"""Glue shared by the training stages: loading the world's tools and building prompts per branch."""
from __future__ import annotations

from dataclasses import dataclass, field

from paperworks.core.lm.tokenizer import load_tokenizer
from paperworks.protocol_distill import artifacts as A
from paperworks.protocol_distill.demos import encode_prompt, strategy_donors, valid_protocols
from paperworks.protocol_distill.episode import EPISODE_TOKENS, Codec, answer_context
from paperworks.protocol_distill.protocol import protocol_to_context
from paperworks.protocol_distill.search import SearchTool
from paperworks.protocol_distill.teacher import TEACHERS


@dataclass
class Workspace:
    codec: Codec
    tool: SearchTool
    questions: list[dict]
    protocol_rows: list[dict]
    protocols: dict
    names: dict[str, tuple[str, ...]] = field(default_factory=dict)   # eid → every name it goes by
    _donors: dict = field(default_factory=dict, repr=False)

    def pool(self, name: str) -> list[dict]:
        return [q for q in self.questions if q["pool"] == name]

    def donors(self, teacher: str) -> dict[str, dict]:
        """qid → strategy protocol of ``teacher`` for every question, drawn from the ONLINE pool (another
        question's, naming none of the question's entities; see demos.strategy_donors). The same map
        serves MAPD's KL (online questions) and the strategy branch's evaluation (test, transfer)."""
        if teacher not in self._donors:
            self._donors[teacher] = strategy_donors(self.questions, self.pool("online"), self.protocols, teacher, self.names, seed=0)
        return self._donors[teacher]


def load_workspace(top_k: int) -> Workspace:
    codec = Codec(load_tokenizer(A.TOKENIZER))
    rows = A.read_protocol_rows()
    return Workspace(codec, SearchTool(A.read_docs(), top_k), A.read_questions(), rows, valid_protocols(rows),
                     A.read_entity_names())


def branch_prompts(ws: Workspace, questions: list[dict], branch: str) -> list[list[int]]:
    """Prompts of one branch: "student" (question only), "answer" (question + reference answer), a
    teacher name (question + that teacher's protocol; a rejected protocol leaves the question bare) or
    "<teacher>_strategy" (question + a strategy protocol: another question's, see ``Workspace.donors``)."""
    out = []
    for q in questions:
        if branch == "student":
            ctx = ""
        elif branch == "answer":
            ctx = answer_context(q["answer"])
        elif branch.endswith("_strategy"):
            p = ws.donors(branch.removesuffix("_strategy")).get(q["qid"])
            ctx = protocol_to_context(p) if p is not None else ""
        else:
            p = ws.protocols.get((q["qid"], branch))
            ctx = protocol_to_context(p) if p is not None else ""
        out.append(encode_prompt(ws.codec, q["text"], ctx))
    return out


def tic_words(ws: Workspace, teachers: list[str]) -> set[str]:
    """The style measure's word list: words of the teachers' narration that occur nowhere a student
    reads or must write for the task — no question, document, answer, plain (unstyled) protocol
    context or episode token. So "what" or "first" (question words) never count as a tic, and a
    tic in an output can only come from the teachers' style (traces or styled protocols)."""
    narration = set().union(*(TEACHERS[t].tic_words for t in teachers))
    task: set[str] = set(EPISODE_TOKENS)
    for text in ws.tool.docs:
        task.update(text.split())
    for q in ws.questions:
        task.update(q["text"].split())
        task.update(q["answer"].split())
    for (qid, teacher), p in ws.protocols.items():
        if not teacher.endswith("_styled"):
            task.update(protocol_to_context(p).split())
    return narration - task
