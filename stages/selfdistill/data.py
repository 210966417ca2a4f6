"""Stage selfdistill_data: task table (sft / train / test per family) + character tokenizer."""
from __future__ import annotations

import pandas as pd

from paperworks.core.io import write_parquet
from paperworks.core.lm import save_tokenizer, train_tokenizer
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.selfdistill.params import Params
from paperworks.selfdistill.pipeline import TASKS_FILE, TOKENIZER_FILE
from paperworks.selfdistill.tasks import TASK_SCHEMA, make_tasks


@stage_main
def main() -> None:
    p = load_section("selfdistill", Params)
    seed = derive_seed(global_seed(read_params_file()), "selfdistill", "data")
    df = pd.DataFrame(make_tasks(p.data, seed), columns=TASK_SCHEMA.names)
    tok = train_tokenizer(list(df["privileged_prompt"]) + list(df["completion"]))  # characters only
    write_parquet(TASKS_FILE, df, TASK_SCHEMA)
    save_tokenizer(tok, TOKENIZER_FILE)
    print(df.groupby(["split", "family"]).size().to_string(), f"\nvocab size: {len(tok)}")


if __name__ == "__main__":
    main()
