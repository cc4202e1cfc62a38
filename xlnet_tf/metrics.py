"""Evaluation metrics for the fine-tuning tasks: GLUE-style classification and regression, SQuAD, RACE, token
classification (entity-level scores as seqeval / conlleval compute them).

Pure Python + numpy (no TensorFlow), so evaluation scripts and the CLI stay light.

Conventions:
  * Classification / regression / RACE scores are fractions in [0, 1] (or [-1, 1] for correlations);
    the SQuAD scores are percentages, as the official SQuAD evaluation scripts print them.
  * Inputs are 1-D sequences of equal, non-zero length; anything else raises `UserError` (a `ValueError`).
  * Undefined values: MCC and F1 are 0.0 when their denominator is zero (as scikit-learn's default);
    Pearson and Spearman are nan when either side is constant (zero variance) or has fewer than two
    values (as scipy, which returns nan there).
"""

from __future__ import annotations

import collections
import math
import re
import string

import numpy as np

from xlnet_tf.errors import UserError

__all__ = [
    "accuracy",
    "f1",
    "macro_f1",
    "matthews_corrcoef",
    "pearson",
    "spearman",
    "mse",
    "classification_metrics",
    "regression_metrics",
    "normalize_answer",
    "exact_match_score",
    "f1_score",
    "squad_evaluate",
    "race_accuracy",
    "entity_chunks",
    "token_classification_metrics",
    "multi_label_metrics",
    "tune_thresholds",
]


# ----------------------------------------------------------------------------------------------------------
# Input checks


def _pair(labels, predictions, name_a="labels", name_b="predictions"):
    a = np.asarray(labels)
    b = np.asarray(predictions)
    if a.ndim != 1 or b.ndim != 1:
        raise UserError(f"{name_a} and {name_b} must be 1-D; got shapes {a.shape} and {b.shape}")
    if a.shape[0] != b.shape[0]:
        raise UserError(f"{name_a} and {name_b} differ in length: {a.shape[0]} vs {b.shape[0]}")
    if a.shape[0] == 0:
        raise UserError(f"{name_a} and {name_b} are empty")
    return a, b


def _confusion(labels, predictions):
    """Confusion matrix over the sorted union of classes: rows are true classes, columns predicted ones."""
    classes, index = np.unique(np.concatenate([labels, predictions]), return_inverse=True)
    n = labels.shape[0]
    true_idx, pred_idx = index[:n], index[n:]
    k = classes.shape[0]
    matrix = np.zeros((k, k), dtype=np.int64)
    np.add.at(matrix, (true_idx, pred_idx), 1)
    return classes, matrix


def _f1_from_counts(tp, fp, fn):
    denom = 2 * tp + fp + fn
    return 0.0 if denom == 0 else float(2 * tp) / float(denom)


# ----------------------------------------------------------------------------------------------------------
# Classification


def accuracy(labels, predictions):
    """Fraction of `predictions` equal to `labels` (two 1-D sequences of class ids or names)."""
    a, b = _pair(labels, predictions)
    return float(np.mean(a == b))


def f1(labels, predictions, positive=1):
    """Binary F1 of the `positive` class (as GLUE MRPC / QQP report it): 2TP / (2TP + FP + FN).

    0.0 when the positive class occurs in neither `labels` nor `predictions` (zero denominator).
    """
    a, b = _pair(labels, predictions)
    true_pos = a == positive
    pred_pos = b == positive
    tp = int(np.sum(true_pos & pred_pos))
    fp = int(np.sum(~true_pos & pred_pos))
    fn = int(np.sum(true_pos & ~pred_pos))
    return _f1_from_counts(tp, fp, fn)


def macro_f1(labels, predictions):
    """Unweighted mean of the per-class F1 over every class seen in `labels` or `predictions`."""
    a, b = _pair(labels, predictions)
    _, matrix = _confusion(a, b)
    tp = np.diag(matrix)
    fp = matrix.sum(axis=0) - tp
    fn = matrix.sum(axis=1) - tp
    return float(np.mean([_f1_from_counts(int(t), int(p), int(n)) for t, p, n in zip(tp, fp, fn)]))


