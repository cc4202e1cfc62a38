"""Generation (`xlnet_tf.generation`): the cached decoder equals recomputing every step from scratch under the same
factorization order (the whole prefix through the model with the matching perm_mask and target_mapping), a row of
a left-padded batch equals the row alone, sampling is a pure function of (logits, settings, seed)."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import tiny_config
from xlnet_tf import generation
from xlnet_tf.config import ConfigError, RunOptions
from xlnet_tf.model import XLNetPretrainer

VOCAB = 64


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(11)
    # A wide initialiser makes attention far from uniform, so a wrong mask shows as a large difference.
    config = tiny_config(n_token=VOCAB, d_model=32, n_head=4, d_head=8, d_inner=64, n_layer=3)
    return XLNetPretrainer(config, RunOptions(dropout=0.0, dropatt=0.0, initializer_range=0.3))


def prompts(rng, lengths):
    """Left-padded prompts [B, max(lengths)] of random ids with their mask."""
    width = max(lengths)
    ids = np.zeros([len(lengths), width], np.int32)
    mask = np.zeros_like(ids)
    for b, n in enumerate(lengths):
        ids[b, width - n:] = rng.integers(5, VOCAB, n)
        mask[b, width - n:] = 1
    return ids, mask


def order_perm_mask(prompt_len, total, window):
    """perm_mask [T, T] of the generation order for T = total positions (the last one the query slot): prompt
    rows see the prompt; generated row i sees the prompt and rows up to i (with a window M, keys i - M .. i);
    the slot sees everything before it (with a window, keys slot - 1 - M .. slot - 1, after the first step)."""
    i, j = np.arange(total)[:, None], np.arange(total)[None, :]
    blocked = np.where(i < prompt_len, j >= prompt_len, j > i)
    slot = total - 1
    if window:
        generated = (i >= prompt_len) & (i < slot) & (j < i - window)
        query = (i == slot) & (slot > prompt_len) & (j < slot - 1 - window)
        blocked = blocked | generated | query
    blocked[slot] |= j[0] >= slot
    return blocked.astype(np.int32)


def recomputed_logits(model, ids, mask, tokens, window):
    """Each step's next-token logits from one full pass over prompt + tokens so far + the query slot."""
    batch, prompt_len = ids.shape
    steps = []
    for n in range(tokens.shape[1]):
        total = prompt_len + n + 1
        inputs = {
            "input_ids": np.concatenate([ids, tokens[:, :n], np.zeros([batch, 1], np.int32)], 1),
            "padding_mask": np.concatenate([mask, np.ones([batch, n], np.int32), np.zeros([batch, 1], np.int32)], 1),
            "perm_mask": np.broadcast_to(order_perm_mask(prompt_len, total, window), [batch, total, total]),
            "target_mapping": np.broadcast_to(np.eye(total, dtype=np.float32)[-1:], [batch, 1, total]),
        }
        steps.append(model(inputs)["logits"].numpy()[:, 0])
    return np.stack(steps, axis=1)


def run_decode(model, ids, mask, cap, window=0, temperature=0.0, top_k=0, top_p=1.0, seeds=None, stop_ids=()):
    batch = len(ids)
    full = lambda value, dtype: np.full([batch], value, dtype)  # noqa: E731
    out = generation.decode(model, ids, mask, cap, temperature=full(temperature, np.float32),
                            top_k=full(top_k, np.int32), top_p=full(top_p, np.float32),
                            seeds=np.arange(batch) if seeds is None else np.asarray(seeds),
                            stop_ids=np.asarray(stop_ids, np.int32), memory_window=window, return_logits=True)
    return {k: v.numpy() for k, v in out.items()}


@pytest.mark.parametrize("window", [0, 4])
def test_cached_steps_equal_recomputing_the_prefix(model, window):
    rng = np.random.default_rng(window)
    ids, mask = prompts(rng, [7, 3, 5])
    cap = 6
    cached = run_decode(model, ids, mask, cap, window=window)
    reference = recomputed_logits(model, ids, mask, cached["tokens"], window)
    diff = np.abs(cached["logits"] - reference).max()
    greedy = reference.argmax(-1)
    what = f"memory window {window} (prompts of 7, 3, 5; text 13)" if window else "no memory window"
    print(f"{what}: cached vs recomputed next-token logits over {cap} steps max |diff| {diff:.2e} (bound 1e-5); "
          f"greedy tokens equal: {np.array_equal(cached['tokens'], greedy)} (bound: all)")
    assert diff <= 1e-5
    np.testing.assert_array_equal(cached["tokens"], greedy)
    assert cached["lengths"].tolist() == [cap] * 3 and cached["finish_reason"].tolist() == [0] * 3
    if window:  # the window changes the result: the comparison can tell
        unwindowed = recomputed_logits(model, ids, mask, cached["tokens"], 0)
        change = np.abs(unwindowed - reference).max()
        print(f"  the same tokens without the window differ by {change:.2e} (bound > 1e-3)")
        assert change > 1e-3


