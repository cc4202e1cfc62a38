"""Converters: published TF1 XLNet checkpoints and transformers XLNet weights -> our pretrained directories.

Both sources are first read into one canonical dict of numpy arrays (names below, our shapes), then
assigned to an XLNetModel / XLNetPretrainer and saved with `save_pretrained`:

    word_embedding [n_token, d]      mask_emb [d]         seg_embed [n_layer, 2, n_head, d_head]
    r_w_bias / r_r_bias / r_s_bias   [n_layer, n_head, d_head] (untie_r) or [n_head, d_head]
    layer_{i}/rel_attn/{q,k,v,r,o}   [d, n_head, d_head]
    layer_{i}/rel_attn/layer_norm/{gamma,beta}, layer_{i}/ff/layer_norm/{gamma,beta}   [d]
    layer_{i}/ff/layer_1_kernel [d, d_inner], layer_1_bias, layer_2_kernel [d_inner, d], layer_2_bias
    lm_bias [n_token]                (only when the source has an LM head)
"""

from __future__ import annotations

import logging

import numpy as np

from xlnet_tf import files
from xlnet_tf.config import ConfigError, RunOptions, XLNetConfig
from xlnet_tf.errors import UserError

log = logging.getLogger(__name__)

# transformers' activation names -> ours ("gelu" there is the exact erf form).
_TRANSFORMERS_ACTIVATIONS = {"gelu": "gelu_exact", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "relu": "relu"}
_BIASES = ("r_w_bias", "r_r_bias", "r_s_bias")
_ATTENTION = ("q", "k", "v", "r", "o")


class ConversionError(UserError):
    """A source checkpoint that cannot be converted; the message names the file and variable."""


def _layer_names(i):
    attention = [f"layer_{i}/rel_attn/{name}" for name in _ATTENTION]
    norms = [f"layer_{i}/{part}/layer_norm/{p}" for part in ("rel_attn", "ff") for p in ("gamma", "beta")]
    ff = [f"layer_{i}/ff/{name}" for name in ("layer_1_kernel", "layer_1_bias", "layer_2_kernel", "layer_2_bias")]
    return attention + norms + ff


def encoder_variables(model):
    """Canonical name -> variable for an XLNetModel."""
    variables = {name: getattr(model, name) for name in ("mask_emb", "seg_embed") + _BIASES}
    variables["word_embedding"] = model.word_embedding.embeddings
    for i, block in enumerate(model.blocks):
        attention, ff = block.attention, block.feed_forward
        for name in _ATTENTION:
            variables[f"layer_{i}/rel_attn/{name}"] = getattr(attention, name)
        for part, layer in (("rel_attn", attention), ("ff", ff)):
            variables[f"layer_{i}/{part}/layer_norm/gamma"] = layer.layer_norm.gamma
            variables[f"layer_{i}/{part}/layer_norm/beta"] = layer.layer_norm.beta
        for name in ("layer_1_kernel", "layer_1_bias", "layer_2_kernel", "layer_2_bias"):
            variables[f"layer_{i}/ff/{name}"] = getattr(ff, name)
    return variables


