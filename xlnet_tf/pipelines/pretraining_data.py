"""`create-pretraining-data --runner ...`: the pretraining records written by a Beam pipeline.

The pipeline runs the single-process command's two steps (`xlnet_tf.data.pretraining`), spread over workers:

    input files --Reshuffle--> tokenize_file (one element per file)   --> token chunks in OUTPUT/.tokens/
    (direction, shard) pairs --Reshuffle--> write_shard (side input: every chunk's counts) --> shard files
    one element, after both (side inputs) --> metadata.json, then the chunks are deleted

A file is one unit of tokenization, so a document never spans workers; a shard is one unit of writing. Every
record's random choices come from (seed, direction, record index), so the shards are byte-identical to the
single-process output for the same seed, whatever the runner and the number of workers. All I/O goes through
Beam's filesystems (`common.BeamFiles`): inputs, chunks and shards may live on any filesystem Beam has (gs://
with apache-beam[gcp]); the workers must be able to read and write them.

Counters (namespace xlnet_tf): documents, tokens, bad_utf8_lines_skipped, records.
"""

from __future__ import annotations

import json

import apache_beam as beam
from apache_beam.metrics import Metrics

from xlnet_tf.data import pretraining
from xlnet_tf.pipelines import common


class _TokenizeFile(beam.DoFn):
    """(index, path) -> the file's chunk counts (`pretraining.tokenize_file`) with its index."""

    def __init__(self, model_bytes, lower_case, chunks_dir, skip_bad_lines):
        self.model_bytes, self.lower_case = model_bytes, lower_case
        self.chunks_dir, self.skip_bad_lines = chunks_dir, skip_bad_lines
        self.documents = Metrics.counter(common.COUNTER_NAMESPACE, "documents")
        self.tokens = Metrics.counter(common.COUNTER_NAMESPACE, "tokens")
        self.skipped = Metrics.counter(common.COUNTER_NAMESPACE, "bad_utf8_lines_skipped")

    def setup(self):
        from xlnet_tf.tokenization import XLNetTokenizer

        self.files = common.BeamFiles()
        self.encode = pretraining.line_encoder(XLNetTokenizer.from_bytes(self.model_bytes, self.lower_case))

    def process(self, element):
        index, path = element
        chunk = pretraining.tokenize_file(self.files, self.encode, path,
                                          pretraining.chunk_path(self.files, self.chunks_dir, index),
                                          self.skip_bad_lines)
        self.documents.inc(chunk["documents"])
        self.tokens.inc(chunk["tokens"])
        self.skipped.inc(chunk["skipped_lines"])
        yield dict(chunk, index=index)


def _in_order(chunks):
    return sorted(chunks, key=lambda c: c["index"])


class _WriteShard(beam.DoFn):
    """(backward, shard) -> that shard written (`pretraining.write_shard`) and its result."""

    def __init__(self, output_dir, settings):
        self.output_dir, self.settings = output_dir, settings
        self.records = Metrics.counter(common.COUNTER_NAMESPACE, "records")

    def setup(self):
        self.files = common.BeamFiles()

    def process(self, element, chunks):
        backward, shard = element
        s = self.settings
        chunks = _in_order(chunks)
        num_records = pretraining.count_records(chunks, s["seq_len"], s["reuse_len"], s["num_shards"])
        written = pretraining.write_shard(self.files, chunks, self.output_dir, shard, s["num_shards"], num_records,
                                          s["seq_len"], s["reuse_len"], s["seed"], backward)
        self.records.inc(written["num_records"])
        yield dict(written, backward=backward, shard=shard)


def _finish(_, written, chunks, output_dir, settings, tokenizer_info):
    """Writes metadata.json (last) from every shard's result, after deleting the token chunks."""
    files = common.BeamFiles()
    ordered = {b: [w for w in sorted(written, key=lambda w: w["shard"]) if w["backward"] == b] for b in (False, True)}
    metadata = pretraining.build_metadata(
        _in_order(chunks), ordered[False], ordered[True], seq_len=settings["seq_len"],
        reuse_len=settings["reuse_len"], num_shards=settings["num_shards"], seed=settings["seed"],
        bi_data=settings["bi_data"], tokenizer_info=tokenizer_info)
    files.remove_tree(pretraining.tokens_dir(files, output_dir))
    files.write_json(files.join(output_dir, pretraining.METADATA_FILE), metadata)


def build_pipeline(pipeline, paths, tokenizer, output_dir, settings, skip_bad_lines):
    """Adds the steps to `pipeline` (a beam.Pipeline): `paths` in order, `settings` = seq_len, reuse_len,
    num_shards, seed, bi_data."""
    files = common.BeamFiles()
    chunks_dir = pretraining.tokens_dir(files, output_dir)
    chunks = (pipeline
              | "input files" >> beam.Create(list(enumerate(paths)))
              | "spread files" >> beam.Reshuffle()
              | "tokenize" >> beam.ParDo(_TokenizeFile(tokenizer.model_bytes, tokenizer.lower_case, chunks_dir,
                                                       skip_bad_lines)))
    directions = (False, True) if settings["bi_data"] else (False,)
    written = (pipeline
               | "shards" >> beam.Create([(b, s) for b in directions for s in range(settings["num_shards"])])
               | "spread shards" >> beam.Reshuffle()
               | "write records" >> beam.ParDo(_WriteShard(output_dir, settings), beam.pvalue.AsList(chunks)))
    tokenizer_info = pretraining.tokenizer_info(tokenizer, settings["spm_model"])
    (pipeline
     | "after all shards" >> beam.Create([None])
     | "metadata" >> beam.Map(_finish, beam.pvalue.AsList(written), beam.pvalue.AsList(chunks), output_dir,
                              settings, tokenizer_info))


def create_pretraining_data_beam(input_files, spm_model, output_dir, options, seq_len=512, reuse_len=256,
                                 num_shards=1, seed=0, bi_data=False, lower_case=None, skip_bad_lines=False) -> dict:
    """`pretraining.create_pretraining_data` as a Beam pipeline run with `options` (PipelineOptions; see
    `common.pipeline_options`): the same arguments, files and metadata. Returns the metadata plus
    `output_dir` and the pipeline's `counters`."""
    pretraining.check_settings(seq_len, reuse_len, num_shards, seed)
    files = common.BeamFiles()
    paths = [pretraining.absolute_path(p) for p in pretraining.expand_inputs(files, input_files)]
    spm_model = pretraining.absolute_path(str(spm_model))
    tokenizer = pretraining.load_tokenizer(files, spm_model, lower_case)
    output_dir = str(output_dir)
    pretraining.prepare_output_dir(files, output_dir)
    pretraining.write_spm_copy(files, output_dir, tokenizer.model_bytes)
    settings = {"seq_len": seq_len, "reuse_len": reuse_len, "num_shards": num_shards, "seed": seed,
                "bi_data": bool(bi_data), "spm_model": spm_model}
    try:
        pipeline = beam.Pipeline(options=options)
        build_pipeline(pipeline, paths, tokenizer, output_dir, settings, skip_bad_lines)
        result = common.run(pipeline)
    finally:
        files.remove_tree(pretraining.tokens_dir(files, output_dir))
    with files.open(files.join(output_dir, pretraining.METADATA_FILE), "rb") as f:
        metadata = json.loads(f.read().decode("utf-8"))
    counts = common.counters(result)
    print(pretraining.summary_line(metadata, output_dir))
    print("Beam counters: " + ", ".join(f"{name} {value}" for name, value in sorted(counts.items())))
    return dict(metadata, output_dir=output_dir, counters=counts)
