"""``export_model``: a fine-tuned model directory -> a versioned SavedModel that TensorFlow Serving can poll.

Layout written (``export_base`` is ``BASE/NAME``, TF Serving's ``--model_base_path``)::

    BASE/NAME/<version>/saved_model.pb            signatures on raw text (see below)
                        variables/                 float32 weights
                        assets.extra/tf_serving_warmup_requests   PredictionLog records (TFRecord)
                        assets.extra/xlnet_export.json            what was exported (task, labels, shapes)

``BASE/NAME`` is a local folder or a URL (``gs://bucket/exports/name``; ``ram://`` in the tests), read and
written through ``xlnet_tf.files``. The version is built and checked (ops allowlist) in a local staging
directory, then published; an existing version is never overwritten. What a server polling ``BASE/NAME``
(TensorFlow Serving, or ``xlnet-tf serve``) can see:

* local ``BASE/NAME``: the staging directory is inside it, named ``.tmp-xlnet-export-*`` (both servers
  load only all-digit names), and one ``rename`` publishes it: the version appears whole or not at all, for
  both servers.
* remote ``BASE/NAME`` (gs://): staging is under the system's temporary folder. An object store has no
  directory rename (a "rename" is a copy object by object), so ``files.publish_tree`` copies the files one by
  one, each whole, and ``saved_model.pb`` LAST. On GCS (and S3) an object becomes visible only once its upload
  is complete, and listings and reads are strongly consistent; on a store that shows a file while it is
  written (HDFS; ``ram://`` in the tests) each file is written as ``.NAME.<random>.tmp`` beside its place and
  renamed into it. Either way whoever finds ``saved_model.pb`` finds every file of the version, whole.

  - ``xlnet-tf serve`` ignores a version directory until its ``saved_model.pb`` exists: it never loads nor
    reports a partial version, and loads the version at its first poll after the copy.
  - TensorFlow Serving (file_system_storage_path_source.cc) aspires every child of the base path whose name
    parses as a number as soon as any object under it exists, without looking inside: it starts loading the
    partial version at its next poll (GetModelStatus: LOADING; the served version keeps serving,
    availability preserving). The load fails with NOT_FOUND ("Specified file path does not appear to contain
    a SavedModel bundle (should have a file called `saved_model.pb`)") and is retried
    ``--max_num_load_retries`` times (default 5), ``--load_retry_interval_micros`` apart (default 60 s), each
    try reading the directory afresh: it can never load half of a version, and it loads the version at the
    first retry after ``saved_model.pb`` lands (up to a minute later by default; with the default
    ``--num_load_threads=0`` the retries run in the manager's own loop, so other versions' loads and unloads
    wait meanwhile). A copy that takes longer than the retries (5 minutes by default) leaves the version in
    error (GetModelStatus: END with that error) and TensorFlow Serving does not try it again
    (``enable_reload_servables_with_error`` is not a flag of ``tensorflow_model_server``) until it restarts or
    the version stops and starts being aspired; the previous version keeps serving. For large exports or
    slow links, raise the two flags, or serve a ``specific`` version policy and switch it by a config reload
    once the copy has finished.

  Two exports publishing the same version of one remote base at the same time are not detected (object
  stores have no atomic create-if-absent through tf.io.gfile); a copy that fails midway is removed (best
  effort: a leftover has no ``saved_model.pb``, so neither server ever loads it, but it takes its number).

Signatures (B = batch, L = max_seq_len, T = the request's width: its longest row rounded up to a multiple of
8, at most L; every input is required, every output has B first):

* classification: ``serving_default(text)`` -- or ``(text_a, text_b)`` for a model trained on pairs --
  -> ``logits`` float32 [B, C], ``probabilities`` float32 [B, C], ``label_id`` int64 [B], ``label`` string
  [B] (the class name). Regression: -> ``prediction`` float32 [B]. Multi-label: -> ``logits`` / ``scores``
  float32 [B, C] (each label's sigmoid), ``label_applies`` int32 [B, C] (score >= the label's recorded
  threshold), ``labels`` string [B, K] (the labels that apply, in label order, padded with ""; K: the
  request's most) and ``num_predicted`` int64 [B]; its Classify gives every label with its score.
  TensorFlow Serving's Classify / Regress API: ``classification(inputs)`` (method
  ``tensorflow/serving/classify``; classification models) and ``regression(inputs)`` (method
  ``tensorflow/serving/regress``; regression models) take serialized ``tf.Example`` s ``inputs`` string [B],
  whose bytes feature ``text`` (``text_a`` and ``text_b`` for pairs: the names of serving_default's inputs)
  holds one UTF-8 text -> ``classes`` string [B, C] (the label names) and ``scores`` float32 [B, C]
  (= ``probabilities``), or ``outputs`` float32 [B] (= ``prediction``). A missing or mistyped feature, or text
  that is not UTF-8 (in the bytes read: see Bounded requests below), fails the request with InvalidArgument
  naming the feature.
* squad: ``serving_default(question, context)`` -> ``answer`` string [B] (a substring of the context),
  ``answer_start`` / ``answer_end`` int64 [B] (Unicode code point offsets into the context, end exclusive:
  ``answer == context[answer_start:answer_end]`` in Python; -1 / -1 and ``answer`` "" when no span
  qualifies), ``score`` float32 [B] (start + end log-probability of the answer; 0 when none),
  ``null_score`` float32 [B] (minimum ``cls_logits`` over the context's windows, the original's null
  score), ``no_answer_probability`` float32 [B] (= sigmoid(null_score): the answerability head is
  trained with label 1 = impossible), ``window_index`` int64 [B] (which window of that context the answer
  came from, -1 when none).
* race: ``serving_default(article, question, options [B, C])`` -> ``logits`` / ``probabilities`` float32
  [B, C], ``answer_index`` int64 [B].
* token-classification: ``serving_default(text)`` splits each text into words in the graph (runs of
  characters that are neither whitespace nor punctuation, and each punctuation character alone:
  ``xlnet_tf.data.graph_words.split_words``), tokenizes each word alone and cuts windows of whole words as
  training did (``graph_features.token_windows``) -> ``words`` string [B, W] (W: the request's most words;
  padded with ""), ``word_start`` / ``word_end`` int64 [B, W] (UTF-8 BYTE offsets into the text, end
  exclusive; -1 padding), ``tags`` string [B, W], ``tag_id`` int64 [B, W], ``scores`` float32 [B, W] (the
  tag's probability), ``num_words`` int64 [B]; the entities (seqeval's chunks of the tags):
  ``entity_text`` / ``entity_type`` string [B, E], ``entity_start`` / ``entity_end`` int64 [B, E] (byte
  offsets: ``entity_text == text[entity_start:entity_end]`` in bytes), ``num_entities`` int64 [B].
  ``words(words string [B, W])`` takes pre-split words (empty strings are padding, anywhere in a row) ->
  ``tags`` / ``tag_id`` / ``scores`` [B, W] at the input's columns, ``num_words``, and the entities with
  ``entity_start`` / ``entity_end`` as column indices (end exclusive) and ``entity_text`` the words joined by
  spaces. ``predict_ids`` -> ``logits`` float32 [B, T, C].
* lm (a pretrained or converted language model; ``build_generation_module``): ``generate(text, max_new_tokens
  int32, temperature float32, top_k int32, top_p float32, seed int64)``, each [B], and ``serving_default(text)``
  (greedy, the export's ``max_new_tokens`` each) -> ``text`` string [B] (the continuation), ``token_ids`` int32
  [B, N], ``log_probs`` float32 [B, N] (N: the export's ``max_new_tokens``), ``num_tokens`` int32 [B],
  ``finish_reason`` string [B] ("stop" / "length"); the decode loop runs in the graph (``While``), sampling
  with ``StatelessRandomUniformV2`` from each row's seed (the same seed, the same text as
  ``xlnet_tf.generation``); ``tokenize``. A setting out of range fails the request with InvalidArgument
  naming it.
* every other export: ``encode`` (the serving text inputs, single-sentence layout for squad / race) ->
  ``sequence_output`` float32 [B, T, d_model], ``pooled_output`` float32 [B, d_model] (the ``<cls>`` state,
  the last position), ``padding_mask`` / ``input_ids`` / ``segment_ids`` int32 [B, T]; ``tokenize(text)``
  -> ``token_ids`` int32 [B, L], ``token_start`` / ``token_end`` int64 [B, L] (code point spans in
  ``text``), all padded with -1 after the first L tokens, ``num_tokens`` int64 [B] (of the text read, before
  truncation);
  ``predict_ids(input_ids, segment_ids, padding_mask int32 [B, T]`` (+ ``p_mask`` [B, T] and ``cls_index``
  [B] for squad; [B, C, T] for race), any T <= L) -> the head's raw outputs.

Long documents (a model fine-tuned with ``--long-doc memory``; classification, regression, race): L is the
segment length and text inputs take up to ``max_doc_len`` tokens (more are truncated as in training: a
single text keeps its first ``max_doc_len - 2``, text_b / question + option keep at most L - 3). Rows are
left-padded to whole segments (T = the request's longest row rounded up to a multiple of L) and the segments
run in order in a ``tf.while_loop`` that carries each layer's memory, so the cost grows with the request's
number of segments. ``encode`` returns the last segment's states ([B, L, d_model]); ``tokenize`` pads to
the document width; ``predict_ids`` takes T up to the document width, a multiple of L.

Bounded requests (TensorFlow Serving has no server of ours in front): each text input is cut, before it is
tokenized, to the bytes its kept pieces come from (its first bytes, or its last where the last pieces are kept: a
prompt, RACE's question + option); a SQuAD context or a token-classification text is read up to 32 x L pieces; ids
wider than the rows are refused (InvalidArgument) before the model runs. ``xlnet_export.json`` records the bounds
under ``limits`` (``piece_bytes``; per text input its ``bytes``, ``keep`` and ``pieces``; ``ids_width``); exports
without that key were made before the bounds and read whole texts. See ``xlnet_tf.tasks.graphs``.
"""

