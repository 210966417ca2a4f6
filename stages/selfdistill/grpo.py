"""Stage selfdistill_grpo: the RLVR baseline (GRPO on the exact-match reward), same base and budget."""
from __future__ import annotations

from paperworks.core.io import write_json
from paperworks.core.lm import save_checkpoint
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.stage import stage_main
from paperworks.selfdistill.params import Params
from paperworks.selfdistill.pipeline import DATA, MODELS, PLOTS, load_base, load_inputs
from paperworks.selfdistill.runner import run_seeds


@stage_main
def main() -> None:
    p = load_section("selfdistill", Params)
    if p.opsd.prompts_per_step % p.grpo.group_size:
        from paperworks.core.params import ParamsError

        raise ParamsError(f"  selfdistill.grpo.group_size: must divide opsd.prompts_per_step={p.opsd.prompts_per_step} "
                          f"(got {p.grpo.group_size})")
    tasks, tok = load_inputs(p)
    base = load_base(p, tok)
    from dvclive import Live

    live = Live(str(PLOTS / "live_grpo"), dvcyaml=False, save_dvc_exp=False, report=None)
    result, students = run_seeds(p, base, tok, tasks, "grpo", None, p.opsd.seeds, global_seed(read_params_file()), live=live)
    live.end()
    for s, student in students.items():
        save_checkpoint(student, MODELS / "runs" / "grpo" / f"seed{s}.safetensors", p.model, len(tok))
    write_json(DATA / "runs" / "grpo.json", result)
    for r in result["runs"]:
        print("grpo", r["seed"], {k: round(v, 3) for k, v in r["final"].items()})


if __name__ == "__main__":
    main()