def assign_weights(model, weights, source):
    """Assigns canonical `weights` to an XLNetModel or XLNetPretrainer; every variable must be covered."""
    encoder = getattr(model, "transformer", model)
    variables = encoder_variables(encoder)
    if hasattr(model, "lm_bias"):
        variables["lm_bias"] = model.lm_bias
    if encoder is not model:  # fine-tuning heads: canonical name = the variable's path
        for variable in model.weights:
            if not variable.path.startswith("transformer/") and variable is not getattr(model, "lm_bias", None):
                variables[variable.path] = variable
    missing = sorted(set(variables) - set(weights))
    if missing:
        raise ConversionError(f"{source}: no value for {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    for name, variable in variables.items():
        value = np.asarray(weights[name], dtype=np.float32)
        if tuple(value.shape) != tuple(variable.shape):
            raise ConversionError(
                f"{source}: {name} has shape {tuple(value.shape)}, the config needs {tuple(variable.shape)}"
            )
        variable.assign(value)


def _save(config, weights, out_dir, source, extra_files=(), finetune_config=None):
    from xlnet_tf.heads import build_head_model, head_arguments, save_finetuned
    from xlnet_tf.model import XLNetModel, XLNetPretrainer

    run_options = RunOptions(dropout=0.0, dropatt=0.0)
    extra_files = [f for f in extra_files if f]
    if finetune_config:
        model = build_head_model(finetune_config["task"], config, run_options, **head_arguments(finetune_config))
        assign_weights(model, weights, source)
        save_finetuned(model, out_dir, finetune_config, extra_files)
        return model
    model_class = XLNetPretrainer if "lm_bias" in weights else XLNetModel
    model = model_class(config, run_options)
    assign_weights(model, weights, source)
    model.save_pretrained(out_dir, extra_files=extra_files)
    return model


def _linear(tensors, name, take):
    """A torch Linear `name` -> (kernel [in, out], bias or None)."""
    kernel = take(f"{name}.weight").T
    return kernel, tensors.get(f"{name}.bias")


def _transformers_head(hf, tensors, take, max_seq_len):
    """Head weights (canonical name = our variable path) and the finetune config, from a transformers head."""
    weights = {}

    def put(ours, theirs):
        kernel, bias = _linear(tensors, theirs, take)
        weights[f"{ours}/kernel"] = kernel
        if bias is not None:
            weights[f"{ours}/bias"] = bias

    architecture = (hf.get("architectures") or [""])[0]
    if "start_logits.dense.weight" in tensors:
        put("start_dense", "start_logits.dense")
        put("end_dense_0", "end_logits.dense_0")
        put("end_dense_1", "end_logits.dense_1")
        put("answer_dense_0", "answer_class.dense_0")
        put("answer_dense_1", "answer_class.dense_1")
        weights["end_layer_norm/gamma"] = take("end_logits.LayerNorm.weight")
        weights["end_layer_norm/beta"] = take("end_logits.LayerNorm.bias")
        return weights, {"task": "squad", "start_n_top": hf.get("start_n_top", 5), "end_n_top": hf.get("end_n_top", 5),
                         "max_seq_len": max_seq_len}
    if "logits_proj.weight" not in tensors:
        return {}, None
    put("sequence_summary/summary", "sequence_summary.summary")
    put("logits_proj", "logits_proj")
    num_labels = tensors["logits_proj.weight"].shape[0]
    if "MultipleChoice" in architecture:
        return weights, {"task": "race", "max_seq_len": max_seq_len}
    if num_labels == 1 or hf.get("problem_type") == "regression":
        return weights, {"task": "regression", "max_seq_len": max_seq_len}
    id2label = hf.get("id2label") or {}
    labels = [id2label.get(str(i), id2label.get(i, f"LABEL_{i}")) for i in range(num_labels)]
    return weights, {"task": "classification", "num_labels": num_labels, "label_names": labels,
                     "max_seq_len": max_seq_len}


# -- transformers ---------------------------------------------------------------------------------------------


def read_transformers(src_dir, max_seq_len=512):
    """Reads a transformers XLNet directory (config.json + model.safetensors) -> (XLNetConfig, weights,
    finetune config of its head or None)."""
    from safetensors.numpy import load, load_file

    config_path = files.join(src_dir, "config.json")
    weights_path = files.join(src_dir, "model.safetensors")
    for path in (config_path, weights_path):
        if not files.exists(path):
            raise ConversionError(f"{path}: missing (a transformers XLNet directory has config.json and model.safetensors)")
    hf = files.read_json(config_path)
    activation = hf.get("ff_activation", "gelu")
    if activation not in _TRANSFORMERS_ACTIVATIONS:
        raise ConversionError(f"{config_path}: ff_activation {activation!r} is not one of {sorted(_TRANSFORMERS_ACTIVATIONS)}")
    tensors = load(files.read_bytes(weights_path)) if files.is_remote(weights_path) else load_file(weights_path)
    tensors = {name[len("transformer."):] if name.startswith("transformer.") else name: value
               for name, value in tensors.items()}
    n_layer = hf["n_layer"]

    def take(name):
        if name not in tensors:
            raise ConversionError(f"{weights_path}: no tensor {name!r}")
        return tensors[name]

    weights = {"word_embedding": take("word_embedding.weight"), "mask_emb": take("mask_emb").reshape(-1)}
    stacked = {bias: np.stack([take(f"layer.{i}.rel_attn.{bias}") for i in range(n_layer)]) for bias in _BIASES}
    untie_r = bool(hf.get("untie_r", True))
    if not untie_r and not all(np.array_equal(stacked[b][0], stacked[b][i]) for b in _BIASES for i in range(n_layer)):
        log.warning("%s: untie_r is false but the per-layer biases differ; converting as untie_r=true", config_path)
        untie_r = True
    for bias in _BIASES:
        weights[bias] = stacked[bias] if untie_r else stacked[bias][0]
    weights["seg_embed"] = np.stack([take(f"layer.{i}.rel_attn.seg_embed") for i in range(n_layer)])
    for i in range(n_layer):
        prefix = f"layer.{i}"
        for name in _ATTENTION:
            weights[f"layer_{i}/rel_attn/{name}"] = take(f"{prefix}.rel_attn.{name}")
        for part in ("rel_attn", "ff"):
            weights[f"layer_{i}/{part}/layer_norm/gamma"] = take(f"{prefix}.{part}.layer_norm.weight")
            weights[f"layer_{i}/{part}/layer_norm/beta"] = take(f"{prefix}.{part}.layer_norm.bias")
        for n in (1, 2):  # torch Linear stores [out, in]
            weights[f"layer_{i}/ff/layer_{n}_kernel"] = take(f"{prefix}.ff.layer_{n}.weight").T
            weights[f"layer_{i}/ff/layer_{n}_bias"] = take(f"{prefix}.ff.layer_{n}.bias")
    if "lm_loss.bias" in tensors:
        weights["lm_bias"] = tensors["lm_loss.bias"]
        if "lm_loss.weight" in tensors and not np.array_equal(tensors["lm_loss.weight"], weights["word_embedding"]):
            raise ConversionError(f"{weights_path}: lm_loss.weight is not tied to word_embedding (unsupported)")
    config = XLNetConfig(
        n_token=hf["vocab_size"], d_model=hf["d_model"], n_layer=n_layer, n_head=hf["n_head"],
        d_head=hf["d_head"], d_inner=hf["d_inner"], ff_activation=_TRANSFORMERS_ACTIVATIONS[activation],
        untie_r=untie_r,
    )
    head_weights, finetune_config = _transformers_head(hf, tensors, take, max_seq_len)
    weights.update(head_weights)
    return config, weights, finetune_config


def convert_transformers(src_dir, out_dir, max_seq_len=512):
    """`xlnet-tf convert huggingface SRC OUT`: no torch needed. Heads (XLNetForSequenceClassification,
    XLNetForQuestionAnswering, XLNetForMultipleChoice) become fine-tuned directories. Copies `spiece.model`."""
    config, weights, finetune_config = read_transformers(src_dir, max_seq_len)
    spm = files.join(src_dir, "spiece.model")
    return _save(config, weights, out_dir, src_dir, [spm if files.exists(spm) else None], finetune_config)


# -- published TF1 checkpoints --------------------------------------------------------------------------------


def read_official(checkpoint_prefix, config):
    """Reads the published name-based checkpoint (`model/transformer/...`) -> canonical weights.

    Variables outside the model (global_step, optimizer slots such as `.../Adam`) are ignored.
    """
    import tensorflow as tf

    try:
        reader = files.checkpoint_reader(checkpoint_prefix)
    except (tf.errors.NotFoundError, tf.errors.DataLossError, ValueError) as error:
        raise ConversionError(f"{checkpoint_prefix}: not a readable TF checkpoint ({error})") from None
    available = reader.get_variable_to_shape_map()

    def take(name):
        if name not in available:
            raise ConversionError(f"{checkpoint_prefix}: no variable {name!r}")
        return reader.get_tensor(name)

    root = "model/transformer"
    weights = {
        "word_embedding": take(f"{root}/word_embedding/lookup_table"),
        "mask_emb": take(f"{root}/mask_emb/mask_emb").reshape(-1),
        "seg_embed": take(f"{root}/seg_embed"),
    }
    for bias in _BIASES:
        weights[bias] = take(f"{root}/{bias}")
    for i in range(config.n_layer):
        layer = f"{root}/layer_{i}"
        for name in _ATTENTION:
            weights[f"layer_{i}/rel_attn/{name}"] = take(f"{layer}/rel_attn/{name}/kernel")
        for part in ("rel_attn", "ff"):
            weights[f"layer_{i}/{part}/layer_norm/gamma"] = take(f"{layer}/{part}/LayerNorm/gamma")
            weights[f"layer_{i}/{part}/layer_norm/beta"] = take(f"{layer}/{part}/LayerNorm/beta")
        for n in (1, 2):
            weights[f"layer_{i}/ff/layer_{n}_kernel"] = take(f"{layer}/ff/layer_{n}/kernel")
            weights[f"layer_{i}/ff/layer_{n}_bias"] = take(f"{layer}/ff/layer_{n}/bias")
    if "model/lm_loss/bias" in available:
        weights["lm_bias"] = take("model/lm_loss/bias")
    return weights


def read_official_head(checkpoint_prefix, max_seq_len=512):
    """The head of a published fine-tuned checkpoint (run_classifier / run_squad / run_race names) ->
    (weights by our variable path, finetune config), or ({}, None) for a pretrained checkpoint."""
    reader = files.checkpoint_reader(checkpoint_prefix)
    names = reader.get_variable_to_shape_map()
    weights = {}

    def put(ours, theirs, bias=True):
        weights[f"{ours}/kernel"] = reader.get_tensor(f"{theirs}/kernel")
        if bias:
            weights[f"{ours}/bias"] = reader.get_tensor(f"{theirs}/bias")

    if "start_logits/dense/kernel" in names:
        put("start_dense", "start_logits/dense")
        put("end_dense_0", "end_logits/dense_0")
        put("end_dense_1", "end_logits/dense_1")
        put("answer_dense_0", "answer_class/dense_0")
        put("answer_dense_1", "answer_class/dense_1", bias=False)
        weights["end_layer_norm/gamma"] = reader.get_tensor("end_logits/LayerNorm/gamma")
        weights["end_layer_norm/beta"] = reader.get_tensor("end_logits/LayerNorm/beta")
        return weights, {"task": "squad", "start_n_top": 5, "end_n_top": 5, "max_seq_len": max_seq_len}
    summary = "model/sequnece_summary/summary"  # sic: the published scope name
    if f"{summary}/kernel" not in names:
        return {}, None
    put("sequence_summary/summary", summary)
    logits = [n[: -len("/kernel")] for n in names
              if n.endswith("/logit/kernel") and n.split("/")[0].startswith(("classification_", "regression_"))]
    if "logits/dense/kernel" in names:
        put("logits_proj", "logits/dense")
        return weights, {"task": "race", "max_seq_len": max_seq_len}
    if len(logits) != 1:
        raise ConversionError(f"{checkpoint_prefix}: expected one classification_*/logit or regression_*/logit head, "
                              f"found {sorted(logits)}")
    put("logits_proj", logits[0])
    if logits[0].startswith("regression_"):
        return weights, {"task": "regression", "max_seq_len": max_seq_len}
    num_labels = int(names[f"{logits[0]}/kernel"][1])
    return weights, {"task": "classification", "num_labels": num_labels,
                     "label_names": [str(i) for i in range(num_labels)], "max_seq_len": max_seq_len}


def convert_official(checkpoint_prefix, out_dir, config_path, spm_model=None, max_seq_len=512):
    """`xlnet-tf convert official CKPT_PREFIX OUT --config xlnet_config.json [--spm-model spiece.model]`;
    a fine-tuned checkpoint's head (classification, regression, SQuAD, RACE) is converted too."""
    config = XLNetConfig.from_json(config_path)
    if spm_model and not files.exists(spm_model):
        raise ConfigError(f"{spm_model}: no such SentencePiece model (--spm-model)")
    weights = read_official(checkpoint_prefix, config)
    head_weights, finetune_config = read_official_head(checkpoint_prefix, max_seq_len)
    weights.update(head_weights)
    return _save(config, weights, out_dir, checkpoint_prefix, [spm_model], finetune_config)
