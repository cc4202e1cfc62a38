"""`export --precision float32|bfloat16|float16`: the served graph computes in that precision (float32 variables,
reduced-precision matmuls), its inputs and outputs are those of the float32 export (text in, float32 out), only
allowlisted ops, and the precision is recorded in xlnet_export.json. A tiny random classifier with real padding
(texts of different lengths in one batch)."""

import json
import os

import numpy as np
import pytest

TEXTS = ["a fine film", "dull", "The model server batches concurrent requests along the first dimension.",
         "Le café « Zoë » sert une crème brûlée.", "x"]
# Relative bounds on the probabilities against the float32 export (bfloat16 keeps 8 bits of mantissa, float16 11).
BOUNDS = {"bfloat16": 3e-2, "float16": 5e-3}


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


def _casts_to(path, dtype_enum):
    """Cast ops to `dtype_enum` in the SavedModel's functions."""
    from xlnet_tf.export import ops

    saved = ops._read_saved_model(path)
    return sum(node.op == "Cast" and node.attr["DstT"].type == dtype_enum
               for graph in saved.meta_graphs for function in graph.graph_def.library.function
               for node in function.node_def)


def _serve_outputs(path):
    """serving_default on TEXTS through a TF1 Session, as TensorFlow Serving runs it -> ({alias: array},
    {alias: dtype name} of the SignatureDef)."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    graph = tf.Graph()
    with tf.compat.v1.Session(graph=graph) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
        signature = meta.signature_def["serving_default"]
        aliases = sorted(signature.outputs)
        values = session.run([signature.outputs[a].name for a in aliases],
                             {signature.inputs["text"].name: np.array(TEXTS, object)})
        dtypes = {a: tf.as_dtype(signature.outputs[a].dtype).name for a in aliases}
    return dict(zip(aliases, values)), dtypes


def test_export_precisions_compute_reduced_and_answer_as_float32(finetuned):
    from xlnet_tf.errors import UserError
    from xlnet_tf.export import ops
    from xlnet_tf.export.exporter import export_model

    model_dir, work = finetuned
    base = work / "exports" / "cls"
    paths = {p: export_model(model_dir, str(base), precision=p) for p in ("float32", "bfloat16", "float16")}
    want, want_dtypes = _serve_outputs(paths["float32"])
    print(f"\nfloat32 export: probabilities {np.round(want['probabilities'], 4).tolist()}")
    for precision in ("bfloat16", "float16"):
        got, dtypes = _serve_outputs(paths[precision])
        check(f"{precision}: the SignatureDef's output dtypes", dtypes, f"== float32 export's {want_dtypes}",
              dtypes == want_dtypes)
        check(f"{precision}: outputs' dtypes as run", {k: v.dtype.name for k, v in got.items() if v.dtype != object},
              "float32 / int64", all(v.dtype in (np.float32, np.int64, object) for v in got.values()))
        diff = float(np.max(np.abs(got["probabilities"] - want["probabilities"])))
        check(f"{precision}: probabilities vs the float32 export, max |diff|", f"{diff:.1e}",
              f"<= {BOUNDS[precision]:.0e} and > 0 (it computes in {precision})", 0 < diff <= BOUNDS[precision])
        recorded = json.load(open(os.path.join(paths[precision], "assets.extra", "xlnet_export.json")))["precision"]
        check(f"{precision}: xlnet_export.json's precision", recorded, f"== {precision}", recorded == precision)
        casts = _casts_to(paths[precision], {"bfloat16": 14, "float16": 19}[precision])  # DT_BFLOAT16, DT_HALF
        check(f"{precision}: Casts to {precision} in the served functions", casts, ">= 10", casts >= 10)
        bad = ops.disallowed_ops(paths[precision])
        check(f"{precision}: ops outside TensorFlow Serving's allowlist", sorted(bad), "none", not bad)
    with pytest.raises(UserError, match="--precision"):
        export_model(model_dir, str(base), precision="int8")
