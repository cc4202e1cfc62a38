"""Pretraining data: record layout against the original rules, streaming memory, determinism, the dataset's
streams / resume / sharding / bi_data halves, and bad input.

The corpus is CPython's bundled documentation (`pydoc_data.topics`): one document per topic, one sentence per
line. A small SentencePiece model is trained on it once. The token stream the records must come from is
rebuilt here independently (line by line with the tokenizer), and every record is checked against it.
Every checked figure is printed with its bound.
"""

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from xlnet_tf.data import pretraining
from xlnet_tf.data.pretraining import create_pretraining_data, load_metadata, pretraining_dataset
from xlnet_tf.data.sampling import SamplingOptions
from test_finetuning_data import original_pop_loop  # the original trimming, stated as its loop
from xlnet_tf.errors import UserError

SEQ, REUSE = 64, 32
TOTAL = SEQ - REUSE - 3  # |A| + |B|
CLS, SEP, EOD = 3, 4, 7
OPTIONS = SamplingOptions(seq_len=SEQ, reuse_len=REUSE, num_predict=10)


def corpus_lines():
    """Topics as documents (blank line after each), paragraphs split into sentences, one per line."""
    from pydoc_data.topics import topics

    lines = []
    for key in sorted(topics):
        for paragraph in re.split(r"\n\s*\n", topics[key]):
            text = " ".join(paragraph.split())
            lines += [s for s in re.split(r"(?<=[.!?:])\s+", text) if s]
        lines.append("")
    return lines


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("pretraining")


