"""insurance_generate: synthetic catalogue, queries, graded labels, splits, label audit."""
from __future__ import annotations

import logging

import numpy as np

from paperworks.core.io import write_json, write_parquet
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed, seed_everything
from paperworks.core.stage import stage_main
from paperworks.core.stats import wilson_interval
from paperworks.insurance import catalogue as cat
from paperworks.insurance import paths
from paperworks.insurance.params import Params

log = logging.getLogger("paperworks.insurance")


@stage_main
def main() -> None:
    p = load_section("insurance", Params)
    d = p.data
    rng = seed_everything(derive_seed(global_seed(read_params_file()), "insurance", "generate"))
    try:
        services, procedures = cat.build_catalogue(d.n_services, d.procedures_per_service, d.split_fractions, rng)
        queries = cat.generate_queries(services, procedures, d.n_queries, dict(d.intent_mix), d.misspelling_rate,
                                       d.distractor_site_rate, rng)
    except ValueError as e:
        from paperworks.core.params import ParamsError
        raise ParamsError(str(e)) from None
    # label audit (the paper's expert check): an independent rule set re-judges the labelled top-1
    n_audit = min(d.audit_lists, len(queries))
    sample = queries.iloc[np.sort(rng.choice(len(queries), size=n_audit, replace=False))]
    proc_by_id = procedures.set_index("procedure_id")
    verdicts = [cat.audit_judge(q.text, proc_by_id.loc[q.target_procedure_id].to_dict()) for q in sample.itertuples()]
    agree = int(np.sum(verdicts))
    lo, hi = wilson_interval(agree, n_audit)
    disagreements = [{"query": q.text, "top1": proc_by_id.loc[q.target_procedure_id, "name"]}
                     for q, ok in zip(sample.itertuples(), verdicts) if not ok][:10]
    write_parquet(paths.SERVICES, services, cat.SERVICES_SCHEMA)
    write_parquet(paths.PROCEDURES, procedures, cat.PROCEDURES_SCHEMA)
    write_parquet(paths.QUERIES, queries, cat.QUERIES_SCHEMA)
    write_json(paths.CORPUS, {"sentences": cat.domain_corpus(services, procedures)})
    write_json(paths.AUDIT, {"n": n_audit, "agree": agree, "agreement": agree / n_audit, "ci95": [lo, hi],
                             "disagreement_examples": disagreements})
    log.info("catalogue: %d services, %d procedures, %d queries; audit agreement %.2f",
             len(services), len(procedures), len(queries), agree / n_audit)


if __name__ == "__main__":
    main()
