"""SQuAD 1.1 / 2.0: a span of the context answers the question (or none does); long contexts read as
--doc-stride windows. Two heads: "beam" (the original's: the end conditioned on the start, an answerability
head) and "simple" (transformers' XLNetForQuestionAnsweringSimple: start / end logits from one dense layer)."""

import json
import math

from xlnet_tf import files
from xlnet_tf.config import ConfigError
from xlnet_tf.errors import UserError
from xlnet_tf.tasks.base import ENCODER_INPUTS, WARMUP_TEXTS, WINDOWED_LENGTHS, Task, TaskData, TaskOptions

HEADS = ("beam", "simple")
# --squad-head / --max-answer-length: FinetuneSetup.squad_head, max_answer_length
SPAN_OPTIONS = TaskOptions(("--squad-head", "--max-answer-length"), {"squad_head": "beam", "max_answer_length": 64})


def squad_predictions(data, outputs, max_answer_length=64, relative_null=False):
    """Best answer text and null score (min cls_logits over windows) per question, as the original's
    `write_predictions`: candidates are the top start x end pairs inside the paragraph, end >= start, at most
    `max_answer_length` tokens, starting where the window has the token's maximal context. `relative_null`
    (the simple head, as transformers): the null score minus the best span's score."""
    f = data.features
    best = {}
    null = {}
    k1 = outputs["start_top_index"].shape[1]
    k2 = outputs["end_top_index"].shape[1] // k1
    for row in range(len(f["input_ids"])):
        example = data.examples[int(f["example_index"][row])]
        qid = example.qas_id
        null[qid] = min(null.get(qid, math.inf), float(outputs["cls_logits"][row]))
        paragraph_len = int(f["paragraph_len"][row])
        for i in range(k1):
            start = int(outputs["start_top_index"][row, i])
            for j in range(k2):
                end = int(outputs["end_top_index"][row, i * k2 + j])
                if start >= paragraph_len or end >= paragraph_len or end < start:
                    continue
                if end - start + 1 > max_answer_length or not f["token_is_max_context"][row, start]:
                    continue
                score = float(outputs["start_top_log_probs"][row, i] + outputs["end_top_log_probs"][row, i * k2 + j])
                if qid not in best or score > best[qid][0]:
                    text = example.context[int(f["token_char_start"][row, start]): int(f["token_char_end"][row, end])]
                    best[qid] = (score, text)
    answers = {example.qas_id: best.get(example.qas_id, (0.0, ""))[1] for example in data.examples}
    if relative_null:
        null = {qid: score - best[qid][0] if qid in best else score for qid, score in null.items()}
    return answers, null


