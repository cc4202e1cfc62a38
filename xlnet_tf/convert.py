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

import dataclasses
import logging
import os
import typing

import numpy as np

from xlnet_tf import files, tasks
from xlnet_tf.config import ATTN_TYPES, ConfigError, RunOptions, XLNetConfig, head_run_options
from xlnet_tf.errors import Spelling, UserError

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


def assign_weights(model, weights, source, strict=False):
    """Assigns canonical `weights` to an XLNetModel or XLNetPretrainer; every variable must be covered (and,
    with `strict`, every weight must have a variable)."""
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
    extra = sorted(set(weights) - set(variables))
    if strict and extra:
        raise ConversionError(f"{source}: the converted model has no variable for {extra}")
    for name, variable in variables.items():
        value = np.asarray(weights[name], dtype=np.float32)
        if tuple(value.shape) != tuple(variable.shape):
            raise ConversionError(
                f"{source}: {name} has shape {tuple(value.shape)}, the config needs {tuple(variable.shape)}"
            )
        variable.assign(value)


def _save(config, weights, out_dir, source, extra_files=(), finetune_config=None, strict=False, run_options=None):
    """Builds the model, assigns `weights` and saves it; `run_options` (RunOptions fields, in xlnet-tf's
    conventions) are recorded in OUT's run_options.json, the defaults of whatever loads it."""
    from xlnet_tf.heads import head_arguments, save_finetuned
    from xlnet_tf.model import RUN_OPTIONS_FILE, XLNetModel, XLNetPretrainer

    recorded = RunOptions.from_dict(run_options or {}, source=f"{source}: run options").recorded()
    if recorded:
        log.info("%s: records run options %s in %s (the defaults of whatever loads it; explicit arguments win)",
                 out_dir, recorded, RUN_OPTIONS_FILE)
    run_options = RunOptions(dropout=0.0, dropatt=0.0, **recorded)
    extra_files = [f for f in extra_files if f]
    if finetune_config:
        model = tasks.build_head_model(finetune_config["task"], config, run_options, **head_arguments(finetune_config))
        assign_weights(model, weights, source, strict)
        save_finetuned(model, out_dir, finetune_config, extra_files)
        return model
    model_class = XLNetPretrainer if "lm_bias" in weights else XLNetModel
    model = model_class(config, run_options)
    assign_weights(model, weights, source, strict)
    model.save_pretrained(out_dir, extra_files=extra_files)
    return model


# -- transformers ---------------------------------------------------------------------------------------------
#
# Every tensor of the source is used or reported, and so is every config.json / tokenizer_config.json value
# that changes what the model or tokenizer computes and that xlnet-tf does not implement. The run options that
# xlnet-tf implements (attn_type, bi_data, clamp_len, same_length, mem_len, reuse_len: RECORDED_RUN_OPTIONS) are
# carried into OUT/run_options.json in xlnet-tf's conventions, so that what loads OUT computes as transformers
# does. Values that only matter for training are not checked: dropout, summary_first_dropout,
# summary_last_dropout, initializer_range, use_mems_train; nor use_mems_eval (new_mems are returned whenever
# mem_len > 0; transformers' unbounded memory for mem_len null has no xlnet-tf counterpart), untie_r
# (transformers keeps per-layer biases whatever it says; the biases themselves decide, see below), pad / bos /
# eos ids, task_specific_params and other generation settings.

# config.json `architectures` entries this converter reads -> the head their tensors hold (None: encoder only)
_HF_ARCHITECTURES = {"XLNetModel": None, "XLNetLMHeadModel": "lm_head",
                     "XLNetForSequenceClassification": "sequence_head", "XLNetForMultipleChoice": "sequence_head",
                     "XLNetForQuestionAnswering": "span_head", "XLNetForTokenClassification": "token_head",
                     "XLNetForQuestionAnsweringSimple": "simple_span_head"}
_HF_HEAD_MODULES = ("sequence_summary", "logits_proj", "start_logits", "end_logits", "answer_class", "lm_loss",
                    "classifier", "qa_outputs")
_HF_HEAD_MARKS = {"span_head": "start_logits.dense.weight", "sequence_head": "logits_proj.weight",
                  "lm_head": "lm_loss.bias", "token_head": "classifier.weight", "simple_span_head": "qa_outputs.weight"}
