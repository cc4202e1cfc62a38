"""`xlnet-tf convert huggingface` is faithful: every tensor of the source is used or reported, config.json /
tokenizer_config.json values that change outputs and that xlnet-tf does not implement stop the conversion
(all listed) unless --allow-unused, the run options it implements are carried (run_options.json; their parity:
test_convert_run_options.py), and tokenizer_config.json's settings travel with the converted directory.

The transformers-style directories are built here without torch: config.json with transformers' XLNetConfig
field names, model.safetensors written by safetensors.numpy with transformers' tensor names and shapes.
"""

import json
import logging
import os
import unicodedata

import numpy as np
import pytest
import sentencepiece as spm

from xlnet_tf import convert
from xlnet_tf.cli import main
from xlnet_tf.errors import UserError
from xlnet_tf.tokenization import (CONTROL_SYMBOLS, TOKENIZER_FILE, USER_DEFINED_SYMBOLS, XLNetTokenizer,
                                   read_tokenizer_settings, tokenizer_settings)

D, N_HEAD, D_HEAD, D_INNER, N_LAYER = 16, 2, 8, 32, 2
ACCENTED = "Café naïve résumé señor Ünïcödé, São Paulo: élan"
CORPUS = [ACCENTED, "cafe naive resume senor unicode sao paulo elan", "The Café is open.", "Il était une fois",
          "Crème brûlée, déjà vu, fiancée, façade, jalapeño", "Hello world, 1,234 people."] * 40


def check(label, value, bound, ok):
    print(f"{label}: {value} (bound {bound})")
    assert ok, f"{label}: {value} (bound {bound})"


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    """A cased SentencePiece model with XLNet's special ids, trained on accented text (accents kept)."""
    tmp = tmp_path_factory.mktemp("spm")
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(tmp / "spiece"), vocab_size=80, hard_vocab_limit=False,
        model_type="unigram",
        character_coverage=1.0, control_symbols=list(CONTROL_SYMBOLS), user_defined_symbols=list(USER_DEFINED_SYMBOLS),
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2, num_threads=1)
    return str(tmp / "spiece.model")


def hf_config(vocab, architecture="XLNetModel", **changes):
    config = {
        "architectures": [architecture], "model_type": "xlnet", "vocab_size": vocab, "d_model": D, "n_layer": N_LAYER,
        "n_head": N_HEAD, "d_head": D_HEAD, "d_inner": D_INNER, "ff_activation": "gelu", "untie_r": True,
        "attn_type": "bi", "bi_data": False, "clamp_len": -1, "same_length": False, "initializer_range": 0.02,
        "layer_norm_eps": 1e-12, "dropout": 0.1, "mem_len": None, "reuse_len": None, "use_mems_eval": True,
        "use_mems_train": False, "summary_type": "last", "summary_use_proj": True, "summary_activation": "tanh",
        "summary_last_dropout": 0.1, "start_n_top": 5, "end_n_top": 5, "pad_token_id": 5, "bos_token_id": 1,
        "eos_token_id": 2, "transformers_version": "4.57.6",
    }
    config.update(changes)
    return config


def encoder_tensors(rng, vocab, prefix="transformer."):
    t = {f"{prefix}word_embedding.weight": rng.normal(0, 0.3, (vocab, D)),
         f"{prefix}mask_emb": rng.normal(0, 0.3, (1, 1, D))}
    for i in range(N_LAYER):
        p = f"{prefix}layer.{i}."
        for name in ("q", "k", "v", "o", "r"):
            t[p + f"rel_attn.{name}"] = rng.normal(0, 0.3, (D, N_HEAD, D_HEAD))
        for name in ("r_r_bias", "r_s_bias", "r_w_bias"):
            t[p + f"rel_attn.{name}"] = rng.normal(0, 0.3, (N_HEAD, D_HEAD))
        t[p + "rel_attn.seg_embed"] = rng.normal(0, 0.3, (2, N_HEAD, D_HEAD))
        for part in ("rel_attn", "ff"):
            t[p + f"{part}.layer_norm.weight"] = 1 + rng.normal(0, 0.1, (D,))
            t[p + f"{part}.layer_norm.bias"] = rng.normal(0, 0.1, (D,))
        t[p + "ff.layer_1.weight"] = rng.normal(0, 0.3, (D_INNER, D))
        t[p + "ff.layer_1.bias"] = rng.normal(0, 0.1, (D_INNER,))
        t[p + "ff.layer_2.weight"] = rng.normal(0, 0.3, (D, D_INNER))
        t[p + "ff.layer_2.bias"] = rng.normal(0, 0.1, (D,))
    return t


