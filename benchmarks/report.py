"""The benchmark's outputs: text tables on stdout, report.md (the same tables and the targets, for the README),
results.json (everything measured) and throughput.png (tokens/s per case).

The header names the machine, its instruction sets and AMX state (whether the AMX targets are judged) and the
matmul peaks of the run. Tables: one of tokens/s per step case; when the "lengths" tasks ran, one of examples/s with real vs padded
tokens (fine-tuning and predict on SST-2 lengths) and one of the exported classifier's latency by text length;
when the "documents" tasks ran, one of fine-tuning examples/s and the export's latency by the segments of a
long document, each against one segment; when the "memory" tasks ran, one of peak memory and step time per
--recompute mode against none; when the "serving" task ran, one of the server's requests/s and latency by client
count against the export in process, and under overload; when the "precision" task ran, one of the export's
latency for one text and for a batch in each precision, in process and served, against float32, with the
logits' relative error and the share of equal labels.
"""

from __future__ import annotations

import json
import os

from xlnet_tf.benchmarks.common import (DOCUMENT_TASKS, DOCUMENT_TRAINING, GENERATE_TASKS, LENGTH_TASKS, LENGTHS_FILE,
                                        MEMORY_TASKS, PRECISION_TASKS, REFERENCES, SERVING_TASKS, SQUAD_LENGTHS_FILE,
                                        STEP_TASKS, precision_text)
from xlnet_tf.benchmarks.comparisons import (GENERATE_TARGET, LATENCY_WHERE, document_growth, document_mode,
                                             document_training, generate_comparison, latency_ratio, length_row,
                                             precision_comparison, recompute_comparison, serving_targets)

PRECISION_REQUESTS = {"one": "1 text", "batch": "batch"}  # the "precision" task's requests: {key: what it holds}
COLUMNS = ("implementation", "task", "T", "precision", "XLA", "tokens/s", "ms/step", "GFLOP/s", "% peak",
           "peak MB", *(f"x {r}" for r in REFERENCES), "bf16 rel err")
LENGTH_COLUMNS = ("implementation", "task", "padding", "batch", "T", "boundaries", "examples/s", "real tok/step",
                  "padded tok/step", "padded/real", "x fixed", "useful/peak")
LATENCY_COLUMNS = ("where", "text", "pieces", "p50 ms", "p99 ms", "requests")
MEMORY_COLUMNS = ("task", "model", "batch", "T", "recompute", "peak MB", "x none", "ms/step", "x none", "bounds",
                  "met")
SERVING_COLUMNS = ("run", "clients", "requests", "requests/s", "p50 ms", "p99 ms", "p99/p50", "x in process",
                   "wrong answers", "errors")
PRECISION_COLUMNS = ("where", "precision", *(f"{what} {column}" for what in PRECISION_REQUESTS.values()
                                             for column in ("p50 ms", "p99 ms", "p50 x float32")),
                     "rel err vs float32", "labels = float32")
DOCUMENT_COLUMNS = ("S", "tokens", "fine-tuning examples/s", "s/example vs S=1", "text pieces", "latency p50 ms",
                    "latency p99 ms", "p50 vs S=1")
GENERATE_COLUMNS = ("implementation", "prompt tokens", "new tokens", "tokens/s", "ms/token", "ms/token x shortest",
                    "x transformers", "target")
DOCUMENT_TRAINING_COLUMNS = ("S", "tokens", "--grad-segments", "--recompute", "examples/s", "s/example x K=1",
                             "peak MB", "x K=1")


def _number(value, digits=0):
    return "" if value is None else f"{value:,.{digits}f}"


def _footnote(row, notes):
    """Appends the reason a row did not run to `notes` (numbered) -> the cell that points to it."""
    notes.append(f"({len(notes) + 1}) {row['label']}: {row['status']}: {row.get('error', '')}".strip())
    return f"{row['status']} ({len(notes)})"


# Under the step table: what its % peak column divides by (`suite.summarize`'s peak_fraction).
PEAK_NOTE = ("% peak: the row's GFLOP/s over the matmul peak of its own precision measured in this run (the header's "
             "2048x2048 matmul in TensorFlow): float32 rows over the float32 peak, bfloat16 rows (ours: Keras' "
             "mixed_bfloat16; transformers: bfloat16 weights or autocast) over the bfloat16 peak")


def _precision(row):
    """A row's precision cell: "float32", "bfloat16", "bfloat16 weights", "bfloat16 autocast"."""
    return precision_text(row["precision"], row.get("precision_mode", ""))


