"""The "generate" task: greedy text generation from one random prompt of `case.seq_len` tokens, `case.new_tokens`
new tokens (no stop ids, so every run generates all of them), timed end to end per generation (`warmup` untimed,
then `iterations` timed).

xlnet-tf: `xlnet_tf.generation` (the prompt as bidirectional context, then left to right; each layer's key /
value heads cached, 2 positions per step, one traced `tf.while_loop`). transformers: `XLNetLMHeadModel.generate`
with its cache (`use_mems`: each layer's hidden states, every step re-projecting keys, values and positions over
the whole prefix; its "offset = 2" scheme feeds 3 positions per step), eager PyTorch, `torch.inference_mode`.
Both start from random weights of the same architecture (the speed does not depend on the values).
"""

from __future__ import annotations

import os

import numpy as np

from xlnet_tf.benchmarks.common import Case, Unsupported, time_iterations

SEED = 0


def _check(case: Case):
    if case.precision != "float32" or case.xla:
        raise Unsupported("generate is measured in float32 without XLA")
    if case.batch_size != 1 or case.new_tokens < 1:
        raise Unsupported("generate is measured on one prompt with at least one new token")


def _prompt(case):
    """One random prompt [1, seq_len] of ids in [10, n_token) (the same for both implementations)."""
    rng = np.random.default_rng(SEED)
    return rng.integers(10, case.dims["n_token"], size=(1, case.seq_len), dtype=np.int32)


def _result(case, seconds, tokens, note):
    generated = int(np.asarray(tokens).size)
    if generated != case.new_tokens:
        raise RuntimeError(f"generated {generated} tokens, not {case.new_tokens}")
    return {"seconds": seconds, "new_tokens": case.new_tokens, "prompt_tokens": case.seq_len, "note": note}


def run_xlnet_tf(case: Case) -> dict:
    import keras

    from xlnet_tf.config import RunOptions, XLNetConfig
    from xlnet_tf.model import XLNetPretrainer

    _check(case)
    keras.utils.set_random_seed(SEED)
    model = XLNetPretrainer(XLNetConfig(**case.dims), RunOptions(dropout=0.0, dropatt=0.0))
    prompt = _prompt(case)
    produced = []

    def generate():
        produced.append(model.generate(prompt, max_new_tokens=case.new_tokens, stop_ids=())["tokens"])

    seconds = time_iterations(generate, max(case.warmup, 1), case.iterations)  # the first call traces
    return _result(case, seconds, produced[-1], "xlnet_tf.generation (cached key / value heads, one tf.while_loop)")


def run_transformers(case: Case) -> dict:
    os.environ.setdefault("USE_TF", "0")
    import torch
    from transformers import XLNetConfig, XLNetLMHeadModel

    _check(case)
    torch.manual_seed(SEED)
    dims = case.dims
    config = XLNetConfig(vocab_size=dims["n_token"], d_model=dims["d_model"], n_layer=dims["n_layer"],
                         n_head=dims["n_head"], d_inner=dims["d_inner"], ff_activation="gelu", dropout=0.0,
                         mem_len=None, use_mems_eval=True, pad_token_id=5, eos_token_id=None, bos_token_id=None)
    model = XLNetLMHeadModel(config).eval()
    prompt = torch.from_numpy(_prompt(case)).long()
    produced = []

    def generate():
        with torch.inference_mode():
            out = model.generate(prompt, max_new_tokens=case.new_tokens, min_new_tokens=case.new_tokens,
                                 do_sample=False, use_cache=True, pad_token_id=5, eos_token_id=None)
        produced.append(out[:, case.seq_len:].numpy())

    seconds = time_iterations(generate, case.warmup, case.iterations)
    return _result(case, seconds, produced[-1], "XLNetLMHeadModel.generate, use_mems cache, eager PyTorch, greedy")
