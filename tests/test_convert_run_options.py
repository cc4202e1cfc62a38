"""Run options are carried, not dropped: a transformers config.json's attn_type, same_length, bi_data, clamp_len,
mem_len and reuse_len go into the converted directory (run_options.json) and are the defaults of whatever loads
it. Loaded with no arguments, the model gives transformers' outputs (golden outputs: tests/fixtures/transformers,
see tests/fixtures/README.md); explicit arguments win; fine-tuning records the ones a head computes with and
predict uses them; generation refuses, by name, the ones it cannot run with."""

import json
import logging
import os
import re
import shutil

import numpy as np
import pytest
from conftest import check_close

from xlnet_tf.cli import main
from xlnet_tf.model import XLNetModel, XLNetPretrainer

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "transformers")
RUN_OPTIONS_FILE = "run_options.json"  # beside xlnet_config.json (xlnet_tf.model.RUN_OPTIONS_FILE)
BOUND = 1e-4
INPUTS = ("input_ids", "segment_ids", "padding_mask", "perm_mask", "target_mapping")
# golden case -> (config.json values in transformers' conventions, what run_options.json must hold)
CASES = {
    "bi_data_clamp": ({"bi_data": True, "clamp_len": 5}, {"bi_data": True, "clamp_len": 5}),
    "uni_same_length": ({"attn_type": "uni", "same_length": True}, {"attn_type": "uni", "same_length": True}),
    # transformers clamps only when clamp_len > 0: its 0 is no clamp (our -1, not recorded)
    "two_stream_bi_data": ({"bi_data": True, "clamp_len": 0}, {"bi_data": True}),
}


def check(label, value, want, ok=None):
    """Prints a checked value with what it must be, then asserts it (`ok`, default: value == want)."""
    print(f"{label}: {value} (want {want})")
    assert (value == want) if ok is None else ok, label


def golden(case):
    return dict(np.load(os.path.join(FIXTURES, "untied", f"{case}.npz")))


def transformers_dir(path, spm=None, **config_changes):
    """The golden untied weights (XLNetLMHeadModel) with their config.json, `config_changes` set on it."""
    os.makedirs(path)
    shutil.copy(os.path.join(FIXTURES, "untied", "model.safetensors"), path)
    with open(os.path.join(FIXTURES, "untied", "config.json")) as f:
        config = json.load(f)
    config.update(config_changes)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if spm:
        shutil.copy(spm, os.path.join(path, "spiece.model"))
    return str(path)


def converted(tmp_path, name, spm=None, **config_changes):
    """`xlnet-tf convert huggingface` of `transformers_dir(...)` -> OUT."""
    src = transformers_dir(tmp_path / f"{name}-hf", spm, **config_changes)
    out = str(tmp_path / name)
    code = main(["convert", "huggingface", src, out])
    check(f"{name}: convert exit code", code, 0)
    return out


def recorded(out):
    path = os.path.join(out, RUN_OPTIONS_FILE)
    return json.load(open(path)) if os.path.exists(path) else None


def run(model, arrays, mems=None):
    if mems is None and "mems" in arrays:
        mems = list(arrays["mems"])
    return model({k: arrays[k] for k in INPUTS if k in arrays}, mems=mems)


def check_outputs(label, outputs, arrays, keys=("sequence_output", "query_output", "logits")):
    """Every output of `keys` and new_mems that the golden case holds, within BOUND."""
    for key in keys:
        if key in arrays:
            check_close(f"{label}/{key}", outputs[key], arrays[key], BOUND)
    if "new_mems" in arrays:
        check_close(f"{label}/new_mems", np.stack([np.asarray(m) for m in outputs["new_mems"]]), arrays["new_mems"],
                    BOUND)


@pytest.mark.parametrize("case", list(CASES))
def test_converted_run_options_give_transformers_outputs(tmp_path, case):
    changes, want = CASES[case]
    out = converted(tmp_path, case, **changes)
    check(f"{case}: {RUN_OPTIONS_FILE}", recorded(out), want)
    architecture = json.load(open(os.path.join(out, "xlnet_config.json")))
    check(f"{case}: xlnet_config.json keys (the architecture only)", sorted(architecture),
          ["d_head", "d_inner", "d_model", "ff_activation", "n_head", "n_layer", "n_token", "untie_r"])
    arrays = golden(case)
    check_outputs(f"{case} XLNetPretrainer.from_pretrained(out)", run(XLNetPretrainer.from_pretrained(out), arrays),
                  arrays)
    encoder = run(XLNetModel.from_pretrained(out), arrays)
    for key in ("sequence_output", "query_output"):
        check_close(f"{case} XLNetModel.from_pretrained(out)/{key}", encoder[key], arrays[key], BOUND)
    assert 0 < arrays["padding_mask"].mean() < 1  # real padding in every case