def table_rows(results):
    """(the table as lists of strings, footnotes): a case that did not run shows its status in the tokens/s
    column and its reason in a numbered footnote; PEAK_NOTE last."""
    rows, notes = [], []
    for row in results["rows"]:
        if row["task"] not in STEP_TASKS:
            continue
        head = [row["implementation"], row["task"], str(row["seq_len"]), _precision(row), "yes" if row["xla"] else "no"]
        if row["status"] != "ok":
            rows.append(head + [_footnote(row, notes)] + [""] * (len(COLUMNS) - len(head) - 1))
            continue
        fraction = row.get("peak_fraction")
        rows.append(head + [
            _number(row["tokens_per_s"]), _number(row["median_s"] * 1000), _number(row["gflops"]),
            "" if fraction is None else f"{100 * fraction:.0f}%", _number(row.get("peak_mb")),
            *(_number(row.get(f"vs_{r}"), 2) for r in REFERENCES),
            "" if row.get("rel_error_vs_float32") is None else f"{row['rel_error_vs_float32']:.1e}",
        ])
    return rows, notes + [PEAK_NOTE]


def length_rows(results):
    """(the fine-tuning / predict table on SST-2 lengths, footnotes): examples/s, real and padded tokens per
    step (per batch for predict), and examples/s over xlnet-tf's fixed padding of the same task and precision.
    A row in another precision than float32 names it after its padding ("buckets bfloat16")."""
    rows, notes = [], []
    for row in results["rows"]:
        if row["task"] not in ("lengths-finetune", "lengths-predict", "lengths-squad"):
            continue
        padding = row["padding"] if row["precision"] == "float32" else f"{row['padding']} {_precision(row)}"
        head = [row["implementation"], row["task"], padding, str(row["batch_size"]), str(row["seq_len"])]
        if row["status"] != "ok":
            rows.append(head + ["", _footnote(row, notes)] + [""] * (len(LENGTH_COLUMNS) - len(head) - 2))
            continue
        fixed = length_row(results["rows"], "xlnet-tf", row["task"], "fixed", row["seq_len"], row["precision"])
        real, padded = row["real_tokens_per_step"], row["padded_tokens_per_step"]
        rows.append(head + [
            _widths(row),
            _number(row["examples_per_s"], 1), _number(real), _number(padded), f"{padded / real:.2f}",
            _number(row["examples_per_s"] / fixed["examples_per_s"], 2) if fixed else "",
            f"{100 * row['useful_fraction']:.0f}%" if row.get("useful_fraction") else "",
        ])
    return rows, notes


def _widths(row):
    """A row's padding widths: "8x11,16x10,..." (width x rows per batch: fine-tuning's strata, packed rows),
    "8,16,..." (predict's bucket boundaries) or "per batch" (dynamic padding)."""
    widths, counts = row.get("boundaries") or [], row.get("rows_per_batch")
    if counts:
        return ",".join(f"{w}x{c}" for w, c in zip(widths, counts))
    return ",".join(str(w) for w in widths) or "per batch"


def latency_rows(results):
    """(the latency table, footnotes): p50 / p99 of each text in process and served, then short/long."""
    rows, notes = [], []
    for row in results["rows"]:
        if row["task"] != "lengths-latency":
            continue
        if row["status"] != "ok":
            rows.append(["", _footnote(row, notes)] + [""] * (len(LATENCY_COLUMNS) - 2))
            continue
        unpacked = {"in process, --packing none": "unpacked_in_process"} if row.get("unpacked_in_process") else {}
        for where, key in {**LATENCY_WHERE, **unpacked}.items():
            if not row.get(key):
                notes.append(f"({len(notes) + 1}) {where}: not measured: {row.get('served_error')}")
                rows.append([where, f"not measured ({len(notes)})"] + [""] * (len(LATENCY_COLUMNS) - 2))
                continue
            for text in ("short", "long", "batch", "encode"):
                measured = row[key].get(text)
                if not measured:
                    continue
                about = row["texts"][text]
                label = {"batch": f"{about.get('texts')} texts (longest {about.get('longest')})",
                         "encode": f"{about.get('texts')} texts, `encode`"}.get(text, text)
                rows.append([where, label, str(about["tokens"]), _number(measured["p50_ms"], 1),
                             _number(measured["p99_ms"], 1), str(measured["requests"])])
            rows.append([where, "short/long", "", _number(latency_ratio(row, key, "p50"), 2),
                         _number(latency_ratio(row, key, "p99"), 2), ""])
    return rows, notes