def test_a_padded_row_equals_the_row_alone(model):
    rng = np.random.default_rng(3)
    ids, mask = prompts(rng, [9, 2, 6])
    seeds = [7, 8, 9]
    for temperature in (0.0, 1.0):
        batch = run_decode(model, ids, mask, 5, temperature=temperature, seeds=seeds)
        for b in range(3):
            real = mask[b] > 0
            alone = run_decode(model, ids[b:b + 1, real], mask[b:b + 1, real], 5, temperature=temperature,
                               seeds=seeds[b:b + 1])
            diff = np.abs(alone["logits"][0] - batch["logits"][b]).max()
            print(f"temperature {temperature}, row {b} ({real.sum()} prompt tokens) alone vs in the batch: logits "
                  f"max |diff| {diff:.2e} (bound 1e-5), tokens {alone['tokens'][0].tolist()} vs "
                  f"{batch['tokens'][b].tolist()}")
            assert diff <= 1e-5
            np.testing.assert_array_equal(alone["tokens"][0], batch["tokens"][b])


def test_seeds_top_k_and_stop_ids(model):
    rng = np.random.default_rng(5)
    ids, mask = prompts(rng, [6, 4])
    greedy = model.generate(ids, mask, max_new_tokens=8)
    sampled = model.generate(ids, mask, max_new_tokens=8, temperature=1.5, seed=42)
    again = model.generate(ids, mask, max_new_tokens=8, temperature=1.5, seed=42)
    other = model.generate(ids, mask, max_new_tokens=8, temperature=1.5, seed=43)
    top1 = model.generate(ids, mask, max_new_tokens=8, temperature=1.5, top_k=1, seed=42)
    tiny_p = model.generate(ids, mask, max_new_tokens=8, temperature=1.5, top_p=1e-6, seed=42)
    print("greedy", greedy["tokens"].tolist(), "sampled (seed 42)", sampled["tokens"].tolist(), "seed 43",
          other["tokens"].tolist())
    np.testing.assert_array_equal(sampled["tokens"], again["tokens"])
    assert not np.array_equal(sampled["tokens"], other["tokens"])
    assert not np.array_equal(sampled["tokens"], greedy["tokens"])
    np.testing.assert_array_equal(top1["tokens"], greedy["tokens"])
    np.testing.assert_array_equal(tiny_p["tokens"], greedy["tokens"])
    # A stop id ends its row where it is drawn, without being emitted; the other row runs to the cap.
    only_first = [t for t in greedy["tokens"][0].tolist() if t not in greedy["tokens"][1].tolist()]
    stop = only_first[0] if only_first else int(greedy["tokens"][0, 3])
    first = [int(np.flatnonzero(row == stop)[0]) if stop in row else 8 for row in greedy["tokens"]]
    stopped = model.generate(ids, mask, max_new_tokens=8, stop_ids=(stop,))
    print(f"stop id {stop}: lengths {stopped['lengths'].tolist()} (expected {first}), reasons "
          f"{stopped['finish_reason'].tolist()}")
    assert stopped["lengths"].tolist() == first
    assert stopped["finish_reason"].tolist() == ["stop" if n < 8 else "length" for n in first]
    for b, n in enumerate(first):
        np.testing.assert_array_equal(stopped["tokens"][b, :n], greedy["tokens"][b, :n])
        assert not stopped["tokens"][b, n:].any() and not stopped["log_probs"][b, n:].any()
    log_probs = greedy["log_probs"]
    assert (log_probs < 0).all() and (log_probs > -np.log(VOCAB) * 4).all()


