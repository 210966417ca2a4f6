"""Stage mol_data: the world (generic corpus, suites per capability, conversations, hidden tables) and the BPE tokenizer."""
from __future__ import annotations

from paperworks.core.io import write_json
from paperworks.core.lm import save_tokenizer, train_tokenizer
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.stage import stage_main
from paperworks.mol.artifacts import WORLD
from paperworks.mol.params import Params
from paperworks.mol.world import build_world


@stage_main
def main() -> None:
    p = load_section("mol", Params)
    seed = global_seed(read_params_file())
    world = build_world(p.world, seed)
    # BPE on the generic corpus only: it holds every character and fragment the four formats use,
    # but no request paired with an answer; a tool call is ~20 tokens, not ~80 characters.
    tok = train_tokenizer(world["corpus_train"], vocab_size=p.tokenizer.vocab_size)
    unknown = [x["prompt"] + x["target"] for s in ("train", "test") for items in world[s].values() for x in items
               if tok.unk_token_id in tok(x["prompt"] + x["target"])["input_ids"]]
    if unknown:
        raise ValueError(f"tokenizer: {len(unknown)} items hold characters the corpus lacks, e.g. {unknown[0]!r}")
    save_tokenizer(tok, WORLD / "tokenizer.json")
    write_json(WORLD / "world.json", world)
    sizes = {s: sum(len(v) for v in world[s].values()) for s in ("train", "dev", "test")}
    print(f"corpus {len(world['corpus_train'])} docs, vocab {len(tok)}, items {sizes}, "
          f"test conversations {len({x['conversation'] for x in world['test_conversations']})}")


if __name__ == "__main__":
    main()