def length_header(results):
    """What the lengths tables measured, in one line (a second sentence when the "lengths-squad" rows ran)."""
    with open(LENGTHS_FILE, encoding="utf-8") as handle:
        summary = json.load(handle)["train_summary"]
    options = results["options"]
    tasks = {row["task"] for row in results["rows"]}
    squad = ""
    if "lengths-squad" in tasks:
        with open(SQUAD_LENGTHS_FILE, encoding="utf-8") as handle:
            windows = json.load(handle)["summary"]
        squad = (f"lengths-squad: SQuAD 2.0 dev window lengths ({windows['windows']:,} windows: mean "
                 f"{windows['mean']}, p50 {windows['p50']}, p90 {windows['p90']}, p99 {windows['p99']} pieces with "
                 f"the special tokens), random token ids; batch {options['squad_batch_size']}, float32, no XLA, a "
                 f"head reading every position; {options['squad_steps']} timed steps after {options['warmup']} "
                 f"untimed.")
        if not tasks - {"lengths-squad"}:
            return squad
        squad = " " + squad
    return (f"SST-2 train sentence lengths ({summary['sentences']:,} sentences: mean {summary['mean']}, p50 "
            f"{summary['p50']}, p90 {summary['p90']}, p99 {summary['p99']} pieces) + 2 special tokens, capped at "
            f"T = max_seq_len, random token ids; batch {options['lengths_batch_size']}, float32, no XLA. "
            f"Fine-tuning: examples/s over {options['lengths_steps']} timed steps after {options['warmup']} untimed, "
            f"data pipeline (transformers: collation) included; predict: "
            f"{options['lengths_predict_passes']} pass(es) over {options['lengths_predict_rows']} rows; latency: {options['latency_requests']} requests "
            f"per text after {options['latency_warmup']}, one client.{_length_bfloat16(results)}{squad}")


def _length_bfloat16(results):
    """The lengths header's sentence on the bfloat16 fine-tuning rows, when there are any."""
    if not any(r["task"] == "lengths-finetune" and r["precision"] == "bfloat16" for r in results["rows"]):
        return ""
    return (" bfloat16 fine-tuning rows (bfloat16 in --precisions): xlnet-tf's under Keras' mixed_bfloat16 policy, "
            "transformers' under torch.autocast (float32 weights); x fixed compares rows of one precision only.")


def document_rows(results):
    """(the long-documents table, footnotes): per segment count S, fine-tuning examples/s and the export's
    latency, each against S = 1 (seconds per example, p50), then the line saying what linear growth is. A case
    that did not run shows its status in its columns and its reason in a numbered footnote."""
    rows, notes, failed, planned = [], [], {}, {}
    for row in results["rows"]:
        if row["task"] not in DOCUMENT_TASKS:
            continue
        planned.update({segments: row["seq_len"] for segments in row["segments"]})
        if row["task"] == "documents-finetune" and document_mode(row) != DOCUMENT_TRAINING[0]:
            continue  # the training table's
        if row["status"] != "ok":
            cell = _footnote(row, notes)
            failed.update({(row["task"], segments): cell for segments in row["segments"]})
    growth = {g["segments"]: g for g in document_growth(results["rows"])}
    for segments, seq_len in sorted(planned.items()):
        figures = growth.get(segments, {})
        tune, latency = (failed.get((task, segments)) for task in DOCUMENT_TASKS)
        rows.append([str(segments), str(segments * seq_len),
                     *_cells(tune, figures, ("finetune_examples_per_s", 2), ("finetune_cost_ratio", 2)),
                     *_cells(latency, figures, ("latency_tokens", 0), ("latency_p50_ms", 1), ("latency_p99_ms", 1),
                             ("latency_ratio", 2))])
    if rows:
        counts = ", ".join(str(segments) for segments in sorted(planned))
        notes.append(f"Linear growth in the segments: both ratios = S ({counts}); below S is sublinear, above "
                     f"superlinear.")
    return rows, notes


