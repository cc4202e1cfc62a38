"""transformers' runner: PyTorch `XLNetModel`, `XLNetForSequenceClassification` and `XLNetLMHeadModel` on the
CPU, tasks "inference", "finetune" and "pretrain" (eager PyTorch, no XLA), and "lengths-finetune" with dynamic
padding (each batch LEFT-padded to its longest row, as transformers' XLNet tokenizer pads); in float32, or in
bfloat16 in one of TORCH_BFLOAT16_MODES (`Case.precision_mode`): "weights" (the model and its float inputs cast
to bfloat16, AdamW on bfloat16 parameters) or "autocast" (float32 parameters, the steps under torch.autocast).

Conventions (`XLNetModel.forward`): attention_mask 1 = real token (it computes input_mask = 1 - attention_mask),
token_type_ids are the segment ids, perm_mask[b, i, j] = 1 means i may NOT attend to j and target_mapping is
one-hot [B, P, T], all as ours. mem_len None and use_mems=False: no memory.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np

from xlnet_tf.benchmarks.common import (
    STEP_TASKS, TORCH_BFLOAT16_MODES, Case, ReferenceMissing, Unsupported, length_examples, precision_text,
    require_split_heads, synthetic_batch, time_case, time_iterations,
)

SEED = 0
TRAINING_DROPOUT = 0.1
NUM_CLASSES = 2
# XLNet's special ids (as xlnet_tf.data.graph_features) and the segment ids transformers' XLNet tokenizer writes.
SEP_ID, CLS_ID, PAD_ID = 4, 3, 5
SEG_A, SEG_CLS, SEG_PAD = 0, 2, 3


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
    if case.task == "lengths-finetune":
        return _lengths_finetune(case)
    tensors = _tensors(case)
    return time_case(
        case, lambda: _inference_step(case, tensors), lambda losses: _train_step(case, tensors, losses),
        f"eager PyTorch, inference_mode{_in(case)}", f"eager PyTorch, backward + clip_grad_norm_ + AdamW{_in(case)}")


def _in(case):
    """The note's words on a reduced precision: ", bfloat16 weights" / ", bfloat16 autocast", else nothing."""
    return f", {precision_text(case.precision, case.precision_mode)}" if case.precision_mode else ""


def _check(case):
    """Raises Unsupported for what transformers' XLNet cannot run here."""
    if case.task not in STEP_TASKS + ("lengths-finetune",):
        raise Unsupported(f"transformers runs {STEP_TASKS} and lengths-finetune, not {case.task!r}")
    if case.task == "lengths-finetune" and case.padding != "dynamic":
        raise Unsupported("transformers fine-tunes on real lengths with dynamic padding only")
    if case.xla:
        raise Unsupported("transformers' PyTorch XLNet runs eagerly on the CPU here: no XLA")
    modes = {"float32": ("",), "bfloat16": TORCH_BFLOAT16_MODES}
    if case.precision_mode not in modes.get(case.precision, ()):
        raise Unsupported(f"transformers runner supports float32 and bfloat16 {' / '.join(TORCH_BFLOAT16_MODES)}, not "
                          f"{precision_text(case.precision, case.precision_mode)!r}")
    require_split_heads(case, "transformers' XLNetConfig")


def _tensors(case):
    """Our synthetic batch as torch tensors with transformers' argument names (ids int64, masks float32; bfloat16
    for the "weights" mode)."""
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
    return _inputs_in_precision(case, tensors)


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
    """torch.autocast to bfloat16 in the "autocast" mode, else nothing."""
    import torch

    if case.precision_mode == "autocast":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _model_in_precision(case, model):
    """`model`, its parameters cast to bfloat16 in the "weights" mode."""
    import torch

    return model.to(torch.bfloat16) if case.precision_mode == "weights" else model


def _inputs_in_precision(case, tensors):
    """`tensors` (a dict), the floating ones (masks, target mapping) cast to bfloat16 in the "weights" mode."""
    import torch

    if case.precision_mode != "weights":
        return tensors
    return {name: value.to(torch.bfloat16) if value.is_floating_point() else value for name, value in tensors.items()}


def _inference_step(case, tensors):
    """The encoder forward in eval mode under inference_mode; returns the last hidden states."""
    import torch
    import transformers

    model = _model_in_precision(case, transformers.XLNetModel(_config(case, dropout=0.0)).eval())
    inputs = {name: tensors[name] for name in ("input_ids", "token_type_ids", "attention_mask")}

    def step():
        with torch.inference_mode(), _autocast(case):
            return model(**inputs, use_mems=False).last_hidden_state

    return step