def classification_tensors(rng, num_labels=3):
    return {"sequence_summary.summary.weight": rng.normal(0, 0.3, (D, D)),
            "sequence_summary.summary.bias": rng.normal(0, 0.1, (D,)),
            "logits_proj.weight": rng.normal(0, 0.3, (num_labels, D)),
            "logits_proj.bias": rng.normal(0, 0.1, (num_labels,))}


def write_dir(path, config, tensors, spm_model=None, tokenizer_config=None, weights_file="model.safetensors"):
    from safetensors.numpy import save_file

    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if weights_file == "model.safetensors":
        save_file({k: np.ascontiguousarray(v, np.float32) for k, v in tensors.items()},
                  os.path.join(path, weights_file))
    else:  # only the name matters: the converter must not try to read it
        with open(os.path.join(path, weights_file), "wb") as f:
            f.write(b"not read")
    if spm_model:
        with open(spm_model, "rb") as src, open(os.path.join(path, "spiece.model"), "wb") as dst:
            dst.write(src.read())
    if tokenizer_config is not None:
        with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
            json.dump(tokenizer_config, f)
    return str(path)


@pytest.fixture(scope="module")
def vocab(spm_model):
    return spm.SentencePieceProcessor(model_file=spm_model).get_piece_size()


def refused(src, capsys, *extra):
    """The CLI's exit code and stderr for a conversion that must stop."""
    capsys.readouterr()
    code = main(["convert", "huggingface", src, src + "-out", *extra])
    err = capsys.readouterr().err
    return code, err


def test_clean_directories_convert_with_every_tensor_used(tmp_path, vocab, capsys):
    from xlnet_tf.model import XLNetModel, XLNetPretrainer

    rng = np.random.default_rng(0)
    # XLNetModel (no "transformer." prefix) and XLNetLMHeadModel (prefix + the tied LM head's bias)
    base = encoder_tensors(rng, vocab, prefix="")
    src = write_dir(tmp_path / "base", hf_config(vocab), base)
    source = convert.read_transformers(src)
    check("base: left out", list(source.left_out), "[]", not source.left_out)
    check("base: tokenizer settings without tokenizer_config.json", source.tokenizer,
          "the published defaults",
          source.tokenizer == {"lower_case": False, "keep_accents": False, "remove_space": True})
    out = str(tmp_path / "base-out")
    code = main(["convert", "huggingface", src, out])
    check("base: CLI exit code", code, 0, code == 0)
    model = XLNetModel.from_pretrained(out)
    diff = float(np.abs(model.word_embedding.embeddings.numpy() - base["word_embedding.weight"]).max())
    check("base: max |word_embedding - source|", diff, "<= 1e-7", diff <= 1e-7)
    kernel = model.blocks[1].feed_forward.layer_1_kernel.numpy()
    diff = float(np.abs(kernel - base["layer.1.ff.layer_1.weight"].T).max())
    check("base: max |layer_1 ff kernel - source^T|", diff, "<= 1e-7", diff <= 1e-7)

    lm = {**encoder_tensors(rng, vocab), "lm_loss.bias": rng.normal(0, 0.1, (vocab,))}
    src = write_dir(tmp_path / "lm", hf_config(vocab, "XLNetLMHeadModel", dropout=0.3, summary_last_dropout=0.5,
                                                 mem_len=512, reuse_len=256), lm)
    left_out = list(convert.read_transformers(src).left_out)
    check("LM head (dropout and memory settings only): left out", left_out, "[]", not left_out)
    out = str(tmp_path / "lm-out")
    convert.convert_transformers(src, out)
    carried = json.load(open(os.path.join(out, "run_options.json")))
    check("LM head: memory settings carried to run_options.json", carried, {"mem_len": 512, "reuse_len": 256},
          carried == {"mem_len": 512, "reuse_len": 256})
    diff = float(np.abs(XLNetPretrainer.from_pretrained(out).lm_bias.numpy() - lm["lm_loss.bias"]).max())
    check("LM head: max |lm_bias - source|", diff, "<= 1e-7", diff <= 1e-7)