def document_training_rows(results):
    """(the long-document training table, footnotes): per S and training mode (--grad-segments, --recompute),
    examples/s and peak memory, each against --grad-segments 1 without recompute at the same S."""
    rows, notes = [], []
    measured = {(t["segments"], t["grad_segments"], t["recompute"]): t for t in document_training(results["rows"])}
    for row in results["rows"]:
        if row["task"] != "documents-finetune":
            continue
        (segments,), (grad_segments, recompute) = row["segments"], document_mode(row)
        head = [str(segments), str(segments * row["seq_len"]), str(grad_segments or "all"), recompute]
        figures = measured.get((segments, grad_segments, recompute))
        if row["status"] != "ok" or figures is None:
            rows.append(head + [_footnote(row, notes), "", "", ""])
            continue
        rows.append(head + [_number(figures["examples_per_s"], 2), _number(figures["time_ratio"], 2),
                            _number(figures["peak_memory_mb"]), _number(figures["memory_ratio"], 2)])
    return rows, notes


def document_training_header(results):
    """What the long-document training table measured, in one line."""
    kinds = {r["memory_kind"] for r in results["rows"] if r["task"] == "documents-finetune" and r.get("memory_kind")}
    where = " / ".join(MEMORY_KIND_TEXT[kind] for kind in sorted(kinds)) or "not measured"
    return ("the fine-tuning steps above by --grad-segments (all: the memory of every segment keeps its gradient, "
            "the default; 1: the paper's stop_gradient) and --recompute; peak MB: " + where + ", each case in its "
            "own process; x K=1: seconds per example and peak memory against --grad-segments 1, --recompute none, "
            "at the same S")


def generate_rows(results):
    """(the generation table, footnotes): each "generate" case's tokens/s and ms per token, against the same
    implementation's shortest prompt and, for ours, transformers' at the same prompt with the target."""
    rows, notes = [], []
    measured = {(g["implementation"], g["prompt_tokens"]): g for g in generate_comparison(results["rows"])}
    for row in results["rows"]:
        if row["task"] not in GENERATE_TASKS:
            continue
        head = [row["implementation"], str(row["seq_len"]), str(row["new_tokens"])]
        figures = measured.get((row["implementation"], row["seq_len"]))
        if row["status"] != "ok" or figures is None:
            rows.append(head + [_footnote(row, notes)] + [""] * (len(GENERATE_COLUMNS) - len(head) - 1))
            continue
        met = {True: f"MET (>= {GENERATE_TARGET.bound:g}x)", False: f"NOT MET (>= {GENERATE_TARGET.bound:g}x)",
               None: ""}[figures["met"]]
        rows.append(head + [_number(figures["tokens_per_s"], 1), _number(figures["ms_per_token"], 1),
                            _number(figures["ms_vs_shortest"], 2), _number(figures["vs_transformers"], 2), met])
    return rows, notes


def generate_header(results):
    """What the generation table measured, in one line."""
    options = results["options"]
    return (f"greedy generation from one random prompt, float32, no XLA, random weights; the median of "
            f"{options['long_iterations']} timed generations after 1, each generating every new token (no stop "
            f"ids). xlnet-tf: xlnet_tf.generation (each layer's key / value heads cached; 2 positions per step); "
            f"transformers: XLNetLMHeadModel.generate with its use_mems cache (hidden states, re-projected over the "
            f"prefix every step), eager PyTorch")


def _cells(failure, figures, *keys):
    """The cells of `keys` ((key, digits) of `figures`), or `failure` (a footnote cell) then empty ones."""
    if failure:
        return [failure] + [""] * (len(keys) - 1)
    return [_number(figures.get(key), digits) for key, digits in keys]


def document_header(results):
    """What the long-documents table measured, in one line."""
    options = results["options"]
    rows = [r for r in results["rows"] if r["task"] in DOCUMENT_TASKS]
    seq_len, longest = rows[0]["seq_len"], max(max(r["segments"]) for r in rows)
    return (f"documents of S segments of T = {seq_len} tokens, each segment attending to the memory of the ones "
            f"before, float32, no XLA. Fine-tuning: examples/s of a classification step (forward, backward, AdamW; "
            f"memory of every earlier segment, with its gradient: --grad-segments all, the default; no recompute) on "
            f"batches of {options['documents_batch_size']} "
            f"rows of S * T real tokens, median of {options['iterations']} timed steps after {options['warmup']}; "
            f"latency: the export of a --long-doc memory classifier (max_doc_len {longest * seq_len}, segments in a "
            f"tf.while_loop), serving_default in process on one text of at most S * T - 2 pieces, "
            f"{options['latency_requests']} requests per S after {options['latency_warmup']}, one client")