def test_mem_len_and_reuse_len_decide_what_new_mems_hold(tmp_path):
    out = converted(tmp_path, "mems", mem_len=8, reuse_len=6)
    check(f"mems: {RUN_OPTIONS_FILE}", recorded(out), {"mem_len": 8, "reuse_len": 6})
    step1, step2 = golden("mems_step1"), golden("mems_step2")
    for name, cls, keys in (("XLNetPretrainer", XLNetPretrainer, ("sequence_output", "query_output", "logits")),
                            ("XLNetModel", XLNetModel, ("sequence_output", "query_output"))):
        model = cls.from_pretrained(out)
        first = run(model, step1)
        check_outputs(f"{name} segment 1", first, step1, keys)
        second = run(model, step2, mems=first["new_mems"])  # fed the first call's own new_mems
        check_outputs(f"{name} segment 2 (mems = segment 1's new_mems)", second, step2, keys)
        check("new_mems lengths (reuse_len 6, then the last mem_len 8)",
              [int(first["new_mems"][0].shape[1]), int(second["new_mems"][0].shape[1])], [6, 8])


def test_explicit_arguments_win_and_directories_without_run_options_load_as_before(tmp_path):
    from xlnet_tf.model import load_run_options

    out = converted(tmp_path, "bi_data_clamp", bi_data=True, clamp_len=5)
    plain = converted(tmp_path, "plain")  # the golden config.json: every run option at transformers' default
    check("plain: files", sorted(os.listdir(plain)), "no run_options.json", RUN_OPTIONS_FILE not in os.listdir(plain))
    arrays = golden("bi_data_clamp")
    overridden = run(XLNetPretrainer.from_pretrained(out, bi_data=False, clamp_len=-1), arrays)
    baseline = run(XLNetPretrainer.from_pretrained(plain), arrays)
    for key in ("sequence_output", "logits"):
        check_close(f"bi_data=False, clamp_len=-1 given vs the directory without run options: {key}",
                    overridden[key], baseline[key], 1e-6)
    moved = float(np.max(np.abs(overridden["logits"].numpy() - arrays["logits"])))
    print(f"explicit arguments vs the recorded options' (golden) logits: max|diff| = {moved:.2e} (bound > 1e-2)")
    assert moved > 1e-2
    options = load_run_options(out, clamp_len=3)
    check("load_run_options(out, clamp_len=3): bi_data, clamp_len", (options.bi_data, options.clamp_len), (True, 3))
    check_outputs("plain directory, perm_targets", run(XLNetPretrainer.from_pretrained(plain), golden("perm_targets")),
                  golden("perm_targets"))

    # saving keeps what the model computes with; a save without run options leaves no stale file behind
    model = XLNetPretrainer.from_pretrained(out)
    model.save_pretrained(tmp_path / "resaved")
    check("save_pretrained of the loaded model: run_options.json", recorded(str(tmp_path / "resaved")),
          {"bi_data": True, "clamp_len": 5})
    XLNetPretrainer.from_pretrained(out, bi_data=False, clamp_len=-1).save_pretrained(out)
    check("saved over OUT with the defaults: run_options.json", recorded(out), None)


def test_remote_directories_record_run_options_before_xlnet_config(tmp_path):
    """On a store without directory renames (ram://, as gs://) run_options.json is written before
    xlnet_config.json, and a save without run options removes an old one."""
    import uuid

    import tensorflow as tf
    from conftest import tiny_config

    from xlnet_tf import files
    from xlnet_tf.config import RunOptions

    path = f"ram://run-options-{uuid.uuid4().hex[:8]}/model"
    writes = []
    real = files.write_bytes

    def write_bytes(target, data):
        writes.append(files.basename(target))
        return real(target, data)

    files.write_bytes = write_bytes
    try:
        XLNetModel(tiny_config(), RunOptions(clamp_len=3, attn_type="uni")).save_pretrained(path)
    finally:
        files.write_bytes = real
    check("ram:// writes, in order", writes, "run_options.json before xlnet_config.json",
          writes.index(RUN_OPTIONS_FILE) < writes.index("xlnet_config.json"))
    options = XLNetModel.from_pretrained(path).run_options
    check("loaded from ram://: clamp_len, attn_type", (options.clamp_len, options.attn_type), (3, "uni"))
    other = path + "-other"
    files.write_json(files.join(other, RUN_OPTIONS_FILE), {"clamp_len": 3})  # left by an earlier write
    XLNetModel(tiny_config()).save_pretrained(other)
    check("a model with the defaults saved there: run_options.json on ram://",
          tf.io.gfile.exists(files.join(other, RUN_OPTIONS_FILE)), False)
    check("loaded: clamp_len", XLNetModel.from_pretrained(other).run_options.clamp_len, -1)