@pytest.mark.parametrize("case", ["unknown_head", "summary_type", "extra_tensor", "problem_type"])
def test_unimplemented_things_stop_the_conversion_naming_them(tmp_path, vocab, capsys, case):
    rng = np.random.default_rng(1)
    tensors = encoder_tensors(rng, vocab)
    if case == "unknown_head":  # a head transformers may add one day
        config = hf_config(vocab, "XLNetForSpanClassification")
        tensors.update({"span_head.weight": rng.normal(0, 0.3, (2, D)), "span_head.bias": np.zeros(2)})
        wanted = ["XLNetForSpanClassification", "span_head: bias [2], weight [2, 16]"]
    elif case == "summary_type":
        config = hf_config(vocab, "XLNetForSequenceClassification", summary_type="mean")
        tensors.update(classification_tensors(rng))
        wanted = ["config.json summary_type = 'mean'"]
    elif case == "extra_tensor":
        config = hf_config(vocab, "XLNetModel")
        tensors["transformer.adapter.down.weight"] = rng.normal(0, 0.3, (4, D))
        wanted = ["transformer.adapter.down: weight [4, 16]"]
    else:
        config = hf_config(vocab, "XLNetForSequenceClassification", problem_type="ordinal_regression")
        tensors.update(classification_tensors(rng))
        wanted = ["config.json problem_type = 'ordinal_regression'"]
    src = write_dir(tmp_path / case, config, tensors)
    code, err = refused(src, capsys)
    print(err)
    check(f"{case}: exit code", code, 2, code == 2)
    for text in wanted + ["--allow-unused"]:
        check(f"{case}: message names {text!r}", text in err, True, text in err)
    check(f"{case}: output directory written", os.path.exists(src + "-out"), False, not os.path.exists(src + "-out"))
    with pytest.raises(UserError) as error:
        convert.convert_transformers(src, str(tmp_path / "python-out"))
    check(f"{case}: Python API error names {wanted[0]!r}", wanted[0] in str(error.value), True,
          wanted[0] in str(error.value))