def memory_rows(results):
    """(the recompute table, footnotes): each "memory" case's peak memory and step time, against "none" of the
    same task, with the bounds it is held to and whether it meets them."""
    rows, notes = [], []
    compared = {(c["task"], c["recompute"]): c for c in recompute_comparison(results["rows"])}
    for row in results["rows"]:
        if row["task"] not in MEMORY_TASKS:
            continue
        head = [row["task"], row.get("model", ""), str(row["batch_size"]), str(row["seq_len"]), row["recompute"]]
        figures = compared.get((row["task"], row["recompute"]))
        if row["status"] != "ok" or figures is None:
            rows.append(head + [_footnote(row, notes)] + [""] * (len(MEMORY_COLUMNS) - len(head) - 1))
            continue
        bounds = [f"{name} <= {bound}x" for name, bound in (("memory", figures["memory_bound"]),
                                                            ("time", figures["time_bound"])) if bound is not None]
        rows.append(head + [
            _number(figures["peak_memory_mb"]), _number(figures["memory_ratio"], 2),
            _number(figures["median_s"] * 1000), _number(figures["time_ratio"], 2), ", ".join(bounds),
            {True: "MET", False: "NOT MET", None: ""}[figures["met"]],
        ])
    return rows, notes


MEMORY_KIND_TEXT = {
    "device": "the device's peak memory (TensorFlow's memory info)",
    "tensors": "the most memory TensorFlow's tensors held at once on the CPU (its BFC allocator's statistics: "
               "weights, AdamW slots, gradients and activations; what a GPU's memory info counts)",
    "host": "the process's peak resident memory over its size after importing TensorFlow",
}


def memory_header(results):
    """What the recompute table measured, in one line."""
    options = results["options"]
    kinds = {r.get("memory_kind") for r in results["rows"] if r["task"] in MEMORY_TASKS and r["status"] == "ok"}
    where = " / ".join(MEMORY_KIND_TEXT[kind] for kind in sorted(kinds)) or "not measured"
    return (f"training steps with each --recompute mode, float32, no XLA, dropout 0.1, median of "
            f"{options['long_iterations']} timed steps after 1; peak MB: {where}, each case in its own process; "
            f"x none: against recompute none of the same task")


def serving_rows(results):
    """(the serving table, footnotes): in process (examples/s; latency per batch), served at each client count,
    the overload run's accepted and refused requests; then the serving targets as footnotes."""
    rows, notes = [], []
    for row in results["rows"]:
        if row["task"] not in SERVING_TASKS:
            continue
        if row["status"] != "ok":
            rows.append(["", _footnote(row, notes)] + [""] * (len(SERVING_COLUMNS) - 2))
            continue
        local, overload = row["in_process"], row["overload"]
        base = local["examples_per_s"]

        def ratio(p50, p99):
            return _number(p99 / p50, 2) if p50 and p99 is not None else ""

        rows.append([f"in process, batches of {local['batch_size']} (latency per batch)", "", str(local["examples"]),
                     _number(base, 2), _number(local["p50_ms"]), _number(local["p99_ms"]),
                     ratio(local["p50_ms"], local["p99_ms"]), "1.00", "", ""])
        for served in row["served"]:
            errors = ", ".join(f"{code} {n}" for code, n in served["errors"].items()) or "0"
            rows.append(["served (batching)", str(served["clients"]), str(served["requests"]),
                         _number(served["requests_per_s"], 2), _number(served["p50_ms"]), _number(served["p99_ms"]),
                         ratio(served["p50_ms"], served["p99_ms"]), _number(served["vs_in_process"], 2),
                         str(served["wrong_answers"]), errors])
        others = ", ".join(f"{code} {n}" for code, n in overload["other_errors"].items()) or "0"
        rows.append([f"overload {overload['factor']:g}x, accepted", f"{overload['threads']} open-loop",
                     str(overload["accepted"]), _number(overload["accepted_per_s"], 2),
                     _number(overload["accepted_p50_ms"]), _number(overload["accepted_p99_ms"]),
                     ratio(overload["accepted_p50_ms"], overload["accepted_p99_ms"]),
                     _number(overload["accepted_per_s"] / base, 2), str(overload["wrong_answers"]), others])
        rows.append([f"overload {overload['factor']:g}x, refused (RESOURCE_EXHAUSTED)", "", str(overload["rejected"]),
                     "", _number(overload["rejected_p50_ms"], 1), _number(overload["rejected_p99_ms"], 1), "", "", "",
                     ""])
    for target in serving_targets(results["rows"]):
        notes.append(_target_line(target))
    return rows, notes


