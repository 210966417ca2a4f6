"""Latency of each fusion and of the segmentation tool call, batch 1, one CPU thread.

    PYTHONPATH=. python benchmarks/encoder_fusion_latency.py                 # default-profile sizes
    PYTHONPATH=. python benchmarks/encoder_fusion_latency.py --profile smoke --repeats 20

What one request costs end to end, from pixels (the paper characterises none of this):
- ``vqa``: one image + one question embedding → answer logits: the foundation encoder on the 2× coarse
  view (+ both specialists at full resolution for ``parallel`` / ``cascade``), the fusion, the VQA head;
- ``report``: one image → the same encoders and fusion → the report decoder's visual prefix → greedy
  generation of ``--report-tokens`` tokens with the KV cache (``<eos>`` disabled so every fusion
  generates the same number of tokens; the default is about the mean training report length, 14.7);
- ``volume``: one CT-like volume → every 3D arm's answer logits (comparison 2);
- ``tool``: one image → the specialist and its dense head → region masks → region text (the tool call).

Weights are untrained (latency does not depend on their values); sizes come from
``conf/<profile>/encoder_fusion.yaml`` (the overlay on the default). Wall time per call, median and 90th
percentile of ``--repeats`` calls after ``--warmup``; the load average is printed beside the table —
on a shared machine read the numbers as upper bounds.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from paperworks.core.lm import train_tokenizer  # noqa: E402
from paperworks.core.vision.contrastive import ImageTextModel  # noqa: E402
from paperworks.core.vision.encoders import frames_to_tensor  # noqa: E402
from paperworks.encoder_fusion.decoder import ReportDecoder, lm_config  # noqa: E402
from paperworks.encoder_fusion.models import Specialist, foundation_encoder  # noqa: E402
from paperworks.encoder_fusion.params import FUSIONS, MODALITIES, Params  # noqa: E402
from paperworks.encoder_fusion.reports import realise  # noqa: E402
from paperworks.encoder_fusion.tool import SegmentationTool  # noqa: E402
from paperworks.encoder_fusion.volume import VolumeVQA, render_volume  # noqa: E402
from paperworks.encoder_fusion.world import coarse_view, render_case  # noqa: E402

QUESTION_DIM = 384  # MiniLM sentence embeddings


def load_params(profile: str) -> Params:
    def read(name: str) -> dict:
        return yaml.safe_load((REPO / "conf" / name / "encoder_fusion.yaml").read_text()) or {}

    def merge(a: dict, b: dict) -> dict:
        out = dict(a)
        for k, v in b.items():
            out[k] = merge(a[k], v) if isinstance(v, dict) and isinstance(a.get(k), dict) else v
        return out

    raw = read("default")
    if profile != "default":
        raw = merge(raw, read(profile))
    return Params.model_validate(raw)


def timeit(fn, repeats: int, warmup: int) -> tuple[float, float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(round(0.9 * (len(times) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="default", choices=("default", "smoke", "paper"))
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--report-tokens", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    p = load_params(a.profile)
    load0 = os.getloadavg()

    image, findings, _, _ = render_case(1, "xray", p.world)
    images = image[None]
    coarse = coarse_view(images)
    grid = p.world.size // 16
    torch.manual_seed(0)
    foundation = ImageTextModel(foundation_encoder(p.foundation), text_dim=QUESTION_DIM).image_encoder.eval()
    specialists = {m: Specialist(p.specialist).eval() for m in MODALITIES}
    dims = {"foundation": p.foundation.widths[-1], **{m: p.specialist.widths[-1] for m in MODALITIES}}
    question = torch.randn(1, QUESTION_DIM)
    texts = [realise(findings, "xray", np.random.default_rng(i), 0.0) for i in range(200)]
    tokenizer = train_tokenizer(texts, vocab_size=p.decoder.vocab_size)

    def tokens_of(fusion: str) -> dict[str, torch.Tensor]:
        tok = {"foundation": foundation.forward_features(frames_to_tensor(coarse)).flatten(2).transpose(1, 2)}
        if fusion == "foundation":  # the other encoders are not run at all
            tok.update({m: torch.zeros(1, grid * grid, dims[m]) for m in MODALITIES})
        else:
            full = frames_to_tensor(images)
            tok.update({m: specialists[m].encoder.forward_features(full).flatten(2).transpose(1, 2) for m in MODALITIES})
        return tok

    rows = []
    with torch.inference_mode():
        for fusion in FUSIONS:
            dec = ReportDecoder(fusion, dims, QUESTION_DIM, grid, p.head, lm_config(p.decoder, grid * grid, a.report_tokens + 2),
                                len(tokenizer), seed=0).eval()
            vqa = dec.fusion.eval()
            med, p90 = timeit(lambda: vqa(tokens_of(fusion), question), a.repeats, a.warmup)
            rows.append(("vqa", fusion, med, p90))
            med, p90 = timeit(lambda: dec.generate(tokens_of(fusion), tokenizer.bos_token_id, -1, a.report_tokens),
                              max(5, a.repeats // 5), 2)
            rows.append(("report", f"{fusion} ({a.report_tokens} tokens)", med, p90))
        vol, _ = render_volume(1, p.volume)
        vol_t = torch.from_numpy(vol[None])
        for arm in p.volume.arms:
            torch.manual_seed(0)
            model = VolumeVQA(arm, p.volume).eval()
            med, p90 = timeit(lambda: model(vol_t), a.repeats, a.warmup)
            rows.append(("volume", arm, med, p90))
        tool = SegmentationTool(specialists["xray"], "xray")
        med, p90 = timeit(lambda: tool(images), a.repeats, a.warmup)
        rows.append(("tool", "segmentation (specialist + dense head + region text)", med, p90))
    load1 = os.getloadavg()
    print(f"# encoder_fusion latency, batch 1, {a.threads} thread(s), profile {a.profile} sizes "
          f"(image {p.world.size}², volume {p.volume.depth}×{p.volume.size}², decoder d{p.decoder.hidden_size} "
          f"L{p.decoder.num_layers}), untrained weights, torch {torch.__version__}")
    print(f"# load average before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} "
          f"(1/5/15 min), {os.cpu_count()} CPUs")
    print("| call | arm | median ms | p90 ms |")
    print("| --- | --- | ---: | ---: |")
    for call, arm, med, p90 in rows:
        print(f"| {call} | {arm} | {med:.2f} | {p90:.2f} |")


if __name__ == "__main__":
    main()