def _classifier(case):
    """A randomly initialised XLNetForSequenceClassification in train mode and its AdamW."""
    import transformers

    return _with_optimizer(case, transformers.XLNetForSequenceClassification(_config(case, TRAINING_DROPOUT)))


def _with_optimizer(case, model):
    """(`model` in train mode in the case's precision, its AdamW as ours: lr 2e-5, weight decay 0.01, epsilon
    1e-6)."""
    import torch

    model = _model_in_precision(case, model.train())
    return model, torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01, eps=1e-6)


def _update(model, optimizer, loss):
    """Backward, global-norm clipping at 1.0, AdamW step."""
    import torch

    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def collate(sentences, labels):
    """One batch, LEFT-padded to its longest row as transformers' XLNet tokenizer pads (`A <sep> <cls>`,
    segments A 0 / <cls> 2 / pad 3) -> torch int64 input_ids, token_type_ids [B, W], float32 attention_mask
    [B, W] (1 = real token), int64 labels [B]."""
    import torch

    width = max(len(s) for s in sentences) + 2
    ids = np.full((len(sentences), width), PAD_ID, np.int64)
    segments = np.full((len(sentences), width), SEG_PAD, np.int64)
    mask = np.zeros((len(sentences), width), np.float32)
    for row, sentence in enumerate(sentences):
        start = width - len(sentence) - 2
        ids[row, start:] = np.concatenate([sentence, [SEP_ID, CLS_ID]])
        segments[row, start:] = SEG_A
        segments[row, -1] = SEG_CLS
        mask[row, start:] = 1.0
    return {"input_ids": torch.from_numpy(ids), "token_type_ids": torch.from_numpy(segments),
            "attention_mask": torch.from_numpy(mask), "labels": torch.from_numpy(labels.astype(np.int64))}


def _lengths_finetune(case):
    """`case.warmup` untimed then `case.iterations` timed steps over consecutive batches of a seeded
    permutation of the case's examples (`length_examples`), the collation of each batch timed with its step.
    -> seconds [steps], timed_examples, real / padded tokens per step of the timed batches, losses."""
    sentences, labels = length_examples(case)
    steps = case.warmup + case.iterations
    order = np.resize(np.random.default_rng(SEED).permutation(len(sentences)), steps * case.batch_size)
    batches = order.reshape(steps, case.batch_size)
    model, optimizer = _classifier(case)
    losses, pending = [], iter(batches)

    def step():
        rows = next(pending)
        batch = _inputs_in_precision(case, collate([sentences[i] for i in rows], labels[rows]))
        with _autocast(case):
            loss = model(**batch, use_mems=False).loss
        _update(model, optimizer, loss)
        losses.append(loss.item())

    seconds = time_iterations(step, case.warmup, case.iterations)
    timed = batches[case.warmup:]
    widths = [max(len(sentences[i]) for i in rows) + 2 for rows in timed]
    return {
        "seconds": seconds, "timed_examples": case.iterations * case.batch_size, "steps": case.iterations,
        "real_tokens_per_step": sum(len(sentences[i]) + 2 for i in timed.reshape(-1)) / case.iterations,
        "padded_tokens_per_step": case.batch_size * sum(widths) / case.iterations,
        "loss_first": losses[case.warmup], "loss_last": losses[-1],
        "note": "eager PyTorch, collate (left padding to the batch's longest row) + backward + clip_grad_norm_ + "
                f"AdamW{_in(case)}",
    }


def _train_step(case, tensors, losses):
    """One step of the sequence classifier ("finetune") or the tied-LM-head two-stream model ("pretrain"):
    loss, backward, global-norm clipping at 1.0, AdamW; appends the loss to `losses`."""
    import transformers

    if case.task == "finetune":
        model, optimizer = _classifier(case)
        inputs = {name: tensors[name] for name in ("input_ids", "token_type_ids", "attention_mask", "labels")}
    else:
        model, optimizer = _with_optimizer(case, transformers.XLNetLMHeadModel(_config(case, TRAINING_DROPOUT)))
        inputs = tensors

    def step():
        with _autocast(case):
            loss = model(**inputs, use_mems=False).loss
        _update(model, optimizer, loss)
        losses.append(loss.item())

    return step