def serving_header(results):
    """What the serving table measured, in one line."""
    row = next(r for r in results["rows"] if r["task"] in SERVING_TASKS)
    params = row.get("serving") or {}
    if row["status"] != "ok":
        return f"xlnet-tf serve with batching, model {row.get('model')}: {row['status']}"
    texts, batching, overload = row["texts"], row["batching"], row["overload"]
    stats = (row.get("batch_stats") or {}).get("throughput") or {}
    load = row.get("load_average") or {"before": None}
    mean = stats["requests"] / stats["batches"] if stats.get("batches") else None
    return (f"model {row['model']} ({row['export']}), max_seq_len {row['seq_len']}, float32; {texts['count']} "
            f"one-sentence requests of SST-2 {texts['split']} lengths (pieces by the export's {texts['counted_by']}: mean "
            f"{texts['pieces_mean']:.1f}, p50 {texts['pieces_p50']:.0f}, p99 {texts['pieces_p99']:.0f}, max "
            f"{texts['pieces_max']:.0f}), in order, cycled. In process: serving_default (tf.saved_model.load) on "
            f"consecutive batches of {row['batch_size']}, at least one pass and {params.get('seconds', 0):g} s. "
            f"Served: python -m xlnet_tf.serving serve in its own process, gRPC on loopback, "
            f"--grpc_max_threads={row['grpc_max_threads']['throughput']}, batching max_batch_size "
            f"{batching['max_batch_size']}, batch_timeout_micros {batching['batch_timeout_micros']}, "
            f"num_batch_threads {batching['num_batch_threads']}, max_enqueued_batches "
            f"{batching['max_enqueued_batches']}" + (f" (mean {mean:.1f} requests per batch over the runs)"
                                                     if mean else "")
            + f"; closed loop, one gRPC channel per client, {params.get('seconds', 0):g} s per client count after "
            f"one untimed request each; wrong answers: label_id differing from in process for the same text. "
            f"Overload: {overload['target_rate']:.2f} requests/s ({overload['factor']:g}x the {overload['of_clients']}"
            f"-client rate) sent open-loop for {overload['seconds']:g} s by {overload['threads']} threads (send lag "
            f"p99 {overload['send_lag_p99_ms']:.0f} ms) to a server with --grpc_max_threads="
            f"{row['grpc_max_threads']['overload']} and max_enqueued_batches "
            f"{row['overload_batching']['max_enqueued_batches']}: refused {overload['rejected_grpc_limit']} by the "
            f"concurrent-RPC limit, {overload['rejected_queue_full']} by the full queue"
            + (f". Load average (1 min) {load['before']:.1f} before the timed runs, {load['after']:.1f} after, "
               f"on {results['machine']['cores']} cores" if None not in load.values() else ""))


def precision_rows(results):
    """(the precisions table, footnotes): per place (in process, served) and export precision, p50 / p99 of one
    text and of the batch with p50 over float32's, and (in process) the logits' relative error and the share of
    equal labels against the float32 export. A case that did not run, or a place not measured, shows its status
    and its reason in a numbered footnote."""
    rows, notes = [], []
    compared = precision_comparison(results["rows"])
    for where, key in LATENCY_WHERE.items():
        for entry in compared:
            head = [where, entry["precision"]]
            if entry["status"] != "ok":
                if key == "in_process":
                    rows.append(head + [_footnote(entry, notes)] + [""] * (len(PRECISION_COLUMNS) - 3))
                continue
            measured = entry[key]
            if not measured:
                notes.append(f"({len(notes) + 1}) {entry['label']} {where}: not measured: {entry['served_error']}")
                rows.append(head + [f"not measured ({len(notes)})"] + [""] * (len(PRECISION_COLUMNS) - 3))
                continue
            cells = [cell for request in PRECISION_REQUESTS for cell in (
                _number(measured[request]["p50_ms"], 1), _number(measured[request]["p99_ms"], 1),
                _number(measured[request]["vs_float32"], 2))]
            error, agreement = entry["logits_rel_error"], entry["label_agreement"]
            if key != "in_process":
                compare = ["", ""]
            elif error is None:
                notes.append(f"({len(notes) + 1}) {entry['label']}: logits not compared: {entry['compared_error']}")
                compare = [f"not compared ({len(notes)})", ""]
            else:
                compare = [f"{error:.1e}", f"{agreement:.2f}"]
            rows.append(head + cells + compare)
    return rows, notes


