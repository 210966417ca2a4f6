"""The tiny causal-LM kit shared by the language tracks (see README.md in this folder).

A tokenizer trained on a track's own corpus, a transformers Llama model built from a
config (no hub), a training loop, safetensors checkpoints and batched sampling.
"""
from paperworks.core.lm.model import (
    LMConfig,
    build_model,
    expected_shapes,
    load_checkpoint,
    save_checkpoint,
)
from paperworks.core.lm.sampling import (
    Samples,
    check_prompt_fits,
    completion_logits,
    encode_prompts,
    position_ids_from_mask,
    sample,
)
from paperworks.core.lm.tokenizer import (
    SPECIAL_TOKENS,
    load_tokenizer,
    save_tokenizer,
    train_tokenizer,
)
from paperworks.core.lm.train import (
    TrainConfig,
    encode_sft,
    log_row,
    make_optimizer,
    sft_loss,
    train_sft,
    warmup_cosine,
)

__all__ = [
    "LMConfig", "build_model", "expected_shapes", "load_checkpoint", "save_checkpoint",
    "Samples", "check_prompt_fits", "completion_logits", "encode_prompts", "position_ids_from_mask", "sample",
    "SPECIAL_TOKENS", "load_tokenizer", "save_tokenizer", "train_tokenizer",
    "TrainConfig", "encode_sft", "log_row", "make_optimizer", "sft_loss", "train_sft", "warmup_cosine",
]
