"""Small, real datasets made from text that ships with Python, for every kind of input the commands read.

CPython's documentation topics (`pydoc_data.topics`, 79 topics, ~2,000 paragraphs) give a pretraining corpus and
one labelled task per fine-tuning family, in the formats the published datasets use (GLUE TSV, SQuAD JSON, RACE
JSON files, CoNLL), so that the Quickstart, the guides and the demo run with nothing to download. Every writer
takes a folder (any filesystem `xlnet_tf.files` reaches) and returns what it wrote; `write_sample` is the
`xlnet-tf sample-data` command.
"""

from __future__ import annotations

import json
import random
import re

from xlnet_tf import files

CORPUS_FILE = "corpus.txt"


def documentation_paragraphs():
    """(topic, paragraph text, is_indented) for every paragraph of CPython's bundled documentation topics."""
    import pydoc_data.topics

    for topic, text in sorted(pydoc_data.topics.topics.items()):
        for paragraph in re.split(r"\n\s*\n", text):
            lines = [line for line in paragraph.split("\n") if line.strip()]
            if lines and not set(lines[-1].strip()) <= set("*=-"):
                yield topic, " ".join(" ".join(lines).split()), all(line.startswith("   ") for line in lines)


def _split(rows, share, seed):
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    cut = int(len(rows) * share)
    return rows[:cut], rows[cut:]


def write_corpus(path):
    """One paragraph per line, a blank line between topics (the train-spm / create-pretraining-data input)."""
    lines, current = [], None
    for topic, paragraph, _ in documentation_paragraphs():
        if current is not None and topic != current:
            lines.append("")
        current = topic
        lines.append(paragraph)
    files.write_text(path, "\n".join(lines) + "\n")
    return sum(1 for line in lines if line)


def write_classification_task(directory, seed=0):
    """code (indented paragraphs: grammar, examples) vs prose, balanced: train.tsv / dev.tsv with the columns
    `sentence` and `label` -> (train rows, dev rows)."""
    rng = random.Random(seed)
    rows = [(p, "code" if code else "prose") for _, p, code in documentation_paragraphs() if len(p.split()) >= 4]
    code = [r for r in rows if r[1] == "code"]
    prose = [r for r in rows if r[1] == "prose"]
    rng.shuffle(code)
    rng.shuffle(prose)
    n = min(len(code), len(prose))
    rows = code[:n] + prose[:n]
    rng.shuffle(rows)
    split = int(len(rows) * 0.8)
    for name, part in (("train.tsv", rows[:split]), ("dev.tsv", rows[split:])):
        files.write_text(files.join(directory, name), "sentence\tlabel\n" + "".join(
            f"{text.replace(chr(9), ' ')}\t{label}\n" for text, label in part))
    return len(rows[:split]), len(rows[split:])


def write_qa_task(directory, seed=0, max_words=60):
    """SQuAD-style train.json / dev.json over prose paragraphs that quote names ("assert", "__init__()", ...):
    "which name is quoted first" and, when there are several, "which name is quoted last"; the answer is the
    quoted text -> (train questions, dev questions)."""
    articles = []
    for topic, paragraph, code in documentation_paragraphs():
        context = " ".join(paragraph.split()[:max_words])
        quoted = list(re.finditer(r'"([^"]{1,40})"', context))
        if code or not quoted:
            continue
        qas = [(f"{topic}-{len(articles)}-first", "which name is quoted first", quoted[0])]
        if len(quoted) > 1 and quoted[-1].group(1) != quoted[0].group(1):
            qas.append((f"{topic}-{len(articles)}-last", "which name is quoted last", quoted[-1]))
        articles.append({"title": topic, "paragraphs": [{"context": context, "qas": [
            {"id": qid, "question": question, "answers": [{"text": m.group(1), "answer_start": m.start(1)}]}
            for qid, question, m in qas]}]})
    random.Random(seed).shuffle(articles)
    split = int(len(articles) * 0.85)
    for name, part in (("train.json", articles[:split]), ("dev.json", articles[split:])):
        files.write_text(files.join(directory, name), json.dumps({"version": "sample", "data": part}))
    count = lambda part: sum(len(a["paragraphs"][0]["qas"]) for a in part)  # noqa: E731
    return count(articles[:split]), count(articles[split:])


