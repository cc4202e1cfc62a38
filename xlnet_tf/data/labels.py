"""Labels: the ids every feature builder and head agree on, and the kinds of label a sentence task reads
(numpy only: the readers import it too).

A `LabelKind` says how a file's label field becomes a label (`parse`) and how the labels of a set of examples
become label ids (`encode`); the sentence tasks each read one (xlnet_tf.tasks), and `readers.read_examples` /
`finetuning.classification_features` ask the kind instead of comparing names."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from xlnet_tf.errors import UserError

IGNORE = -100  # the label id of positions that are not scored (transformers' ignore_index)


def sorted_labels(labels):
    """Label strings in id order: numerically when all are integers, else as strings."""
    try:
        return sorted(labels, key=int)
    except ValueError:
        return sorted(labels)


def parse_label_names(given):
    """--label-names: "NAME,NAME,..." (the names of a training file's label values in id order, `sorted_labels`)
    or "VALUE=NAME,VALUE=NAME,..." or "@FILE" (a text file of the same items, one a line; blank lines skipped;
    from a Python caller also a list of names or a {value: name} dict) -> a tuple of names or a {value: name}
    dict. UserError for a missing file, an empty or repeated name or value, or a mix of the forms."""
    if isinstance(given, str) and given.startswith("@"):
        from xlnet_tf import files

        path = given[1:]
        if not files.exists(path):
            raise UserError(f"--label-names {given}: no such file (one name, or VALUE=NAME, a line)")
        given = ",".join(line.strip() for line in files.read_text(path).splitlines() if line.strip())
    if isinstance(given, str):
        items = [item.strip() for item in given.split(",")]
        pairs = ["=" in item for item in items]
        if any(pairs) and not all(pairs):
            raise UserError(f"--label-names takes NAME,NAME,... or VALUE=NAME,VALUE=NAME,..., not a mix: {given!r}")
        given = [tuple(part.strip() for part in item.split("=", 1)) for item in items] if all(pairs) else items
    elif isinstance(given, dict):
        given = [(str(value).strip(), str(name).strip()) for value, name in given.items()]
    else:
        given = [str(name).strip() for name in given]
    pairs = bool(given) and isinstance(given[0], tuple)
    names = [item[1] for item in given] if pairs else given
    if not names or "" in names or (pairs and "" in dict(given)):
        raise UserError(f"--label-names has an empty name or value: {given_text(given)!r}")
    for what, words in (("value", [item[0] for item in given] if pairs else []), ("name", names)):
        repeated = [word for k, word in enumerate(words) if word in words[:k]]
        if repeated:
            raise UserError(f"--label-names gives the {what} {repeated[0]!r} twice (each label has one name): "
                            f"{given_text(given)!r}")
    return dict(given) if pairs else tuple(names)


def given_text(given):
    """`parse_label_names`' items as the flag writes them."""
    return ",".join("=".join(item) if isinstance(item, tuple) else item for item in given)


def name_labels(values, given, source):
    """The names of `values` (the label strings of `source`, a training file, in id order) by `parse_label_names`'
    `given`, in the same order. UserError naming --label-names and the file's values for a count that does not
    match, a value the file does not have, or a name that is another label's value."""
    listed = f"the {len(values)} label values of {source}: {', '.join(values)}"
    if isinstance(given, dict):
        unknown = [value for value in given if value not in values]
        if unknown:
            raise UserError(f"--label-names names the value {unknown[0]!r}, which is not among {listed}")
        names = [given.get(value) for value in values]
    else:
        names = list(given)
    if len(given) != len(values):
        written = given_text(given.items() if isinstance(given, dict) else given)
        raise UserError(f"--label-names gives {len(given)} name{'s' * (len(given) != 1)} ({written}) for {listed}")
    for value, name in zip(values, names):
        if name in values and name != value:
            raise UserError(f"--label-names names the value {value!r} {name!r}, another label's value among {listed}")
    return names


def renamed(examples, values, names):
    """`examples` (`TextExample`s) with each label (each label of a set) that is one of `values` read as the name at
    its place in `names` (--label-names); the others, names already, unchanged. `values` None: `examples`."""
    if not values:
        return examples
    rename = dict(zip(values, names))

    def name(label):
        return tuple(rename.get(x, x) for x in label) if isinstance(label, tuple) else rename.get(label, label)

    return [dataclasses.replace(e, label=name(e.label)) if e.label is not None else e for e in examples]


class LabelKind:
    """One kind of sentence label. `name`: the task that reads it (`read_examples`' task=, the feature report's
    task); `python_type`: what `parse` gives (how `kind_of` recognises a list of parsed labels)."""

    name = ""
    python_type = type(None)

    def parse(self, value, separator=","):
        """A field of a file (JSON value or TSV / CSV string) -> (label, None), or (None, reason) when it is not
        such a label (here: no label, whatever the field holds). `separator`: between the labels of one field
        (a label set)."""
        return None, None

    def encode(self, examples, label_list):
        """The labels of `examples` (`TextExample`s, all of this kind) -> (label_ids, label_list): numpy ids per
        example, and the label strings in id order (None where labels are numbers). `label_list`: the given
        order (None: the labels present, `sorted_labels`); a label outside it is a UserError naming the
        example's source."""
        return np.full([len(examples)], -1, np.int32), None if label_list is None else list(label_list)

    def __repr__(self):
        return f"<labels of {self.name}>"


class _ClassLabel(LabelKind):
    """One class name per example (a string; an integer in JSON reads as its digits) -> int32 ids [N]."""

    name, python_type = "classification", str

    def parse(self, value, separator=","):
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            return None, f"label {value!r} is not a string or an integer"
        value = str(value).strip()
        return (value, None) if value else (None, "empty label")

    def encode(self, examples, label_list):
        labels = [e.label for e in examples]
        label_list = list(label_list) if label_list is not None else sorted_labels(set(labels))
        label_map = {lab: i for i, lab in enumerate(label_list)}
        for e in examples:
            if e.label not in label_map:
                raise UserError(f"{e.source or 'example'}: label {e.label!r} is not in the label list "
                                f"{label_list}.")
        return np.array([label_map[lab] for lab in labels], np.int32), label_list


class _NumberLabel(LabelKind):
    """One finite number per example -> float32 [N]."""

    name, python_type = "regression", float

    def parse(self, value, separator=","):
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            return None, f"regression label {value!r} is not a number"
        try:
            number = float(value.strip() if isinstance(value, str) else value)
        except ValueError:
            return None, f"regression label {value!r} is not a number"
        if not math.isfinite(number):
            return None, f"regression label {value!r} is not finite"
        return number, None

    def encode(self, examples, label_list):
        return np.array([e.label for e in examples], np.float32), None


class _LabelSet(LabelKind):
    """Any number of class names per example (a JSON list, or a string of them separated by `separator`; an
    empty field: none) -> float32 [N, C], 1 for each of the example's labels."""

    name, python_type = "multi-label", tuple

    def parse(self, value, separator=","):
        if isinstance(value, str):
            value = [part for part in value.split(separator)] if value.strip() else []
        if not isinstance(value, list):
            return None, f"multi-label labels {value!r} are not a list or a {separator!r}-separated string"
        labels = []
        for item in value:
            if isinstance(item, bool) or not isinstance(item, (int, str)) or not str(item).strip():
                return None, f"multi-label label {item!r} is not a non-empty string or an integer"
            labels.append(str(item).strip())
        return tuple(dict.fromkeys(labels)), None  # each label once, in order

    def encode(self, examples, label_list):
        label_list = (list(label_list) if label_list is not None else
                      sorted_labels({x for e in examples for x in e.label}))
        label_map = {lab: i for i, lab in enumerate(label_list)}
        label_ids = np.zeros([len(examples), len(label_list)], np.float32)
        for k, e in enumerate(examples):
            missing = [lab for lab in e.label if lab not in label_map]
            if missing:
                raise UserError(f"{e.source or 'example'}: label {missing[0]!r} is not in the label list "
                                f"{label_list}.")
            label_ids[k, [label_map[lab] for lab in e.label]] = 1.0
        return label_ids, label_list


class _NoLabel(LabelKind):
    """Examples to predict: ids -1, the label list passed through."""

    name = "unlabeled"


CLASS_LABEL, NUMBER_LABEL, LABEL_SET, NO_LABEL = _ClassLabel(), _NumberLabel(), _LabelSet(), _NoLabel()
LABEL_KINDS = {kind.name: kind for kind in (CLASS_LABEL, NUMBER_LABEL, LABEL_SET)}  # the kinds a file is read as


def label_kind(name):
    """The `LabelKind` a sentence task named `name` reads (UserError for another name)."""
    kind = LABEL_KINDS.get(name)
    if kind is None:
        choices = [repr(known) for known in LABEL_KINDS]
        raise UserError(f"task must be {', '.join(choices[:-1])} or {choices[-1]}, got {name!r}.")
    return kind


def kind_of(labels):
    """The `LabelKind` of parsed labels: NO_LABEL when all are None, else the kind whose python_type all have
    (UserError when they mix kinds)."""
    for kind in (NO_LABEL, *LABEL_KINDS.values()):
        if all(isinstance(label, kind.python_type) for label in labels):
            return kind
    raise UserError("Examples mix labels of different kinds (text / number / missing).")