import json
import os
import shutil
import tempfile

from xlnet_tf import files
from xlnet_tf.errors import UserError

WARMUP_FILE = "tf_serving_warmup_requests"
METADATA_FILE = "xlnet_export.json"
TMP_PREFIX = ".tmp-xlnet-export-"

SAVED_MODEL_FILE = "saved_model.pb"  # published last on remote bases: a version without it is not loadable


def _versions(export_base):
    if not files.isdir(export_base):
        return []
    return sorted(int(name) for name in files.listdir(export_base) if name.isdigit())


def next_version(export_base):
    """The next free version number under ``export_base`` (1 when there is none)."""
    versions = _versions(os.fspath(export_base))
    return (versions[-1] + 1) if versions else 1


def _resolve_version(export_base, version):
    if version is None:
        return next_version(export_base)
    if isinstance(version, bool) or not isinstance(version, int):
        try:
            version = int(str(version), 10)
        except ValueError:
            raise UserError(f"--version must be a non-negative integer, got {version!r}") from None
    if version < 0:
        raise UserError(f"--version must be a non-negative integer, got {version}")
    return version


def _check_free(export_base, version):
    target = files.join(export_base, str(version))
    if files.exists(target) if files.is_remote(target) else os.path.lexists(target):
        raise UserError(f"{target} already exists: an exported version is never overwritten "
                        f"(pick another --version, or omit it for the next free one, "
                        f"{next_version(export_base)})")
    return target


