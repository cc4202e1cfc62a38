"""Parity with transformers' PyTorch XLNet (golden outputs in tests/fixtures/transformers, made by
tests/fixtures/make_transformers_golden.py from transformers 4.57.6 on torch 2.13.0)."""

import json
import os

import numpy as np
import pytest

from xlnet_tf import convert
from xlnet_tf.model import XLNetPretrainer

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "transformers")
TOLERANCE = 1e-4
RUN_OPTION_KEYS = ("mem_len", "reuse_len", "bi_data", "clamp_len", "attn_type", "same_length")
CASES = json.load(open(os.path.join(FIXTURES, "cases.json")))["cases"]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """Each weight set converted once with `xlnet-tf convert huggingface` (the CLI path)."""
    from xlnet_tf.cli import main

    out = {}
    for weights in ("untied", "tied"):
        target = str(tmp_path_factory.mktemp("converted") / weights)
        assert main(["convert", "huggingface", os.path.join(FIXTURES, weights), target]) == 0
        out[weights] = target
    return out


def run_case(model, case_arrays):
    inputs = {k: case_arrays[k] for k in ("input_ids", "segment_ids", "padding_mask", "perm_mask", "target_mapping")
              if k in case_arrays}
    mems = None
    if "mems" in case_arrays:
        mems = [case_arrays["mems"][i] for i in range(case_arrays["mems"].shape[0])]
    return model(inputs, mems=mems, training=False)


def compare(name, got, want):
    diff = float(np.max(np.abs(np.asarray(got) - want)))
    print(f"{name}: max|diff| = {diff:.2e} (bound {TOLERANCE:.0e})")
    assert diff <= TOLERANCE, name
    return diff


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_matches_transformers(case, converted):
    options = {k: case[k] for k in RUN_OPTION_KEYS}
    model = XLNetPretrainer.from_pretrained(converted[case["weights"]], dropout=0.0, dropatt=0.0, **options)
    arrays = dict(np.load(os.path.join(FIXTURES, case["file"])))
    outputs = run_case(model, arrays)
    checked = ["sequence_output", "logits"] + (["query_output"] if "target_mapping" in arrays else [])
    for key in checked:
        compare(f"{case['name']}/{key}", outputs[key], arrays[key])
    if "new_mems" in arrays:
        got = np.stack([np.asarray(m) for m in outputs["new_mems"]])
        compare(f"{case['name']}/new_mems", got, arrays["new_mems"])
    # Make sure the case is not trivial: real padding and (when given) masks that are neither all 0 nor all 1.
    assert 0 < arrays["padding_mask"].mean() < 1
    if "perm_mask" in arrays:
        assert 0 < arrays["perm_mask"].mean() < 1
