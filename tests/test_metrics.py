"""Metrics against hand-computed values on small fixed examples; SQuAD against the official v2.0 logic.

Every checked figure is printed next to its expected value (run with -s to see them).
"""

import math

import pytest

from xlnet_tf import metrics as M
from xlnet_tf.errors import UserError


def check(name, got, expected, tol=1e-9):
    print(f"{name}={got:.6f} expected {expected:.6f}")
    assert got == pytest.approx(expected, abs=tol), name


def check_nan(name, got):
    print(f"{name}={got} expected nan")
    assert math.isnan(got), name


# Binary example: TP=3 (idx 0-2), FN=1 (idx 3), TN=4 (idx 4-7), FP=2 (idx 8-9).
BIN_LABELS = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
BIN_PREDS = [1, 1, 1, 0, 0, 0, 0, 0, 1, 1]
TP, FN, TN, FP = 3, 1, 4, 2


def test_accuracy():
    check("accuracy", M.accuracy(BIN_LABELS, BIN_PREDS), (TP + TN) / 10)  # 7/10
    check("accuracy_str", M.accuracy(["a", "b", "c"], ["a", "c", "c"]), 2 / 3)


def test_binary_f1_and_macro_f1():
    # F1 of class 1: P = 3/5, R = 3/4 -> 2PR/(P+R) = 2TP/(2TP+FP+FN) = 6/9.
    p, r = TP / (TP + FP), TP / (TP + FN)
    check("f1_pos1", M.f1(BIN_LABELS, BIN_PREDS), 2 * p * r / (p + r))
    check("f1_pos1_counts", M.f1(BIN_LABELS, BIN_PREDS), 6 / 9)
    # Class 0 as positive: TP0 = TN = 4, FP0 = FN = 1, FN0 = FP = 2 -> 8 / (8 + 1 + 2) = 8/11.
    check("f1_pos0", M.f1(BIN_LABELS, BIN_PREDS, positive=0), 8 / 11)
    # Macro: mean of the two = (6/9 + 8/11) / 2 = 23/33.
    check("macro_f1_binary", M.macro_f1(BIN_LABELS, BIN_PREDS), (6 / 9 + 8 / 11) / 2)
    # A class seen only in predictions (2) counts with F1 0: class 0 TP1 FN1 -> 2/3; class 1 -> 1; class 2 -> 0.
    check("macro_f1_pred_only_class", M.macro_f1([0, 0, 1], [0, 2, 1]), (2 / 3 + 1 + 0) / 3)
    # Undefined binary F1 (no positive anywhere) is 0.0.
    check("f1_undefined", M.f1([0, 0, 0], [0, 0, 0]), 0.0)


def test_mcc():
    expected = (TP * TN - FP * FN) / math.sqrt((TP + FP) * (TP + FN) * (TN + FP) * (TN + FN))  # 10/sqrt(600)
    check("mcc_binary", M.matthews_corrcoef(BIN_LABELS, BIN_PREDS), expected)
    check("mcc_binary_value", M.matthews_corrcoef(BIN_LABELS, BIN_PREDS), 10 / math.sqrt(600))
    # Multi-class: C = [[1,1,0],[0,1,1],[1,0,1]]; n=6, trace c=3, t=p=(2,2,2):
    # (c*n - t.p) / sqrt((n^2 - p.p)(n^2 - t.t)) = (18 - 12) / sqrt(24 * 24) = 0.25.
    check("mcc_multiclass", M.matthews_corrcoef([0, 0, 1, 1, 2, 2], [0, 1, 1, 2, 2, 0]), (18 - 12) / 24)
    # Perfect and inverted.
    check("mcc_perfect", M.matthews_corrcoef([0, 1, 2, 1], [0, 1, 2, 1]), 1.0)
    check("mcc_inverted", M.matthews_corrcoef([0, 1, 0, 1], [1, 0, 1, 0]), -1.0)
    # Undefined (constant predictions / constant labels) -> 0.0, as scikit-learn.
    check("mcc_const_pred", M.matthews_corrcoef([0, 1, 1, 0], [1, 1, 1, 1]), 0.0)
    check("mcc_const_label", M.matthews_corrcoef([1, 1, 1, 1], [0, 1, 1, 0]), 0.0)


def test_classification_metrics_dict():
    out = M.classification_metrics(BIN_LABELS, BIN_PREDS)
    assert sorted(out) == ["accuracy", "f1", "macro_f1", "mcc"]
    check("cls.accuracy", out["accuracy"], 0.7)
    check("cls.f1", out["f1"], 6 / 9)
    check("cls.macro_f1", out["macro_f1"], 23 / 33)
    check("cls.mcc", out["mcc"], 10 / math.sqrt(600))
    multi = M.classification_metrics([0, 0, 1, 1, 2, 2], [0, 1, 1, 2, 2, 0])
    print(f"multi-class keys={sorted(multi)} expected no 'f1'")
    assert "f1" not in multi
    check("cls_multi.macro_f1", multi["macro_f1"], 0.5)  # each class TP1 FP1 FN1 -> 2/4


