"""The exported graphs: raw text in, the task's answers out, tokenization built in.

``build_serving_module`` returns the SavedModel root and its signatures for a fine-tuned head model (those
of every export here, the task's own from its ``Task.serving_signatures``, over ``xlnet_tf.tasks.graphs``);
``build_reusable_module`` the reusable encoder's; ``build_generation_module`` a language model's. They trace
the ONE tokenizer (``XLNetTokenizer``, TF + TF Text ops) and the graph feature builders
(``xlnet_tf.data.graph_features``), so a served request gets exactly the rows that ``xlnet_tf.data.finetuning``
builds for training and ``xlnet-tf predict``.

A request is padded to its own longest row, rounded up to a multiple of ``PAD_MULTIPLE`` (8) and at most
the export's ``max_seq_len``, not to ``max_seq_len``: XLNet's outputs at real positions do not depend on the
amount of padding, so a short request costs less and gets the same answer. Requests that a server merges
into one batch (strings, merged before tokenization) are padded once, to the longest merged row; sequence
heads then pack those rows (`xlnet_tf.data.packing`): several short texts share a row of that width, each
attending only to itself, so a merged batch with one long text costs about its real tokens, not rows x width.

Tokenization and feature building are pinned to the CPU (``tf.device("/cpu:0")``); the model runs
wherever the server places it. Every ``tf.function`` is traced with ``jit_compile=False``.

Every text input is cut to the bytes its kept pieces come from before it is tokenized, and ``predict_ids``
refuses ids wider than the export's rows before the model runs (``xlnet_tf.tasks.graphs``, "Bounded requests");
``export_limits`` is what xlnet_export.json records of those bounds.
"""

import tensorflow as tf

from xlnet_tf import tasks
from xlnet_tf.data import graph_features as gf
from xlnet_tf.data import packing
from xlnet_tf.tasks.graphs import JIT, Graphs, limits_record, same_batch, signature_function, text_spec
from xlnet_tf.tokenization import row_ids


class _Root(tf.__internal__.tracking.AutoTrackable):
    """SavedModel root: the tokenizer (its SentencePiece resource), ``variables``, functions."""


def _backing(variables):
    """The ``tf.Variable``s behind Keras 3 variables.

    The SavedModel must track the very variables the traced functions read: tracking the Keras wrappers
    instead gives a checkpoint whose TF1 restore op (what TensorFlow Serving runs when it loads a model in
    a Session) fills other resources than the ones the signatures read.
    """
    out = []
    for v in variables:
        value = v.value if not isinstance(v, tf.Variable) else v
        if not isinstance(value, tf.Variable):
            raise TypeError(f"{v.path if hasattr(v, 'path') else v}: no backing tf.Variable (got {type(value)})")
        out.append(value)
    return out


def text_pieces(task, finetune_config, max_seq_len, reusable=False):
    """{text input: (pieces, "first" or "last")} of an export (``ExportTask.text_pieces``; the reusable encoder:
    its ``text``, up to max_seq_len pieces)."""
    from xlnet_tf.training.finetune import config_doc_len

    doc_len = None if reusable else config_doc_len(finetune_config)
    width = gf.document_width(max_seq_len, doc_len)
    return {"text": (width, "first")} if reusable else task.text_pieces(finetune_config, max_seq_len, doc_len, width)


def export_limits(task, finetune_config, tokenizer, max_seq_len, reusable=False):
    """What xlnet_export.json records of an export's bounds (``graphs.limits_record``): the bytes each text input is
    cut to and from which end, and the widest ``predict_ids`` input (None for the reusable encoder, whose
    signatures take text, and a language model's)."""
    from xlnet_tf.training.finetune import config_doc_len

    ids_width = None if reusable or task is tasks.LANGUAGE_MODEL else gf.document_width(
        max_seq_len, config_doc_len(finetune_config))
    return limits_record(text_pieces(task, finetune_config, max_seq_len, reusable), tokenizer, ids_width)


# ----------------------------------------------------------------------------------------------------
# Serving module