def matthews_corrcoef(labels, predictions):
    """Matthews correlation coefficient, binary or multi-class (Gorodkin's R_K, the general formula).

    With C the confusion matrix, n samples, c = trace(C), t_k / p_k the true / predicted count of class k:
        (c*n - sum_k t_k p_k) / sqrt((n^2 - sum_k p_k^2) * (n^2 - sum_k t_k^2)).
    For two classes this is (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)).
    0.0 when the denominator is zero (one side is constant), as scikit-learn.
    """
    a, b = _pair(labels, predictions)
    _, matrix = _confusion(a, b)
    matrix = matrix.astype(np.float64)
    n = matrix.sum()
    correct = np.trace(matrix)
    t = matrix.sum(axis=1)
    p = matrix.sum(axis=0)
    cov_tp = correct * n - float(np.dot(t, p))
    cov_pp = n * n - float(np.dot(p, p))
    cov_tt = n * n - float(np.dot(t, t))
    if cov_pp == 0.0 or cov_tt == 0.0:
        return 0.0
    return float(cov_tp / math.sqrt(cov_tt * cov_pp))


def classification_metrics(labels, predictions):
    """Metrics the CLI's `evaluate` prints for a classification task.

    Returns {"accuracy", "macro_f1", "mcc"} plus "f1" (of class 1) when every label and prediction is 0 or 1.
    """
    a, b = _pair(labels, predictions)
    out = {"accuracy": accuracy(a, b)}
    classes = set(np.unique(np.concatenate([a, b])).tolist())
    if classes <= {0, 1} and all(not isinstance(c, (str, bytes)) for c in classes):
        out["f1"] = f1(a, b, positive=1)
    out["macro_f1"] = macro_f1(a, b)
    out["mcc"] = matthews_corrcoef(a, b)
    return out


# ----------------------------------------------------------------------------------------------------------
# Regression


def _float_pair(x, y):
    a, b = _pair(x, y, "x", "y")
    return a.astype(np.float64), b.astype(np.float64)


def _correlation(a, b):
    if a.shape[0] < 2 or np.all(a == a[0]) or np.all(b == b[0]):
        return float("nan")
    da = a - a.mean()
    db = b - b.mean()
    r = float(np.dot(da, db) / math.sqrt(float(np.dot(da, da)) * float(np.dot(db, db))))
    return max(-1.0, min(1.0, r))


def _average_ranks(values):
    """1-based ranks; tied values share the mean of the ranks they span (scipy's rankdata 'average')."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    last = np.cumsum(counts).astype(np.float64)  # rank of the last member of each tie group
    first = last - counts + 1.0  # rank of its first member
    return ((first + last) / 2.0)[inverse.reshape(-1)]


def pearson(x, y):
    """Pearson correlation of two equal-length 1-D sequences (GLUE STS-B).

    nan when either side is constant or has fewer than two values (the correlation is undefined).
    """
    a, b = _float_pair(x, y)
    return _correlation(a, b)


def spearman(x, y):
    """Spearman rank correlation: Pearson of the ranks, ties given their average rank (as scipy.stats.spearmanr).

    nan when either side is constant or has fewer than two values.
    """
    a, b = _float_pair(x, y)
    return _correlation(_average_ranks(a), _average_ranks(b))


def mse(labels, predictions):
    """Mean squared error between two equal-length 1-D sequences of numbers."""
    a, b = _float_pair(labels, predictions)
    return float(np.mean((a - b) ** 2))


def regression_metrics(labels, predictions):
    """Metrics the CLI's `evaluate` prints for a regression task: {"pearson", "spearman", "mse"}."""
    return {
        "pearson": pearson(labels, predictions),
        "spearman": spearman(labels, predictions),
        "mse": mse(labels, predictions),
    }


# ----------------------------------------------------------------------------------------------------------
# SQuAD (semantics of the official v1.1 / v2.0 evaluation scripts)

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(s):
    """Normalize an answer string as the official SQuAD scripts do, in this order: lower-case, drop ASCII
    punctuation characters, replace the whole words a / an / the by a space, collapse runs of whitespace."""
    text = s.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _tokens(s):
    return normalize_answer(s).split() if s else []


