"""Keras users (issue #52): every model, head and layer round-trips through a `.keras` file with no custom_objects,
and `model.fit` on a head warns about no variable (mask_emb, the pretraining query stream's, is not offered)."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import check_close, permutation_inputs, tiny_config
from xlnet_tf.config import RunOptions
from xlnet_tf.heads import (Dense, SequenceSummary, XLNetForMultipleChoice, XLNetForQuestionAnswering,
                            XLNetForQuestionAnsweringSimple, XLNetForSequenceClassification,
                            XLNetForTokenClassification)
from xlnet_tf.layers import Dropout, PositionwiseFeedForward, TwoStreamRelativeAttention, XLNetBlock
from xlnet_tf.model import XLNetModel, XLNetPretrainer

BOUND = 1e-6
ENCODER = ("input_ids", "segment_ids", "padding_mask")
GRADIENT_WARNING = "Gradients do not exist"


def encoder_inputs(rng, batch=3, length=12):
    """Left-padded rows (0, 3 and 6 pads), two segments, random ids: the encoder's inputs of a head."""
    data = permutation_inputs(rng, batch=batch, length=length)
    return {k: data[k] for k in ENCODER}


def squad_inputs(rng):
    inputs = encoder_inputs(rng)
    p_mask = 1 - inputs["padding_mask"]
    p_mask[:, -1] = 0  # the <cls> (last position) may answer "no answer"
    p_mask[:, -3:-1] = 1  # <sep> tokens
    return {**inputs, "p_mask": p_mask, "cls_index": np.full(len(p_mask), p_mask.shape[1] - 1, np.int32)}


def pretraining_inputs(rng):
    data = permutation_inputs(rng)
    targets = rng.integers(9, 64, size=data["target_mapping"].shape[:2]).astype(np.int32)
    return {**data, "target_ids": targets, "target_mask": np.ones(targets.shape, np.float32)}


def choice_inputs(rng):
    """[B, C, T] = [2, 3, 12] options."""
    return {k: v.reshape(2, 3, -1) for k, v in encoder_inputs(rng, batch=6).items()}


# name -> (class, keyword arguments, inputs from an rng)
CASES = {
    "XLNetModel": (XLNetModel, {"run_options": RunOptions(mem_len=4, clamp_len=6)}, permutation_inputs),
    "XLNetPretrainer": (XLNetPretrainer, {}, pretraining_inputs),
    "XLNetForSequenceClassification": (XLNetForSequenceClassification, {"num_labels": 3}, encoder_inputs),
    "XLNetForSequenceClassification (regression)": (XLNetForSequenceClassification, {"regression": True},
                                                    encoder_inputs),
    "XLNetForSequenceClassification (long documents)": (XLNetForSequenceClassification,
                                                        {"num_labels": 2, "segment_len": 6, "mem_len": 6},
                                                        encoder_inputs),
    "XLNetForSequenceClassification (mixed_bfloat16)": (XLNetForSequenceClassification,
                                                        {"num_labels": 2, "dtype": "mixed_bfloat16"}, encoder_inputs),
    "XLNetForMultipleChoice": (XLNetForMultipleChoice, {}, choice_inputs),
    "XLNetForTokenClassification": (XLNetForTokenClassification, {"num_labels": 5}, encoder_inputs),
    "XLNetForQuestionAnswering": (XLNetForQuestionAnswering, {"start_n_top": 3, "end_n_top": 2}, squad_inputs),
    "XLNetForQuestionAnsweringSimple": (XLNetForQuestionAnsweringSimple, {}, squad_inputs),
}


def flat_outputs(outputs):
    """A model's output dict -> {name: array}, lists (new_mems) as name[i]."""
    flat = {}
    for key, value in outputs.items():
        for i, item in enumerate(value) if isinstance(value, (list, tuple)) else [(None, value)]:
            flat[key if i is None else f"{key}[{i}]"] = np.asarray(item, np.float64)
    return flat


@pytest.mark.parametrize("name", list(CASES))
def test_keras_file_round_trip(name, tmp_path):
    cls, kwargs, make_inputs = CASES[name]
    keras.utils.set_random_seed(7)
    model = cls(tiny_config(), **kwargs)
    inputs = make_inputs(np.random.default_rng(3))
    want = flat_outputs(model(inputs, training=False))
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    print(f"{name}: loaded class {type(loaded).__name__} (bound {cls.__name__})")
    assert type(loaded) is cls
    assert loaded.config == model.config and loaded.run_options == model.run_options
    encoder = getattr(loaded, "transformer", loaded)
    print(f"{name}: dtype policy {loaded.dtype_policy.name}, encoder's {encoder.dtype_policy.name} "
          f"(bound {model.dtype_policy.name})")
    assert loaded.dtype_policy.name == encoder.dtype_policy.name == model.dtype_policy.name
    # Weights, not variables: Keras saves no dropout seed state (inference does not read it).
    same = sum(a.path == b.path and np.array_equal(a.numpy(), b.numpy()) for a, b in zip(model.weights, loaded.weights))
    print(f"{name}: loaded weights equal to the saved ones: {same} of {len(model.weights)} (bound all, "
          f"{len(loaded.weights)} in the loaded model)")
    assert same == len(model.weights) == len(loaded.weights)
    got = flat_outputs(loaded(inputs, training=False))
    assert sorted(got) == sorted(want)
    for key in want:
        check_close(f"{name}/{key}: .keras round trip", got[key], want[key], BOUND)