def build_serving_module(model, tokenizer, finetune_config, max_seq_len, packing_mode="auto"):
    """(root, signatures) for a fine-tuned head model.

    Args:
      model: the head model (float32, dropout 0), from ``xlnet_tf.tasks.load_finetuned``.
      tokenizer: its ``XLNetTokenizer``.
      finetune_config: the fine-tuned directory's config (``task``, ``label_names``, ``pairs``,
        ``doc_stride``, ``max_query_len``, ``max_qa_len``, ``num_choices``).
      max_seq_len: L, the longest input of every signature (requests are padded to their longest row); for
        a model reading long documents (``long_doc`` "memory"), the segment length, and inputs take up to
        ``max_doc_len`` tokens (the segments run in a ``tf.while_loop`` carrying the memory).
      packing_mode: "auto": classification, regression, multi-label and RACE exports reading one window pack
        the rows of a request (several texts, or requests merged by the server's batching) into rows of the
        request's width before the model (`xlnet_tf.data.packing.pack_merged`); "none": they do not.
    Returns:
      ``(root, signatures)``: the root object holding the tokenizer and the model's variables, and the
      concrete functions by signature name: ``tokenize``, ``encode`` and the task's own
      (``Task.serving_signatures``: ``serving_default``, ``predict_ids``, ``words`` for token
      classification, ``classification`` / ``regression`` on tf.Examples for the sentence tasks, see
      ``Task.example_methods``).
    """
    from xlnet_tf.training.finetune import config_doc_len

    task = tasks.get(finetune_config["task"])
    pack = packing.parse_mode(packing_mode) == "auto" and task.packs
    g = Graphs(model, tokenizer, max_seq_len, config_doc_len(finetune_config),
               text_pieces(task, finetune_config, max_seq_len))
    root = _Root()
    root.tokenizer = tokenizer
    root.variables = _backing(model.variables)
    root.trainable_variables = _backing(model.trainable_variables)
    text_inputs = [text_spec(name) for name in task.text_inputs(finetune_config)]
    signatures = {}

    @signature_function([text_spec("text")])
    def tokenize(text):
        return g.tokenize(text)

    signatures["tokenize"] = tokenize.get_concrete_function()

    if len(text_inputs) == 2:
        @signature_function(text_inputs)
        def encode(text_a, text_b):
            return g.encode(g.classification_inputs(text_a, text_b), pack=pack)
    else:
        @signature_function(text_inputs)
        def encode(text):
            return g.encode(g.classification_inputs(text), pack=pack)
    signatures["encode"] = encode.get_concrete_function()
    for name, function in task.serving_signatures(g, finetune_config, pack).items():
        signatures[name] = function.get_concrete_function()
    return root, signatures


# ----------------------------------------------------------------------------------------------------
# Reusable encoder