def write_warmup(path, model_name, requests):
    """Write ``path`` (TFRecord of ``PredictionLog``s with ``PredictRequest``s for ``serving_default``): one a
    request of ``requests`` (input name -> list / nested list of str, ``ExportTask.warmup_inputs``)."""
    import tensorflow as tf
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    with tf.io.TFRecordWriter(path) as writer:
        for inputs in requests:
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name=model_name, signature_name="serving_default"))
            for key, value in inputs.items():
                request.inputs[key].CopyFrom(tf.make_tensor_proto(
                    [[s.encode("utf-8") for s in row] for row in value] if isinstance(value[0], list)
                    else [s.encode("utf-8") for s in value], dtype=tf.string))
            log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())
    return len(requests)


def set_method_names(export_dir, methods):
    """Sets the ``method_name`` of the SignatureDefs named in ``methods`` ({signature: method}) in
    ``export_dir/saved_model.pb`` and rewrites the fingerprint. ``tf.saved_model.save`` writes every signature
    as a predict one; TensorFlow Serving's Classify and Regress run only signatures whose method is
    ``tensorflow/serving/classify`` / ``regress``."""
    from tensorflow.core.protobuf import saved_model_pb2

    path = os.path.join(export_dir, "saved_model.pb")
    saved = saved_model_pb2.SavedModel()
    with open(path, "rb") as f:
        saved.ParseFromString(f.read())
    for meta in saved.meta_graphs:
        for name, method in methods.items():
            if name in meta.signature_def:
                meta.signature_def[name].method_name = method
    files.write_bytes(path, saved.SerializeToString(deterministic=True))  # whole: a reader never sees half
    fingerprint = os.path.join(export_dir, "fingerprint.pb")
    if os.path.exists(fingerprint):  # the fingerprint hashes saved_model.pb: write the new one's
        os.remove(fingerprint)
        try:
            from tensorflow.python.saved_model import fingerprinting_utils
        except ImportError:  # pragma: no cover - a TensorFlow without fingerprints: none is written
            return
        fingerprinting_utils.write_fingerprint(export_dir)