def test_choose_tokens_samples_the_cut_distribution():
    """Inverse-CDF sampling over an even grid of uniforms gives each kept token its share exactly."""
    logits = np.log(np.array([0.05, 0.4, 0.1, 0.3, 0.15], np.float32))
    rows = 20000
    uniforms = (np.arange(rows, dtype=np.float32) + 0.5) / rows
    cases = [((1.0, 0, 1.0), [0.05, 0.4, 0.1, 0.3, 0.15]),
             ((1.0, 2, 1.0), [0, 0.4 / 0.7, 0, 0.3 / 0.7, 0]),
             ((1.0, 0, 0.8), [0, 0.4 / 0.85, 0, 0.3 / 0.85, 0.15 / 0.85]),  # 0.4 + 0.3 < 0.8: the 0.15 joins
             ((0.5, 0, 1.0), np.array([0.05, 0.4, 0.1, 0.3, 0.15]) ** 2 / np.sum(np.array([0.05, 0.4, 0.1, 0.3,
                                                                                            0.15]) ** 2))]
    for (temperature, top_k, top_p), expected in cases:
        chosen = generation.choose_tokens(
            tf.constant(np.broadcast_to(logits, [rows, 5])), tf.fill([rows], temperature), tf.fill([rows], top_k),
            tf.fill([rows], top_p), tf.constant(uniforms)).numpy()
        shares = np.bincount(chosen, minlength=5) / rows
        diff = np.abs(shares - expected).max()
        print(f"temperature {temperature}, top_k {top_k}, top_p {top_p}: shares {np.round(shares, 4).tolist()} vs "
              f"{np.round(expected, 4).tolist()}: max |diff| {diff:.1e} (bound 2e-4)")
        assert diff <= 2e-4
    greedy = generation.choose_tokens(tf.constant([[1.0, 3.0, 3.0]]), tf.zeros([1]), tf.zeros([1], tf.int32),
                                      tf.ones([1]), tf.constant([0.99]))
    assert greedy.numpy().tolist() == [1]  # the lowest id among ties


def test_bad_generation_settings_are_refused(model):
    with pytest.raises(ConfigError, match="top_p must be in"):
        generation.GenerationOptions(top_p=0.0)
    with pytest.raises(ConfigError, match="temperature must be >= 0"):
        generation.GenerationOptions(temperature=-1.0)
    with pytest.raises(ValueError, match=r"prompt rows \[1\] have no tokens"):
        model.generate([[5, 6], []], max_new_tokens=2)
    with pytest.raises(ConfigError, match="attn_type='bi', bi_data=False"):
        generation.check_generation_model(RunOptions(bi_data=True))


# ----------------------------------------------------------------------------------------------------
# A tiny model pretrained in the test, through the CLI

WORDS = ("class function value object list string module file name type method number error code data line key time "
         "call option").split()


@pytest.fixture(scope="module")
def pattern_model(tmp_path_factory):
    """`xlnet-tf pretrain` (tiny, 300 steps) on text whose lines each repeat one word 20-40 times."""
    import random

    from pydoc_data.topics import topics

    from xlnet_tf.cli import main
    from xlnet_tf.data.pretraining import create_pretraining_data

    root = tmp_path_factory.mktemp("generation")
    rng = random.Random(0)
    lines = []
    for _ in range(600):
        lines += [" ".join([rng.choice(WORDS)] * rng.randint(20, 40)), ""]
    (root / "lines.txt").write_text("\n".join(lines), encoding="utf-8")
    (root / "spm_corpus.txt").write_text("\n".join(" ".join(t.split()) for t in topics.values()), encoding="utf-8")
    assert main(["train-spm", "--input", str(root / "spm_corpus.txt"), "--model-prefix", str(root / "spm"),
                 "--vocab-size", "800"]) == 0
    create_pretraining_data([str(root / "lines.txt")], str(root / "spm.model"), str(root / "data"), seq_len=64,
                            reuse_len=32, num_shards=1, seed=1, progress=False)
    assert main(["pretrain", "--data-dir", str(root / "data"), "--model-dir", str(root / "lm"), "--model-size", "tiny",
                 "--train-steps", "300", "--batch-size", "16", "--learning-rate", "2e-3", "--warmup-steps", "20",
                 "--num-predict", "10", "--steps-per-loop", "100", "--dropout", "0", "--dropatt", "0"]) == 0
    return root