def write_race_task(directory, seed=0, max_words=120):
    """RACE-style multiple choice, one JSON file per article under train/ and dev/: an article is up to
    `max_words` words of one topic's prose; its question asks which topic of the language reference it comes
    from, with the right topic and three others as options A-D -> (train questions, dev questions)."""
    rng = random.Random(seed)
    by_topic = {}
    for topic, paragraph, code in documentation_paragraphs():
        if not code:
            by_topic.setdefault(topic, []).append(paragraph)
    topics = sorted(by_topic)
    articles = []
    for topic in topics:
        words = " ".join(by_topic[topic]).split()
        for start in range(0, len(words), max_words):
            chunk = words[start:start + max_words]
            if len(chunk) < 20:
                continue
            options = rng.sample([t for t in topics if t != topic], 3) + [topic]
            rng.shuffle(options)
            articles.append({"id": f"{topic}-{start // max_words}", "article": " ".join(chunk),
                             "questions": ["Which topic of the Python language reference is this passage from?"],
                             "options": [options], "answers": ["ABCD"[options.index(topic)]]})
    train, dev = _split(articles, 0.85, seed)
    for name, part in (("train", train), ("dev", dev)):
        for article in part:
            files.write_text(files.join(directory, name, article["id"] + ".json"), json.dumps(article))
    return len(train), len(dev)


def write_token_classification_task(directory, seed=0, max_words=40):
    """CoNLL-style train.txt / dev.txt (one `word tag` line per word, a blank line between sentences) over the
    prose's sentences: B-NAME / I-NAME tag the words of a quoted name ("assert", "__init__()"), O the rest ->
    (train sentences, dev sentences)."""
    sentences = []
    for _, paragraph, code in documentation_paragraphs():
        if code or '"' not in paragraph:
            continue
        for sentence in re.split(r"(?<=[.:;])\s+", paragraph):
            words = sentence.split()[:max_words]
            if len(words) < 4 or not any(w.count('"') for w in words):
                continue
            tags, inside = [], False
            for word in words:
                quotes = word.count('"')
                tags.append(("I-NAME" if inside else "B-NAME") if quotes or inside else "O")
                if quotes % 2:
                    inside = not inside
            sentences.append("".join(f"{w} {t}\n" for w, t in zip(words, tags)))
    train, dev = _split(sentences, 0.85, seed)
    for name, part in (("train.txt", train), ("dev.txt", dev)):
        files.write_text(files.join(directory, name), "\n".join(part))
    return len(train), len(dev)


# What `xlnet-tf sample-data --task` can write: the task's writer, what its two numbers count, its files.
SAMPLES = {
    "corpus": (lambda d, seed: (write_corpus(files.join(d, CORPUS_FILE)),), "paragraphs", CORPUS_FILE),
    "classification": (write_classification_task, "rows (code vs prose)", "train.tsv, dev.tsv"),
    "squad": (write_qa_task, "questions (which name is quoted first / last)", "train.json, dev.json"),
    "race": (write_race_task, "questions (which topic is the passage from)", "train/*.json, dev/*.json"),
    "token-classification": (write_token_classification_task, "sentences (B-NAME / I-NAME: quoted names)",
                             "train.txt, dev.txt"),
}


def write_sample(task, directory, seed=0):
    """Writes the sample of `task` (a key of SAMPLES) into `directory` -> one line saying what was written."""
    writer, counts, names = SAMPLES[task]
    files.makedirs(directory)
    sizes = writer(directory, seed)
    split = f"{sizes[0]} {counts}" if len(sizes) == 1 else f"{sizes[0]} train / {sizes[1]} dev {counts}"
    return f"{task}: {split} -> {directory}: {names}"