_HF_TENSORS = "model.safetensors"
_HF_INDEX = "model.safetensors.index.json"  # sharded safetensors
# Weight files transformers may write instead of safetensors -> (what it is, from_pretrained's argument)
_HF_OTHER_FILES = {"pytorch_model.bin": ("a PyTorch pickle", ""),
                   "pytorch_model.bin.index.json": ("sharded PyTorch pickles", ""),
                   "tf_model.h5": ("transformers' TensorFlow (Keras 2) weights", ", from_tf=True"),
                   "flax_model.msgpack": ("transformers' Flax weights", ", from_flax=True")}
_HF_TOKENIZER_KEYS = {"do_lower_case": "lower_case", "keep_accents": "keep_accents", "remove_space": "remove_space"}
_HF_TOKENIZER_CLASSES = (None, "XLNetTokenizer", "XLNetTokenizerFast")
_LAYER_NORM_EPS = 1e-12  # the epsilon of every LayerNormalization in xlnet-tf
_ALLOW_HINT = "--allow-unused (Python: allow_unused=True)"


@dataclasses.dataclass(frozen=True)
class Unused:
    """One thing in a transformers directory that xlnet-tf does not implement: `what` names it (file, key or
    tensors, and value or shapes), `why` says what xlnet-tf implements and what converting without it does;
    `fatal`: it cannot be left out (the conversion stops even with allow_unused)."""

    what: str
    why: str
    fatal: bool = False

    def __str__(self):
        return f"{self.what}: {self.why}{' (cannot be left out)' if self.fatal else ''}"


class TransformersCheckpoint(typing.NamedTuple):
    """What `read_transformers` reads: the architecture, canonical weights, the head's finetune config (None
    for an encoder or LM directory), the tokenizer settings (`XLNetTokenizer` keywords; those of
    tokenizer_config.json over the published defaults), what was left out (`Unused`, with allow_unused) and the
    run options config.json sets (RunOptions fields that differ from the defaults, in xlnet-tf's conventions)."""

    config: XLNetConfig
    weights: dict
    finetune_config: dict | None
    tokenizer: dict
    left_out: tuple
    run_options: dict


def _shape(value):
    return "[" + ", ".join(str(n) for n in np.shape(value)) + "]"


def _tensor_groups(names, tensors, original):
    """'module: a [2, 3], b [3]' per module (name up to its last dot), in name order."""
    groups = {}
    for name in sorted(names, key=lambda n: original[n]):
        module, _, leaf = original[name].rpartition(".")
        groups.setdefault(module, []).append(f"{leaf} {_shape(tensors[name])}" if module else
                                             f"{original[name]} {_shape(tensors[name])}")
    return [(module, ", ".join(parts)) for module, parts in groups.items()]