def _publish_remote(staging, target):
    """Copies the local ``staging`` directory to the remote ``target``, ``saved_model.pb`` last (see the
    module docstring); a copy that fails midway is removed (best effort)."""
    if files.exists(target):  # publish_tree refuses it too: checked here so that a refusal removes nothing
        raise UserError(f"{target} already exists: an exported version is never overwritten")
    try:
        files.publish_tree(staging, target, last=(SAVED_MODEL_FILE,))
    except BaseException:
        try:
            files.rmtree(target)
        except Exception:  # noqa: BLE001 - the copy's own error is the one to report
            pass
        raise


def _signature_summary(signatures):
    out = {}
    for name, fn in signatures.items():
        inputs = {k: [spec.dtype.name, spec.shape.as_list()] for k, spec in fn.structured_input_signature[1].items()}
        outputs = {k: [t.dtype.name, t.shape.as_list()] for k, t in fn.structured_outputs.items()}
        out[name] = {"inputs": inputs, "outputs": outputs}
    return out


PRECISIONS = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}
LM_PROMPT_LEN, LM_NEW_TOKENS = 512, 64  # a language model's export: prompt tokens kept, new tokens at most


def _lm_directory(model_dir):
    """Whether ``model_dir`` holds a language model to export for generation (a pretrained or converted
    directory: xlnet_config.json without finetune_config.json)."""
    from xlnet_tf.heads import FINETUNE_FILE
    from xlnet_tf.model import CONFIG_FILE

    return not files.exists(files.join(model_dir, FINETUNE_FILE)) and files.exists(files.join(model_dir, CONFIG_FILE))