@pytest.mark.slow
def test_a_pretrained_model_continues_its_pattern_through_python_and_the_cli(pattern_model, tmp_path):
    from xlnet_tf.cli import main

    model, tokenizer = generation.load_generator(str(pattern_model / "lm"))
    prompts = ["module module module", "error error", "key key key key", "value value value"]
    results = generation.generate_text(model, tokenizer, prompts, max_new_tokens=24)
    correct = total = 0
    for prompt, result in zip(prompts, results):
        words = result["text"].split()[:8]
        correct += sum(word == prompt.split()[0] for word in words)
        total += 8
        print(f"{prompt!r} -> {result['text']!r} ({result['finish_reason']})")
    print(f"next 8 words that repeat the prompt's: {correct} of {total} (bound >= 0.75 of them; one of the 20 "
          "words at random: 0.05)")
    assert correct >= 0.75 * total
    # The CLI: the same greedy text, and a seed that repeats its samples.
    assert main(["generate", "--model-dir", str(pattern_model / "lm"), "--prompt", prompts[0], "--prompt", prompts[1],
                 "--max-new-tokens", "24", "--output", str(tmp_path / "greedy.jsonl")]) == 0
    rows = [json.loads(line) for line in open(tmp_path / "greedy.jsonl", encoding="utf-8")]
    assert [row["text"] for row in rows] == [r["text"] for r in results[:2]]
    sampled = []
    for name in ("a", "b"):
        assert main(["generate", "--model-dir", str(pattern_model / "lm"), "--prompt", prompts[0], "--max-new-tokens",
                     "12", "--temperature", "10", "--seed", "5", "--output", str(tmp_path / f"{name}.jsonl")]) == 0
        sampled.append(json.loads(open(tmp_path / f"{name}.jsonl", encoding="utf-8").readline()))
    python = generation.generate_text(model, tokenizer, prompts[:1], max_new_tokens=12, temperature=10.0, seed=5)[0]
    print(f"temperature 10, seed 5: CLI {sampled[0]['text']!r}, again {sampled[1]['text']!r}, Python "
          f"{python['text']!r}")
    assert sampled[0]["tokens"] == sampled[1]["tokens"] == python["tokens"]
    assert sampled[0]["tokens"] != rows[0]["tokens"]


@pytest.mark.slow
def test_the_export_generates_what_python_does_served_by_xlnet_tf_serve(pattern_model, tmp_path, capsys):
    """`xlnet-tf export` of the pretrained directory (task lm): allowlisted ops, the decode loop in-graph; served by
    `xlnet-tf serve`, `Client.generate` gives the Python API's text for the same seeds, greedy and sampled;
    `xlnet-tf query` prints the continuation; a bad setting is refused and the server keeps serving."""
    from xlnet_tf.cli import main
    from xlnet_tf.export import ops
    from xlnet_tf.serving import Client, serve
    from xlnet_tf.serving.errors import ServingError

    lm = str(pattern_model / "lm")
    assert main(["export", "--model-dir", lm, "--export-base", str(tmp_path / "exports" / "lm"), "--max-new-tokens",
                 "12", "--max-seq-len", "64"]) == 0
    path = tmp_path / "exports" / "lm" / "1"
    found = ops.saved_model_ops(str(path))
    bad = ops.disallowed_ops(str(path))
    print(f"ops outside the allowlist: {bad} (bound none); While {found.get('While', 0)}, StatelessRandomUniformV2 "
          f"{found.get('StatelessRandomUniformV2', 0)} (bound >= 1 each)")
    assert not bad and found.get("While") and found.get("StatelessRandomUniformV2")
    record = json.loads((path / "assets.extra" / "xlnet_export.json").read_text())
    assert (record["task"], record["max_new_tokens"], record["max_seq_len"]) == ("lm", 12, 64)
    assert (path / "assets.extra" / "tf_serving_warmup_requests").exists()
    assert sorted(record["signatures"]) == ["generate", "serving_default", "tokenize"]

    model, tokenizer = generation.load_generator(lm)
    prompts = ["module module module", "error error", "key key key key"]
    greedy = generation.generate_text(model, tokenizer, prompts, max_new_tokens=12)
    sampled = generation.generate_text(model, tokenizer, prompts, max_new_tokens=12, temperature=10.0, seed=5)
    server = serve(model_base_path=str(tmp_path / "exports" / "lm"), model_name="lm", port=0,
                   rest_api_port=None).start()
    try:
        with Client(server.grpc_target, "lm", timeout=120) as client:
            served_greedy = client.generate(prompts)
            served = client.generate(prompts, temperature=10.0, seed=5)
            default = client.predict({"text": prompts})  # serving_default: greedy, the export's cap
            with pytest.raises(ServingError) as refused:
                client.generate(prompts[:1], top_p=2.0)
            again = client.generate(prompts[:1])
        for name, ours, theirs in (("greedy", greedy, served_greedy), ("temperature 10, seed 5", sampled, served)):
            print(f"{name}: Python {[r['text'] for r in ours]} vs served {[r['text'] for r in theirs]}")
            assert [r["tokens"] for r in ours] == [r["tokens"] for r in theirs]
            assert [r["text"] for r in ours] == [r["text"] for r in theirs]
            diff = max(abs(a - b) for r, s in zip(ours, theirs) for a, b in zip(r["log_probs"], s["log_probs"]))
            print(f"  log_probs max |diff| {diff:.1e} (bound 1e-4)")
            assert diff <= 1e-4
        assert [t.decode() for t in default["text"]] == [r["text"] for r in greedy]
        print(f"top_p 2.0 -> {refused.value}")
        assert "INVALID_ARGUMENT" in str(refused.value) and "top_p must be in (0, 1]" in str(refused.value)
        assert again[0]["tokens"] == greedy[0]["tokens"]
        earlier = capsys.readouterr().out  # the checks printed so far, printed again below
        assert main(["query", "--server", server.grpc_target, "--model", "lm", "--text", prompts[1], "--timeout",
                     "120"]) == 0
        printed = capsys.readouterr().out
        print(earlier + printed)
        assert repr(greedy[1]["text"]) in printed and "(length, 12 tokens)" in printed
    finally:
        server.stop(1)


