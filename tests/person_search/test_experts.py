"""The three experts train end to end on a tiny sim corpus (schedule, shapes) and score a pool."""
import numpy as np
import torch

from paperworks.person_search.data import CorpusConfig, attribute_keys, make_corpus
from paperworks.person_search.embed import MINILM_DIM, view_table
from paperworks.person_search.experts import ExpertConfig, score_cloze, score_cross, score_verify, train_cloze, train_cross, train_verifier
from paperworks.person_search.towers import images_to_tensor


def test_experts_train_through_their_schedule_and_score_a_pool():
    cfg = CorpusConfig(n_train_families=6, family_size=3, n_targets=4, distractor_ratio=2.0, val_fraction=0.5,
                       drop_scene_prob=0.0, width=16, height=16)
    c = make_corpus(cfg, seed=0)
    train = c["train"]
    texts, ids, slots, _ = view_table(list(train["caption"]))
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((len(texts), MINILM_DIM)).astype(np.float32)  # stands in for MiniLM here
    ecfg = ExpertConfig(epochs=2, families_per_batch=2, width=8)
    fams = train["family"].to_numpy()
    cross = train_cross(ecfg, c["train_images"], fams, ids, emb, seed=1)
    cloze = train_cloze(ecfg, c["train_images"], train, seed=2)
    verify = train_verifier(ecfg, c["train_images"], fams, ids, attribute_keys(train), emb, seed=3)
    pool = images_to_tensor(c["train_images"][:6]).view(2, 3, 3, 16, 16)
    tok = torch.from_numpy(emb[np.maximum(ids[:2], 0)] * (ids[:2, :, None] >= 0))
    assert score_cross(cross, pool, tok, torch.from_numpy(ids[:2] >= 0)).shape == (2, 3)
    out = score_cloze(cloze, pool, slots[:2])
    assert out.shape == (2, 3) and (out <= 0).all()  # mean log-probabilities
    assert score_verify(verify, pool, ids[:2], emb).shape == (2, 3)