def export_model(model_dir, export_base, version=None, max_seq_len=None, reusable=False, precision="float32",
                 max_new_tokens=None, packing="auto", checkpoint=None):
    """Export a fine-tuned model directory as a TensorFlow Serving SavedModel; returns the version's path.

    Args:
      model_dir: a fine-tuned directory (``finetune_config.json``, ``xlnet_config.json``, checkpoint,
        ``spiece.model``), as written by ``xlnet-tf finetune``; or a pretrained / converted language model
        (``xlnet_config.json``, a checkpoint with the LM head, ``spiece.model``): task "lm", text generation
        (``build_generation_module``), ``max_seq_len`` its prompt tokens kept (default 512) and
        ``max_new_tokens`` the most tokens a request generates (default 64).
      export_base: ``BASE/NAME``, a local folder or a URL (gs://...); the export goes to
        ``BASE/NAME/<version>/`` (see the module docstring for how it is published).
      version: a non-negative integer; default: one more than the highest existing version (1 first).
      max_seq_len: L, the longest input of every signature (default: the ``max_seq_len`` the model was
        fine-tuned with); requests are padded to their own longest row.
      reusable: write the reusable encoder (``build_reusable_module``: TF Hub-style ``__call__`` on ids,
        trainable ``variables``, plus ``serving_default`` / ``encode`` / ``tokenize`` on text) instead of the
        task model.
      precision: what the served graph computes in: "float32", "bfloat16" or "float16" (the Keras mixed
        policies: float32 variables, matmuls in the reduced type; attention scores, softmax, layer norm
        statistics and the heads' outputs in float32, as in training). Inputs and outputs are the same in
        every precision (text in, float32 scores out); recorded in ``xlnet_export.json``.
      packing: "auto" (classification, regression, multi-label, RACE in one window: the rows of a request, or
        of requests merged by batching, are packed before the model; ``build_serving_module``) or "none";
        recorded.
      checkpoint: a fine-tuned directory's weights: "best", "last", a checkpoint path, or None (the best when
        evaluation during training kept one, else the last; ``xlnet_tf.tasks.choose_checkpoint``).
    Raises:
      UserError: the version exists already, a bad version / max_seq_len, or a graph with an op that TF
        Serving does not link (nothing is left behind).
    """
    from xlnet_tf import tasks
    from xlnet_tf.data.packing import parse_mode

    if precision not in PRECISIONS:
        raise UserError(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    packing = parse_mode(packing)
    model_dir, export_base = os.fspath(model_dir), files.absolute(os.fspath(export_base))
    remote = files.is_remote(export_base)
    lm = _lm_directory(model_dir)
    if lm and reusable:
        raise UserError(f"{model_dir}: --reusable exports the encoder of a fine-tuned directory; this one is a "
                        "language model (exported for generation)")
    if max_new_tokens is not None and (not lm or max_new_tokens < 1):
        raise UserError("--max-new-tokens is for a language model's export (a pretrained or converted directory) "
                        f"and must be at least 1, got {max_new_tokens} for {model_dir}")
    if lm:
        task = tasks.LANGUAGE_MODEL
        finetune_config = {"task": task.name, "max_seq_len": LM_PROMPT_LEN,
                           "max_new_tokens": max_new_tokens or LM_NEW_TOKENS}
    else:
        finetune_config = tasks.read_finetune_config(model_dir)  # fails early on a directory that is not fine-tuned
        task = tasks.get(finetune_config["task"])
    version = _resolve_version(export_base, version)
    _check_free(export_base, version)
    length = int(max_seq_len or finetune_config.get("max_seq_len") or 0)
    if finetune_config.get("long_doc") == "memory" and length != finetune_config["max_seq_len"] and not reusable:
        raise UserError(f"--max-seq-len of a long-document model is its segment length, "
                        f"{finetune_config['max_seq_len']}; got {length} (documents take up to max_doc_len "
                        f"{finetune_config['max_doc_len']} tokens)")
    minimum = 3 if reusable else task.min_seq_len(finetune_config)
    if length < minimum:
        raise UserError(f"--max-seq-len must be at least {minimum} for this {task.name} model, got {length}")

    import tensorflow as tf

    from . import ops
    from .signatures import build_generation_module, build_reusable_module, build_serving_module, export_limits
    from xlnet_tf.model import SPM_FILE
    from xlnet_tf.tokenization import XLNetTokenizer, tokenizer_settings

    if lm:
        from xlnet_tf.generation import load_generator

        model, tokenizer = load_generator(model_dir, dtype=PRECISIONS[precision])
    else:
        # float32 variables whatever the training precision (computing in `precision`); no dropout.
        model, _ = tasks.load_finetuned(model_dir, dtype=PRECISIONS[precision], dropout=0.0, dropatt=0.0,
                                        checkpoint=checkpoint)
        tokenizer = XLNetTokenizer(os.path.join(model_dir, finetune_config.get("spm_model") or SPM_FILE),
                                   **tokenizer_settings(finetune_config))
    if lm:
        root, signatures = build_generation_module(model, tokenizer, length, finetune_config["max_new_tokens"])
    elif reusable:
        root, signatures = build_reusable_module(model, tokenizer, length)
    else:
        root, signatures = build_serving_module(model, tokenizer, finetune_config, length, packing)

    if remote:  # built locally, then copied file by file (saved_model.pb last)
        staging = tempfile.mkdtemp(prefix=TMP_PREFIX)
    else:  # built inside the base: one atomic rename publishes it
        os.makedirs(export_base, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=TMP_PREFIX, dir=export_base)
    try:
        tf.saved_model.save(root, staging, signatures=signatures)
        examples = {} if reusable else task.example_methods  # Classify / Regress signatures
        if examples:
            set_method_names(staging, examples)
        extra = os.path.join(staging, "assets.extra")
        os.makedirs(extra, exist_ok=True)
        if not reusable:
            write_warmup(os.path.join(extra, WARMUP_FILE), files.basename(export_base),
                         task.warmup_inputs(finetune_config))
        metadata = {
            "kind": "reusable_encoder" if reusable else "serving",
            "task": task.name, "max_seq_len": length, "version": version, "precision": precision,
            "packing": "requests" if packing == "auto" and not reusable and task.packs and
            finetune_config.get("long_doc", "truncate") == "truncate" else "none",
            "label_names": finetune_config.get("label_names"), "pairs": bool(finetune_config.get("pairs")),
            **tokenizer.settings,  # lower_case, keep_accents, remove_space
            "doc_stride": finetune_config.get("doc_stride"), "max_query_len": finetune_config.get("max_query_len"),
            "long_doc": "truncate" if reusable else finetune_config.get("long_doc", "truncate"),
            "max_doc_len": None if reusable else finetune_config.get("max_doc_len"),
            "mem_len": None if reusable else finetune_config.get("mem_len"),
            "max_new_tokens": finetune_config.get("max_new_tokens"),
            "signatures": _signature_summary(signatures),
            # the tf.Example features the classification / regression signature reads (bytes, UTF-8 text)
            "example_features": list(task.text_inputs(finetune_config)) if examples else None,
            # what one request may cost: the bytes each text input is cut to, the widest predict_ids input
            "limits": export_limits(task, finetune_config, tokenizer, length, reusable),
        }
        with open(os.path.join(extra, METADATA_FILE), "w", encoding="utf-8") as f:
            json.dump(metadata, f, indent=2, sort_keys=True)
        bad = ops.disallowed_ops(staging)
        if bad:
            raise UserError(f"the exported graph uses ops that TensorFlow Serving does not link: {sorted(bad)}")
        target = _check_free(export_base, version)
        if remote:
            _publish_remote(staging, target)
        else:
            umask = os.umask(0)
            os.umask(umask)
            for folder, _, _ in os.walk(staging):  # mkdtemp made it 0700: readable by the server too
                os.chmod(folder, 0o777 & ~umask)
            try:
                os.rename(staging, target)  # fails on an existing non-empty directory: never overwrites
            except OSError as error:
                raise UserError(f"{target}: could not publish the export ({error}); it may have been created "
                                f"meanwhile") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target