LAYERS = {
    "Dense": lambda: Dense(8, 3, activation="tanh", initializer_range=0.1, name="d"),
    "SequenceSummary": lambda: SequenceSummary(8, dropout=0.1, initializer_range=0.1, name="s"),
    "Dropout": lambda: Dropout(0.2, seed=5, name="drop"),
    "PositionwiseFeedForward": lambda: PositionwiseFeedForward(8, 12, activation="gelu_exact", dropout=0.1),
    "TwoStreamRelativeAttention": lambda: TwoStreamRelativeAttention(8, 2, 4, dropout=0.1, dropatt=0.2,
                                                                     recompute_scores=True),
    "XLNetBlock": lambda: XLNetBlock(8, 2, 4, 12, ff_activation="relu", dropout=0.1, recompute="blocks",
                                     dtype="mixed_bfloat16"),
}


@pytest.mark.parametrize("name", list(LAYERS))
def test_layers_serialize_without_custom_objects(name):
    layer = LAYERS[name]()
    serialized = keras.saving.serialize_keras_object(layer)
    print(f"{name}: registered as {serialized['registered_name']} (bound xlnet_tf>{name})")
    assert serialized["registered_name"] == f"xlnet_tf>{name}"
    rebuilt = keras.saving.deserialize_keras_object(serialized)
    assert type(rebuilt) is type(layer) and rebuilt.get_config() == layer.get_config()


def test_reusable_encoder_layer_is_registered():
    from xlnet_tf.export.keras_layer import ReusableEncoderLayer

    registered = keras.saving.get_registered_name(ReusableEncoderLayer)
    print(f"ReusableEncoderLayer: registered as {registered} (bound xlnet_tf>ReusableEncoderLayer)")
    assert registered == "xlnet_tf>ReusableEncoderLayer"
    assert keras.saving.get_registered_object(registered) is ReusableEncoderLayer


def gradient_warnings(record):
    return [w for w in record if GRADIENT_WARNING in str(w.message)]


def test_fit_on_a_head_warns_of_no_missing_gradient(tmp_path):
    keras.utils.set_random_seed(11)
    model = XLNetForSequenceClassification(tiny_config(), num_labels=2)
    mask_emb = model.transformer.mask_emb
    inputs = encoder_inputs(np.random.default_rng(5), batch=4)
    labels = np.array([0, 1, 1, 0], np.int32)
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss={"logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True)})
    before = {v.path: v.numpy().copy() for v in model.weights}

    # The capture sees Keras' warning: an optimizer given a variable without gradient emits it.
    with warnings.catch_warnings(record=True) as control:
        warnings.simplefilter("always")
        keras.optimizers.SGD().apply_gradients([(None, keras.Variable(1.0)), (tf.ones(()), keras.Variable(1.0))])
    print(f"control: an optimizer given a variable without gradient: {len(gradient_warnings(control))} "
          f"'{GRADIENT_WARNING}' warning(s) (bound 1)")
    assert len(gradient_warnings(control)) == 1

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        history = model.fit(inputs, {"logits": labels}, batch_size=2, epochs=1, verbose=0)
    found = gradient_warnings(record)
    print(f"model.fit on XLNetForSequenceClassification, 2 steps: {len(found)} '{GRADIENT_WARNING}' warning(s) "
          f"(bound 0){': ' + str(found[0].message) if found else ''}")
    assert not found
    assert model.optimizer.iterations.numpy() == 2 and np.isfinite(history.history["loss"]).all()
    moved = [v.path for v in model.weights if not np.array_equal(before[v.path], v.numpy())]
    print(f"fit moved {len(moved)} of {len(model.trainable_weights)} offered weights (bound all); mask_emb moved: "
          f"{mask_emb.path in moved} (bound False)")
    assert len(moved) == len(model.trainable_weights) and mask_emb.path not in moved

    # mask_emb is still an encoder weight under its checkpoint path, and in trainable_variables (the list the project's
    # Trainer builds its optimizer from, and the reusable export reads from the encoder) ...
    assert any(v is mask_emb for v in model.weights) and any(v is mask_emb for v in model.non_trainable_weights)
    assert len(model.trainable_weights) + len(model.non_trainable_weights) == len(model.weights)
    assert any(v is mask_emb for v in model.trainable_variables)
    assert any(v is mask_emb for v in model.transformer.trainable_variables)
    names = {name for name, _ in tf.train.list_variables(tf.train.Checkpoint(model=model).write(str(tmp_path / "c")))}
    assert "model/transformer/mask_emb/.ATTRIBUTES/VARIABLE_VALUE" in names
    # ... and pretraining trains it.
    pretrainer = XLNetPretrainer(tiny_config())
    trained = [v.path for v in pretrainer.trainable_variables]
    print(f"XLNetPretrainer offers {pretrainer.transformer.mask_emb.path} for training: "
          f"{pretrainer.transformer.mask_emb.path in trained} (bound True)")
    assert any(v is pretrainer.transformer.mask_emb for v in pretrainer.trainable_variables)
