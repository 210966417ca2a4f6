"""The OPSD/SR-OPSD and GRPO loops on a tiny model: they run, update what they should, fail early."""
from __future__ import annotations

import pandas as pd
import pytest
import torch

from paperworks.core.lm import LMConfig, build_model, train_tokenizer
from paperworks.selfdistill.grpo import GRPOConfig, group_advantages, train_grpo
from paperworks.selfdistill.opsd import OPSDConfig, train_opsd
from paperworks.selfdistill.params import DataParams
from paperworks.selfdistill.pipeline import eval_subset
from paperworks.selfdistill.tasks import make_tasks

CFG = LMConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, max_positions=96)


@pytest.fixture(scope="module")
def setup():
    torch.set_num_threads(1)
    tasks = pd.DataFrame(make_tasks(DataParams(n_sft=12, n_train_prompts=30, n_test_per_family=4, n_val_per_family=4), 0))
    tok = train_tokenizer(list(tasks["privileged_prompt"]) + list(tasks["completion"]))
    base = build_model(CFG, len(tok), seed=0)
    train = tasks[tasks.split == "train"].reset_index(drop=True)
    evals = eval_subset(tasks[tasks.split == "val"], 2)
    return base, tok, train, evals


def _params(m):
    return [p.detach().clone() for p in m.parameters()]


@pytest.mark.parametrize("alpha,rho,direction,teacher", [(1.0, 1.0, "reverse", "ema"), (0.5, 0.75, "reverse", "ema"),
                                                         (1.0, 1.0, "forward", "ema"), (1.0, 1.0, "reverse", "frozen")])
def test_opsd_runs_and_updates(setup, alpha, rho, direction, teacher):
    base, tok, train, evals = setup
    before = _params(base)
    cfg = OPSDConfig(alpha=alpha, rho=rho, direction=direction, teacher=teacher, steps=2, prompts_per_step=4,
                     max_new_tokens=12, eval_every=1, warmup_steps=0, lr=1e-2)
    student, tch, history, cost = train_opsd(base, tok, train, evals, cfg)
    assert all(torch.equal(a, b) for a, b in zip(before, base.parameters()))  # the base is left untouched
    assert not all(torch.equal(a, b) for a, b in zip(before, student.parameters()))
    moved = not all(torch.equal(a, b) for a, b in zip(before, tch.parameters()))
    assert moved == (teacher == "ema")  # the frozen control keeps the base as teacher
    assert [h["step"] for h in history] == [0, 1, 2]
    assert {"acc", "entropy", "teacher_acc", "acc_sum", "train_loss", "train_lr", "kl_ref"} <= set(history[-1])
    assert history[0]["kl_ref"] == pytest.approx(0.0, abs=1e-6)  # step 0: the student is the base
    assert cost["forward_passes_per_step"] == (3 if alpha < 1 else 2)


def test_opsd_rejects_bad_inputs_before_training(setup):
    base, tok, train, evals = setup
    for kwargs in ({"alpha": 1.5}, {"rho": -0.5}, {"ema_beta": 1.0}):
        with pytest.raises(ValueError):
            train_opsd(base, tok, train, evals, OPSDConfig(steps=1, **kwargs))
    long_prompt = train.copy()
    long_prompt.loc[0, "privileged_prompt"] = "ref " + "1+1=2," * 20 + "|" + long_prompt.loc[0, "prompt"]
    with pytest.raises(ValueError, match="exceeds the model context"):
        train_opsd(base, tok, long_prompt, evals, OPSDConfig(steps=1, max_new_tokens=12))


def test_group_advantages():
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0]), 3, 1e-4)
    assert torch.allclose(adv.view(2, 3).mean(1), torch.zeros(2), atol=1e-6)
    assert adv[0] > 0 and adv[1] < 0 and adv[3] < 0
    assert torch.allclose(group_advantages(torch.ones(4), 2, 1e-4), torch.zeros(4))  # no signal without contrast


def test_grpo_runs(setup):
    base, tok, train, evals = setup
    cfg = GRPOConfig(steps=2, prompts_per_step=4, group_size=2, max_new_tokens=12, eval_every=2, warmup_steps=0)
    student, history, cost = train_grpo(base, tok, train, evals, cfg)
    assert [h["step"] for h in history] == [0, 2] and "teacher_acc" not in history[-1]
    # the diagnostics of GRPO's fall: reward sparsity, KL to the reference, learning rate
    last = history[-1]
    assert {"train_zero_reward_groups", "train_no_contrast_groups", "train_kl_k3", "train_lr", "kl_ref"} <= set(last)
    assert 0.0 <= last["train_zero_reward_groups"] <= last["train_no_contrast_groups"] <= 1.0
    # an untrained model gets no reward: every group is all-zero
    assert last["train_zero_reward_groups"] == 1.0
    with pytest.raises(ValueError, match="multiple"):
        train_grpo(base, tok, train, evals, GRPOConfig(steps=1, prompts_per_step=5, group_size=2))
