"""Pretraining records: the files `create_pretraining_data` (xlnet_tf.data.pretraining) writes, and reading them
back as batched training features.

Files in the output directory: `records-IIIII-of-NNNNN.tfrecord` (and `records-bwd-...` with bi_data), each a
contiguous range of records in stream order (shard i holds records [i*n//N, (i+1)*n//N)), tf.train.Example
with int64 features `input_ids` [seq_len], `segment_ids` [seq_len], `is_next` [1]; `spiece.model`, a copy of the
SentencePiece model, which metadata.json names by that relative path (the directory keeps working when it is
copied to a bucket); then `metadata.json`. Every file is written under a temporary name and renamed;
metadata.json is written last.

Reading (`pretraining_dataset`)
-------------------------------
The record sequence of each direction is cut into contiguous streams, one per batch row of every replica
(the original's `batchify`); row r of consecutive batches reads consecutive records, so the model's new
memory of batch t is the right memory for batch t + 1. Targets are sampled per record with
`sampling.sample_features` from stateless seeds of (seed, record, epoch), which makes batch b a pure function
of (seed, b) and lets training resume its data position with `start_batch`.
"""

from __future__ import annotations

import json
import os

import numpy as np
import tensorflow as tf

from xlnet_tf.data import sampling
from xlnet_tf.errors import UserError
from xlnet_tf.files import resolve as resolve_path

FORMAT_VERSION = 1
METADATA_FILE = "metadata.json"
SPM_FILE = "spiece.model"  # the data's SentencePiece model, named as in model directories (xlnet_tf.model)
_SEED_SALT = 0x584C4E54  # second word of the stateless seeds ("XLNT")


def shard_name(index, num_shards, backward=False):
    """File name of shard `index` of `num_shards` (forward or backward records)."""
    kind = "records-bwd" if backward else "records"
    return f"{kind}-{index:05d}-of-{num_shards:05d}.tfrecord"


def check_int(name, value, low):
    """A whole number >= `low` for the argument or flag `name` (UserError naming --name)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise UserError(f"--{name.replace('_', '-')} must be an integer >= {low}, got {value!r}")


_REQUIRED = {"format_version": int, "seq_len": int, "reuse_len": int, "bi_data": bool, "vocab_size": int,
             "spm_model": str, "num_records": int, "num_shards": int, "shards": list, "bwd_shards": list}


def load_metadata(data_dir) -> dict:
    """metadata.json of a `create_pretraining_data` directory; UserError naming the file when it is missing,
    unreadable, of another format version or lacks fields."""
    path = os.path.join(os.fspath(data_dir), METADATA_FILE)
    if not tf.io.gfile.exists(path):  # local or gs:// (any filesystem TensorFlow reads)
        raise UserError(f"no pretraining data here: {path} not found (write it with create-pretraining-data)")
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            metadata = json.loads(f.read().decode("utf-8"))
    except (OSError, tf.errors.OpError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(metadata, dict):
        raise UserError(f"{path}: expected a JSON object")
    for key, kind in _REQUIRED.items():
        if not isinstance(metadata.get(key), kind) or (kind is int and isinstance(metadata.get(key), bool)):
            raise UserError(f"{path}: field {key!r} is missing or not a {kind.__name__}")
    if metadata["format_version"] != FORMAT_VERSION:
        raise UserError(f"{path}: format version {metadata['format_version']}, this code reads {FORMAT_VERSION}")
    # relative (the copy inside the directory), or an absolute path / URL (data written before the copy existed)
    metadata["spm_model"] = resolve_path(metadata["spm_model"], os.fspath(data_dir))
    for key in ("shards", "bwd_shards"):
        for shard in metadata[key]:
            if not isinstance(shard, dict) or not isinstance(shard.get("file"), str) or not isinstance(
                    shard.get("num_records"), int):
                raise UserError(f"{path}: bad entry in {key!r}: {shard!r}")
        if (key == "shards" or metadata["bi_data"]) and sum(s["num_records"] for s in metadata[key]) != \
                metadata["num_records"]:
            raise UserError(f"{path}: the {key!r} record counts do not add up to num_records")
    return metadata


def _default_word_start(metadata):
    import sentencepiece as spm

    model = metadata["spm_model"]
    if not tf.io.gfile.exists(model):
        raise UserError(f"SentencePiece model of the data not found: {model} (pass word_start explicitly)")
    with tf.io.gfile.GFile(model, "rb") as f:
        processor = spm.SentencePieceProcessor(model_proto=f.read())
    return sampling.word_start_from_pieces([processor.id_to_piece(i) for i in range(processor.get_piece_size())])


def _record_range(data_dir, shards, lo, hi):
    """Serialized records [lo, hi) of one direction's shards, as a dataset."""
    files, first, position = [], None, 0
    for shard in shards:
        end = position + shard["num_records"]
        if end > lo and position < hi:
            path = os.path.join(data_dir, shard["file"])
            if not tf.io.gfile.exists(path):
                raise UserError(f"pretraining shard not found: {path} (listed in {METADATA_FILE})")
            files.append(path)
            first = position if first is None else first
        position = end
    return tf.data.TFRecordDataset(files).skip(lo - first).take(hi - lo)


def _row_dataset(data_dir, shards, begin, length, first_step, key):
    """(serialized record, step, key) for steps first_step, first_step + 1, ... of one row that cycles over
    records [begin, begin + length); the record at step t is begin + t % length."""
    offset = first_step % length
    records = _record_range(data_dir, shards, begin, begin + length).repeat()
    if offset:
        records = _record_range(data_dir, shards, begin + offset, begin + length).concatenate(records)
    steps = tf.data.Dataset.range(first_step, np.iinfo(np.int64).max)
    keys = tf.data.Dataset.from_tensors(tf.constant(key, tf.int64)).repeat()
    return tf.data.Dataset.zip((records, steps, keys))


