"""transformers' runner: PyTorch `XLNetModel`, `XLNetForSequenceClassification` and `XLNetLMHeadModel` on the
CPU, tasks "inference", "finetune" and "pretrain" (eager PyTorch, no XLA).

Conventions (`XLNetModel.forward`): attention_mask 1 = real token (it computes input_mask = 1 - attention_mask),
token_type_ids are the segment ids, perm_mask[b, i, j] = 1 means i may NOT attend to j and target_mapping is
one-hot [B, P, T], all as ours. mem_len None and use_mems=False: no memory.
"""

from __future__ import annotations

import contextlib
import os

from xlnet_tf.benchmarks.common import (
    TASKS, Case, ReferenceMissing, Unsupported, require_split_heads, synthetic_batch, time_case,
)

SEED = 0
TRAINING_DROPOUT = 0.1
NUM_CLASSES = 2


def run(case: Case) -> dict:
    """Times `case` on transformers' XLNet -> {"seconds", "note"} (+ "loss_first", "loss_last" when training)."""
    # Without this, importing the XLNet models also imports TensorFlow (transformers.loss -> image_transforms).
    os.environ.setdefault("USE_TF", "0")
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as error:
        raise ReferenceMissing(f"transformers (with torch) is not installed: {error}") from error
    _check(case)
    torch.manual_seed(SEED)
    tensors = _tensors(case)
    precision = ", autocast bfloat16" if case.precision == "bfloat16" else ""
    return time_case(
        case, lambda: _inference_step(case, tensors), lambda losses: _train_step(case, tensors, losses),
        f"eager PyTorch, inference_mode{precision}", f"eager PyTorch, backward + clip_grad_norm_ + AdamW{precision}")


def _check(case):
    """Raises Unsupported for what transformers' XLNet cannot run here."""
    if case.task not in TASKS:
        raise Unsupported(f"unknown task {case.task!r}")
    if case.xla:
        raise Unsupported("transformers' PyTorch XLNet runs eagerly on the CPU here: no XLA")
    if case.precision not in ("float32", "bfloat16"):
        raise Unsupported(f"transformers runner supports float32 and bfloat16, not {case.precision!r}")
    require_split_heads(case, "transformers' XLNetConfig")


def _tensors(case):
    """Our synthetic batch as torch tensors with transformers' argument names (ids int64, masks float32)."""
    import torch

    features = synthetic_batch(case)
    names = {"input_ids": "input_ids", "segment_ids": "token_type_ids", "padding_mask": "attention_mask",
             "perm_mask": "perm_mask", "target_mapping": "target_mapping"}
    tensors = {names[key]: torch.from_numpy(value) for key, value in features.items() if key in names}
    for name in ("input_ids", "token_type_ids"):
        tensors[name] = tensors[name].long()
    tensors["attention_mask"] = tensors["attention_mask"].float()
    tensors["labels"] = torch.from_numpy(
        features["target_ids"] if case.task == "pretrain" else features["label_ids"]).long()
    return tensors


def _config(case, dropout):
    """XLNetConfig for `case`: GELU, bi-directional attention, untied r biases, no memory, summary of the last
    token (dense tanh, dropout) for classification."""
    import transformers

    dims = case.dims
    return transformers.XLNetConfig(
        vocab_size=dims["n_token"], d_model=dims["d_model"], n_layer=dims["n_layer"], n_head=dims["n_head"],
        d_inner=dims["d_inner"], ff_activation="gelu", untie_r=True, attn_type="bi", mem_len=None,
        use_mems_eval=False, use_mems_train=False, dropout=dropout, summary_type="last", summary_use_proj=True,
        summary_activation="tanh", summary_last_dropout=dropout, num_labels=NUM_CLASSES)


def _autocast(case):
    import torch

    if case.precision == "bfloat16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _inference_step(case, tensors):
    """The encoder forward in eval mode under inference_mode; returns the last hidden states."""
    import torch
    import transformers

    model = transformers.XLNetModel(_config(case, dropout=0.0)).eval()
    inputs = {name: tensors[name] for name in ("input_ids", "token_type_ids", "attention_mask")}

    def step():
        with torch.inference_mode(), _autocast(case):
            return model(**inputs, use_mems=False).last_hidden_state

    return step


def _train_step(case, tensors, losses):
    """One step of the sequence classifier ("finetune") or the tied-LM-head two-stream model ("pretrain"):
    loss, backward, global-norm clipping at 1.0, AdamW; appends the loss to `losses`."""
    import torch
    import transformers

    if case.task == "finetune":
        model = transformers.XLNetForSequenceClassification(_config(case, TRAINING_DROPOUT))
        inputs = {name: tensors[name] for name in ("input_ids", "token_type_ids", "attention_mask", "labels")}
    else:
        model = transformers.XLNetLMHeadModel(_config(case, TRAINING_DROPOUT))
        inputs = tensors
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01, eps=1e-6)

    def step():
        with _autocast(case):
            loss = model(**inputs, use_mems=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())

    return step