def _load_safetensors(path):
    """name -> numpy array of one safetensors file (any filesystem); bfloat16 tensors are read with ml_dtypes
    (numpy has no bfloat16) and become float32 when assigned."""
    from safetensors.numpy import load, load_file

    try:
        return load(files.read_bytes(path)) if files.is_remote(path) else load_file(path)
    except (TypeError, KeyError) as error:
        if "bfloat16" not in str(error) and "BF16" not in str(error):
            raise
    import json
    import struct

    import ml_dtypes

    dtypes = {"BF16": ml_dtypes.bfloat16, "F64": np.float64, "F32": np.float32, "F16": np.float16,
              "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
    data = files.read_bytes(path)
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    out = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        if spec["dtype"] not in dtypes:
            raise ConversionError(f"{path}: tensor {name} has dtype {spec['dtype']}, which xlnet-tf cannot read")
        begin, end = spec["data_offsets"]
        out[name] = np.frombuffer(data[8 + size + begin: 8 + size + end], dtypes[spec["dtype"]]).reshape(spec["shape"])
    return out


def _read_transformers_tensors(src_dir, hf):
    """The source's tensors (model.safetensors, or the shards its index names); a directory without them
    gets a message naming the weight file it has and how to re-save it as safetensors."""
    single, index = files.join(src_dir, _HF_TENSORS), files.join(src_dir, _HF_INDEX)
    if files.exists(single):
        return single, _load_safetensors(single)
    if files.exists(index):
        shards = sorted(set(files.read_json(index).get("weight_map", {}).values()))
        tensors = {}
        for shard in shards:
            tensors.update(_load_safetensors(files.join(src_dir, shard)))
        return index, tensors
    architecture = next((a for a in hf.get("architectures") or [] if isinstance(a, str)), "XLNetModel")
    for name, (kind, argument) in _HF_OTHER_FILES.items():
        path = files.join(src_dir, name)
        if files.exists(path):
            raise ConversionError(
                f"{path}: {kind}; xlnet-tf reads transformers weights only as {_HF_TENSORS} (no torch needed). "
                f"Re-save the directory as safetensors with transformers (this needs torch"
                f"{' and TensorFlow' if 'from_tf' in argument else ''}):\n"
                f"  python -c \"import transformers; transformers.{architecture}.from_pretrained('{src_dir}'"
                f"{argument}).save_pretrained('{src_dir}', safe_serialization=True)\"\n"
                f"then run the conversion again.")
    raise ConversionError(f"{single}: missing (a transformers XLNet directory has config.json and {_HF_TENSORS})")


def _check_transformers_config(hf, unused):
    """config.json values that change the encoder's outputs and that xlnet-tf does not implement."""
    def report(key, why, fatal=False):
        unused.append(Unused(f"config.json {key} = {hf[key]!r}", why, fatal))

    activation = hf.get("ff_activation", "gelu")
    if activation not in _TRANSFORMERS_ACTIVATIONS:
        report("ff_activation", f"xlnet-tf implements {', '.join(sorted(_TRANSFORMERS_ACTIVATIONS))}", fatal=True)
    eps = hf.get("layer_norm_eps", _LAYER_NORM_EPS)
    if not isinstance(eps, (int, float)) or float(eps) != _LAYER_NORM_EPS:
        report("layer_norm_eps", f"xlnet-tf's layer norms use {_LAYER_NORM_EPS:g}; left out, they keep "
                                 f"{_LAYER_NORM_EPS:g} (outputs differ slightly)")
    if hf.get("pruned_heads"):
        report("pruned_heads", "xlnet-tf has no pruned attention heads", fatal=True)


def _transformers_run_options(hf, unused):
    """config.json's run options -> RunOptions fields that differ from the defaults (RECORDED_RUN_OPTIONS), in
    xlnet-tf's conventions; values that no xlnet-tf code path implements go to `unused` (left out)."""
    def report(key, why):
        unused.append(Unused(f"config.json {key} = {hf[key]!r}", why))

    options = {}
    attn_type = hf.get("attn_type", "bi")
    if attn_type in ATTN_TYPES:
        options["attn_type"] = attn_type
    else:
        report("attn_type", f"transformers and xlnet-tf implement {' and '.join(map(repr, ATTN_TYPES))}; left "
                            "out, the converted model attends both ways ('bi')")
    # As transformers, xlnet-tf's masks apply same_length with attn_type 'uni' only: recorded as it is.
    options["same_length"] = bool(hf.get("same_length", False))
    options["bi_data"] = bool(hf.get("bi_data", False))
    clamp = hf.get("clamp_len", -1)
    if clamp is not None and (isinstance(clamp, bool) or not isinstance(clamp, (int, float))):
        report("clamp_len", "not a number; left out, relative distances are not clamped")
    elif clamp is not None and clamp > 0:  # transformers clamps only when clamp_len > 0: 0 and -1 are our -1
        if clamp != int(clamp):
            report("clamp_len", "xlnet-tf clamps relative distances to a whole number; left out, they are not "
                                "clamped")
        else:
            options["clamp_len"] = int(clamp)
    for key in ("mem_len", "reuse_len"):  # null: no memory / the whole segment cached, which is our 0
        value = hf.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            report(key, "must be a whole number >= 0 or null; left out, as null")
        elif value:
            options[key] = value
    return RunOptions(**options).recorded()


def _summary_weights(hf, tensors, take, d_model, unused):
    """sequence_summary.* -> (our weights, whether the head can be built); reports the summary settings that
    xlnet-tf does not implement (it implements: the last position -> Linear(d, d) -> tanh)."""
    def report(key, why, fatal=False):
        unused.append(Unused(f"config.json {key} = {hf.get(key)!r}", why, fatal))

    summary_type = hf.get("summary_type", "last")
    if summary_type != "last":
        report("summary_type", "xlnet-tf's sequence summary reads the last position (<cls>, 'last'); left "
                               "out, the head reads the last position")
    activation = hf.get("summary_activation", "tanh")
    if activation != "tanh":
        report("summary_activation", "xlnet-tf's sequence summary applies tanh; left out, it applies tanh")
    if not hf.get("summary_use_proj", True):
        # transformers then has no projection: tanh(h_last). An identity projection gives the same outputs.
        log.info("summary_use_proj is false: the sequence summary is converted with an identity projection (same "
                 "outputs; fine-tuning trains it)")
        return {"sequence_summary/summary/kernel": np.eye(d_model, dtype=np.float32),
                "sequence_summary/summary/bias": np.zeros(d_model, np.float32)}, True
    kernel = tensors.get("sequence_summary.summary.weight")
    if kernel is not None and np.shape(kernel) != (d_model, d_model):
        report("summary_proj_to_labels", f"the summary projects to {np.shape(kernel)[0]} values "
               f"(sequence_summary.summary.weight {_shape(kernel)}); xlnet-tf's projects to d_model {d_model}; left "
               "out with the whole head (its tensors are listed)")
        return {}, False
    weights = {"sequence_summary/summary/kernel": take("sequence_summary.summary.weight").T,
               "sequence_summary/summary/bias": take("sequence_summary.summary.bias")}
    return weights, True


def _transformers_head(hf, tensors, take, max_seq_len, architecture, d_model, unused):
    """Head weights (canonical name = our variable path) and the finetune config of the head the tensors hold,
    or ({}, None); head settings xlnet-tf does not implement go to `unused` (those that make the head
    impossible to build leave the whole head out: ({}, None) and its tensors unread)."""
    weights = {}

    def put(ours, theirs, bias=True):  # a torch Linear: weight [out, in] -> our kernel [in, out]
        weights[f"{ours}/kernel"] = take(f"{theirs}.weight").T
        if bias:
            weights[f"{ours}/bias"] = take(f"{theirs}.bias")

    if _HF_HEAD_MARKS["span_head"] in tensors:
        put("start_dense", "start_logits.dense")
        put("end_dense_0", "end_logits.dense_0")
        put("end_dense_1", "end_logits.dense_1")
        put("answer_dense_0", "answer_class.dense_0")
        put("answer_dense_1", "answer_class.dense_1", bias=False)  # transformers has none either
        weights["end_layer_norm/gamma"] = take("end_logits.LayerNorm.weight")
        weights["end_layer_norm/beta"] = take("end_logits.LayerNorm.bias")
        return weights, {"task": "squad", "start_n_top": hf.get("start_n_top", 5), "end_n_top": hf.get("end_n_top", 5),
                         "max_seq_len": max_seq_len}
    if _HF_HEAD_MARKS["simple_span_head"] in tensors:
        # XLNetForQuestionAnsweringSimple: qa_outputs(sequence_output) -> start, end logits
        put("qa_outputs", "qa_outputs")
        return weights, {"task": "squad", "squad_head": "simple", "start_n_top": 20, "end_n_top": 20,
                         "max_seq_len": max_seq_len}
    if _HF_HEAD_MARKS["token_head"] in tensors and _HF_HEAD_MARKS["sequence_head"] not in tensors:
        # XLNetForTokenClassification: classifier(sequence_output) at every position (problem_type unused)
        put("classifier", "classifier")
        num_labels = int(np.shape(weights["classifier/kernel"])[1])
        return weights, tasks.get("token-classification").converted_config(max_seq_len, num_labels,
                                                                            _label_names(hf, num_labels))
    if _HF_HEAD_MARKS["sequence_head"] not in tensors:
        return {}, None
    num_labels = int(np.shape(tensors["logits_proj.weight"])[0])
    problem_type = hf.get("problem_type")
    if architecture == "XLNetForMultipleChoice":
        task = "race"
    elif problem_type == "regression" or problem_type is None and num_labels == 1:
        task = "regression"
        if num_labels != 1:
            unused.append(Unused(f"config.json problem_type = 'regression' with {num_labels} outputs "
                                 f"(logits_proj.weight {_shape(tensors['logits_proj.weight'])})",
                                 "xlnet-tf's regression head has one output; left out with the whole head (its "
                                 "tensors are listed)"))
            return {}, None
    elif problem_type == "multi_label_classification":
        task = "multi-label"  # each label's own sigmoid over the same logits
    else:
        task = "classification"
        if problem_type not in (None, "single_label_classification"):
            unused.append(Unused(f"config.json problem_type = {problem_type!r}",
                                 "transformers knows regression, single_label_classification and "
                                 "multi_label_classification; left out, it converts as single-label classification"))
    summary, buildable = _summary_weights(hf, tensors, take, d_model, unused)
    if not buildable:
        return {}, None
    weights.update(summary)
    put("logits_proj", "logits_proj")
    return weights, tasks.get(task).converted_config(max_seq_len, num_labels, _label_names(hf, num_labels))


def _label_names(hf, num_labels):
    """config.json's id2label in id order (transformers' LABEL_i where it has none)."""
    id2label = hf.get("id2label") or {}
    return [str(id2label.get(str(i), id2label.get(i, f"LABEL_{i}"))) for i in range(num_labels)]


def _transformers_tokenizer(src_dir, unused):
    """The tokenizer settings (XLNetTokenizer keywords) of SRC's tokenizer_config.json over the published
    defaults; reports a tokenizer class other than XLNet's and added tokens that spiece.model lacks."""
    from xlnet_tf.tokenization import TOKENIZER_DEFAULTS

    settings = dict(TOKENIZER_DEFAULTS)  # = transformers' XLNetTokenizer defaults
    name = "tokenizer_config.json"
    path = files.join(src_dir, name)
    hf_tok = files.read_json(path) if files.exists(path) else {}
    if not isinstance(hf_tok, dict):
        raise ConversionError(f"{path}: expected a JSON object")
    for theirs, ours in _HF_TOKENIZER_KEYS.items():
        if theirs in hf_tok:
            if not isinstance(hf_tok[theirs], bool):
                unused.append(Unused(f"{name} {theirs} = {hf_tok[theirs]!r}", "must be true or false", fatal=True))
            else:
                settings[ours] = hf_tok[theirs]
    if hf_tok.get("tokenizer_class") not in _HF_TOKENIZER_CLASSES:
        unused.append(Unused(f"{name} tokenizer_class = {hf_tok['tokenizer_class']!r}",
                             "xlnet-tf tokenizes as XLNetTokenizer (spiece.model + XLNet's preprocessing); left "
                             "out, converted models tokenize that way"))
    from xlnet_tf.model import SPM_FILE

    spm_path = files.join(src_dir, SPM_FILE)
    if not files.exists(spm_path):
        return settings
    added = {}  # id -> text of the tokens transformers matches before SentencePiece
    try:
        for key, token in (hf_tok.get("added_tokens_decoder") or {}).items():
            added[int(key)] = token.get("content") if isinstance(token, dict) else token
        added_path = files.join(src_dir, "added_tokens.json")
        if files.exists(added_path):
            added.update({int(i): content for content, i in files.read_json(added_path).items()})
    except (AttributeError, TypeError, ValueError) as error:
        raise ConversionError(f"{src_dir}: added tokens that cannot be read ({error})") from None
    if added:
        import sentencepiece

        processor = sentencepiece.SentencePieceProcessor(model_proto=files.read_bytes(spm_path))
        size = processor.get_piece_size()
        extra = sorted((i, content) for i, content in added.items()
                       if i >= size or processor.id_to_piece(i) != content)
        if extra:
            listed = ", ".join(f"{content!r} (id {i})" for i, content in extra)
            unused.append(Unused(f"{name} added tokens {listed}",
                                 f"not pieces of {SPM_FILE} ({size} pieces) at those ids; xlnet-tf's tokenizer "
                                 "uses SentencePiece alone; left out, such text is split into pieces"))
    return settings


def _unused_message(src_dir, unused):
    lines = "\n".join(f"  - {item}" for item in unused)
    message = (f"{src_dir}: not converted; it holds {len(unused)} thing(s) that xlnet-tf does not implement:\n"
               f"{lines}")
    if all(item.fatal for item in unused):
        return message
    fatal = " (all but those that cannot be left out)" if any(item.fatal for item in unused) else ""
    return (f"{message}\nTo convert without them{fatal}, pass {_ALLOW_HINT}; what is left out is then logged.")


def read_transformers(src_dir, max_seq_len=512, *, allow_unused=False):
    """Reads a transformers XLNet directory (config.json, model.safetensors, optional tokenizer_config.json)
    -> TransformersCheckpoint (config, weights, finetune config of its head or None, tokenizer settings,
    what was left out).

    Every tensor is used or reported, and so is every config value that changes outputs and that xlnet-tf does
    not implement (see `Unused`): reported things stop the conversion with a ConversionError that lists them
    all, unless `allow_unused`, which leaves them out (tensors unread, values ignored, an unimplemented head's
    tensors dropped so that the encoder alone is converted) and logs them.
    """
    src_dir = os.fspath(src_dir)
    config_path = files.join(src_dir, "config.json")
    if not files.exists(config_path):
        raise ConversionError(f"{config_path}: missing (a transformers XLNet directory has config.json and "
                              f"{_HF_TENSORS})")
    hf = files.read_json(config_path)
    if not isinstance(hf, dict):
        raise ConversionError(f"{config_path}: expected a JSON object")
    if hf.get("model_type", "xlnet") != "xlnet":
        raise ConversionError(f"{config_path}: model_type {hf['model_type']!r}; xlnet-tf converts XLNet models "
                              "(model_type 'xlnet')")
    for key in ("vocab_size", "d_model", "n_layer", "n_head", "d_inner"):
        if key not in hf:
            raise ConversionError(f"{config_path}: no {key!r}")
    weights_path, raw = _read_transformers_tensors(src_dir, hf)
    weights_file = files.basename(weights_path)
    original = {}  # our lookup name (no "transformer." prefix) -> the source's name
    for name in raw:
        original[name[len("transformer."):] if name.startswith("transformer.") else name] = name
    tensors = {name: raw[theirs] for name, theirs in original.items()}
    used = set()
    unused = []
    n_layer = hf["n_layer"]

    def take(name):
        if name not in tensors:
            raise ConversionError(f"{weights_path}: no tensor {name!r}")
        used.add(name)
        return tensors[name]

    _check_transformers_config(hf, unused)
    run_options = _transformers_run_options(hf, unused)
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

    # Heads: by tensor names, checked against config.json's architectures.
    architectures = [a for a in hf.get("architectures") or [] if isinstance(a, str)]
    known = [a for a in architectures if a in _HF_ARCHITECTURES]
    architecture = known[0] if known else None
    accounted = set()  # tensors an Unused entry names already
    for name in architectures:
        if name in _HF_ARCHITECTURES:
            continue
        unused.append(Unused(
            f"config.json architectures {name!r}",
            f"a head xlnet-tf does not implement (it converts {', '.join(_HF_ARCHITECTURES)}); left out, the "
            "converted directory holds the encoder" + (" and any head it implements" if known else " only")))
    wants = _HF_ARCHITECTURES.get(architecture)
    has = next((kind for kind, mark in _HF_HEAD_MARKS.items() if mark in tensors), None)
    if wants and wants != has:
        unused.append(Unused(f"config.json architectures {architecture!r}",
                             f"{weights_file} has no {_HF_HEAD_MARKS[wants]}, so not that head; left out, the "
                             "converted directory holds what the tensors hold"))
    head_weights, finetune_config = _transformers_head(hf, tensors, take, max_seq_len, architecture,
                                                       hf["d_model"], unused)
    weights.update(head_weights)
    if finetune_config:
        run_options = _head_run_options(run_options, config_path, unused)
    if finetune_config is None and _HF_HEAD_MARKS["lm_head"] in tensors:
        lm_weight = tensors.get("lm_loss.weight")
        if lm_weight is not None and not np.array_equal(lm_weight, weights["word_embedding"]):
            accounted.update(("lm_loss.weight", "lm_loss.bias"))
            unused.append(Unused(f"{weights_file} lm_loss.weight {_shape(lm_weight)}, lm_loss.bias "
                                 f"{_shape(tensors['lm_loss.bias'])}",
                                 "an LM head not tied to word_embedding (tie_word_embeddings false); xlnet-tf's LM "
                                 "head is tied; left out, the converted directory has no LM head"))
        else:
            weights["lm_bias"] = take("lm_loss.bias")
            if lm_weight is not None:
                used.add("lm_loss.weight")  # the tied copy

    for module, parts in _tensor_groups(sorted(set(tensors) - used - accounted), tensors, original):
        parts_of = module.removeprefix("transformer.").split(".")
        top = parts_of[0]
        if top in _HF_HEAD_MODULES:
            why = "tensors of a head that is not converted; left out"
        elif top == "layer" and len(parts_of) > 1 and parts_of[1].isdigit() and int(parts_of[1]) >= n_layer:
            why = f"beyond config.json's n_layer {n_layer}; left out"
        else:
            why = "not part of an XLNet model or head that xlnet-tf implements; left out"
        unused.append(Unused(f"{weights_file} tensors {module + ': ' if module else ''}{parts}", why))
    tokenizer = _transformers_tokenizer(src_dir, unused)
    if unused:
        if not allow_unused or any(item.fatal for item in unused):
            raise ConversionError(_unused_message(src_dir, unused))
        log.warning("%s: converted with allow_unused, leaving out %d thing(s) that xlnet-tf does not implement:\n%s",
                    src_dir, len(unused), "\n".join(f"  - {item}" for item in unused))
    config = XLNetConfig(
        n_token=hf["vocab_size"], d_model=hf["d_model"], n_layer=n_layer, n_head=hf["n_head"],
        d_head=hf.get("d_head", hf["d_model"] // hf["n_head"]), d_inner=hf["d_inner"],
        ff_activation=_TRANSFORMERS_ACTIVATIONS[hf.get("ff_activation", "gelu")], untie_r=untie_r,
    )
    if finetune_config:
        finetune_config.update(tokenizer)
    return TransformersCheckpoint(config, weights, finetune_config, tokenizer, tuple(unused), run_options)


def _head_run_options(run_options, source, unused):
    """The run options a converted head model records (HEAD_RUN_OPTIONS): bi_data goes to `unused` (a head
    model's rows are read forward whatever their place in a batch), mem_len / reuse_len are logged (a head
    returns no memory, so they change none of its outputs)."""
    kept, _ = head_run_options(run_options)
    if run_options.get("bi_data"):
        unused.append(Unused("config.json bi_data = True", "transformers then reads the second half of every batch "
                             "with backward relative positions, so a row's outputs depend on its place in the batch; "
                             "xlnet-tf's fine-tuned models read every row forward (evaluate, predict, export and "
                             "serving batch rows by length); left out, every row reads forward"))
    memory = {k: v for k, v in run_options.items() if k in ("mem_len", "reuse_len")}
    if memory:
        log.info("%s: %s not recorded: a fine-tuned model returns no memory, so they change none of its outputs",
                 source, memory)
    return kept


def convert_transformers(src_dir, out_dir, max_seq_len=512, *, allow_unused=False):
    """`xlnet-tf convert huggingface SRC OUT [--allow-unused]`: no torch needed. Heads
    (XLNetForSequenceClassification, XLNetForQuestionAnswering, XLNetForQuestionAnsweringSimple,
    XLNetForMultipleChoice, XLNetForTokenClassification) become fine-tuned directories. Copies `spiece.model`
    and writes the tokenizer settings of tokenizer_config.json (do_lower_case, keep_accents, remove_space) as
    `xlnet_tokenizer.json` (and into a head's finetune_config.json), and config.json's run options as
    `run_options.json` (the defaults of whatever loads OUT). What `read_transformers` reports stops the
    conversion unless `allow_unused`. Returns the converted model."""
    import tempfile

    from xlnet_tf.model import SPM_FILE
    from xlnet_tf.tokenization import TOKENIZER_FILE

    source = read_transformers(src_dir, max_seq_len, allow_unused=allow_unused)
    spm = files.join(src_dir, SPM_FILE)
    if not files.exists(spm):
        log.warning("%s: no %s; %s has no tokenizer (fine-tuning then needs --spm-model)", src_dir, SPM_FILE, out_dir)
    with tempfile.TemporaryDirectory() as scratch:
        settings = os.path.join(scratch, TOKENIZER_FILE)
        files.write_json(settings, source.tokenizer)
        extra = [spm if files.exists(spm) else None, settings]
        return _save(source.config, source.weights, out_dir, src_dir, extra, source.finetune_config, strict=True,
                     run_options=source.run_options)


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
        return weights, tasks.get("race").converted_config(max_seq_len)
    if len(logits) != 1:
        raise ConversionError(f"{checkpoint_prefix}: expected one classification_*/logit or regression_*/logit head, "
                              f"found {sorted(logits)}")
    put("logits_proj", logits[0])
    if logits[0].startswith("regression_"):
        return weights, tasks.get("regression").converted_config(max_seq_len)
    num_labels = int(names[f"{logits[0]}/kernel"][1])
    return weights, tasks.get("classification").converted_config(max_seq_len, num_labels,
                                                                  [str(i) for i in range(num_labels)])


def official_run_options(clamp_len=-1, same_length=False, bi_data=False, mem_len=0, reuse_len=0):
    """The original XLNet's run flags (run_*.py / train.py: --clamp_len, --same_length, --bi_data, --mem_len,
    --reuse_len) -> RunOptions fields that differ from the defaults. As the original, clamp_len clamps only when
    > 0 (0 and -1: no clamp, our -1); mem_len / reuse_len None mean 0."""
    for name, value in (("clamp_len", clamp_len), ("mem_len", mem_len), ("reuse_len", reuse_len)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(f"{name} must be a whole number, got {value!r}")
    if mem_len is not None and mem_len < 0 or reuse_len is not None and reuse_len < 0:
        raise ConfigError(f"mem_len and reuse_len must be >= 0, got {mem_len!r} and {reuse_len!r}")
    clamp = clamp_len if clamp_len is not None and clamp_len > 0 else -1
    return RunOptions(clamp_len=clamp, same_length=bool(same_length), bi_data=bool(bi_data), mem_len=mem_len or 0,
                      reuse_len=reuse_len or 0).recorded()


def convert_official(checkpoint_prefix, out_dir, config_path, spm_model=None, max_seq_len=512, **run_flags):
    """`xlnet-tf convert official CKPT_PREFIX OUT --config xlnet_config.json [--spm-model spiece.model]
    [--clamp_len N] [--same_length] [--bi_data] [--mem_len N] [--reuse_len N]`; a fine-tuned checkpoint's head
    (classification, regression, SQuAD, RACE) is converted too. `run_flags` are the original's run flags
    (`official_run_options`), recorded in OUT/run_options.json (a fine-tuned checkpoint: clamp_len and
    same_length; bi_data is refused there, mem_len / reuse_len change none of a head's outputs)."""
    unknown = sorted(set(run_flags) - {"clamp_len", "same_length", "bi_data", "mem_len", "reuse_len"})
    if unknown:
        raise TypeError(f"convert_official() got unexpected keyword argument(s) {unknown}")
    run_options = official_run_options(**run_flags)
    config = XLNetConfig.from_json(config_path)
    if spm_model and not files.exists(spm_model):
        raise ConfigError(f"{spm_model}: no such SentencePiece model",
                          Spelling(" (spm_model=)", " (--spm-model)", hint=False))
    weights = read_official(checkpoint_prefix, config)
    head_weights, finetune_config = read_official_head(checkpoint_prefix, max_seq_len)
    weights.update(head_weights)
    if finetune_config:
        unused = []
        run_options = _head_run_options(run_options, checkpoint_prefix, unused)
        if unused:
            raise ConversionError(f"{checkpoint_prefix}: a fine-tuned {finetune_config['task']} checkpoint, which "
                                  "xlnet-tf reads every row forward as the original's fine-tuning does; bi_data is "
                                  "for pretrained checkpoints")
    return _save(config, weights, out_dir, checkpoint_prefix, [spm_model], finetune_config, run_options=run_options)