def test_every_problem_listed_at_once_and_allow_unused_converts(tmp_path, vocab, capsys, caplog):
    from xlnet_tf.tasks import load_finetuned

    rng = np.random.default_rng(2)
    tensors = {**encoder_tensors(rng, vocab), **classification_tensors(rng),
               "pooler.dense.weight": rng.normal(0, 1, (D, D))}
    config = hf_config(vocab, "XLNetForSequenceClassification", summary_type="mean", layer_norm_eps=1e-5,
                       problem_type="ordinal_regression", bi_data=True, clamp_len=16)
    src = write_dir(tmp_path / "many", config, tensors)
    code, err = refused(src, capsys)
    print(err)
    listed = [line for line in err.splitlines() if line.startswith("  - ")]
    # clamp_len was refused (listed) before run options were recorded; now it is carried: 5 problems, not 6.
    # bi_data stays refused on a fine-tuned head (its rows' outputs would depend on their place in a batch).
    check("problems listed in one message", len(listed), "== 5", code == 2 and len(listed) == 5)
    for text in ("summary_type = 'mean'", "layer_norm_eps = 1e-05", "ordinal_regression", "bi_data = True",
                 "place in the batch", "pooler.dense: weight [16, 16]"):
        check(f"message names {text!r}", text in err, True, text in err)
    check("message names clamp_len (carried)", "clamp_len" in err, False, "clamp_len" not in err)

    out = str(tmp_path / "many-out")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="xlnet_tf.convert"):
        code = main(["convert", "huggingface", src, out, "--allow-unused"])
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name == "xlnet_tf.convert")
    print(logged)
    check("--allow-unused: exit code", code, 0, code == 0)
    for text in ("leaving out 5 thing(s)", "summary_type = 'mean'", "pooler.dense: weight [16, 16]"):
        check(f"--allow-unused: log names {text!r}", text in logged, True, text in logged)
    carried = json.load(open(os.path.join(out, "run_options.json")))
    check("--allow-unused: run_options.json", carried, {"clamp_len": 16}, carried == {"clamp_len": 16})
    model, finetune_config = load_finetuned(out)
    check("--allow-unused: loaded head's clamp_len, bi_data", (model.run_options.clamp_len, model.run_options.bi_data),
          "(16, False)", (model.run_options.clamp_len, model.run_options.bi_data) == (16, False))
    check("--allow-unused: converted head task / num_labels", (finetune_config["task"], finetune_config["num_labels"]),
          "('classification', 3)", (finetune_config["task"], finetune_config["num_labels"]) == ("classification", 3))
    kernel = model.logits_proj.kernel.numpy()
    diff = float(np.abs(kernel - tensors["logits_proj.weight"].T).max())
    check("--allow-unused: max |logits_proj kernel - source^T|", diff, "<= 1e-7", diff <= 1e-7)

    # an unimplemented head: left out, the encoder alone is converted (Python API)
    tensors = {**encoder_tensors(rng, vocab), "span_head.weight": rng.normal(0, 1, (2, D)),
               "span_head.bias": np.zeros(2)}
    src = write_dir(tmp_path / "span", hf_config(vocab, "XLNetForSpanClassification"), tensors)
    source = convert.read_transformers(src, allow_unused=True)
    left_out = [str(u) for u in source.left_out]
    check("unknown head: left out", left_out, "its architecture and its tensors",
          len(left_out) == 2 and "XLNetForSpanClassification" in left_out[0] and "span_head: bias [2], weight [2, 16]"
          in left_out[1])
    out = str(tmp_path / "span-out")
    convert.convert_transformers(src, out, allow_unused=True)
    names = sorted(os.listdir(out))
    check("unknown head with allow_unused: files", names, "no finetune_config.json",
          "finetune_config.json" not in names and "xlnet_config.json" in names)

    # token classification converts (its logits' parity: test_token_classification)
    tensors = {**encoder_tensors(rng, vocab), "classifier.weight": rng.normal(0, 1, (5, D)),
               "classifier.bias": np.zeros(5)}
    config = hf_config(vocab, "XLNetForTokenClassification", id2label={str(i): t for i, t in enumerate("OABCD")})
    source = convert.read_transformers(write_dir(tmp_path / "tokens", config, tensors))
    check("token classification: task, labels, nothing left out",
          (source.finetune_config["task"], source.finetune_config["label_names"], source.left_out),
          "('token-classification', ['O', 'A', 'B', 'C', 'D'], ())",
          source.finetune_config["task"] == "token-classification" and not source.left_out
          and source.finetune_config["label_names"] == list("OABCD"))


def test_what_cannot_be_left_out_stops_even_with_allow_unused(tmp_path, vocab, capsys):
    rng = np.random.default_rng(3)
    src = write_dir(tmp_path / "silu", hf_config(vocab, ff_activation="silu", attn_type="uni"),
                    encoder_tensors(rng, vocab))
    code, err = refused(src, capsys, "--allow-unused")
    print(err)
    check("ff_activation silu with --allow-unused: exit code", code, 2, code == 2)
    for text in ("ff_activation = 'silu'", "(cannot be left out)"):
        check(f"message names {text!r}", text in err, True, text in err)
    # attn_type 'uni' was listed before run options were recorded; now it is carried (run_options.json)
    check("message names attn_type (carried)", "attn_type" in err, False, "attn_type" not in err)


@pytest.mark.parametrize("weights_file, hint", [("pytorch_model.bin", "safe_serialization=True"),
                                                ("tf_model.h5", "from_tf=True")])
def test_other_weight_files_get_instructions(tmp_path, vocab, capsys, weights_file, hint):
    src = write_dir(tmp_path / "pt", hf_config(vocab, "XLNetForSequenceClassification"), {}, weights_file=weights_file)
    code, err = refused(src, capsys)
    print(err)
    check(f"{weights_file} only: exit code", code, 2, code == 2)
    for text in (os.path.join(src, weights_file), "model.safetensors", hint,
                 "transformers.XLNetForSequenceClassification.from_pretrained"):
        check(f"message names {text!r}", text in err, True, text in err)


def reference_preprocess(text, lower, keep_accents, remove_space):
    """transformers' XLNetTokenizer.preprocess_text."""
    if remove_space:
        text = " ".join(text.strip().split())
    text = text.replace("``", '"').replace("''", '"')
    if not keep_accents:
        text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return text.lower() if lower else text