def test_what_no_code_path_implements_is_still_refused(tmp_path, capsys):
    src = transformers_dir(tmp_path / "odd", attn_type="lstm", clamp_len=2.5, mem_len=-4, reuse_len=3)
    capsys.readouterr()
    code = main(["convert", "huggingface", src, str(tmp_path / "odd-out")])
    err = capsys.readouterr().err
    print(err)
    check("exit code", code, 2)
    for text in ("attn_type = 'lstm'", "clamp_len = 2.5", "mem_len = -4", "--allow-unused"):
        check(f"refusal names {text!r}", text in err, True)
    check("refusal names reuse_len (it is carried)", "reuse_len" in err, False)
    out = str(tmp_path / "odd-out")
    check("--allow-unused: exit code", main(["convert", "huggingface", src, out, "--allow-unused"]), 0)
    check(f"--allow-unused: {RUN_OPTIONS_FILE}", recorded(out), {"reuse_len": 3})


@pytest.fixture(scope="module")
def spm96(tmp_path_factory):
    """A SentencePiece model of 96 pieces (the golden models' n_token) with XLNet's special ids."""
    import pydoc_data.topics

    from xlnet_tf.tokenization import train_spm

    work = tmp_path_factory.mktemp("spm96")
    lines = [" ".join(re.sub("[^a-z]", " ", line.lower()).split()) for _, text in
             sorted(pydoc_data.topics.topics.items()) for line in text.splitlines()]  # few characters: 96 pieces
    lines = [line for line in lines if line]
    (work / "corpus.txt").write_text("\n".join(lines[:800]) + "\n", encoding="utf-8")
    return train_spm(work / "corpus.txt", work / "spiece", 96, minloglevel=2, num_threads=2)