def pretraining_dataset(data_dir, batch_size, options: sampling.SamplingOptions, seed=0, input_context=None,
                        start_batch=0, word_start=None) -> tf.data.Dataset:
    """Endless dataset of batched training features from a `create_pretraining_data` directory.

    Yields dicts of `sampling.sample_features` outputs with a leading batch dimension `batch_size` (the
    per-replica batch), all shapes static: for PLM `input_ids`, `segment_ids` [B, T] int32, `padding_mask`
    [B, T], `perm_mask` [B, T, T], `target_mapping` [B, P, T], `target_ids` [B, P] int32, `target_mask` [B, P];
    for MLM `input_ids`, `segment_ids`, `padding_mask`, `target_ids`, `target_mask` [B, T]; plus `is_next` [B]
    int32. T = options.seq_len, P = options.num_predict.

    Streams: with P input pipelines of D replicas each (input_context; P = D = 1 without it), each direction's
    records are cut into G = P * D * H contiguous streams of L = num_records // G records (H = batch_size, or
    batch_size / 2 per direction with bi_data); row j of replica d on pipeline p reads stream
    (p * D + d) * H + j, record begin + t % L at step t. Pipelines read disjoint records. Elements come replica
    by replica, step by step (element t * D + d is replica d's batch of step t), as tf.distribute hands the
    elements of one pipeline to its replicas in turn. With bi_data the first half of each batch comes from
    forward records and the second half from backward ones.

    Args:
      data_dir: the output directory of `create_pretraining_data`.
      batch_size: per-replica batch (even with bi_data).
      options: `sampling.SamplingOptions`; its seq_len / reuse_len must be the data's.
      seed: sampling seed; targets of record k in pass e over its stream come from seeds of (seed, k, e).
      input_context: a `tf.distribute.InputContext`, or None for one pipeline with one replica.
      start_batch: steps already taken by every replica (micro-batches, with gradient accumulation): the
        dataset starts where it would be after them, i.e. equals skipping start_batch * D elements.
      word_start: bool [vocab] table (`sampling.word_start_from_pieces`); None builds it from the data's
        SentencePiece model.
    """
    data_dir = os.fspath(data_dir)
    metadata = load_metadata(data_dir)
    where = os.path.join(data_dir, METADATA_FILE)
    if (options.seq_len, options.reuse_len) != (metadata["seq_len"], metadata["reuse_len"]):
        raise UserError(f"sampling options have seq_len {options.seq_len}, reuse_len {options.reuse_len}, but the "
                        f"data ({where}) has seq_len {metadata['seq_len']}, reuse_len {metadata['reuse_len']}")
    check_int("batch_size", batch_size, 1)
    check_int("start_batch", start_batch, 0)
    check_int("seed", seed, 0)
    bi_data = metadata["bi_data"]
    if bi_data and batch_size % 2:
        raise UserError(f"the data has bi_data (forward and backward halves), so the per-replica batch size "
                        f"must be even, got {batch_size}")
    pipelines, pipeline = 1, 0
    replicas = 1
    if input_context is not None:
        pipelines, pipeline = input_context.num_input_pipelines, input_context.input_pipeline_id
        replicas = max(1, input_context.num_replicas_in_sync // pipelines)
    half = batch_size // 2 if bi_data else batch_size
    streams = pipelines * replicas * half
    num_records = metadata["num_records"]
    length = num_records // streams
    if length < 1:
        raise UserError(f"{num_records} records in {data_dir} cannot fill {streams} streams "
                        f"({pipelines} pipelines x {replicas} replicas x {half} rows): use more data or smaller "
                        "batches")
    if word_start is None:
        word_start = _default_word_start(metadata)
    word_start = np.asarray(word_start, bool)
    vocab_size = metadata["vocab_size"]
    if word_start.shape != (vocab_size,):
        raise UserError(f"word_start has shape {word_start.shape}, the data's vocabulary has {vocab_size} ids")
    word_start = tf.constant(word_start)

    rows = []
    for replica in range(replicas):
        for row in range(batch_size):
            backward = bi_data and row >= half
            stream = (pipeline * replicas + replica) * half + (row - half if backward else row)
            shards = metadata["bwd_shards"] if backward else metadata["shards"]
            begin = stream * length
            rows.append(_row_dataset(data_dir, shards, begin, length, start_batch,
                                     key=begin + (num_records if backward else 0)))
    order = tf.data.Dataset.range(len(rows)).repeat()
    dataset = tf.data.Dataset.choose_from_datasets(rows, order)

    spec = {
        "input_ids": tf.io.FixedLenFeature([options.seq_len], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([options.seq_len], tf.int64),
        "is_next": tf.io.FixedLenFeature([1], tf.int64),
    }
    base_seed = tf.constant([seed, _SEED_SALT], tf.int64)

    def features(serialized, step, key):
        example = tf.io.parse_single_example(serialized, spec)
        record = key + step % length  # forward records 0..n-1, backward n..2n-1
        record_seed = tf.random.experimental.stateless_fold_in(base_seed, record)
        record_seed = tf.random.experimental.stateless_fold_in(record_seed, step // length)
        out = sampling.sample_features(example["input_ids"], example["segment_ids"], word_start, options,
                                       record_seed, vocab_size=vocab_size)
        out["is_next"] = tf.cast(example["is_next"][0], tf.int32)
        return out

    dataset = dataset.map(tf.autograph.experimental.do_not_convert(features), num_parallel_calls=tf.data.AUTOTUNE,
                          deterministic=True)
    dataset = dataset.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    dataset_options = tf.data.Options()
    dataset_options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    dataset_options.deterministic = True
    return dataset.with_options(dataset_options)