def test_pearson_spearman_mse():
    x = [1, 2, 3, 4, 5]
    y = [2, 4, 5, 4, 5]
    # Pearson: dx = (-2,-1,0,1,2), dy = (-2,0,1,0,1): sum dx*dy = 6, sum dx^2 = 10, sum dy^2 = 6.
    check("pearson", M.pearson(x, y), 6 / math.sqrt(10 * 6))
    # Spearman with ties: ranks(y) = (1, 2.5, 4.5, 2.5, 4.5), mean 3 -> dy = (-2,-.5,1.5,-.5,1.5);
    # sum dx*dy = 4 + .5 + 0 - .5 + 3 = 7, sum dy^2 = 4 + .25 + 2.25 + .25 + 2.25 = 9.
    check("spearman_ties", M.spearman(x, y), 7 / math.sqrt(10 * 9))
    # Monotone but nonlinear -> Spearman 1, Pearson < 1.
    check("spearman_monotone", M.spearman([1, 2, 3, 4], [1, 8, 27, 1000]), 1.0)
    check("spearman_reversed", M.spearman([1, 2, 3], [9, 5, 1]), -1.0)
    # Average ranks: (10, 20, 20, 30, 10) -> (1.5, 3.5, 3.5, 5, 1.5).
    ranks = M._average_ranks([10, 20, 20, 30, 10]).tolist()
    print(f"ranks={ranks} expected [1.5, 3.5, 3.5, 5.0, 1.5]")
    assert ranks == [1.5, 3.5, 3.5, 5.0, 1.5]
    # MSE: ((1-1.5)^2 + 0 + (3-2)^2) / 3 = 1.25 / 3.
    check("mse", M.mse([1, 2, 3], [1.5, 2, 2]), 1.25 / 3)
    out = M.regression_metrics(x, y)
    assert sorted(out) == ["mse", "pearson", "spearman"]
    check("reg.pearson", out["pearson"], 6 / math.sqrt(60))
    check("reg.spearman", out["spearman"], 7 / math.sqrt(90))
    check("reg.mse", out["mse"], (1 + 4 + 4 + 0 + 0) / 5)  # (1-2)^2 + (2-4)^2 + (3-5)^2 + 0 + 0


def test_correlation_undefined_is_nan():
    # Policy: a constant side (zero variance) or fewer than two values -> nan, as scipy.
    check_nan("pearson_const_y", M.pearson([1, 2, 3], [4, 4, 4]))
    check_nan("pearson_const_x", M.pearson([7, 7, 7], [1, 2, 3]))
    check_nan("spearman_const_y", M.spearman([1, 2, 3], [4, 4, 4]))
    check_nan("pearson_single", M.pearson([1.0], [2.0]))
    check_nan("reg.pearson_const", M.regression_metrics([1, 2, 3], [0, 0, 0])["pearson"])


def test_bad_inputs_raise():
    for a, b in (([1, 2], [1]), ([], []), ([[1, 2]], [[1, 2]])):
        with pytest.raises(UserError):
            M.accuracy(a, b)
    with pytest.raises(UserError):
        M.pearson([1, 2, 3], [1, 2])
    print("length mismatch / empty / 2-D inputs raise UserError")


def test_race_accuracy():
    labels = [0, 1, 2, 3, 0, 1]
    preds = [0, 1, 0, 3, 1, 1]  # correct: q1 q2 q4 q6
    levels = ["middle", "middle", "high", "high", "high", "high"]
    out = M.race_accuracy(labels, preds, levels)
    assert sorted(out) == ["accuracy", "high", "middle"]
    check("race.accuracy", out["accuracy"], 4 / 6)
    check("race.middle", out["middle"], 2 / 2)
    check("race.high", out["high"], 2 / 4)  # q3 wrong, q4 right, q5 wrong, q6 right
    plain = M.race_accuracy(["A", "B", "C"], ["A", "B", "D"])
    assert sorted(plain) == ["accuracy"]
    check("race.letters", plain["accuracy"], 2 / 3)


# ----------------------------------------------------------------------------------------------------------
# SQuAD


def test_normalize_answer():
    cases = [
        ("The  Quick, brown FOX!", "quick brown fox"),
        ("an apple a day", "apple day"),
        ("Theater and anthem", "theater and anthem"),  # articles only as whole words
        ("Saint Peter's", "saint peters"),  # punctuation removed, not split on
        ("the.", ""),  # punctuation goes first, then the article
        ("A.B.", "ab"),
        ("  \tNew\nYork  ", "new york"),
    ]
    for raw, expected in cases:
        got = M.normalize_answer(raw)
        print(f"normalize({raw!r})={got!r} expected {expected!r}")
        assert got == expected


