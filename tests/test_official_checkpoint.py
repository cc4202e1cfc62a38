"""The published TF1 checkpoint layout converts, loads and gives transformers' outputs for the same weights.

The checkpoint is written here, in graph mode with tf.compat.v1's Saver, under the published variable names
and shapes (plus global_step and Adam slots, which the converter must ignore); its values are the golden
fixtures' transformers weights, so the expected outputs are transformers'.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file

from xlnet_tf.cli import main
from xlnet_tf.model import XLNetModel, XLNetPretrainer

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "transformers")
TOLERANCE = 1e-4


def published_variables(weight_dir):
    """transformers tensors -> {published TF1 name: array}, written out name by name."""
    hf_config = json.load(open(os.path.join(weight_dir, "config.json")))
    t = {k.removeprefix("transformer."): v for k, v in load_file(os.path.join(weight_dir, "model.safetensors")).items()}
    n_layer, untie = hf_config["n_layer"], hf_config["untie_r"]
    root = "model/transformer"
    out = {
        f"{root}/word_embedding/lookup_table": t["word_embedding.weight"],
        f"{root}/mask_emb/mask_emb": t["mask_emb"],  # [1, 1, d]
        f"{root}/seg_embed": np.stack([t[f"layer.{i}.rel_attn.seg_embed"] for i in range(n_layer)]),
        "global_step": np.array(1234, np.int64),
    }
    if "lm_loss.bias" in t:
        out["model/lm_loss/bias"] = t["lm_loss.bias"]
    for bias in ("r_w_bias", "r_r_bias", "r_s_bias"):
        stacked = np.stack([t[f"layer.{i}.rel_attn.{bias}"] for i in range(n_layer)])
        out[f"{root}/{bias}"] = stacked if untie else stacked[0]
    for i in range(n_layer):
        layer, src = f"{root}/layer_{i}", f"layer.{i}"
        for name in "qkvro":
            out[f"{layer}/rel_attn/{name}/kernel"] = t[f"{src}.rel_attn.{name}"]
            out[f"{layer}/rel_attn/{name}/kernel/Adam"] = np.zeros_like(t[f"{src}.rel_attn.{name}"])
        out[f"{layer}/rel_attn/LayerNorm/gamma"] = t[f"{src}.rel_attn.layer_norm.weight"]
        out[f"{layer}/rel_attn/LayerNorm/beta"] = t[f"{src}.rel_attn.layer_norm.bias"]
        out[f"{layer}/ff/LayerNorm/gamma"] = t[f"{src}.ff.layer_norm.weight"]
        out[f"{layer}/ff/LayerNorm/beta"] = t[f"{src}.ff.layer_norm.bias"]
        for n in (1, 2):
            out[f"{layer}/ff/layer_{n}/kernel"] = t[f"{src}.ff.layer_{n}.weight"].T
            out[f"{layer}/ff/layer_{n}/bias"] = t[f"{src}.ff.layer_{n}.bias"]
    official_config = {
        "n_token": hf_config["vocab_size"], "d_model": hf_config["d_model"], "n_layer": n_layer,
        "n_head": hf_config["n_head"], "d_head": hf_config["d_head"], "d_inner": hf_config["d_inner"],
        # The published "gelu" is the tanh form (= transformers' "gelu_new"); erf needs our "gelu_exact".
        "ff_activation": {"gelu_new": "gelu", "gelu": "gelu_exact"}[hf_config["ff_activation"]],
        "untie_r": untie,
    }
    return out, official_config


def write_tf1_checkpoint(variables, prefix):
    with tf.Graph().as_default():
        tf_vars = {name: tf.compat.v1.Variable(value, name=name) for name, value in variables.items()}
        saver = tf.compat.v1.train.Saver(var_list=tf_vars)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, prefix, write_meta_graph=False)


@pytest.mark.parametrize("weights,case", [("tied", "tied_r"), ("untied", "perm_targets")])
def test_published_layout_converts_and_matches(tmp_path, weights, case):
    variables, official_config = published_variables(os.path.join(FIXTURES, weights))
    prefix = str(tmp_path / "tf1" / "model.ckpt")
    write_tf1_checkpoint(variables, prefix)
    names = dict(tf.train.list_variables(prefix))
    assert "model/transformer/layer_0/rel_attn/q/kernel" in names and "global_step" in names
    (tmp_path / "xlnet_config.json").write_text(json.dumps(official_config))
    (tmp_path / "spiece.model").write_bytes(b"stand-in model bytes")
    out = str(tmp_path / "converted")
    assert main(["convert", "official", prefix, out, "--config", str(tmp_path / "xlnet_config.json"),
                 "--spm-model", str(tmp_path / "spiece.model")]) == 0
    assert sorted(os.listdir(out)) == ["model.ckpt.data-00000-of-00001", "model.ckpt.index", "spiece.model",
                                       "xlnet_config.json"]

    arrays = dict(np.load(os.path.join(FIXTURES, weights, f"{case}.npz")))
    inputs = {k: arrays[k] for k in ("input_ids", "segment_ids", "padding_mask", "perm_mask", "target_mapping")}
    model = XLNetPretrainer.from_pretrained(out, dropout=0.0, dropatt=0.0)
    outputs = model(inputs)
    for key in ("sequence_output", "query_output", "logits"):
        diff = float(np.max(np.abs(outputs[key].numpy() - arrays[key])))
        print(f"official {weights}/{key}: max|diff| = {diff:.2e} (bound {TOLERANCE:.0e})")
        assert diff <= TOLERANCE
    # The encoder alone loads from the same directory.
    encoder = XLNetModel.from_pretrained(out, dropout=0.0, dropatt=0.0)
    diff = float(np.max(np.abs(encoder(inputs)["sequence_output"].numpy() - arrays["sequence_output"])))
    print(f"official {weights}/encoder-only sequence_output: max|diff| = {diff:.2e} (bound {TOLERANCE:.0e})")
    assert diff <= TOLERANCE


def test_bad_checkpoint_is_named(tmp_path, capsys):
    variables, official_config = published_variables(os.path.join(FIXTURES, "tied"))
    del variables["model/transformer/layer_1/ff/layer_2/bias"]
    prefix = str(tmp_path / "model.ckpt")
    write_tf1_checkpoint(variables, prefix)
    (tmp_path / "xlnet_config.json").write_text(json.dumps(official_config))
    code = main(["convert", "official", prefix, str(tmp_path / "out"), "--config", str(tmp_path / "xlnet_config.json")])
    err = capsys.readouterr().err
    print(err)
    assert code == 2 and "layer_1/ff/layer_2/bias" in err and prefix in err
    official_config["d_model"] = 48
    (tmp_path / "xlnet_config.json").write_text(json.dumps(official_config))
    variables["model/transformer/layer_1/ff/layer_2/bias"] = np.zeros(32, np.float32)
    write_tf1_checkpoint(variables, prefix)
    code = main(["convert", "official", prefix, str(tmp_path / "out"), "--config", str(tmp_path / "xlnet_config.json")])
    err = capsys.readouterr().err
    print(err)
    assert code == 2 and "has shape" in err and "the config needs" in err and prefix in err
    assert not os.path.exists(tmp_path / "out")


def untied_checkpoint(tmp_path):
    """The golden untied weights as a published TF1 checkpoint -> (prefix, xlnet_config.json path)."""
    variables, official_config = published_variables(os.path.join(FIXTURES, "untied"))
    prefix = str(tmp_path / "tf1" / "model.ckpt")
    write_tf1_checkpoint(variables, prefix)
    (tmp_path / "xlnet_config.json").write_text(json.dumps(official_config))
    return prefix, str(tmp_path / "xlnet_config.json")


def test_run_flags_are_recorded_and_give_transformers_outputs(tmp_path):
    """The original's run flags (--clamp_len, --same_length, --bi_data, --mem_len, --reuse_len; dash spellings
    too) go into OUT/run_options.json, the defaults of whatever loads OUT."""
    prefix, config = untied_checkpoint(tmp_path)

    def convert(name, *flags):
        out = str(tmp_path / name)
        assert main(["convert", "official", prefix, out, "--config", config, *flags]) == 0
        recorded = json.load(open(os.path.join(out, "run_options.json")))
        print(f"{' '.join(flags)}: run_options.json = {recorded}")
        return out, recorded

    out, recorded = convert("clamp3", "--clamp_len", "3", "--bi_data")
    assert recorded == {"bi_data": True, "clamp_len": 3}
    options = XLNetPretrainer.from_pretrained(out).run_options
    print(f"loaded with no arguments: bi_data {options.bi_data}, clamp_len {options.clamp_len} (want True, 3)")
    assert options.bi_data and options.clamp_len == 3
    _, recorded = convert("memory", "--mem_len", "8", "--reuse-len", "6", "--same-length", "--clamp-len", "0")
    assert recorded == {"mem_len": 8, "reuse_len": 6, "same_length": True}  # clamp_len 0: no clamp, as the original

    out, recorded = convert("clamp5", "--clamp-len", "5", "--bi-data")
    arrays = dict(np.load(os.path.join(FIXTURES, "untied", "bi_data_clamp.npz")))
    inputs = {k: arrays[k] for k in ("input_ids", "segment_ids", "padding_mask", "perm_mask", "target_mapping")}
    outputs = XLNetPretrainer.from_pretrained(out)(inputs, mems=list(arrays["mems"]))
    for key in ("sequence_output", "query_output", "logits"):
        diff = float(np.max(np.abs(outputs[key].numpy() - arrays[key])))
        print(f"official --clamp-len 5 --bi-data, bi_data_clamp/{key}: max|diff| = {diff:.2e} (bound {TOLERANCE:.0e})")
        assert diff <= TOLERANCE


def test_bad_run_flag_is_named(tmp_path, capsys):
    prefix, config = untied_checkpoint(tmp_path)
    code = main(["convert", "official", prefix, str(tmp_path / "bad"), "--config", config, "--mem_len", "-1"])
    err = capsys.readouterr().err
    print(err)
    assert code == 2 and "--mem_len must be >= 0" in err and not os.path.exists(tmp_path / "bad")