def precision_header(results):
    """What the precisions table measured, in one line."""
    options = results["options"]
    entry = next(c for c in precision_comparison(results["rows"]))
    texts = entry.get("texts") or {}
    one, batch = texts.get("one") or {}, texts.get("batch") or {}
    pieces = (f"{one['tokens']} pieces" if one else f"at most {entry['seq_len'] - 2} pieces")
    spread = (f" ({batch['tokens_min']}-{batch['tokens_max']} pieces)" if batch else "")
    device = f"on the {entry['device']}" if entry.get("device") else ""
    return (f"the lengths tasks' random classifier, model {entry['model']}, max_seq_len {entry['seq_len']}, "
            f"exported with export --precision in each precision (float32 variables, matmuls in the precision, "
            f"float32 scores out) {device}; serving_default on one text of {pieces} "
            f"({options['latency_requests']} requests after {options['latency_warmup']}) and on a batch of "
            f"{entry['batch_size']} texts{spread} ({options['precision_batch_requests']} requests after 1), one "
            f"client; in process: tf.saved_model.load; served: xlnet-tf serve, gRPC on loopback, one Predict per "
            f"request; p50 x float32: over the float32 export's p50 in the same run; rel err: max |logit - float32 "
            f"logit| / max |float32 logit| on the batch; labels = float32: share of the batch with the float32 "
            f"export's label")


def _target_line(target):
    sign = "<=" if target["at_most"] else ">="
    verdict = {True: "MET", False: "NOT MET", None: "NOT MEASURED"}[target["met"]]
    if target.get("evaluated") is False:
        verdict = "NOT EVALUATED"
    value = "-" if target["value"] is None else f"{target['value']:.2f}"
    return f"{verdict:12s} {target['target']}: {value} (bound {sign} {target['bound']}) - {target['detail']}"


def target_lines(results):
    return [_target_line(target) for target in results["targets"]]


def instruction_sets(flags):
    """`machine_info`'s cpu_flags as "avx2, avx512f, avx512_bf16 (not: amx_tile, ...)" (bfloat16 is emulated,
    about 5x slower than float32, without avx512_bf16 / amx_bf16)."""
    if flags is None:
        return "unknown (no /proc/cpuinfo)"
    present = [name for name, has in flags.items() if has]
    missing = [name for name, has in flags.items() if not has]
    return ", ".join(present or ["none of those listed"]) + (f" (not: {', '.join(missing)})" if missing else "")


def amx_state(flags):
    """The CPU's AMX (`hardware.AMX_FLAGS`) in words, and whether the AMX targets are judged on it: "amx_tile yes,
    amx_bf16 yes: the AMX targets are evaluated"."""
    from xlnet_tf.hardware import AMX_FLAGS

    if flags is None:
        return "unknown (no /proc/cpuinfo): the AMX targets are NOT EVALUATED"
    present = ", ".join(f"{flag} {'yes' if flags.get(flag) else 'no'}" for flag in AMX_FLAGS)
    return f"{present}: the AMX targets are {'evaluated' if flags.get('amx_bf16') else 'NOT EVALUATED'}"


def header_lines(results):
    machine, peaks = results["machine"], results["matmul_peak_gflops"]
    versions = ", ".join(f"{k} {v}" for k, v in machine["versions"].items() if v)
    peak = ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in peaks.items()) or "not measured"
    options = results["options"]
    recorded = "cpu_flags" in machine
    return [
        f"machine: {machine['cpu']}, {machine['cores']} cores, Python {machine['python']}; {versions}",
        f"CPU instruction sets: {instruction_sets(machine['cpu_flags']) if recorded else 'not recorded'}",
        f"AMX: {amx_state(machine['cpu_flags']) if recorded else 'not recorded'}",
        f"matmul peak (2048x2048 in TensorFlow, same run): {peak}",
        f"batch {options['batch_size']}, model {options['size']}, median of {options['iterations']} timed steps after "
        f"{options['warmup']} warm-up"
        + (f" ({options['long_iterations']} after 1 at T={options['long_seq_len']})" if options["long_seq_len"] else "")
        + "; "
        f"ratios: tokens/s over the reference's best float32 mode for the same task and T; run took "
        f"{results['wall_s'] / 60:.1f} min",
    ]