class Squad(Task):
    """Rows right-padded (positions keep their index): question <sep> context windows, `p_mask` (1 = cannot be
    in an answer) and `cls_index`; labels start / end positions and `is_impossible`. Metrics: the official
    evaluation (exact match, F1; SQuAD 2.0's best null threshold)."""

    name = "squad"
    metric_names = ("f1", "exact_match", "best_f1", "best_exact")
    best_metric = "f1"
    inputs = ENCODER_INPUTS + ("p_mask", "cls_index")
    labels = ("start_positions", "end_positions", "is_impossible")
    left_padded = False
    position_outputs = ("start_logits", "end_logits")
    windows = "SQuAD reads long contexts"
    options = (SPAN_OPTIONS,)

    def check_setup(self, setup):
        if setup.squad_head not in HEADS:
            raise UserError(f"--squad-head must be one of {', '.join(HEADS)}, got {setup.squad_head!r}")
        if setup.max_answer_length < 1:
            raise UserError(f"--max-answer-length must be at least 1, got {setup.max_answer_length}")

    def read(self, path, tokenizer, max_seq_len, options):
        from xlnet_tf.data import finetuning, readers

        examples, report = readers.read_squad(path, skip_bad_rows=options.skip_bad_rows)
        features, feature_report = finetuning.squad_features(examples, tokenizer, max_seq_len, options.doc_stride,
                                                             options.max_query_len, is_training=options.is_training)
        features = dict(features, start_positions=features["start_position"], end_positions=features["end_position"])
        raw = json.loads(files.read_text(path))  # read_squad has checked it
        return TaskData(examples, features, {**report, **feature_report}, raw=raw)

    def recorded(self, setup, train):
        top = 20 if setup.squad_head == "simple" else 5  # transformers' n_best_size / the original's
        return {"squad_head": setup.squad_head, "start_n_top": top, "end_n_top": top,
                "max_answer_length": setup.max_answer_length}

    def head_model(self, config, run_options, dtype, document, head):
        from xlnet_tf.heads import XLNetForQuestionAnswering, XLNetForQuestionAnsweringSimple

        squad_head = head.get("squad_head", "beam")
        if squad_head == "simple":
            return XLNetForQuestionAnsweringSimple(config, run_options, start_n_top=head.get("start_n_top", 20),
                                                   end_n_top=head.get("end_n_top", 20), dtype=dtype)
        if squad_head != "beam":
            raise ConfigError(f"squad_head must be 'beam' or 'simple', got {squad_head!r}")
        return XLNetForQuestionAnswering(config, run_options, start_n_top=head.get("start_n_top", 5),
                                         end_n_top=head.get("end_n_top", 5), dtype=dtype)

    def loss(self, finetune_config):
        from xlnet_tf.heads import simple_squad_loss, squad_loss

        return simple_squad_loss if finetune_config.get("squad_head") == "simple" else squad_loss

    def answers(self, data, outputs, finetune_config):
        """({question id: answer text}, {question id: null score}) as `squad_predictions`."""
        return squad_predictions(data, outputs, finetune_config.get("max_answer_length", 64),
                                 relative_null=finetune_config.get("squad_head") == "simple")

    def predictions(self, data, outputs, finetune_config):
        answers, null = self.answers(data, outputs, finetune_config)
        return [{"id": q, "answer": a, "null_odds": null[q]} for q, a in answers.items()]

    def evaluate(self, data, outputs, finetune_config):
        from xlnet_tf import metrics

        answers, null = self.answers(data, outputs, finetune_config)
        return metrics.squad_evaluate(data.raw, answers, na_probs=null)

    def write_predictions(self, path, data, outputs, finetune_config):
        """The official {id: answer} JSON and, beside it, `<path>.null_odds.json` ({id: null score}, for SQuAD
        2.0's threshold)."""
        answers, null = self.answers(data, outputs, finetune_config)
        files.write_text(path, json.dumps(answers, ensure_ascii=False, indent=1))
        files.write_text(path + ".null_odds.json", json.dumps(null, indent=1))
        return len(answers)

    def min_seq_len(self, finetune_config):
        """The question's tokens, <sep>, a context token, <sep>, <cls>."""
        return int(finetune_config.get("max_query_len", 64)) + 4

    def warmup_inputs(self, finetune_config):
        question, texts = "What is XLNet?", list(WARMUP_TEXTS)
        return [{"question": [question], "context": [texts[0]]},
                {"question": [question, "Qui sert une crème brûlée ?", ""], "context": texts}]

    def text_pieces(self, finetune_config, length, doc_len, width):
        """The question keeps its first max_query_len pieces; the context is read up to WINDOWED_LENGTHS x
        max_seq_len pieces (all of them in windows)."""
        return {**super().text_pieces(finetune_config, length, doc_len, width),
                "question": (int(finetune_config.get("max_query_len", 64)), "first"),
                "context": (WINDOWED_LENGTHS * length, "first")}

    def serving_signatures(self, g, finetune_config, pack):
        """``serving_default(question, context)`` -> the best span of the context and the null score;
        ``predict_ids`` on ids with ``p_mask`` and ``cls_index``."""
        import tensorflow as tf

        from xlnet_tf.data import graph_features as gf
        from xlnet_tf.data.buckets import PAD_MULTIPLE
        from xlnet_tf.tasks import graphs

        length = g.length
        doc_stride = int(finetune_config.get("doc_stride", 128))
        max_query_len = int(finetune_config.get("max_query_len", 64))
        max_answer_length = int(finetune_config.get("max_answer_length", 64))
        simple = finetune_config.get("squad_head") == "simple"

        @graphs.signature_function([graphs.text_spec("question"), graphs.text_spec("context")])
        def serving_default(question, context):
            with tf.device("/cpu:0"), tf.control_dependencies(graphs.same_batch(question, context)):
                context = g.cut(context, "context")  # answers are cut from what was read
                c_ids, c_start, c_end = g.tokens_with_offsets(context, "context")
                keep = tf.minimum(c_ids.row_lengths(), g.text_pieces["context"][0])
                c_ids, c_start, c_end = (gf.keep_first(t, keep) for t in (c_ids, c_start, c_end))
                windows = gf.squad_windows(g.token_ids(question, "question"), c_ids, c_start, c_end, length,
                                           doc_stride, max_query_len, pad_to_multiple=PAD_MULTIPLE)
            out = g.head({k: windows[k] for k in self.inputs})
            with tf.device("/cpu:0"):
                best = gf.squad_best_spans(out, windows, tf.size(question, out_type=tf.int64), max_answer_length)
                first_window = tf.math.unsorted_segment_min(
                    tf.range(tf.size(windows["example_index"], out_type=tf.int64)), windows["example_index"],
                    tf.size(question, out_type=tf.int64))
                byte_start = graphs.char_to_byte_offsets(context, best["start"])
                byte_end = graphs.char_to_byte_offsets(context, best["end"])
                answer = tf.strings.substr(context, byte_start, byte_end - byte_start)
            return {
                "answer": answer,
                "answer_start": best["start"],
                "answer_end": best["end"],
                "score": best["score"],
                # the beam head's answerability logit; the simple head's null score over the best span's (the
                # null answer wins above 0.5, as transformers picks it when its score is the higher)
                "no_answer_probability": tf.sigmoid(best["null_score"] - (best["score"] if simple else 0.0)),
                "null_score": best["null_score"],
                "window_index": tf.where(best["found"], best["window"] - first_window, -1),
            }

        @graphs.signature_function(graphs.ids_spec(("input_ids", "segment_ids", "padding_mask", "p_mask"))
                                   + [tf.TensorSpec([None], tf.int32, name="cls_index")])
        def predict_ids(input_ids, segment_ids, padding_mask, p_mask, cls_index):
            ids = graphs.checked_ids([input_ids, segment_ids, padding_mask, p_mask], length)
            with tf.control_dependencies(graphs.same_batch(input_ids, cls_index)):
                cls_index = tf.identity(cls_index)
            return g.head({**dict(zip(self.inputs, ids)), "cls_index": cls_index})

        return {"serving_default": serving_default, "predict_ids": predict_ids}


SQUAD = Squad()