def test_finetune_applies_and_records_what_a_head_computes_with_and_predict_uses_it(tmp_path, spm96, caplog,
                                                                                    monkeypatch):
    """At the level of what `finetune --init-checkpoint` builds (a full fine-tuning run takes about a minute
    here): the CLI's FinetuneSetup, the head model it builds, the fine-tuned directory and predict."""
    import types

    from xlnet_tf.config import RunOptions
    from xlnet_tf.heads import save_finetuned, write_head_run_options
    from xlnet_tf.tasks import build_head_model, load_finetuned
    from xlnet_tf.training import finetune

    init = converted(tmp_path, "init", spm96, clamp_len=2, mem_len=8, reuse_len=4, bi_data=True)
    check(f"converted: {RUN_OPTIONS_FILE}", recorded(init),
          {"bi_data": True, "clamp_len": 2, "mem_len": 8, "reuse_len": 4})
    rng = np.random.default_rng(0)
    words = "alpha beta gamma delta river stone cloud forest lamp window garden bridge".split()
    rows = [" ".join(rng.choice(words, size=rng.integers(4, 12))) for _ in range(12)]
    train = tmp_path / "train.tsv"
    train.write_text("text_a\tlabel\n" + "".join(f"{t}\t{t.count('river') * 1.0}\n" for t in rows))
    setups = []
    monkeypatch.setattr(finetune, "run_finetuning", lambda setup, options, strategy: (
        setups.append(setup), (types.SimpleNamespace(stopped_by_signal=False), [], None))[1])
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="xlnet_tf"):
        code = main(["finetune", "--task", "regression", "--train-file", str(train), "--init-checkpoint", init,
                     "--model-dir", str(tmp_path / "finetuned"), "--train-steps", "2", "--max-seq-len", "16",
                     "--dropout", "0.2", "--strategy", "one_device"])
    check("finetune exit code", code, 0)
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name == "xlnet_tf.heads")
    print(logged)
    for text in ("'mem_len': 8", "'reuse_len': 4", "'bi_data': True", "does not apply them",
                 "fine-tuning with the run options it records", "'clamp_len': 2"):
        check(f"finetune's log names {text!r}", text in logged, True)
    options = setups[0].run_options
    check("the fine-tuning run's options: clamp_len, mem_len, reuse_len, bi_data, dropout",
          (options.clamp_len, options.mem_len, options.reuse_len, options.bi_data, options.dropout),
          (2, 0, 0, False, 0.2))

    # what run_finetuning writes: the fine-tuned directory records the head's run options (write_head_run_options
    # file by file; save_finetuned at once), the other ones never
    model_dir = str(tmp_path / "finetuned")
    write_head_run_options(model_dir, RunOptions(clamp_len=2, mem_len=8, bi_data=True))
    check(f"write_head_run_options: {RUN_OPTIONS_FILE}", recorded(model_dir), {"clamp_len": 2})
    write_head_run_options(model_dir, RunOptions())
    check(f"write_head_run_options with the defaults: {RUN_OPTIONS_FILE}", recorded(model_dir), None)
    model = build_head_model("regression", setups[0].config, options.replace(dropout=0.0, dropatt=0.0))
    model.load_encoder(init)
    finetune_config = {"task": "regression", "max_seq_len": 16, "lower_case": False, "keep_accents": False,
                       "remove_space": True, "spm_model": "spiece.model", "pairs": False, "long_doc": "truncate"}
    save_finetuned(model, model_dir, finetune_config, [spm96])
    check(f"fine-tuned: {RUN_OPTIONS_FILE}", recorded(model_dir), {"clamp_len": 2})

    out = tmp_path / "predictions.jsonl"
    finetune.predict(model_dir, str(train), str(out))  # what `xlnet-tf predict --model-dir` runs
    predicted = np.array([json.loads(line)["prediction"] for line in open(out)])
    loaded, _, tokenizer = finetune.load_for_inference(model_dir)
    check("predict's model: clamp_len", loaded.run_options.clamp_len, 2)
    features = finetune.load_task_data("regression", train, tokenizer, 16).features
    with_clamp = finetune.run_model(model, "regression", features)["predictions"]
    unclamped = finetune.run_model(load_finetuned(model_dir, dropout=0.0, dropatt=0.0, clamp_len=-1)[0], "regression",
                                   features)["predictions"]  # the explicit argument wins
    check_close("predict vs the fine-tuned model with clamp_len 2", predicted, with_clamp, 1e-5)
    moved = float(np.max(np.abs(with_clamp - unclamped)))
    print(f"clamp_len 2 vs load_finetuned(..., clamp_len=-1): max|diff| of the predictions = {moved:.2e} "
          f"(bound > 1e-6)")
    assert moved > 1e-6


def test_generate_refuses_recorded_bi_data_by_name_and_takes_clamp_len(tmp_path, spm96, capsys):
    from xlnet_tf.generation import RecordedRunOptionsError, load_generator
    from xlnet_tf.plots import attention_maps

    bi = converted(tmp_path, "bi", spm96, bi_data=True)
    capsys.readouterr()
    code = main(["generate", "--model-dir", bi, "--prompt", "the river", "--max-new-tokens", "2"])
    err = capsys.readouterr().err
    print(err)
    check("generate exit code", code, 2)
    for text in (os.path.join(bi, RUN_OPTIONS_FILE), "bi_data = true", "remove them from that file"):
        check(f"CLI error names {text!r}", text in err, True)
    check("CLI error suggests no Python argument", "bi_data=False" in err, False)
    with pytest.raises(RecordedRunOptionsError) as error:
        load_generator(bi)
    print(error.value)
    for text in (os.path.join(bi, RUN_OPTIONS_FILE), "bi_data = true", "pass bi_data=False to load_generator"):
        check(f"Python error names {text!r}", text in str(error.value), True)
    model, _ = load_generator(bi, bi_data=False)  # the explicit argument wins
    check("load_generator(bi, bi_data=False): bi_data", model.run_options.bi_data, False)
    tokens, probs = attention_maps(bi, "the river")  # one text: read forward
    check("plot-attention of a bi_data directory: maps of every layer", probs.shape[:2], (2, 4))

    clamped = converted(tmp_path, "clamped", spm96, clamp_len=3)  # clamp_len: generation applies it
    model, tokenizer = load_generator(clamped)
    check("load_generator of a directory recording clamp_len 3: clamp_len", model.transformer.run_options.clamp_len, 3)