def exact_match_score(prediction, ground_truth):
    """1.0 when the normalized prediction equals the normalized ground truth, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def f1_score(prediction, ground_truth):
    """Token-level F1 between two answer strings after `normalize_answer` (bag of tokens, with counts).

    As the official v2.0 script: when either side has no tokens, 1.0 if both have none else 0.0.
    """
    pred = _tokens(prediction)
    gold = _tokens(ground_truth)
    if not pred or not gold:
        return float(pred == gold)
    overlap = sum((collections.Counter(pred) & collections.Counter(gold)).values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred)
    recall = overlap / len(gold)
    return 2.0 * precision * recall / (precision + recall)


def _squad_questions(dataset):
    """(qid, gold answer texts, has_answer) for every question, in file order.

    has_answer follows the official v2.0 script: the question's `answers` list is non-empty (a question marked
    `is_impossible` counts as unanswerable whatever it lists). Gold answers whose normalized text is empty are
    dropped; a question left with none is scored against the empty answer "".
    """
    if isinstance(dataset, dict) and "data" in dataset:
        dataset = dataset["data"]
    out = []
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answers = [] if qa.get("is_impossible", False) else list(qa.get("answers", []))
                texts = [a["text"] for a in answers if normalize_answer(a["text"])]
                out.append((qa["id"], texts or [""], bool(answers)))
    return out


def _best_threshold(question_ids, raw, has_ans, predictions, na_probs, total):
    """The v2.0 script's sweep: answer the questions whose no-answer probability is <= t, predict "" for the
    rest; return (best score in percent, the t reaching it first, scanning t upward from 0.0)."""
    answered = [q for q in question_ids if q in predictions]
    score = float(sum(1 for q in answered if not has_ans[q]))  # everything predicted "no answer"
    best, best_thresh = score, 0.0
    for q in sorted(answered, key=lambda k: na_probs.get(k, 0.0)):
        if has_ans[q]:
            score += raw[q]
        elif predictions[q]:
            score -= 1.0
        if score > best:
            best, best_thresh = score, float(na_probs.get(q, 0.0))
    return 100.0 * best / total, best_thresh


def squad_evaluate(dataset, predictions, na_probs=None, na_prob_thresh=1.0):
    """Score SQuAD v1.1 / v2.0 predictions as the official evaluation scripts do.

    dataset: the official JSON's `data` list (articles -> paragraphs -> qas with `id`, `answers`
        [{text, answer_start}], optional `is_impossible`); the whole JSON object is accepted too.
    predictions: {qid: answer text}; "" means "no answer".
    na_probs: optional {qid: probability the question is unanswerable}; a question whose probability exceeds
        `na_prob_thresh` is scored as if "" were predicted. Questions absent from it get 0.0 (the official
        script's default). When given, the best-threshold search is added.

    Returns a dict of percentages: exact_match, f1, total, missing; HasAns_exact / HasAns_f1 / HasAns_total
    and NoAns_exact / NoAns_f1 / NoAns_total when such questions exist; best_exact, best_exact_thresh,
    best_f1, best_f1_thresh when `na_probs` is given. Each question scores the maximum over its gold answers.
    A question with no prediction scores 0 in every figure (as the v1.1 script) and is counted in `missing`;
    with none missing, every figure equals the official v2.0 script's.
    """
    questions = _squad_questions(dataset)
    if not questions:
        raise UserError("the SQuAD dataset has no questions")
    probs = {} if na_probs is None else dict(na_probs)
    has_ans = {}
    raw_em, raw_f1, em, f1s = {}, {}, {}, {}
    missing = 0
    for qid, golds, answerable in questions:
        has_ans[qid] = answerable
        if qid not in predictions:
            missing += 1
            em[qid] = f1s[qid] = 0.0
            continue
        pred = predictions[qid]
        raw_em[qid] = max(exact_match_score(pred, g) for g in golds)
        raw_f1[qid] = max(f1_score(pred, g) for g in golds)
        if na_probs is not None and probs.get(qid, 0.0) > na_prob_thresh:
            em[qid] = f1s[qid] = float(not answerable)
        else:
            em[qid], f1s[qid] = raw_em[qid], raw_f1[qid]

    ids = [q for q, _, _ in questions]
    total = len(ids)
    result = {
        "exact_match": 100.0 * sum(em[q] for q in ids) / total,
        "f1": 100.0 * sum(f1s[q] for q in ids) / total,
        "total": total,
        "missing": missing,
    }
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        subset = [q for q in ids if has_ans[q] == wanted]
        if subset:
            result[f"{prefix}_exact"] = 100.0 * sum(em[q] for q in subset) / len(subset)
            result[f"{prefix}_f1"] = 100.0 * sum(f1s[q] for q in subset) / len(subset)
            result[f"{prefix}_total"] = len(subset)
    if na_probs is not None:
        result["best_exact"], result["best_exact_thresh"] = _best_threshold(
            ids, raw_em, has_ans, predictions, probs, total)
        result["best_f1"], result["best_f1_thresh"] = _best_threshold(
            ids, raw_f1, has_ans, predictions, probs, total)
    return result


# ----------------------------------------------------------------------------------------------------------
# RACE / multiple choice


def race_accuracy(labels, predictions, levels=None):
    """Multiple-choice accuracy (fraction). labels / predictions: the chosen option per question (index or
    letter); levels: optional per-question level ("middle" / "high" in RACE). Returns {"accuracy"} plus one
    accuracy per distinct level, keyed by the level name, when `levels` is given."""
    a, b = _pair(labels, predictions)
    correct = a == b
    out = {"accuracy": float(np.mean(correct))}
    if levels is not None:
        lv = np.asarray(levels)
        if lv.shape != a.shape:
            raise UserError(f"levels has shape {lv.shape}; labels have {a.shape}")
        for level in sorted(set(lv.tolist()), key=str):
            out[str(level)] = float(np.mean(correct[lv == level]))
    return out


# ----------------------------------------------------------------------------------------------------------
# Token classification (NER, POS): entity-level scores as seqeval computes them by default (conlleval's rules)
#
# seqeval 1.2.2, default mode (no `mode="strict"`, no `scheme`): a tag's first CHARACTER is its prefix and
# everything after the first "-" its type ("B-PER" -> B, PER; "O" -> O, "_"; "B" -> B, "_"; a tag without
# a prefix such as "PER" -> P, "ER"); chunks start and end by conlleval's startOfChunk / endOfChunk rules
# plus seqeval's for BIOES: S- is a one-word chunk, E- ends one, and a lone I- or E- (or a type change
# mid-entity) starts a new chunk instead of being dropped. Sentences are joined with an "O" between them.
# On BIO / IOB2 tags this is exactly the CoNLL perl script conlleval (2004-01-26); on BIOES tags conlleval
# differs (it has no rule for S-, nor for E- followed by B-), and seqeval's figures are the ones kept here
# (tests/fixtures/make_seqeval_golden.py --conlleval compares the two).


def tag_parts(tag):
    """seqeval's (prefix, type) of one tag."""
    return tag[0], (tag[1:].split("-", 1)[-1] or "_")


def chunk_ends(prev_tag, tag, prev_type, type_):
    """conlleval's endOfChunk: whether the chunk before this tag ends here."""
    if prev_tag in ("E", "S"):
        return True
    if prev_tag in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev_tag not in ("O", ".") and prev_type != type_


def chunk_starts(prev_tag, tag, prev_type, type_):
    """conlleval's startOfChunk: whether a chunk starts at this tag."""
    if tag in ("B", "S"):
        return True
    if prev_tag in ("E", "S", "O") and tag in ("E", "I"):
        return True
    return tag not in ("O", ".") and prev_type != type_


def _check_tags(tags, where):
    tags = list(tags)
    for k, t in enumerate(tags):
        if not isinstance(t, str) or not t:
            raise UserError(f"{where}: tag {k} is {t!r}; tags are non-empty strings such as 'B-PER' or 'O'")
    return tags


def entity_chunks(tags):
    """Entity chunks of one tag sequence (list of str, e.g. ``["B-PER", "I-PER", "O"]``), exactly as seqeval's
    default ``get_entities`` reads them: a list of ``(type, start, end)`` with ``end`` EXCLUSIVE (seqeval's is
    inclusive), in order. BIO / IOB2 / IOBES tags are read as they are, without conversion."""
    tags = _check_tags(tags, "tags")
    chunks = []
    prev_tag, prev_type, begin = "O", "", 0
    for i, chunk in enumerate(tags + ["O"]):
        tag, type_ = tag_parts(chunk)
        if chunk_ends(prev_tag, tag, prev_type, type_):
            chunks.append((prev_type, begin, i))
        if chunk_starts(prev_tag, tag, prev_type, type_):
            begin = i
        prev_tag, prev_type = tag, type_
    return chunks


def _prf(tp, n_pred, n_true):
    """seqeval's precision, recall, F1 (0.0 where a denominator is zero, as its zero_division="warn")."""
    p = tp / n_pred if n_pred else 0.0
    r = tp / n_true if n_true else 0.0
    f = 2.0 * p * r / (p + r) if p + r else 0.0
    return p, r, f


def token_classification_metrics(true_tag_seqs, pred_tag_seqs):
    """Entity-level precision / recall / F1 and token accuracy of tagged sentences, as seqeval computes them in
    its default mode (the same as conlleval on BIO / IOB2 tags; BIOES read by seqeval's S- / E- rules).

    Args:
      true_tag_seqs, pred_tag_seqs: one list of tag strings per sentence (one tag per word), same lengths.
    Returns:
      {"precision", "recall", "f1"} micro-averaged over entities; "accuracy" (words whose tag is right /
      words); "per_type": {type: {"precision", "recall", "f1", "support"}} (support = gold entities of the
      type; types sorted); "macro" and "weighted" ({"precision", "recall", "f1"}: the per-type scores
      averaged, plainly / weighted by support, as seqeval's classification_report; macro is nan and
      weighted 0.0 without any entity, as seqeval); "true_entities", "pred_entities", "correct_entities",
      "words", "sentences" (counts). Scores are fractions in [0, 1].
    """
    true_seqs, pred_seqs = list(true_tag_seqs), list(pred_tag_seqs)
    if len(true_seqs) != len(pred_seqs):
        raise UserError(f"true and predicted tags differ in the number of sentences: {len(true_seqs)} vs "
                        f"{len(pred_seqs)}")
    if not true_seqs:
        raise UserError("no sentences to score")
    flat_true, flat_pred, correct_words = [], [], 0
    for k, (t, p) in enumerate(zip(true_seqs, pred_seqs)):
        if isinstance(t, str) or isinstance(p, str):
            raise UserError(f"sentence {k}: expected a list of tags, got a string")
        t, p = _check_tags(t, f"sentence {k} (true)"), _check_tags(p, f"sentence {k} (predicted)")
        if len(t) != len(p):
            raise UserError(f"sentence {k}: {len(t)} true tags but {len(p)} predicted")
        correct_words += sum(a == b for a, b in zip(t, p))
        flat_true += t + ["O"]  # seqeval joins sentences with an "O"
        flat_pred += p + ["O"]
    n_words = len(flat_true) - len(true_seqs)
    if n_words == 0:
        raise UserError("no words to score (every sentence is empty)")
    true_sets, pred_sets = collections.defaultdict(set), collections.defaultdict(set)
    for sets, flat in ((true_sets, flat_true), (pred_sets, flat_pred)):
        for type_, start, end in entity_chunks(flat):
            sets[type_].add((start, end))
    per_type = {}
    tp_all = pred_all = true_all = 0
    for type_ in sorted(set(true_sets) | set(pred_sets)):
        tp = len(true_sets[type_] & pred_sets[type_])
        n_pred, n_true = len(pred_sets[type_]), len(true_sets[type_])
        p, r, f = _prf(tp, n_pred, n_true)
        per_type[type_] = {"precision": p, "recall": r, "f1": f, "support": n_true}
        tp_all, pred_all, true_all = tp_all + tp, pred_all + n_pred, true_all + n_true
    p, r, f = _prf(tp_all, pred_all, true_all)
    names = ("precision", "recall", "f1")
    scores = np.array([[v[n] for n in names] for v in per_type.values()], np.float64).reshape(-1, 3)
    support = np.array([v["support"] for v in per_type.values()], np.float64)
    if scores.shape[0]:
        macro = {n: float(np.average(scores[:, j])) for j, n in enumerate(names)}
    else:
        macro = {n: float("nan") for n in names}
    if support.sum() > 0:
        weighted = {n: float(np.average(scores[:, j], weights=support)) for j, n in enumerate(names)}
    else:
        weighted = {n: 0.0 for n in names}
    return {"precision": p, "recall": r, "f1": f, "accuracy": correct_words / n_words, "per_type": per_type,
            "macro": macro, "weighted": weighted, "true_entities": true_all, "pred_entities": pred_all,
            "correct_entities": tp_all, "words": n_words, "sentences": len(true_seqs)}


# ----------------------------------------------------------------------------------------------------
# Multi-label classification


def _multi_hot(values, name):
    array = np.asarray(values)
    if array.ndim != 2:
        raise UserError(f"{name}: expected [examples, labels], got shape {array.shape}")
    return array.astype(bool)


def multi_label_metrics(labels, predictions, label_names=None):
    """Metrics of multi-label predictions: ``labels`` / ``predictions`` ``[N, C]`` (1 = the label applies).

    Returns: ``micro_f1`` (over every (example, label) decision), ``macro_f1`` (the per-label F1 averaged
    over the C labels; a label absent from both gold and predictions counts as F1 0, as scikit-learn's
    ``zero_division=0``), ``per_label`` ({name: {"precision", "recall", "f1", "support"}}), ``subset_accuracy``
    (examples whose predicted label set is exactly the gold set), ``micro_precision``, ``micro_recall``.
    """
    gold, pred = _multi_hot(labels, "labels"), _multi_hot(predictions, "predictions")
    if gold.shape != pred.shape:
        raise UserError(f"labels {gold.shape} and predictions {pred.shape} differ in shape")
    names = list(label_names) if label_names is not None else [str(i) for i in range(gold.shape[1])]
    tp = (gold & pred).sum(0)
    n_pred, n_true = pred.sum(0), gold.sum(0)
    per_label = {}
    for name, t, p_, g in zip(names, tp, n_pred, n_true):
        p, r, f = _prf(int(t), int(p_), int(g))
        per_label[name] = {"precision": p, "recall": r, "f1": f, "support": int(g)}
    micro_p, micro_r, micro_f = _prf(int(tp.sum()), int(n_pred.sum()), int(n_true.sum()))
    return {"micro_f1": micro_f, "macro_f1": float(np.mean([v["f1"] for v in per_label.values()])) if names else 0.0,
            "micro_precision": micro_p, "micro_recall": micro_r,
            "subset_accuracy": float(np.mean((gold == pred).all(1))) if len(gold) else 0.0, "per_label": per_label}


def tune_thresholds(labels, scores, default=0.5):
    """Per label, the score threshold (predict the label when score >= threshold) with the best F1 on
    ``labels`` / ``scores`` ``[N, C]``: candidates are the midpoints between consecutive distinct scores and
    ``default``; ties go to the candidate nearest ``default``; a label without positives keeps ``default``.
    -> list of C floats."""
    gold = _multi_hot(labels, "labels")
    scores = np.asarray(scores, np.float64)
    out = []
    for c in range(gold.shape[1]):
        if not gold[:, c].any():
            out.append(float(default))
            continue
        distinct = np.unique(scores[:, c])
        candidates = np.concatenate([(distinct[1:] + distinct[:-1]) / 2, distinct[:1], [default]])
        best = None
        for threshold in candidates:
            predicted = scores[:, c] >= threshold
            f = _prf(int((predicted & gold[:, c]).sum()), int(predicted.sum()), int(gold[:, c].sum()))[2]
            key = (f, -abs(threshold - default))
            if best is None or key > best[0]:
                best = (key, float(threshold))
        out.append(best[1])
    return out
