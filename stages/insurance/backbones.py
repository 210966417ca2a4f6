"""insurance_backbones: the general backbone and its domain-adapted (MLM) twin."""
from __future__ import annotations

from dvclive import Live

from paperworks.core.io import read_json
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed, seed_everything
from paperworks.core.stage import stage_main
from paperworks.insurance import backbone as bb
from paperworks.insurance import paths
from paperworks.insurance.params import Params


@stage_main
def main() -> None:
    p = load_section("insurance", Params).backbone
    seed = derive_seed(global_seed(read_params_file()), "insurance", "backbones")
    seed_everything(seed)
    corpus = read_json(paths.CORPUS).get("sentences")
    if not corpus:
        from paperworks.core.io import ArtifactError
        raise ArtifactError(f"{paths.CORPUS}: no sentences")
    model, tokenizer = bb.base_bert(p.kind, p.tiny_hidden, p.tiny_layers, seed)
    bb.save_backbone(model, tokenizer, paths.BACKBONE["general"])
    with Live(str(paths.PLOTS / "live_mlm"), dvcyaml=False, save_dvc_exp=False) as live:
        def log(step: int, loss: float) -> None:
            live.log_metric("mlm_loss", loss)
            live.next_step()

        cfg = bb.MLMConfig(steps=p.mlm_steps, batch_size=p.mlm_batch_size, lr=p.mlm_lr,
                           mlm_probability=p.mlm_probability, max_length=p.max_length, seed=seed)
        encoder, tokenizer = bb.mlm_adapt(paths.BACKBONE["general"], corpus, cfg, log)
    bb.save_backbone(encoder, tokenizer, paths.BACKBONE["domain"])


if __name__ == "__main__":
    main()
