"""`export --precision float32|bfloat16|float16`: the served graph computes in that precision (float32 variables,
reduced-precision matmuls), its inputs and outputs are those of the float32 export (text in, float32 out), only
allowlisted ops, and the precision is recorded in xlnet_export.json. The reduced exports agree with the float32
one on 240 texts (logits and predicted labels) through a TF1 Session as TensorFlow Serving loads them and through
`xlnet-tf serve`; the reusable encoder exports in every precision and fine-tunes as a Keras layer. A tiny random
classifier with real padding (texts of different lengths in one batch)."""

import json
import os

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # trains, serves or starts processes: `make test` only, not `make test-quick`

TEXTS = ["a fine film", "dull", "The model server batches concurrent requests along the first dimension.",
         "Le café « Zoë » sert une crème brûlée.", "x"]
# Relative bounds on the probabilities against the float32 export (bfloat16 keeps 8 bits of mantissa, float16 11).
BOUNDS = {"bfloat16": 3e-2, "float16": 5e-3}
# Relative error of the logits (max |diff| / max |float32 logit|) and the share of equal predicted labels on MANY.
LOGIT_BOUNDS = {"bfloat16": 6e-2, "float16": 1e-2}
AGREEMENT_BOUNDS = {"bfloat16": 0.95, "float16": 0.98}
MANY_COUNT = 240


def many_texts():
    """MANY_COUNT sentences of CPython's documentation, 1 to 60 words (most are cut at max_seq_len 32)."""
    import pydoc_data.topics

    lines = [line.strip() for _, text in sorted(pydoc_data.topics.topics.items()) for line in text.splitlines()]
    lines = [" ".join(line.split()[:60]) for line in lines[4000:] if len(line.split()) >= 1]
    return lines[:MANY_COUNT]


def check(label, value, bound, ok):
    print(f"  CHECK {label}: {value} (bound: {bound}) -> {'ok' if ok else 'FAILED'}")
    assert ok, f"{label}: {value} (bound: {bound})"


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory):
    """A tiny fine-tuned classification directory (random weights) and its work folder."""
    from conftest import tiny_finetuned_classifier
    from xlnet_tf.config import XLNetConfig

    work = tmp_path_factory.mktemp("precision")
    config = XLNetConfig(n_token=400, d_model=32, n_layer=2, n_head=2, d_head=16, d_inner=64)
    return tiny_finetuned_classifier(work, TEXTS, config, 32, 7), work


@pytest.fixture(scope="module")
def exported(finetuned):
    """{precision: the version path} of the classifier exported in each precision (versions 1, 2, 3 of one base)."""
    from xlnet_tf.export.exporter import export_model

    model_dir, work = finetuned
    return {p: export_model(model_dir, str(work / "exports" / "cls"), precision=p)
            for p in ("float32", "bfloat16", "float16")}


def _casts_to(path, dtype_enum):
    """Cast ops to `dtype_enum` in the SavedModel's functions."""
    from xlnet_tf.export import ops

    saved = ops._read_saved_model(path)
    return sum(node.op == "Cast" and node.attr["DstT"].type == dtype_enum
               for graph in saved.meta_graphs for function in graph.graph_def.library.function
               for node in function.node_def)


