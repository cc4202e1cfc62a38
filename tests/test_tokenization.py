"""Tests for xlnet_tf.tokenization: SentencePiece training, XLNet preprocessing, ids and offsets.

The reference below re-states XLNet's rules (``preprocess_text`` + ``encode_pieces`` + ``PieceToId``)
in plain Python on top of the ``sentencepiece`` package; the TF graph must reproduce it exactly.
"""

import unicodedata

import pydoc_data.topics
import pytest
import sentencepiece as spm
import tensorflow as tf

from xlnet_tf.tokenization import (
    SPECIAL_PIECES, USER_DEFINED_SYMBOLS, XLNetTokenizer, element_index, kept, preprocess_text, row_ids, search_sorted,
    train_spm)

def model_proto_class():
    """The fields of SentencePiece's ModelProto this file reads (field numbers and enums of
    sentencepiece_model.proto). sentencepiece's own sentencepiece_model_pb2 is generated for a newer protobuf
    than the 6.33 that Apache Beam (the `beam` extra, in the test install) pins, so it cannot be imported here."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="xlnet_tf_test_spm_model.proto", package="xlnet_tf_test",
                                              syntax="proto2")
    model = file.message_type.add(name="ModelProto")
    piece = model.nested_type.add(name="SentencePiece")
    piece.enum_type.add(name="Type").value.extend(
        [descriptor_pb2.EnumValueDescriptorProto(name=n, number=i) for n, i in
         (("NORMAL", 1), ("UNKNOWN", 2), ("CONTROL", 3), ("USER_DEFINED", 4), ("UNUSED", 5), ("BYTE", 6))])
    piece.field.add(name="piece", number=1, label=F.LABEL_OPTIONAL, type=F.TYPE_STRING)
    piece.field.add(name="score", number=2, label=F.LABEL_OPTIONAL, type=F.TYPE_FLOAT)
    piece.field.add(name="type", number=3, label=F.LABEL_OPTIONAL, type=F.TYPE_ENUM,
                    type_name=".xlnet_tf_test.ModelProto.SentencePiece.Type", default_value="NORMAL")
    trainer = model.nested_type.add(name="TrainerSpec")
    trainer.enum_type.add(name="ModelType").value.extend(
        [descriptor_pb2.EnumValueDescriptorProto(name=n, number=i) for n, i in
         (("UNIGRAM", 1), ("BPE", 2), ("WORD", 3), ("CHAR", 4))])
    trainer.field.add(name="model_type", number=3, label=F.LABEL_OPTIONAL, type=F.TYPE_ENUM,
                      type_name=".xlnet_tf_test.ModelProto.TrainerSpec.ModelType", default_value="UNIGRAM")
    model.nested_type.add(name="NormalizerSpec").field.add(name="name", number=1, label=F.LABEL_OPTIONAL,
                                                           type=F.TYPE_STRING)
    for name, number, kind in (("pieces", 1, "SentencePiece"), ("trainer_spec", 2, "TrainerSpec"),
                               ("normalizer_spec", 3, "NormalizerSpec")):
        model.field.add(name=name, number=number, type=F.TYPE_MESSAGE, type_name=f".xlnet_tf_test.ModelProto.{kind}",
                        label=F.LABEL_REPEATED if name == "pieces" else F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("xlnet_tf_test.ModelProto"))


VARIED = [
    "Café naïve résumé, déjà vu: Ångström, Zoë's façade",
    "Cafe\u0301 with a separate combining accent, and Ｆｕｌｌｗｉｄｔｈ ｄｉｇｉｔｓ １２３",
    "日本語のテキストとガラス、中文文本。",
    "Emoji 😀🎉 and 👍🏽 in a row😀x",
    "``Quoted'' text, `single' and '''triple''' and ```five`` quotes",
    "1,000,000 and 12, also 2000, then x9, $5, 3,14 and ٣,",
    "  leading\t\ttabs\n\nnew lines   runs\u3000of\u00a0spaces \u2028 end  ",
    "",
    " \t\n ",
    "ΟΔΥΣΣΕΥΣ ΣΑΣ Σ aΣ. İstanbul STRASSE Straße",
    "Mixed CASE Words With Ünïcödé, e.g. Ω and <eop> markers.",
]
# Characters that expand (ligatures, ǅ): tokens may split inside one original character.
EXPANDING = ["ﬁne ﬂour ǅemal ½ ﬃ"]
EXTRA_TRAINING_LINES = VARIED + EXPANDING + [
    "The year 1999, the year 2000, and 1,234,567 people.",
    "Über die Brücke gehen Mädchen und Jungen; garçon, señor, São Paulo.",
]


# ----------------------------------------------------------------------------------------------------
# Reference (pure Python, sentencepiece package)


def reference_preprocess(text, lower):
    text = " ".join(text.strip().split())
    text = text.replace("``", '"').replace("''", '"')
    text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return text.lower() if lower else text


def reference_pieces(sp, text, lower):
    out = []
    for piece in sp.encode_as_pieces(reference_preprocess(text, lower)):
        if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
            again = sp.encode_as_pieces(piece[:-1].replace("\u2581", ""))
            if piece[0] != "\u2581" and again[0][0] == "\u2581":
                again = again[1:] if len(again[0]) == 1 else [again[0][1:]] + again[1:]
            out += again + [","]
        else:
            out.append(piece)
    return out


def reference_ids(sp, text, lower):
    return [sp.piece_to_id(p) for p in reference_pieces(sp, text, lower)]


def is_viterbi_tie(sp, ids, pieces):
    """Whether ``ids`` re-split a run of one repeated character of ``pieces`` at the same total score.

    TF Text's bundled SentencePiece breaks exact score ties (e.g. in runs like "=====") as sentencepiece
    0.1.99 does; sentencepiece 0.2.x breaks them the other way. Both segmentations are optimal.
    """
    ours = [sp.id_to_piece(i) for i in ids]
    ref_ids = [sp.piece_to_id(p) for p in pieces]
    score = lambda xs: sum(sp.get_score(i) for i in xs)  # noqa: E731
    head = next(i for i, (a, b) in enumerate(zip(ours + [None], pieces + [None])) if a != b)
    tail = next(i for i, (a, b) in enumerate(zip(ours[::-1] + [None], pieces[::-1] + [None])) if a != b)
    run = "".join(ours[head: len(ours) - tail]).replace("\u2581", "")
    return (0 not in ids and 0 not in ref_ids and "".join(ours) == "".join(pieces)
            and abs(score(ids) - score(ref_ids)) < 1e-3 and len(set(run)) == 1)


def compare_to_reference(sp, texts, got, lower):
    """-> (exact matches, Viterbi ties, texts that differ otherwise)."""
    exact, ties, bad = 0, 0, []
    for text, ids in zip(texts, got):
        pieces = reference_pieces(sp, text, lower)
        if ids == [sp.piece_to_id(p) for p in pieces]:
            exact += 1
        elif is_viterbi_tie(sp, ids, pieces):
            ties += 1
        else:
            bad.append(text)
    return exact, ties, bad


def corpus_lines():
    lines = [line for _, doc in sorted(pydoc_data.topics.topics.items()) for line in doc.splitlines()]
    return lines + EXTRA_TRAINING_LINES * 20


# ----------------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """Trains a cased (2000 pieces) and an uncased (1000 pieces) model on pydoc topics + extra lines."""
    tmp = tmp_path_factory.mktemp("spm")
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(corpus_lines()) + "\n", encoding="utf-8")
    quiet = dict(minloglevel=2, num_threads=2)
    cased = train_spm([corpus], tmp / "cased", 2000, lower_case=False, **quiet)
    uncased = train_spm(str(corpus), tmp / "uncased", 1000, lower_case=True, **quiet)
    return {False: cased, True: uncased}


@pytest.fixture(scope="session", params=[False, True], ids=["cased", "uncased"])
def tok_and_sp(request, models):
    lower = request.param
    sp = spm.SentencePieceProcessor(model_file=models[lower])
    return XLNetTokenizer(models[lower], lower_case=lower), sp


def sample_lines(n=300):
    lines = [line for line in corpus_lines() if line.strip()]
    return lines[:: max(1, len(lines) // n)][:n]


# ----------------------------------------------------------------------------------------------------
# Training


def test_special_ids_match_published_vocab(models):
    for lower, path in models.items():
        tok = XLNetTokenizer(path, lower_case=lower)
        sp = spm.SentencePieceProcessor(model_file=path)
        got = [tok.id_to_piece(i) for i in range(9)]
        print(f"lower={lower} pieces 0..8 = {got}")
        assert got == ["<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"]
        assert list(SPECIAL_PIECES) == got
        proto = model_proto_class().FromString(tok.model_bytes)
        types = [(p.piece, p.type) for p in proto.pieces[: 8 + len(USER_DEFINED_SYMBOLS)]]
        kind = proto.SentencePiece
        want = ([("<unk>", kind.UNKNOWN)] + [(p, kind.CONTROL) for p in SPECIAL_PIECES[1:8]]
                + [(p, kind.USER_DEFINED) for p in USER_DEFINED_SYMBOLS])
        n_bad = sum(a != b for a, b in zip(types, want))
        print(f"ids 0..16 with wrong piece or type: {n_bad} (bound 0); "
              f"normalizer={proto.normalizer_spec.name}")
        assert n_bad == 0 and proto.trainer_spec.model_type == proto.trainer_spec.UNIGRAM
        assert (tok.unk_id, tok.bos_id, tok.eos_id, tok.cls_id, tok.sep_id, tok.pad_id, tok.mask_id,
                tok.eod_id, tok.eop_id) == tuple(range(9))
        vocab_file = path[: -len(".model")] + ".vocab"
        with open(vocab_file, encoding="utf-8") as f:
            n_vocab_lines = sum(1 for _ in f)
        print(f"vocab_size={tok.vocab_size}, {vocab_file} lines={n_vocab_lines} (bound {tok.vocab_size})")
        assert n_vocab_lines == tok.vocab_size == sp.get_piece_size()


def test_uncased_training_saw_preprocessed_text(models):
    sp = spm.SentencePieceProcessor(model_file=models[True])
    pieces = [sp.id_to_piece(i) for i in range(9, sp.get_piece_size())]
    upper = [p for p in pieces if p != p.lower()]
    accented = [p for p in pieces if unicodedata.normalize("NFKD", p) != p]
    print(f"uncased vocab: upper-case pieces={len(upper)} (bound 0), "
          f"accented pieces={len(accented)} (bound 0)")
    assert not upper and not accented


def test_graph_helpers_give_tensorflows_results_in_fewer_ops():
    """The feature graphs' small helpers against the TensorFlow functions they stand for: `search_sorted` (1-D) is
    tf.searchsorted on both sides, in int32 and int64, with repeats, empty inputs and values outside the sorted
    range; `row_ids` is value_rowids, empty rows included; `element_index` is tf.range over the elements; `kept`
    is tf.boolean_mask. Each builds fewer graph ops than the function it stands for."""
    import numpy as np

    rng = np.random.default_rng(7)
    cases = 0
    for trial in range(24):
        dtype = (np.int32, np.int64)[trial % 2]
        a = np.sort(rng.integers(-3, 10, int(rng.integers(0, 8)))).astype(dtype)
        v = rng.integers(-5, 12, int(rng.integers(0, 12))).astype(dtype)
        for side in ("left", "right"):
            out = (tf.int32, tf.int64)[trial // 2 % 2]
            want = tf.searchsorted(a, v, side=side, out_type=out).numpy().tolist()
            got = search_sorted(tf.constant(a), tf.constant(v), side=side, out_type=out)
            assert got.dtype == out and got.numpy().tolist() == want, (a, v, side)
            cases += 1
        mask = rng.random(v.shape) < 0.5
        assert kept(tf.constant(v), tf.constant(mask)).numpy().tolist() == v[mask].tolist(), (v, mask)
        assert element_index(tf.constant(v)).numpy().tolist() == list(range(v.size))
        cases += 2
    for lengths in ([], [0], [0, 0], [3, 0, 7], rng.integers(0, 6, 40).tolist()):
        rt = tf.RaggedTensor.from_row_lengths(tf.zeros([int(sum(lengths))]), tf.constant(lengths, tf.int64))
        assert row_ids(rt).numpy().tolist() == rt.value_rowids().numpy().tolist(), lengths
        cases += 1

    def ops(build):
        graph = tf.Graph()
        with graph.as_default():
            values, mask = tf.constant([0, 3, 3, 7], tf.int64), tf.constant([True, False, True, True])
            before = len(graph.get_operations())
            build(values, mask)
            return len(graph.get_operations()) - before

    counts = {"search_sorted": (ops(lambda x, m: search_sorted(x, x, side="right")),
                                ops(lambda x, m: tf.searchsorted(x, x, side="right", out_type=tf.int64))),
              "element_index": (ops(lambda x, m: element_index(x)), ops(lambda x, m: tf.range(tf.size(x, tf.int64)))),
              "kept": (ops(kept), ops(tf.boolean_mask))}
    print(f"{cases} cases equal to TensorFlow's (bound: all); graph ops, ours against TensorFlow's: {counts} "
          f"(bound: fewer each)")
    assert all(ours < theirs for ours, theirs in counts.values())


def test_train_spm_rejects_missing_and_empty_input(tmp_path):
    missing = tmp_path / "nope.txt"
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        train_spm([missing], tmp_path / "m", 100)
    empty = tmp_path / "empty.txt"
    empty.write_text(" \n\n")
    with pytest.raises(ValueError, match="empty.txt"):
        train_spm([empty], tmp_path / "m", 100)


# ----------------------------------------------------------------------------------------------------
# Ids


def test_preprocess_matches_reference():
    texts = VARIED + EXPANDING + sample_lines(100)
    for lower in (False, True):
        got = [t.decode("utf-8") for t in preprocess_text(tf.constant(texts), lower).numpy()]
        bad = sum(g != reference_preprocess(t, lower) for g, t in zip(got, texts))
        print(f"lower={lower}: preprocess mismatches={bad} of {len(texts)} (bound 0)")
        assert bad == 0


def test_ids_match_reference(tok_and_sp):
    tok, sp = tok_and_sp
    texts = VARIED + EXPANDING + sample_lines(300)
    exact, ties, bad = compare_to_reference(sp, texts, tok.encode(texts), tok.lower_case)
    n_split = sum(p == "," and i > 0 and pieces[i - 1][-1:].isdigit()
                  for t in texts for pieces in [reference_pieces(sp, t, tok.lower_case)]
                  for i, p in enumerate(pieces))
    print(f"lower={tok.lower_case}: of {len(texts)} texts, identical ids={exact}, equal-score Viterbi ties="
          f"{ties} (bound: only runs of one repeated character), mismatches={len(bad)} (bound 0); "
          f"digit-comma splits exercised={n_split} (bound >0)")
    assert not bad, bad[:3]
    assert n_split > 0
    varied = VARIED + EXPANDING
    exact, ties, bad = compare_to_reference(sp, varied, tok.encode(varied), tok.lower_case)
    print(f"lower={tok.lower_case}: varied texts with identical ids={exact} of {len(varied)} (bound {len(varied)})")
    assert exact == len(varied)


def test_ids_same_on_every_path(tok_and_sp):
    tok, _ = tok_and_sp
    texts = VARIED + EXPANDING
    python = tok.encode(texts)
    eager = tok.tokenize(tf.constant(texts)).to_list()
    graph = tf.function(tok.tokenize)(tf.constant(texts)).to_list()
    ds = tf.data.Dataset.from_tensor_slices(texts)
    per_item = [t.numpy().tolist() for t in ds.map(tok.tokenize)]
    batched = [r for b in ds.batch(4).map(tok.tokenize) for r in b.to_list()]
    scalar = [tok.tokenize(t).numpy().tolist() for t in texts]
    for name, ids in [("eager", eager), ("tf.function", graph), ("dataset.map", per_item),
                      ("batched dataset.map", batched), ("scalar", scalar)]:
        bad = sum(a != b for a, b in zip(ids, python)) + abs(len(ids) - len(python))
        print(f"lower={tok.lower_case} {name}: mismatches vs encode={bad} (bound 0)")
        assert bad == 0
    assert python[VARIED.index("")] == [] and tok.encode([]) == []


def test_from_bytes_and_detokenize(tok_and_sp):
    tok, sp = tok_and_sp
    again = XLNetTokenizer.from_bytes(tok.model_bytes, lower_case=tok.lower_case)
    texts = VARIED + sample_lines(50)
    bad = sum(a != b for a, b in zip(again.encode(texts), tok.encode(texts)))
    print(f"lower={tok.lower_case} from_bytes id mismatches={bad} (bound 0)")
    assert bad == 0 and again.vocab_size == tok.vocab_size == sp.get_piece_size()
    plain = ["Hello world, this is a test.", "x = 1 + 2"]
    ids = tok.tokenize(tf.constant(plain))
    text = [t.decode() for t in tok.detokenize(ids).numpy()]
    want = [sp.decode_ids(i) for i in ids.to_list()]
    print(f"lower={tok.lower_case} detokenize: {text}")
    assert text == want


# ----------------------------------------------------------------------------------------------------
# Offsets


def _norm(text, lower):
    """The comparison form of a text: XLNet preprocessing, NFKC (as spm's normalizer), no whitespace.

    Final sigma depends on context that a one-token slice lacks, so ς and σ compare equal.
    """
    text = unicodedata.normalize("NFKC", reference_preprocess(text, lower)).replace("\u03c2", "\u03c3")
    return "".join(text.split())


def _offset_errors(tok, sp, texts, exact):
    ids, starts, ends = tok.tokenize_with_offsets(tf.constant(texts))
    errors, n_tokens = [], 0
    for text, i, s, e in zip(texts, ids.to_list(), starts.to_list(), ends.to_list()):
        raw, pieces, prev = text.encode("utf-8"), reference_pieces(sp, text, tok.lower_case), 0
        if i != [sp.piece_to_id(p) for p in pieces]:  # a Viterbi tie: the pieces are those of our ids
            assert is_viterbi_tie(sp, i, pieces), text
            pieces = [sp.id_to_piece(x) for x in i]
        for piece, a, b in zip(pieces, s, e):
            n_tokens += 1
            got = _norm(raw[a:b].decode("utf-8"), tok.lower_case)
            want = _norm(piece.replace("\u2581", ""), False)
            ok = (got == want) if exact else (want in got)
            if not (ok and prev <= a <= b <= len(raw)):
                errors.append((text, piece, raw[a:b]))
            prev = a
    return errors, n_tokens


def test_offsets_slice_back_to_original(tok_and_sp):
    tok, sp = tok_and_sp
    errors, n = _offset_errors(tok, sp, VARIED + sample_lines(100), exact=True)
    print(f"lower={tok.lower_case}: tokens whose slice != piece: {len(errors)} of {n} (bound 0)")
    assert not errors, errors[:5]
    # Characters that expand: the slice is the whole original character, which contains the piece.
    errors, n = _offset_errors(tok, sp, EXPANDING, exact=False)
    print(f"lower={tok.lower_case}: expanding chars, slice not containing piece: {len(errors)} of {n} "
          "(bound 0)")
    assert not errors, errors[:5]


def test_offsets_examples(models):
    tok = XLNetTokenizer(models[False])
    text = "  Café ``x''  1,000, end"
    ids, starts, ends = tok.tokenize_with_offsets(text)
    raw = text.encode()
    spans = [raw[a:b].decode() for a, b in zip(starts.numpy(), ends.numpy())]
    pieces = [tok.id_to_piece(i) for i in ids.numpy()]
    print(list(zip(pieces, spans)))
    assert "".join(spans) == "Café``x''1,000,end"  # every original non-space byte covered exactly once
    assert spans[pieces.index('"')] == "``"
    graph = tf.function(tok.tokenize_with_offsets)(tf.constant([text]))
    same = all(g.to_list() == [e.numpy().tolist()] for g, e in zip(graph, (ids, starts, ends)))
    print(f"tf.function offsets equal eager: {same} (bound True)")
    assert same
