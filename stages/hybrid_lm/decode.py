"""Stage hybrid_lm_decode: decoding cost vs context (CPU ms per token step, cache MiB) of the
decode variants, as CSV and PNG."""
from __future__ import annotations

import pandas as pd

from paperworks.core.io import atomic_path, write_text
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.hybrid_lm import PLOTS, probe, report
from paperworks.hybrid_lm.params import Params


@stage_main
def main() -> None:
    p = load_section("hybrid_lm", Params)
    seed = derive_seed(global_seed(read_params_file()), "hybrid_lm", "decode")
    rows = []
    for v in p.decode.variants:
        for r in probe.decode_cost(p.model_config_for(v), p.decode.contexts, p.decode.batch, p.decode.steps, seed,
                                   repeats=p.decode.repeats):
            rows.append({"variant": v, **r})
            print(f"{v} context {r['context']}: {r['ms_per_token_step']:.2f} ms/step, cache {r['cache_mib']:.3f} MiB")
    df = pd.DataFrame(rows)
    write_text(PLOTS / "decode_cost.csv", df.to_csv(index=False))
    with atomic_path(PLOTS / "decode_cost.png") as tmp:
        report.plot_decode_cost(df, tmp)


if __name__ == "__main__":
    main()