def reference_ids(sp, text, lower, keep_accents, remove_space):
    """transformers' XLNetTokenizer._tokenize (preprocess_text, sp.encode, the digit-comma re-split) -> ids."""
    pieces = []
    for piece in sp.encode_as_pieces(reference_preprocess(text, lower, keep_accents, remove_space)):
        if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
            again = sp.encode_as_pieces(piece[:-1].replace("\u2581", ""))
            if piece[0] != "\u2581" and again[0][0] == "\u2581":
                again = again[1:] if len(again[0]) == 1 else [again[0][1:]] + again[1:]
            pieces += again + [","]
        else:
            pieces.append(piece)
    return [sp.piece_to_id(p) for p in pieces]


def test_tokenizer_config_settings_travel_with_the_converted_directory(tmp_path, vocab, spm_model):
    from xlnet_tf.training.finetune import load_for_inference

    sp = spm.SentencePieceProcessor(model_file=spm_model)
    rng = np.random.default_rng(4)
    tensors = {**encoder_tensors(rng, vocab), **classification_tensors(rng)}
    config = hf_config(vocab, "XLNetForSequenceClassification")
    texts = [ACCENTED, "  Crème  brûlée ``déjà''  1,234, İstanbul\tÉLAN  ",
             "Cafe\u0301 de\u0301ja\u0300 (decomposed)"]
    runs = {"keep_accents": {"do_lower_case": False, "keep_accents": True, "remove_space": True},
            "defaults": None,
            "lower_no_space_removal": {"do_lower_case": True, "keep_accents": False, "remove_space": False},
            "lower_keep_accents": {"do_lower_case": True, "keep_accents": True, "remove_space": False}}
    for name, tokenizer_config in runs.items():
        src = write_dir(tmp_path / name, config, tensors, spm_model, tokenizer_config)
        out = str(tmp_path / f"{name}-out")
        code = main(["convert", "huggingface", src, out])
        check(f"{name}: CLI exit code", code, 0, code == 0)
        want = {"lower_case": False, "keep_accents": False, "remove_space": True}
        if tokenizer_config:
            want = {"lower_case": tokenizer_config["do_lower_case"], "keep_accents": tokenizer_config["keep_accents"],
                    "remove_space": tokenizer_config["remove_space"]}
        recorded = read_tokenizer_settings(out)
        check(f"{name}: {TOKENIZER_FILE}", recorded, want, recorded == want)
        finetune_config = json.load(open(os.path.join(out, "finetune_config.json")))
        in_finetune = {k: finetune_config.get(k) for k in want}
        check(f"{name}: settings in finetune_config.json", in_finetune, want, in_finetune == want)
        _, _, tokenizer = load_for_inference(out)  # what evaluate / predict use
        check(f"{name}: predict's tokenizer settings", tokenizer.settings, want, tokenizer.settings == want)
        got = [t.decode("utf-8") for t in tokenizer.preprocess(texts).numpy()]
        want_text = [reference_preprocess(t, want["lower_case"], want["keep_accents"], want["remove_space"])
                     for t in texts]
        check(f"{name}: preprocessed text equals transformers' preprocess_text", got, want_text, got == want_text)
        ids = tokenizer.encode(texts)
        expected = [reference_ids(sp, t, want["lower_case"], want["keep_accents"], want["remove_space"]) for t in texts]
        check(f"{name}: ids equal transformers' XLNetTokenizer with these settings", ids == expected, True,
              ids == expected)
        pieces = [sp.id_to_piece(i) for i in ids[0]]
        accents = sum(any(c in p for c in "éïñÜöã") for p in pieces)
        if want["keep_accents"]:
            check(f"{name}: pieces of {ACCENTED!r} with an accent", accents, "> 0", accents > 0)
        else:
            check(f"{name}: pieces of {ACCENTED!r} with an accent", accents, "== 0", accents == 0)
    # fine-tuning from a converted directory reads the settings beside its spiece.model; --lower-case wins
    settings = tokenizer_settings(read_tokenizer_settings(str(tmp_path / "keep_accents-out")), lower_case=True)
    check("fine-tuning's settings with --lower-case", settings, "keep_accents True, lower_case True",
          settings == {"lower_case": True, "keep_accents": True, "remove_space": True})
    published = XLNetTokenizer(spm_model)
    check("XLNetTokenizer defaults", published.settings, "the published XLNet's",
          published.settings == {"lower_case": False, "keep_accents": False, "remove_space": True})