@pytest.mark.slow
def test_generate_reads_and_writes_remote_paths(pattern_model, tmp_path, monkeypatch, capsys):
    """`xlnet-tf generate` with the model, the prompts and the output on ram:// (TensorFlow's in-memory filesystem,
    standing in for gs://): the same rows as locally, nothing written to the working directory; a bad JSONL line
    is named by file and line."""
    import os
    import uuid

    from xlnet_tf import files
    from xlnet_tf.cli import main

    remote = f"ram://xlnet-generate-{uuid.uuid4().hex[:12]}"
    for folder, _, names in os.walk(pattern_model / "lm"):  # config, spiece.model, checkpoints/
        for name in names:
            relative = os.path.relpath(os.path.join(folder, name), pattern_model / "lm")
            files.copy(os.path.join(folder, name), f"{remote}/lm/{relative}")
    prompts = [{"id": 1, "prompt": "error error"}, {"id": 2, "prompt": "key key key"}]
    files.write_text(f"{remote}/prompts.jsonl", "".join(json.dumps(p) + "\n" for p in prompts))
    monkeypatch.chdir(tmp_path)
    assert main(["generate", "--model-dir", f"{remote}/lm", "--input", f"{remote}/prompts.jsonl", "--output",
                 f"{remote}/out.jsonl", "--max-new-tokens", "6"]) == 0
    remote_rows = [json.loads(line) for line in files.read_text(f"{remote}/out.jsonl").splitlines()]
    assert main(["generate", "--model-dir", str(pattern_model / "lm"), "--prompt", "error error", "--prompt",
                 "key key key", "--max-new-tokens", "6", "--output", str(tmp_path / "local.jsonl")]) == 0
    local_rows = [json.loads(line) for line in open(tmp_path / "local.jsonl", encoding="utf-8")]
    print(f"ram:// rows {[(r['id'], r['text']) for r in remote_rows]}; working directory {os.listdir(tmp_path)}")
    assert [r["id"] for r in remote_rows] == [1, 2]  # the input's fields are kept
    assert [r["tokens"] for r in remote_rows] == [r["tokens"] for r in local_rows]
    assert os.listdir(tmp_path) == ["local.jsonl"]
    files.write_text(f"{remote}/bad.jsonl", '{"prompt": "ok"}\n{"text": "no prompt"}\n')
    earlier = capsys.readouterr().out  # printed again below
    assert main(["generate", "--model-dir", f"{remote}/lm", "--input", f"{remote}/bad.jsonl"]) == 2
    error = capsys.readouterr().err
    print(earlier + error)
    assert f"{remote}/bad.jsonl:2: a JSONL line needs a string field \"prompt\"" in error