def _serve_outputs(path, texts=TEXTS):
    """serving_default on `texts` through a TF1 Session, as TensorFlow Serving runs it -> ({alias: array},
    {alias: dtype name} of the SignatureDef)."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    graph = tf.Graph()
    with tf.compat.v1.Session(graph=graph) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
        signature = meta.signature_def["serving_default"]
        aliases = sorted(signature.outputs)
        values = session.run([signature.outputs[a].name for a in aliases],
                             {signature.inputs["text"].name: np.array(texts, object)})
        dtypes = {a: tf.as_dtype(signature.outputs[a].dtype).name for a in aliases}
    return dict(zip(aliases, values)), dtypes


def test_export_precisions_compute_reduced_and_answer_as_float32(finetuned, exported):
    from xlnet_tf.errors import UserError
    from xlnet_tf.export import ops
    from xlnet_tf.export.exporter import export_model

    model_dir, work = finetuned
    paths = exported
    want, want_dtypes = _serve_outputs(paths["float32"])
    print(f"\nfloat32 export: probabilities {np.round(want['probabilities'], 4).tolist()}")
    texts = many_texts()
    many, _ = _serve_outputs(paths["float32"], texts)
    print(f"float32 export on {len(texts)} texts: predicted labels {np.bincount(many['label_id'], minlength=3)} "
          f"per label, logits within +-{np.max(np.abs(many['logits'])):.2f}")
    for precision in ("bfloat16", "float16"):
        got, dtypes = _serve_outputs(paths[precision])
        check(f"{precision}: the SignatureDef's output dtypes", dtypes, f"== float32 export's {want_dtypes}",
              dtypes == want_dtypes)
        check(f"{precision}: outputs' dtypes as run", {k: v.dtype.name for k, v in got.items() if v.dtype != object},
              "float32 / int64", all(v.dtype in (np.float32, np.int64, object) for v in got.values()))
        diff = float(np.max(np.abs(got["probabilities"] - want["probabilities"])))
        check(f"{precision}: probabilities vs the float32 export, max |diff|", f"{diff:.1e}",
              f"<= {BOUNDS[precision]:.0e} and > 0 (it computes in {precision})", 0 < diff <= BOUNDS[precision])
        reduced, _ = _serve_outputs(paths[precision], texts)
        relative = float(np.max(np.abs(reduced["logits"] - many["logits"])) / np.max(np.abs(many["logits"])))
        check(f"{precision}: logits on {len(texts)} texts vs the float32 export, max |diff| / max |logit|",
              f"{relative:.1e}", f"<= {LOGIT_BOUNDS[precision]:.0e}", relative <= LOGIT_BOUNDS[precision])
        agree = float(np.mean(reduced["label_id"] == many["label_id"]))
        check(f"{precision}: share of the {len(texts)} texts with the float32 export's label", f"{agree:.3f}",
              f">= {AGREEMENT_BOUNDS[precision]}", agree >= AGREEMENT_BOUNDS[precision])
        recorded = json.load(open(os.path.join(paths[precision], "assets.extra", "xlnet_export.json")))["precision"]
        check(f"{precision}: xlnet_export.json's precision", recorded, f"== {precision}", recorded == precision)
        casts = _casts_to(paths[precision], {"bfloat16": 14, "float16": 19}[precision])  # DT_BFLOAT16, DT_HALF
        check(f"{precision}: Casts to {precision} in the served functions", casts, ">= 10", casts >= 10)
        bad = ops.disallowed_ops(paths[precision])
        check(f"{precision}: ops outside TensorFlow Serving's allowlist", sorted(bad), "none", not bad)
    with pytest.raises(UserError, match="--precision"):
        export_model(model_dir, str(work / "exports" / "cls"), precision="int8")


def test_reduced_exports_answer_through_xlnet_tf_serve(exported, capsys):
    """The three versions served side by side (one model per precision, each base holding one version), Predict
    and Classify through gRPC as a client sends them: the answers are the TF1 Session's. GetModelMetadata's
    field xlnet_export (this server's addition) gives each one's precision; `xlnet-tf query --metadata` prints
    it; a SavedModel from elsewhere has none (INVALID_ARGUMENT, as TensorFlow Serving answers that field)."""
    import shutil

    from xlnet_tf.cli import main
    from xlnet_tf.serving import Client, serve
    from xlnet_tf.serving.errors import ServingError
    from xlnet_tf.serving.testing import build_standin

    root = os.path.join(os.path.dirname(os.path.dirname(exported["float32"])), "served")
    entries = []
    for precision, path in exported.items():
        shutil.copytree(path, os.path.join(root, precision, "1"))
        entries.append(f'config {{ name: "{precision}" base_path: "{os.path.join(root, precision)}" '
                       f'model_platform: "tensorflow" }}')
    build_standin(os.path.join(root, "standin", "1"), warmup=False)
    entries.append(f'config {{ name: "standin" base_path: "{os.path.join(root, "standin")}" '
                   f'model_platform: "tensorflow" }}')
    config = os.path.join(root, "models.config")
    with open(config, "w", encoding="utf-8") as f:
        f.write("model_config_list { " + " ".join(entries) + " }\n")
    texts = many_texts()[:64]
    server = serve(model_config_file=config, port=0, rest_api_port=None, enable_batching=True).start()
    try:
        for precision, path in exported.items():
            client = Client(server.grpc_target, precision)
            want, _ = _serve_outputs(path, texts)
            got = client.predict({"text": texts})
            worst = float(np.max(np.abs(np.asarray(got["logits"]) - want["logits"])))
            check(f"{precision}: Predict through xlnet-tf serve vs the TF1 Session, logits max |diff|",
                  f"{worst:.1e}", "<= 1e-5 (the same graph; batching may merge rows)", worst <= 1e-5)
            labels = [r["label"] for r in client.classify(texts[:8], api="classify")]
            expected = [v.decode() for v in want["label"][:8]]
            check(f"{precision}: Classify labels through xlnet-tf serve", labels, f"== {expected}", labels == expected)
            record = client.export_metadata()
            check(f"{precision}: GetModelMetadata xlnet_export's precision / task", (record["precision"],
                  record["task"]), f"== ({precision!r}, 'classification')",
                  (record["precision"], record["task"]) == (precision, "classification"))
            signatures = sorted(client.metadata()["signatures"])
            check(f"{precision}: GetModelMetadata signature_def keys", signatures, "those of the export",
                  "serving_default" in signatures and "classification" in signatures)
            client.close()
            capsys.readouterr()
            assert main(["query", "--server", server.grpc_target, "--model", precision, "--metadata"]) == 0
            printed = capsys.readouterr().out
            check(f"{precision}: `xlnet-tf query --metadata` names the precision", f"precision {precision}" in printed,
                  "True", f"precision {precision}" in printed)
        standin = Client(server.grpc_target, "standin")
        check("a SavedModel without xlnet_export.json: export_metadata()", standin.export_metadata(), "None",
              standin.export_metadata() is None)
        request_error = None
        try:
            from tensorflow_serving.apis import get_model_metadata_pb2

            request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def", "nope"])
            request.model_spec.name = "standin"
            standin._call(standin._predict.GetModelMetadata, request)
        except ServingError as error:
            request_error = str(error)
        check("metadata_field 'nope'", request_error, "INVALID_ARGUMENT: Metadata field nope is not supported",
              request_error == "INVALID_ARGUMENT: Metadata field nope is not supported")
        standin.close()
    finally:
        server.stop(1)


def test_reusable_encoder_in_reduced_precision(finetuned):
    """`export --reusable --precision P`: float32 states out (close to the float32 encoder's), float32 trainable
    variables, gradients through the reduced graph close to the float32 graph's, allowlisted ops."""
    import tensorflow as tf

    from xlnet_tf.export import ops
    from xlnet_tf.export.exporter import export_model
    from xlnet_tf.export.keras_layer import ReusableEncoderLayer

    model_dir, work = finetuned
    base = str(work / "exports" / "encoder")
    layers = {p: ReusableEncoderLayer(export_model(model_dir, base, reusable=True, precision=p))
              for p in ("float32", "bfloat16", "float16")}
    inputs = layers["float32"].saved_model.text_inputs(tf.constant(many_texts()[:32]))

    def run(layer):
        with tf.GradientTape() as tape:
            out = layer(inputs, training=True)
            loss = tf.reduce_mean(tf.square(out["pooled_output"]))
        return out, [tf.convert_to_tensor(g) for g in tape.gradient(loss, layer.trainable_weights)]

    want, want_grads = run(layers["float32"])
    scale = float(np.max(np.abs(want["sequence_output"])))
    for precision in ("bfloat16", "float16"):
        layer = layers[precision]
        got, grads = run(layer)
        check(f"reusable {precision}: output dtypes", {k: v.dtype.name for k, v in got.items()}, "float32",
              all(v.dtype == tf.float32 for v in got.values()))
        check(f"reusable {precision}: variables' dtypes", sorted({w.dtype for w in layer.trainable_weights}),
              "['float32']", {w.dtype for w in layer.trainable_weights} == {"float32"})
        padding = inputs["padding_mask"].numpy()[..., None] > 0
        diff = float(np.max(np.abs(np.where(padding, got["sequence_output"] - want["sequence_output"], 0))))
        check(f"reusable {precision}: real tokens' states vs float32, max |diff| / max |state|",
              f"{diff / scale:.1e}", f"<= {LOGIT_BOUNDS[precision]:.0e} and > 0",
              0 < diff / scale <= LOGIT_BOUNDS[precision])
        norm = lambda gs: float(tf.linalg.global_norm(gs))
        relative = norm([a - b for a, b in zip(grads, want_grads)]) / norm(want_grads)
        check(f"reusable {precision}: gradients' global norm of the difference / float32's", f"{relative:.1e}",
              "<= 3e-2 (finite, all weights reached)", relative <= 3e-2 and all(g is not None for g in grads))
        bad = ops.disallowed_ops(layer.saved_model_path)
        check(f"reusable {precision}: ops outside TensorFlow Serving's allowlist", sorted(bad), "none", not bad)