def tables(results):
    """[(columns, body, footnotes, left-aligned columns, (title, line) above or None)]: the step table (unless
    only the lengths, documents, memory, serving or precision tasks ran), then the lengths tables when those
    tasks ran, the first under `length_header`, then the long-documents table under `document_header`, the
    recompute table under `memory_header`, the serving table under `serving_header` and the precisions table
    under `precision_header` when those tasks ran."""
    tasks = {row["task"] for row in results["rows"]}
    out = [(COLUMNS, *table_rows(results), 5, None)] if tasks & set(STEP_TASKS) or not tasks else []
    if tasks & set(LENGTH_TASKS):
        lengths = [(LENGTH_COLUMNS, *length_rows(results), 6), (LATENCY_COLUMNS, *latency_rows(results), 2)]
        lengths = [table for table in lengths if table[1]]
        above = ("Real sentence lengths:", length_header(results))
        out += [(*table, above if i == 0 else None) for i, table in enumerate(lengths)]
    if tasks & set(DOCUMENT_TASKS):
        out.append((DOCUMENT_COLUMNS, *document_rows(results), 1, ("Long documents:", document_header(results))))
        training = document_training_rows(results)
        if training[0]:
            out.append((DOCUMENT_TRAINING_COLUMNS, *training, 4, ("Long-document training:",
                                                                  document_training_header(results))))
    if tasks & set(MEMORY_TASKS):
        out.append((MEMORY_COLUMNS, *memory_rows(results), 5, ("Recompute (memory for compute):",
                                                                memory_header(results))))
    if tasks & set(SERVING_TASKS):
        out.append((SERVING_COLUMNS, *serving_rows(results), 2, ("Serving (xlnet-tf serve, batching):",
                                                                  serving_header(results))))
    if tasks & set(GENERATE_TASKS):
        out.append((GENERATE_COLUMNS, *generate_rows(results), 1, ("Generation:", generate_header(results))))
    if tasks & set(PRECISION_TASKS):
        out.append((PRECISION_COLUMNS, *precision_rows(results), 2, ("Export precisions:",
                                                                      precision_header(results))))
    return out


def _aligned(columns, body, left):
    """A text table: the first `left` columns left-aligned, the others right-aligned."""
    rows = [list(columns)] + body
    widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(len(columns))]
    return ["  ".join(cell.rjust(width) if i >= left else cell.ljust(width)
                      for i, (cell, width) in enumerate(zip(row, widths))).rstrip() for row in rows]


def format_text(results):
    lines = header_lines(results)
    for columns, body, notes, left, above in tables(results):
        lines += [""] + ([above[1], ""] if above else []) + _aligned(columns, body, left) + notes
    return "\n".join(lines + [""] + target_lines(results))


def format_markdown(results):
    lines = [f"- {line}" for line in header_lines(results)]
    for columns, body, notes, _, above in tables(results):
        lines += (["", above[0], "", f"- {above[1]}"] if above else [])
        lines += ["", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        lines += [""] + [f"{note}  " for note in notes]
    lines += ["", "Targets:", ""] + [f"- {line}" for line in target_lines(results)]
    return "\n".join(lines) + "\n"


def plot_throughput(results, path):
    """Horizontal bars of tokens/s, one per case that ran, grouped by task and length."""
    from xlnet_tf.plots import pyplot, save_figure

    plt = pyplot()
    order = {task: i for i, task in enumerate(("inference", "finetune", "pretrain"))}
    rows = sorted((r for r in results["rows"] if r["status"] == "ok" and r["task"] in STEP_TASKS),
                  key=lambda r: (order.get(r["task"], 9), r["seq_len"]))  # each task's cases side by side
    if not rows:
        return None
    labels = [f"{r['task']} T={r['seq_len']} | {r['implementation']} {_precision(r)}{' XLA' if r['xla'] else ''}"
              for r in rows]
    colors = ["tab:blue" if r["implementation"] in ("xlnet-tf", "xlnet-tf-savedmodel") else "tab:gray" for r in rows]
    figure, axis = plt.subplots(figsize=(10, 0.28 * len(rows) + 1.5))
    axis.barh(range(len(rows)), [r["tokens_per_s"] for r in rows], color=colors)
    axis.set_yticks(range(len(rows)), labels, fontsize=7)
    axis.invert_yaxis()
    axis.set_xlabel("tokens / s (blue: xlnet-tf)")
    axis.set_title(f"XLNet throughput, batch {results['options']['batch_size']}, {results['machine']['cpu']}", fontsize=9)
    figure.tight_layout()
    save_figure(figure, path)
    return path


def write(results, output_dir):
    """Writes results.json, report.md and throughput.png into `output_dir` and prints the table."""
    with open(os.path.join(output_dir, "results.json"), "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2)
    with open(os.path.join(output_dir, "report.md"), "w", encoding="utf-8") as handle:
        handle.write(format_markdown(results))
    plot_throughput(results, os.path.join(output_dir, "throughput.png"))
    print(format_text(results))