def test_exact_match_and_f1_score():
    check("em_case_punct_article", M.exact_match_score("the Eiffel Tower!", "Eiffel tower"), 1.0)
    check("em_diff", M.exact_match_score("Broncos", "Denver Broncos"), 0.0)
    # "the Broncos" -> [broncos] vs [denver, broncos]: P = 1/1, R = 1/2 -> 2/3.
    check("f1_partial", M.f1_score("the Broncos", "Denver Broncos"), 2 * 1 * 0.5 / 1.5)
    # Token counts: [cat, cat] vs [cat]: overlap 1, P = 1/2, R = 1 -> 2/3.
    check("f1_counts", M.f1_score("the cat the cat", "cat"), 2 * 0.5 * 1 / 1.5)
    check("f1_disjoint", M.f1_score("red", "blue"), 0.0)
    # v2.0 empty handling: both empty -> 1, one empty -> 0 (also when normalization empties a side).
    check("f1_both_empty", M.f1_score("", ""), 1.0)
    check("f1_pred_empty", M.f1_score("", "Paris"), 0.0)
    check("f1_gold_empty", M.f1_score("Paris", ""), 0.0)
    check("f1_normalized_empty", M.f1_score("the", ""), 1.0)


def _squad_dataset():
    def qa(qid, answers, impossible=False):
        item = {"id": qid, "question": "?", "answers": [{"text": t, "answer_start": 0} for t in answers]}
        if impossible:
            item["is_impossible"] = True
        return item

    return [
        {"title": "Paris", "paragraphs": [{"context": "...", "qas": [
            qa("q1", ["the Eiffel Tower", "Eiffel Tower"]),
            qa("q2", ["Denver Broncos", "The Denver Broncos"]),
            qa("q3", ["1,000 years", "a thousand years"]),
        ]}]},
        {"title": "Rome", "paragraphs": [
            {"context": "...", "qas": [qa("q4", ["Saint Peter's Basilica"]), qa("q5", [], impossible=True)]},
            {"context": "...", "qas": [qa("q6", [], impossible=True)]},
        ]},
    ]


PREDICTIONS = {
    "q1": "eiffel tower!",  # -> "eiffel tower" = both golds: EM 1, F1 1
    "q2": "the Broncos",  # [broncos] vs [denver broncos]: EM 0, F1 max = 2/3 (P 1, R 1/2)
    "q3": "a thousand years ago",  # [thousand years ago]: vs [1000 years] P 1/3 R 1/2 -> 0.4;
    #                                vs [thousand years] P 2/3 R 1 -> 0.8; EM 0, F1 0.8
    "q4": "",  # answerable, predicted no answer: EM 0, F1 0
    "q5": "",  # unanswerable, predicted no answer: EM 1, F1 1
    "q6": "the river Seine",  # unanswerable, predicted an answer: EM 0, F1 0
}
RAW_EM = {"q1": 1, "q2": 0, "q3": 0, "q4": 0, "q5": 1, "q6": 0}
RAW_F1 = {"q1": 1, "q2": 2 / 3, "q3": 0.8, "q4": 0, "q5": 1, "q6": 0}
NA_PROBS = {"q1": 0.1, "q2": 0.6, "q3": 0.3, "q4": 0.9, "q5": 0.2, "q6": 0.7}


def test_squad_v2_default_threshold():
    # na_prob_thresh = 1.0: no probability exceeds it, so the raw scores stand.
    out = M.squad_evaluate(_squad_dataset(), PREDICTIONS, NA_PROBS)
    assert out["total"] == 6 and out["missing"] == 0
    assert out["HasAns_total"] == 4 and out["NoAns_total"] == 2
    check("squad.exact", out["exact_match"], 100 * (1 + 0 + 0 + 0 + 1 + 0) / 6)  # 33.33
    check("squad.f1", out["f1"], 100 * (1 + 2 / 3 + 0.8 + 0 + 1 + 0) / 6)  # 57.78
    check("squad.HasAns_exact", out["HasAns_exact"], 100 * 1 / 4)
    check("squad.HasAns_f1", out["HasAns_f1"], 100 * (1 + 2 / 3 + 0.8 + 0) / 4)  # 61.67
    check("squad.NoAns_exact", out["NoAns_exact"], 100 * 1 / 2)
    check("squad.NoAns_f1", out["NoAns_f1"], 100 * 1 / 2)
    # Best-threshold search (official find_best_thresh on raw scores): start with all predicted "no answer"
    # = number of unanswerable = 2; answer questions in ascending na_prob order:
    #   q1 (0.1) has ans: EM +1 -> 3 (best, t=0.1) | F1 +1   -> 3    (best, t=0.1)
    #   q5 (0.2) no ans, pred "": +0     -> 3            | +0     -> 3
    #   q3 (0.3) has ans: EM +0 -> 3                     | +0.8   -> 3.8  (best, t=0.3)
    #   q2 (0.6) has ans: EM +0 -> 3                     | +2/3   -> 4.467 (best, t=0.6)
    #   q6 (0.7) no ans, pred non-empty: -1 -> 2         | -1     -> 3.467
    #   q4 (0.9) has ans, pred "": +0 -> 2               | +0     -> 3.467
    check("squad.best_exact", out["best_exact"], 100 * 3 / 6)
    check("squad.best_exact_thresh", out["best_exact_thresh"], 0.1)
    check("squad.best_f1", out["best_f1"], 100 * (2 + 1 + 0.8 + 2 / 3) / 6)  # 74.44
    check("squad.best_f1_thresh", out["best_f1_thresh"], 0.6)


