"""The Prefect deployment of one version cycle: its DVC upstream comes from dvc.yaml, each flow run adds exactly one
cycle to the live store (the same candidate the stage's cycle k makes), the schedule is on the deployment, and the
DVC-owned stores are refused."""
import tempfile
from pathlib import Path

import pytest

from flows import mol_cycle as M
from tests.conftest import REPO


def test_upstream_of_the_loop_is_read_from_dvc_yaml():
    from flows.pipeline import read_dag

    import yaml

    dag = read_dag(REPO)
    up = M.upstream_of(dag)
    seed = yaml.safe_load((REPO / "params.yaml").read_text())["mol"]["versions"]["seed"]
    assert set(up) == {"params_check", "mol_data", "mol_base", f"mol_train@{seed}"}, up
    assert up.index("mol_data") < up.index("mol_base") < up.index(f"mol_train@{seed}")


def test_store_must_be_a_free_folder_under_data_mol(tmp_path):
    assert M.live_store_path(tmp_path, M.LIVE) == (tmp_path / "data/mol/live").resolve()
    for bad in ("data/mol/versions", "data/mol/versions/x", "data/mol/train", "data/mol", "../elsewhere", "/tmp/x", "models/mol/live"):
        with pytest.raises(ValueError, match="under data/mol"):
            M.live_store_path(tmp_path, bad)


def test_the_deployment_carries_the_schedule(prefect_api):
    flow = M.build_cycle_flow(REPO)
    dep = M.make_deployment(flow, "nightly", cron="0 4 * * *")
    assert dep.name == "nightly" and dep.parameters == {"store": M.LIVE, "upstream": True}
    assert [s.schedule.cron for s in dep.schedules] == ["0 4 * * *"]
    hourly = M.make_deployment(flow, "hourly", interval=3600, upstream=False)
    assert hourly.schedules[0].schedule.interval.total_seconds() == 3600 and hourly.parameters["upstream"] is False


def test_each_run_adds_one_cycle_to_the_live_store(tiny_repo, prefect_api):
    from paperworks.core.claims import load_evidence
    from paperworks.core.lm import load_checkpoint, load_tokenizer
    from paperworks.core.params import global_seed, load_section, read_params_file
    from paperworks.mol import versions as V
    from paperworks.mol import world as W
    from paperworks.mol.artifacts import BASE, WORLD, read_world, seed_dir
    from paperworks.mol.loop import Loop
    from paperworks.mol.models import freeze
    from paperworks.mol.params import Params

    flow = M.build_cycle_flow(tiny_repo, retries=0)
    store = V.VersionStore(tiny_repo / M.LIVE)
    first = flow(upstream=False)
    assert first["initialised"] and first["cycle"] == 1 and first["candidate"] == "cand1"
    assert [r.get("candidate") for r in store.lineage()] == ["-", "cand1"]
    second = flow(upstream=False)
    assert second["cycle"] == 2 and not second["initialised"] and len(store.lineage()) == 3
    faulty = store.lineage()[-1]
    assert faulty["faulty"] and faulty["status"] == "rejected" and "update data verified" in faulty["failed_checks"]
    assert store.serving()["version"] == second["serving"] == first["serving"]  # the rejected candidate serves nothing
    assert (tiny_repo / M.LIVE / "lineage.md").read_text().startswith(f"Serving: **{second['serving']}**")
    third = flow(upstream=False)  # smoke configures two cycles: nothing left
    assert third["cycle"] is None and "nothing to do" in third["status"] and len(store.lineage()) == 3

    # cycle 1 of the live store is cycle 1 of the stage: the same candidate bytes from the same inputs
    import contextlib

    with contextlib.chdir(tiny_repo), tempfile.TemporaryDirectory() as tmp:
        p = load_section("mol", Params)
        base, cfg, _ = load_checkpoint(BASE)
        loop = Loop(p, global_seed(read_params_file()), read_world(), load_tokenizer(WORLD / "tokenizer.json"), freeze(base), cfg,
                    load_evidence())
        other = V.VersionStore(Path(tmp) / "s")
        loop.init_store(other, {c: seed_dir(p.versions.seed) / "adapters" / f"{c}.safetensors" for c in W.CAPABILITIES})
        rec = loop.cycle(other, 1, Path(tmp))
    assert rec["adapters"] == store.lineage()[1]["adapters"] and rec["status"] == store.lineage()[1]["status"]


def test_a_dvc_owned_store_fails_the_run(tiny_repo, prefect_api):
    state = M.build_cycle_flow(tiny_repo, retries=0)(store="data/mol/versions", upstream=False, return_state=True)
    assert state.is_failed() and "no DVC stage owns" in state.message