def build_reusable_module(model, tokenizer, max_seq_len):
    """(root, signatures) of the reusable encoder (TF Hub's reusable SavedModel conventions).

    The root has ``__call__(inputs, training=False)`` (also as ``encode_ids``): ``inputs`` a dict of int32
    ``input_ids`` / ``segment_ids`` / ``padding_mask`` ``[B, T]`` (any T; 1 = real token) -> dict
    ``sequence_output`` float32 ``[B, T, d_model]`` and ``pooled_output`` ``[B, d_model]`` (the state at the
    LAST position: ``<cls>`` in XLNet's left-padded layout). ``training`` is accepted for the convention;
    the encoder has no dropout in either mode. ``text_inputs(text)`` turns raw strings into those inputs
    (single-sentence layout ``text <sep> <cls>``, at most max_seq_len tokens, left-padded to the batch's
    longest row rounded up to a multiple of 8). ``variables``,
    ``trainable_variables`` (the encoder weights the call uses: all but the pretraining-only ``mask_emb``) and
    ``regularization_losses`` (empty) are attributes. Load it with ``import tensorflow_text`` first (it
    registers the tokenizer's ops); ``xlnet_tf.export.keras_layer.ReusableEncoderLayer`` wraps it as a
    trainable Keras layer.
    Signatures: ``serving_default`` / ``encode`` (text -> as the serving export's ``encode``) and ``tokenize``.
    """
    encoder = model.transformer
    length = max_seq_len
    g = Graphs(model, tokenizer, length, text_pieces=text_pieces(None, {}, length, reusable=True))
    root = _Root()
    root.tokenizer = tokenizer
    root.variables = _backing(encoder.variables)
    # mask_emb only feeds the pretraining query stream: not used here, so not offered for training.
    root.trainable_variables = _backing([v for v in encoder.trainable_variables if v is not encoder.mask_emb])
    root.regularization_losses = []

    @tf.function(jit_compile=JIT, autograph=False)
    def infer(inputs):
        hidden = encoder(inputs, training=False)["sequence_output"]
        hidden = tf.cast(hidden, tf.float32)
        return {"sequence_output": hidden, "pooled_output": hidden[:, -1]}

    def call(inputs, training=False):
        # Both modes call the inference graph, traced once: without dropout they compute the same function, and
        # the training-mode layers use XLA-compiled parts (the feed-forward's GELU) that an export must not hold.
        del training
        return infer({k: inputs[k] for k in ("input_ids", "segment_ids", "padding_mask")})

    call_fn = tf.function(call, jit_compile=JIT, autograph=False)
    spec = {k: tf.TensorSpec([None, None], tf.int32, name=k) for k in ("input_ids", "segment_ids", "padding_mask")}
    for training in (False, True):
        call_fn.get_concrete_function(spec, training=training)

    @signature_function([text_spec("text")])
    def text_inputs(text):
        features = g.classification_inputs(text)
        return {k: features[k] for k in ("input_ids", "segment_ids", "padding_mask")}

    @signature_function([text_spec("text")])
    def encode(text):
        return g.encode(g.classification_inputs(text))

    @signature_function([text_spec("text")])
    def tokenize(text):
        return g.tokenize(text)

    root.__call__ = call_fn
    root.encode_ids = call_fn
    root.text_inputs = text_inputs
    signatures = {"serving_default": encode.get_concrete_function(), "encode": encode.get_concrete_function(),
                  "tokenize": tokenize.get_concrete_function()}
    return root, signatures


GENERATE_INPUTS = ("text", "max_new_tokens", "temperature", "top_k", "top_p", "seed")