@pytest.fixture(scope="module")
def corpus(work):
    path = work / "pydoc.txt"
    path.write_text("\n".join(corpus_lines()) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def spm_model(work, corpus):
    from xlnet_tf.tokenization import train_spm

    return train_spm([corpus], str(work / "spm"), 1000, num_threads=2, minloglevel=2)


@pytest.fixture(scope="module")
def reference(corpus, spm_model):
    """(ids, parity) of the whole token stream, built line by line: each line one sentence, <eod> (its own
    sentence) after each document, the parity flipping from sentence to sentence."""
    from xlnet_tf.tokenization import XLNetTokenizer

    tokenizer = XLNetTokenizer(spm_model)
    lines = open(corpus, encoding="utf-8").read().split("\n")
    encoded = iter(tokenizer.encode([line for line in lines if line.strip()]))
    ids, parity, flag, in_doc = [], [], 0, False
    for line in lines:
        if line.strip():
            tokens = next(encoded)
            in_doc = True
        elif in_doc:
            tokens, in_doc = [EOD], False
        else:
            continue
        if tokens:
            ids += tokens
            parity += [flag] * len(tokens)
            flag ^= 1
    return np.array(ids), np.array(parity)


@pytest.fixture(scope="module")
def data_bi(work, corpus, spm_model):
    out = work / "bi"
    summary = create_pretraining_data([corpus], spm_model, out, seq_len=SEQ, reuse_len=REUSE, num_shards=3, seed=0,
                                      bi_data=True, progress=False)
    return str(out), summary


@pytest.fixture(scope="module")
def data_uni(work, corpus, spm_model):
    out = work / "uni"
    summary = create_pretraining_data([corpus], spm_model, out, seq_len=SEQ, reuse_len=REUSE, num_shards=2, seed=5,
                                      progress=False)
    return str(out), summary


def read_records(data_dir, backward=False):
    """All records of one direction in order: ids [n, SEQ], segment ids [n, SEQ], is_next [n]."""
    metadata = load_metadata(data_dir)
    files = [os.path.join(data_dir, s["file"]) for s in metadata["bwd_shards" if backward else "shards"]]
    spec = {"input_ids": tf.io.FixedLenFeature([SEQ], tf.int64), "segment_ids": tf.io.FixedLenFeature([SEQ], tf.int64),
            "is_next": tf.io.FixedLenFeature([1], tf.int64)}
    ids, segments, is_next = [], [], []
    for batch in tf.data.TFRecordDataset(files).batch(1024).map(lambda x: tf.io.parse_example(x, spec)):
        ids.append(batch["input_ids"].numpy())
        segments.append(batch["segment_ids"].numpy())
        is_next.append(batch["is_next"].numpy()[:, 0])
    return np.concatenate(ids), np.concatenate(segments), np.concatenate(is_next)


def cut_points(parity, begin, total):
    """Sentence boundaries the original may end A at, and the first boundary past the budget (or the end)."""
    cuts, end = [], begin + 1
    while end < len(parity):
        if parity[end] != parity[end - 1]:
            if end - begin >= total:
                break
            cuts.append(end)
        end += 1
    return cuts, end


def check_direction(name, records, stream, parity):
    """Checks every record of one direction against the token stream; returns the is_next figures."""
    ids, segments, is_next = records
    n = ids.shape[0]
    assert n == (len(stream) - SEQ) // REUSE + 1
    starts = np.flatnonzero(np.concatenate([[True], parity[1:] != parity[:-1]]))  # sentence starts
    start_windows = stream[np.minimum(starts[:, None] + np.arange(TOTAL), len(stream) - 1)]
    coin, coin_next, forced_zero = 0, 0, 0
    for k in range(n):
        row, seg = ids[k], segments[k]
        a = int(np.sum(seg == 0)) - REUSE - 1
        b = int(np.sum(seg == 1)) - 1
        assert a >= 1 and b >= 1 and a + b == TOTAL, (name, k, a, b)
        expected_seg = [0] * (REUSE + a + 1) + [1] * (b + 1) + [2]
        assert seg.tolist() == expected_seg, (name, k)
        assert row[REUSE + a] == SEP and row[-2] == SEP and row[-1] == CLS, (name, k)
        begin = (k + 1) * REUSE
        # The prefix is the stream at k * reuse_len (so record k + 1's prefix continues record k's), and A
        # continues the prefix.
        np.testing.assert_array_equal(row[:REUSE], stream[k * REUSE:begin], err_msg=f"{name} prefix {k}")
        np.testing.assert_array_equal(row[REUSE:REUSE + a], stream[begin:begin + a], err_msg=f"{name} A {k}")
        piece = row[REUSE + a + 1:REUSE + a + 1 + b]
        cuts, end = cut_points(parity, begin, TOTAL)
        if cuts:
            coin += 1
            coin_next += int(is_next[k])
        else:
            forced_zero += 1
            assert is_next[k] == 0, f"{name} record {k}: no sentence boundary for A, so B must be random"
        if is_next[k]:
            # B follows A's sentence boundary c; the lengths are the original's trimming of (c - begin, end - c).
            ok = [c for c in cuts if original_pop_loop(c - begin, end - c, TOTAL) == (a, b)
                  and np.array_equal(stream[c:c + b], piece)]
            assert ok, f"{name} record {k}: is_next B is not the text after a sentence boundary of A"
        else:
            # A random B: whole sentences from somewhere in the corpus, so it starts at a sentence start.
            assert np.any(np.all(start_windows[:, :b] == piece, axis=1)), f"{name} record {k}: B not found"
    return n, coin, coin_next, forced_zero


def test_record_layout_follows_the_original(data_bi, reference):
    data_dir, summary = data_bi
    stream, parity = reference
    metadata = load_metadata(data_dir)
    from pydoc_data.topics import topics

    lines = len([x for x in corpus_lines() if x])
    print(f"\n[layout] tokens {summary['tokens']} == independently rebuilt stream {len(stream)}; documents "
          f"{summary['documents']} == topics {len(topics)}; lines {summary['lines']} == {lines}")
    assert summary["tokens"] == len(stream)
    assert summary["documents"] == len(topics) and summary["lines"] == lines
    assert 0 <= summary["unused_tail_tokens"] < REUSE
    print(f"[layout] unused tail tokens {summary['unused_tail_tokens']} < reuse_len {REUSE}")
    n = metadata["num_records"]
    for key, backward in (("shards", False), ("bwd_shards", True)):
        names = [s["file"] for s in metadata[key]]
        counts = [s["num_records"] for s in metadata[key]]
        assert names == [pretraining.shard_name(i, 3, backward) for i in range(3)]
        assert counts == [(i + 1) * n // 3 - i * n // 3 for i in range(3)]
    assert sorted(os.listdir(data_dir)) == sorted(
        [s["file"] for s in metadata["shards"] + metadata["bwd_shards"]] + ["metadata.json", "spiece.model"])

    for name, backward in (("forward", False), ("backward", True)):
        s, p = (stream[::-1], parity[::-1]) if backward else (stream, parity)
        n, coin, coin_next, forced = check_direction(name, read_records(data_dir, backward), s, p)
        fraction = coin_next / coin
        print(f"[layout] {name}: {n} records of {SEQ} ids: prefix == stream[k*{REUSE}:], A continues it, "
              f"segment ids 0/1/2, <sep> <sep> <cls>; is_next B after a sentence boundary of A with the original "
              f"trimming, random B at a sentence start: all {n} checked")
        print(f"[layout] {name}: is_next fraction where A has a sentence boundary (the original's coin) "
              f"{fraction:.3f} of {coin} in [0.45, 0.55]; {forced} records without one are all is_next=0; "
              f"overall {(coin_next / n):.3f}")
        assert 0.45 <= fraction <= 0.55
    if metadata["is_next_records"] != int(read_records(data_dir)[2].sum()):
        raise AssertionError("metadata is_next_records does not match the records")


def test_deterministic_for_a_seed(work, corpus, spm_model, data_bi):
    data_dir, _ = data_bi

    def shard_bytes(directory):
        names = sorted(f for f in os.listdir(directory) if f.endswith(".tfrecord"))
        return {f: open(os.path.join(directory, f), "rb").read() for f in names}

    again = create_pretraining_data([corpus], spm_model, work / "again", seq_len=SEQ, reuse_len=REUSE, num_shards=3,
                                    seed=0, bi_data=True, progress=False)
    other = create_pretraining_data([corpus], spm_model, work / "other", seq_len=SEQ, reuse_len=REUSE, num_shards=3,
                                    seed=1, bi_data=True, progress=False)
    first, second, third = shard_bytes(data_dir), shard_bytes(again["output_dir"]), shard_bytes(other["output_dir"])
    assert first == second
    differing = sum(first[f] != third[f] for f in first)
    print(f"\n[determinism] seed 0 twice: {len(first)} shard files byte-identical; seed 1: {differing} of "
          f"{len(first)} differ (bound: all)")
    assert differing == len(first)
    saved = json.load(open(os.path.join(data_dir, "metadata.json")))
    assert {k: v for k, v in saved.items() if k != "input_files"} == {
        k: v for k, v in json.load(open(os.path.join(again["output_dir"], "metadata.json"))).items()
        if k != "input_files"}


MEMORY_SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    from xlnet_tf.data.pretraining import create_pretraining_data
    import tensorflow as tf
    from xlnet_tf.hardware import peak_resident_mb, resident_mb
    from xlnet_tf.tokenization import XLNetTokenizer
    corpus, spm_model, out = sys.argv[1:4]
    # The tokenizer's process-wide Unicode tables (~120 MB, built once per process) are not the data's.
    XLNetTokenizer(spm_model).encode(["warm up"])

    try:  # reset the peak (VmHWM) to the current RSS, so the peak below is the call's own
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = resident_mb()
    except OSError:  # no reset: growth over the peak of the imports (a lower bound)
        before = peak_resident_mb()
    began = time.perf_counter()
    summary = create_pretraining_data([corpus], spm_model, out, seq_len=128, reuse_len=64, progress=False)
    print("RESULT " + json.dumps({"growth_mb": peak_resident_mb() - before, "seconds": time.perf_counter() - began,
                                  "tokens": summary["tokens"], "records": summary["num_records"]}))
""")


@pytest.mark.slow
def test_streaming_memory_does_not_grow_with_the_corpus(work, corpus, spm_model):
    text = open(corpus, encoding="utf-8").read()
    results = {}
    running = {}
    for scale, repeats in (("1x", 7), ("3x", 21)):  # two processes at once: each measures its own peak
        path = work / f"big-{scale}.txt"
        path.write_text(text * repeats, encoding="utf-8")
        running[scale] = path, subprocess.Popen(
            [sys.executable, "-c", MEMORY_SCRIPT, str(path), spm_model, str(work / f"big-{scale}")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for scale, (path, process) in running.items():
        stdout, stderr = process.communicate(timeout=240)
        assert process.returncode == 0, stderr[-3000:]
        result = json.loads(stdout.split("RESULT ")[-1])
        result["mb"] = path.stat().st_size / 2**20
        results[scale] = result
        print(f"\n[memory] {scale}: {result['mb']:.1f} MB of text, {result['tokens']} tokens -> {result['records']} "
              f"records in {result['seconds']:.1f} s; peak RSS growth {result['growth_mb']:.1f} MB (bound < 150 MB)")
        assert result["growth_mb"] < 150
    extra_tokens = results["3x"]["tokens"] - results["1x"]["tokens"]
    difference = results["3x"]["growth_mb"] - results["1x"]["growth_mb"]
    print(f"[memory] 3x - 1x peak growth {difference:.1f} MB (bound < 25 MB; holding the {extra_tokens} extra "
          f"tokens as int64 alone would take {extra_tokens * 8 / 2**20:.0f} MB)")
    assert difference < 25


def collect(dataset, count):
    batches = []
    for batch in dataset.take(count):
        batches.append({k: v.numpy() for k, v in batch.items()})
    return batches


def same_batches(left, right):
    return len(left) == len(right) and all(
        set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a) for a, b in zip(left, right))


def test_dataset_shapes_resume_and_streams(data_uni):
    data_dir, summary = data_uni
    records = read_records(data_dir)
    n, batch = summary["num_records"], 4
    length = n // batch
    dataset = pretraining_dataset(data_dir, batch, OPTIONS, seed=3)
    shapes = {k: s.shape.as_list() for k, s in dataset.element_spec.items()}
    print(f"\n[dataset] element_spec {shapes}")
    assert all(s.shape.is_fully_defined() and s.shape[0] == batch for s in dataset.element_spec.values())
    assert shapes["perm_mask"] == [batch, SEQ, SEQ] and shapes["target_mapping"] == [batch, 10, SEQ]

    steps = 5
    batches = collect(dataset, steps)
    for t, features in enumerate(batches):
        want = [r * length + t for r in range(batch)]
        np.testing.assert_array_equal(features["input_ids"], records[0][want])
        np.testing.assert_array_equal(features["is_next"], records[2][want])
    # Row r of batch t + 1 continues row r of batch t: its prefix starts with batch t's A.
    for t in range(steps - 1):
        for r in range(batch):
            seg = batches[t]["segment_ids"][r]
            a = int(np.sum(seg == 0)) - REUSE - 1
            current, following = batches[t]["input_ids"][r], batches[t + 1]["input_ids"][r]
            np.testing.assert_array_equal(following[:a], current[REUSE:REUSE + a])
    print(f"[dataset] {steps} batches x {batch} rows: row r at step t is record r*{length}+t, and its prefix "
          "continues row r of step t-1")

    resumed = collect(pretraining_dataset(data_dir, batch, OPTIONS, seed=3, start_batch=2), steps - 2)
    assert same_batches(resumed, batches[2:])
    assert same_batches(collect(dataset.skip(2), steps - 2), batches[2:])
    other_seed = collect(pretraining_dataset(data_dir, batch, OPTIONS, seed=4), 1)[0]
    assert not np.array_equal(other_seed["target_mapping"], batches[0]["target_mapping"])
    print("[dataset] start_batch=2 == skip(2) == batches 2..4 of a fresh dataset (all features equal); seed 4 "
          "samples other targets")

    # Cycling: the step after a stream's last record is its first record again, with new targets (next epoch).
    wrap = collect(pretraining_dataset(data_dir, batch, OPTIONS, seed=3, start_batch=length), 1)[0]
    np.testing.assert_array_equal(wrap["input_ids"], batches[0]["input_ids"])
    assert not np.array_equal(wrap["target_mapping"], batches[0]["target_mapping"])
    print(f"[dataset] start_batch={length} (one pass over each stream): same records as step 0, new targets")


def test_input_pipelines_and_replicas(data_uni):
    data_dir, summary = data_uni
    records = read_records(data_dir)[0]
    n, batch, steps = summary["num_records"], 2, 3
    seen = []
    for pipeline in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline, num_replicas_in_sync=2)
        length = n // 4
        batches = collect(pretraining_dataset(data_dir, batch, OPTIONS, input_context=context), steps)
        indices = set()
        for t, features in enumerate(batches):
            want = [(pipeline * batch + r) * length + t for r in range(batch)]
            np.testing.assert_array_equal(features["input_ids"], records[want])
            indices.update(want)
        seen.append(indices)
    assert not seen[0] & seen[1]
    print(f"\n[pipelines] 2 pipelines x batch {batch}: pipeline 0 reads records {sorted(seen[0])}, pipeline 1 "
          f"{sorted(seen[1])}: disjoint (bound: no overlap)")

    # One pipeline feeding two replicas: element 2t + d is replica d's batch of step t, from its own streams.
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=2)
    length = n // 4
    elements = collect(pretraining_dataset(data_dir, batch, OPTIONS, input_context=context), 2 * steps)
    for e, features in enumerate(elements):
        t, replica = divmod(e, 2)
        want = [(replica * batch + r) * length + t for r in range(batch)]
        np.testing.assert_array_equal(features["input_ids"], records[want])
    resumed = collect(pretraining_dataset(data_dir, batch, OPTIONS, input_context=context, start_batch=1), 4)
    assert same_batches(resumed, elements[2:])
    print("[pipelines] 1 pipeline, 2 replicas: element 2t+d = replica d's rows at step t; start_batch=1 == "
          "skipping 2 elements")


def test_bi_data_halves(data_bi):
    data_dir, summary = data_bi
    forward, backward = read_records(data_dir)[0], read_records(data_dir, backward=True)[0]
    n, batch = summary["num_records"], 4
    length = n // 2
    batches = collect(pretraining_dataset(data_dir, batch, OPTIONS, seed=1), 3)
    for t, features in enumerate(batches):
        np.testing.assert_array_equal(features["input_ids"][:2], forward[[t, length + t]])
        np.testing.assert_array_equal(features["input_ids"][2:], backward[[t, length + t]])
    print(f"\n[bi_data] batch {batch}: rows 0-1 are forward records [t, {length}+t], rows 2-3 backward ones")
    with pytest.raises(UserError, match="even"):
        pretraining_dataset(data_dir, 3, OPTIONS)


def test_long_lines_tokenize_as_whole_lines(work, spm_model, corpus):
    """A line far longer than one tokenizer call is cut at spaces; the stream is the whole line's tokens."""
    from xlnet_tf.tokenization import XLNetTokenizer

    sentences = [x for x in corpus_lines() if x][:600]
    long_line = " ".join(sentences)
    path = work / "long.txt"
    path.write_text(long_line + "\n\n" + "\n".join(sentences[:50]) + "\n", encoding="utf-8")
    summary = create_pretraining_data([path], spm_model, work / "long-out", seq_len=SEQ, reuse_len=REUSE,
                                      progress=False)
    tokenizer = XLNetTokenizer(spm_model)
    expected = tokenizer.encode([long_line])[0] + [EOD] + sum(tokenizer.encode(sentences[:50]), []) + [EOD]
    ids = read_records(summary["output_dir"])[0]
    covered = summary["num_records"] * REUSE
    got, want = ids[:, :REUSE].reshape(-1), np.array(expected[:covered])
    assert summary["tokens"] == len(expected)
    # SentencePiece may break exact score ties (runs like "=====") differently with other surrounding text:
    # the pieces then differ but spell the same text.
    pieces = lambda x: b"".join(tokenizer.id_to_piece(tf.constant(x, tf.int32)).numpy())  # noqa: E731
    assert pieces(got) == pieces(want)
    differing = int(np.sum(got != want))
    print(f"\n[long line] a {len(long_line)}-character line (pieces of {pretraining._PIECE_CHARS} characters): "
          f"{summary['tokens']} tokens == whole-line encoding; the {covered} tokens the record prefixes cover spell "
          f"the same pieces text; {differing} positions differ by score ties (bound < 0.5%: {0.005 * covered:.0f})")
    assert differing < 0.005 * covered


def test_bad_input(work, spm_model, corpus):
    text = "\n".join(corpus_lines()[:200]).encode("utf-8")
    bad = work / "bad.txt"
    bad.write_bytes(b"first line\nsecond line\nthird \xff\xfe line\n" + text)
    with pytest.raises(UserError, match=re.escape(f"{bad}:3")) as error:
        create_pretraining_data([bad], spm_model, work / "bad-out", seq_len=SEQ, reuse_len=REUSE, progress=False)
    print(f"\n[bad input] {error.value}")
    summary = create_pretraining_data([bad], spm_model, work / "bad-out", seq_len=SEQ, reuse_len=REUSE,
                                      skip_bad_lines=True, progress=False)
    assert summary["skipped_lines"] == 1
    print(f"[bad input] skip_bad_lines: skipped_lines {summary['skipped_lines']} == 1, "
          f"{summary['num_records']} records")

    empty = work / "empty.txt"
    empty.write_bytes(b"\n  \n")
    for paths, pattern in (([corpus, empty], f"empty.*{re.escape(str(empty))}"),
                           ([work / "missing.txt"], "not found.*missing.txt")):
        with pytest.raises(UserError, match=pattern) as error:
            create_pretraining_data(paths, spm_model, work / "bad-out", progress=False)
        print(f"[bad input] {error.value}")
    short = work / "short.txt"
    short.write_text("just a few words here\n", encoding="utf-8")
    with pytest.raises(UserError, match="too short") as error:
        create_pretraining_data([short], spm_model, work / "bad-out", progress=False)
    print(f"[bad input] {error.value}")

    nowhere = work / "no-data"
    nowhere.mkdir()
    with pytest.raises(UserError, match=re.escape(str(nowhere / "metadata.json"))) as error:
        pretraining_dataset(nowhere, 2, OPTIONS)
    print(f"[bad input] {error.value}")
    (nowhere / "metadata.json").write_text("{not json")
    with pytest.raises(UserError, match=re.escape(str(nowhere / "metadata.json"))) as error:
        load_metadata(nowhere)
    print(f"[bad input] {error.value}")