def test_squad_v2_applied_threshold():
    # na_prob_thresh = 0.5: q2 (0.6), q6 (0.7), q4 (0.9) are scored as "" predictions:
    # answerable q2, q4 -> 0; unanswerable q6 -> 1. Per question EM (1,0,0,0,1,1), F1 (1,0,0.8,0,1,1).
    out = M.squad_evaluate(_squad_dataset(), PREDICTIONS, NA_PROBS, na_prob_thresh=0.5)
    check("squad@0.5.exact", out["exact_match"], 100 * 3 / 6)
    check("squad@0.5.f1", out["f1"], 100 * (1 + 0 + 0.8 + 0 + 1 + 1) / 6)  # 63.33
    check("squad@0.5.HasAns_exact", out["HasAns_exact"], 100 * 1 / 4)
    check("squad@0.5.HasAns_f1", out["HasAns_f1"], 100 * (1 + 0 + 0.8 + 0) / 4)  # 45
    check("squad@0.5.NoAns_exact", out["NoAns_exact"], 100.0)
    check("squad@0.5.NoAns_f1", out["NoAns_f1"], 100.0)
    # The sweep uses raw scores, so it does not depend on na_prob_thresh.
    check("squad@0.5.best_f1", out["best_f1"], 100 * (67 / 15) / 6)
    check("squad@0.5.best_f1_thresh", out["best_f1_thresh"], 0.6)


def test_squad_without_na_probs_and_missing():
    out = M.squad_evaluate(_squad_dataset(), PREDICTIONS)
    print(f"keys without na_probs={sorted(out)}")
    assert "best_f1" not in out and "best_exact" not in out
    check("squad_nonull.f1", out["f1"], 100 * sum(RAW_F1.values()) / 6)
    # q3 missing: scored 0 and still counted in total (v1.1 behaviour): F1 (1 + 2/3 + 0 + 0 + 1 + 0) / 6.
    partial = {k: v for k, v in PREDICTIONS.items() if k != "q3"}
    out = M.squad_evaluate(_squad_dataset(), partial, NA_PROBS)
    print(f"missing={out['missing']} expected 1; total={out['total']} expected 6")
    assert out["missing"] == 1 and out["total"] == 6
    check("squad_missing.exact", out["exact_match"], 100 * 2 / 6)
    check("squad_missing.f1", out["f1"], 100 * (1 + 2 / 3 + 1) / 6)
    # Sweep without q3: 2 -> q1 +1 = 3 (t .1) -> q5 0 -> q2 +2/3 = 3.667 (t .6) -> q6 -1 -> q4 0.
    check("squad_missing.best_f1", out["best_f1"], 100 * (3 + 2 / 3) / 6)
    check("squad_missing.best_f1_thresh", out["best_f1_thresh"], 0.6)


def test_squad_v1_style():
    # SQuAD v1.1 data: every question answerable, no NoAns keys; EM/F1 are max over golds.
    data = [{"title": "t", "paragraphs": [{"context": "...", "qas": [
        {"id": "a", "answers": [{"text": "Denver Broncos", "answer_start": 0}, {"text": "Broncos", "answer_start": 7}]},
        {"id": "b", "answers": [{"text": "in 1990", "answer_start": 0}]},
    ]}]}]
    out = M.squad_evaluate({"version": "1.1", "data": data}, {"a": "The Broncos.", "b": "1990"})
    assert "NoAns_f1" not in out and out["HasAns_total"] == 2
    # a: "broncos" == "broncos" -> EM 1, F1 1; b: [1990] vs [in 1990]: P 1, R 1/2 -> F1 2/3, EM 0.
    check("squad_v1.exact", out["exact_match"], 100 * 1 / 2)
    check("squad_v1.f1", out["f1"], 100 * (1 + 2 / 3) / 2)