def build_generation_module(model, tokenizer, max_prompt_len, max_new_tokens):
    """(root, signatures) for a language model (an ``XLNetPretrainer``; task "lm"): ``xlnet_tf.generation``'s
    cached decoder in one ``While`` loop, the tokenizer and detokenizer in the graph.

    ``generate(text [B], max_new_tokens int32 [B], temperature float32 [B], top_k int32 [B], top_p float32 [B],
    seed int64 [B])`` and ``serving_default(text [B])`` (greedy, ``max_new_tokens`` each) -> ``text`` string [B]
    (the continuation), ``token_ids`` int32 [B, N] (0 after a row's end; N = ``max_new_tokens``, the export's
    cap), ``log_probs`` float32 [B, N], ``num_tokens`` int32 [B] and ``finish_reason`` string [B] ("stop" or
    "length"). A prompt keeps its last ``max_prompt_len`` tokens (read from the end of its text: ``Graphs.cut``);
    an empty prompt reads ``<eod>`` (the start of a document). Rows stop at ``</s>``, ``<eod>`` or ``<eop>``. Plus
    ``tokenize(text)`` (what a prompt reads: of a longer text, the tokens of its end) -> ``token_ids`` int32,
    ``token_start`` / ``token_end`` int64 (UTF-8 byte offsets into ``text``) padded with -1 to the longest row,
    ``num_tokens`` int64.
    """
    from xlnet_tf import generation

    g = Graphs(model, tokenizer, max_prompt_len, text_pieces=text_pieces(
        tasks.LANGUAGE_MODEL, {"task": tasks.LANGUAGE_MODEL.name}, max_prompt_len))
    root = _Root()
    root.tokenizer = tokenizer
    root.variables = _backing(model.variables)
    root.trainable_variables = _backing(model.trainable_variables)
    stop_ids = tf.constant(generation.default_stop_ids(tokenizer), tf.int32)
    reasons = tf.constant(generation.FINISH_REASONS)

    @tf.function(jit_compile=JIT, autograph=False)  # traced once, called by generate and serving_default
    def decode(text, limits, temperature, top_k, top_p, seeds):
        with tf.device("/cpu:0"):
            keep = tf.fill(tf.shape(text, out_type=tf.int64), tf.constant(max_prompt_len, tf.int64))
            ids = gf.keep_last(tokenizer.tokenize(g.cut(text, "text")), keep)
            ids = tf.ragged.map_flat_values(tf.cast, ids, tf.int32)
            empty = tf.equal(ids.row_lengths(), 0)
            eod = tf.RaggedTensor.from_row_lengths(tf.fill([tf.reduce_sum(tf.cast(empty, tf.int64))], tokenizer.eod_id),
                                                   tf.cast(empty, tf.int64))
            ids = tf.concat([eod, ids], axis=1)  # an empty prompt reads <eod>
            width = tf.reduce_max(ids.row_lengths())
            prompt_ids = gf.pad_rows(ids, width, 0, left=True)
            prompt_mask = gf.pad_rows(tf.ones_like(ids), width, 0, left=True)
        out = generation.decode(model, prompt_ids, prompt_mask, max_new_tokens, temperature=temperature,
                                top_k=top_k, top_p=top_p, seeds=seeds, stop_ids=stop_ids, max_new_tokens=limits)
        with tf.device("/cpu:0"):
            tokens = tf.RaggedTensor.from_tensor(out["tokens"], lengths=out["lengths"])
            continuation = tokenizer.detokenize(tokens)
        return {"text": continuation, "token_ids": out["tokens"], "log_probs": out["log_probs"],
                "num_tokens": out["lengths"], "finish_reason": tf.gather(reasons, out["finish_reason"])}

    specs = [text_spec("text"), tf.TensorSpec([None], tf.int32, name="max_new_tokens"),
             tf.TensorSpec([None], tf.float32, name="temperature"), tf.TensorSpec([None], tf.int32, name="top_k"),
             tf.TensorSpec([None], tf.float32, name="top_p"), tf.TensorSpec([None], tf.int64, name="seed")]

    @signature_function(specs)
    def generate(text, max_new_tokens, temperature, top_k, top_p, seed):
        checks = same_batch(text, max_new_tokens, temperature, top_k, top_p, seed) + [
            tf.debugging.assert_non_negative(max_new_tokens, message="max_new_tokens must be >= 0"),
            tf.debugging.assert_non_negative(temperature, message="temperature must be >= 0 (0: greedy)"),
            tf.debugging.assert_non_negative(top_k, message="top_k must be >= 0 (0: every token)"),
            tf.debugging.assert_positive(top_p, message="top_p must be in (0, 1]"),
            tf.debugging.assert_less_equal(top_p, 1.0, message="top_p must be in (0, 1]")]
        with tf.control_dependencies(checks):
            return decode(tf.identity(text), max_new_tokens, temperature, top_k, top_p, seed)

    @signature_function([text_spec("text")])
    def serving_default(text):
        batch = tf.shape(text)
        return decode(text, tf.fill(batch, max_new_tokens), tf.zeros(batch, tf.float32), tf.zeros(batch, tf.int32),
                      tf.ones(batch, tf.float32), tf.zeros(batch, tf.int64))

    @signature_function([text_spec("text")])
    def tokenize(text):
        with tf.device("/cpu:0"):
            read = g.cut(text, "text")
            ids, starts, ends = tokenizer.tokenize_with_offsets(read)
            dropped = tf.cast(tf.strings.length(text) - tf.strings.length(read), tf.int64)  # offsets into `text`
            starts, ends = (t.with_values(t.values + tf.gather(dropped, row_ids(t))) for t in (starts, ends))
            return {"token_ids": gf.pad_to_longest(ids, -1), "token_start": gf.pad_to_longest(starts, -1),
                    "token_end": gf.pad_to_longest(ends, -1), "num_tokens": ids.row_lengths()}

    signatures = {"serving_default": serving_default.get_concrete_function(),
                  "generate": generate.get_concrete_function(), "tokenize": tokenize.get_concrete_function()}
    return root, signatures
