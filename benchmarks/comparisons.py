"""What the suite's results and the report both read from the measured rows: a lengths row and its latency ratio,
the long documents' growth and training modes, the recompute comparison, the serving targets, each export
precision against float32 and the generation against transformers; with `Target` (a bound on a ratio) and the
bounds these comparisons hold rows to. `suite` writes them into results.json, `report` into its tables."""

from __future__ import annotations

import dataclasses

import numpy as np

from xlnet_tf.benchmarks.common import DOCUMENT_TRAINING, GENERATE_TASKS, MEMORY_TASKS, PRECISION_TASKS, SERVING_TASKS

# The "memory" tasks' bounds on a --recompute mode against "none" (same task, size, batch and length):
# {mode: (peak memory ratio at most, step time ratio at most)}; None: reported without a bound.
RECOMPUTE_BOUNDS = {"blocks": (0.5, 1.35), "attention": (None, None)}
# The "serving" task's bounds, at the largest client count: served examples/s over in process at least, p99 over
# p50 at most; and wrong answers under overload at most.
SERVING_BOUNDS = {"served_vs_in_process": 0.8, "p99_over_p50": 3.0, "overload_wrong_answers": 0}
# Where the latency rows were measured: {the report's words: the result's key}.
LATENCY_WHERE = {"in process": "in_process", "served (gRPC)": "served"}


@dataclasses.dataclass(frozen=True)
class Target:
    """One speed target: `value` (a ratio) must be >= `bound`, or <= it when `at_most`."""

    name: str
    bound: float
    at_most: bool = False


# The "generate" task's target: our tokens/s over transformers' (its generate with the cache), same prompt.
GENERATE_TARGET = Target("generate tokens/s vs transformers (greedy, float32)", 5.0)


def recompute_comparison(rows):
    """Each "memory" row that ran, against the "none" row of its task: one dict per row with task, model,
    batch_size, seq_len, recompute, peak_memory_mb (device memory on a GPU / TPU, else the process's peak
    resident growth), memory_kind, median_s, memory_ratio and time_ratio (None without a "none" row), their
    bounds (RECOMPUTE_BOUNDS) and met (True / False, None when a bound or a ratio is missing)."""
    ran = [r for r in rows if r["task"] in MEMORY_TASKS and r["status"] == "ok"]
    reference = {r["task"]: r for r in ran if r["recompute"] == "none"}
    compared = []
    for row in ran:
        none = reference.get(row["task"])
        memory_bound, time_bound = RECOMPUTE_BOUNDS.get(row["recompute"], (None, None))
        memory_ratio = row["peak_memory_mb"] / none["peak_memory_mb"] if none else None
        time_ratio = row["median_s"] / none["median_s"] if none else None
        bounded = [(value, bound) for value, bound in ((memory_ratio, memory_bound), (time_ratio, time_bound))
                   if bound is not None]
        met = None if not bounded or any(value is None for value, _ in bounded) else \
            all(value <= bound for value, bound in bounded)
        compared.append({
            **{key: row[key] for key in ("task", "model", "batch_size", "seq_len", "recompute", "peak_memory_mb",
                                         "memory_kind", "median_s")},
            "memory_ratio": memory_ratio, "time_ratio": time_ratio, "memory_bound": memory_bound,
            "time_bound": time_bound, "met": met,
        })
    return compared


def serving_targets(rows):
    """The "serving" rows' targets (SERVING_BOUNDS) -> [{target, value, bound, at_most, met, detail}]: at the
    largest client count, served examples/s over in process and p99 over p50; wrong answers under overload (None
    values, met None, when not measured)."""
    targets = []
    for row in rows:
        if row["task"] not in SERVING_TASKS:
            continue
        top = (row.get("served") or [None])[-1] if row["status"] == "ok" else None
        overload = row.get("overload") if row["status"] == "ok" else None
        clients = top["clients"] if top else max(dict(row.get("serving") or {}).get("clients") or [0])
        values = [
            (f"served vs in-process examples/s at {clients} clients", "served_vs_in_process", False,
             top and top["vs_in_process"],
             top and f"{top['requests_per_s']:.2f} vs {row['in_process']['examples_per_s']:.2f} examples/s"),
            (f"served p99 / p50 latency at {clients} clients", "p99_over_p50", True,
             top and top["p50_ms"] and top["p99_ms"] / top["p50_ms"],
             top and top["p50_ms"] and f"p99 {top['p99_ms']:.0f} ms, p50 {top['p50_ms']:.0f} ms"),
            ("wrong answers under overload", "overload_wrong_answers", True, overload and overload["wrong_answers"],
             overload and f"of {overload['accepted']} accepted, {overload['rejected']} refused"),
        ]
        for name, key, at_most, value, detail in values:
            bound = SERVING_BOUNDS[key]
            met = None if value is None else (value <= bound if at_most else value >= bound)
            targets.append({"target": name, "value": value, "bound": bound, "at_most": at_most, "met": met,
                            "detail": detail or f"not measured: {row['status']} {row.get('error', '')}".strip()})
    return targets


def precision_comparison(rows):
    """Each "precision" row, against the float32 row of the same run: one dict per row with precision, status,
    label, model, batch_size, seq_len, texts, device, in_process and served ({"one", "batch": {p50_ms, p99_ms,
    requests, vs_float32 (p50 over float32's, None without it)}}; served None when not measured, with
    served_error), logits_rel_error (max |logit - float32 logit| / max |float32 logit| on the batch),
    logits_max_abs_diff, label_agreement (share of the batch with float32's label) and, where these three are
    None, compared_error: why (no float32 row, another classifier)."""
    ran = [r for r in rows if r["task"] in PRECISION_TASKS]
    reference = next((r for r in ran if r["precision"] == "float32" and r["status"] == "ok"), None)
    compared = []
    for row in ran:
        entry = {key: row.get(key) for key in ("precision", "status", "error", "label", "model", "batch_size",
                                               "seq_len", "texts", "device", "served_error")}
        entry.update(logits_rel_error=None, logits_max_abs_diff=None, label_agreement=None, compared_error=None,
                     in_process=None, served=None)
        if row["status"] != "ok":
            compared.append(entry)
            continue
        for where in LATENCY_WHERE.values():
            if row.get(where):
                entry[where] = {key: {**measured, "vs_float32": _p50_ratio(measured, reference, where, key)}
                                for key, measured in row[where].items()}
        if reference is None:
            entry["compared_error"] = "the float32 export was not measured in this run"
        elif row["weights_digest"] != reference["weights_digest"]:
            entry["compared_error"] = "its export holds other weights or another vocabulary than the float32 one"
        else:
            logits, exact = np.asarray(row["logits"]), np.asarray(reference["logits"])
            difference = float(np.max(np.abs(logits - exact)))
            entry.update(logits_max_abs_diff=difference, logits_rel_error=difference / float(np.max(np.abs(exact))),
                         label_agreement=float(np.mean(np.asarray(row["label_ids"]) ==
                                                       np.asarray(reference["label_ids"]))))
        compared.append(entry)
    return compared


def _p50_ratio(measured, reference, where, key):
    """`measured`'s p50 over the float32 `reference` row's p50 of the same request at `where`, or None."""
    other = ((reference or {}).get(where) or {}).get(key)
    return measured["p50_ms"] / other["p50_ms"] if other and other["p50_ms"] else None


def length_row(rows, implementation, task, padding, seq_len, precision="float32", mode=""):
    """The ok row of a LENGTH_TASKS case (in `precision` with `mode`, its precision_mode), or None."""
    return next((r for r in rows if r["status"] == "ok" and r["implementation"] == implementation and
                 r["task"] == task and r.get("padding") == padding and r["seq_len"] == seq_len and
                 r["precision"] == precision and r.get("precision_mode", "") == mode), None)


def latency_ratio(row, where, statistic):
    """Short-text over long-text latency of a "lengths-latency" row at `where` ("in_process" or "served") for
    `statistic` ("p50" or "p99"), or None when not measured there."""
    measured = row.get(where) if row else None
    if not measured:
        return None
    return measured["short"][f"{statistic}_ms"] / measured["long"][f"{statistic}_ms"]


def document_growth(rows):
    """How the "documents" figures grow with the segments S: one dict per S measured (ascending) with
    `segments`, `finetune_examples_per_s` and `latency_p50_ms` / `latency_p99_ms` (None when not measured), and
    against S = 1 `finetune_cost_ratio` (seconds per example) and `latency_ratio` (p50); linear growth: S."""
    default = DOCUMENT_TRAINING[0]
    finetune = {r["segments"][0]: r["examples_per_s"] for r in rows if r["task"] == "documents-finetune"
                and r["status"] == "ok" and document_mode(r) == default}
    latency = {m["segments"]: m for r in rows if r["task"] == "documents-latency" and r["status"] == "ok"
               for m in r["by_segments"]}
    growth = []
    for segments in sorted(set(finetune) | set(latency)):
        speed, measured = finetune.get(segments), latency.get(segments) or {}
        p50 = measured.get("p50_ms")
        growth.append({
            "segments": segments, "finetune_examples_per_s": speed,
            "finetune_cost_ratio": finetune[1] / speed if speed and finetune.get(1) else None,
            "latency_tokens": measured.get("tokens"), "latency_p50_ms": p50, "latency_p99_ms": measured.get("p99_ms"),
            "latency_ratio": p50 / latency[1]["p50_ms"] if p50 and 1 in latency else None,
        })
    return growth


def document_mode(row):
    """A "documents-finetune" row's (grad_segments, recompute); rows of results written before the modes: (1,
    "none")."""
    return row.get("grad_segments", 1), row.get("recompute") or "none"


def document_training(rows):
    """The "documents-finetune" rows by training mode: one dict per (S, grad_segments, recompute) measured, in
    DOCUMENT_TRAINING's order within each S, with `examples_per_s`, `peak_memory_mb`, `memory_kind` and, against
    --grad-segments 1 without recompute at the same S (DOCUMENT_TRAINING[2]), `time_ratio` (seconds per example)
    and `memory_ratio` (None where either is missing)."""
    measured = {(r["segments"][0], *document_mode(r)): r for r in rows
                if r["task"] == "documents-finetune" and r["status"] == "ok"}
    order = {mode: i for i, mode in enumerate(DOCUMENT_TRAINING)}
    out = []
    for segments, grad_segments, recompute in sorted(measured, key=lambda k: (k[0], order.get(k[1:], len(order)))):
        row, reference = measured[segments, grad_segments, recompute], measured.get((segments, *DOCUMENT_TRAINING[2]))
        same_kind = reference is not None and reference.get("memory_kind") == row.get("memory_kind")
        out.append({
            "segments": segments, "grad_segments": grad_segments, "recompute": recompute,
            "examples_per_s": row["examples_per_s"], "peak_memory_mb": row.get("peak_memory_mb"),
            "memory_kind": row.get("memory_kind"),
            "time_ratio": reference["examples_per_s"] / row["examples_per_s"] if reference else None,
            "memory_ratio": row["peak_memory_mb"] / reference["peak_memory_mb"] if same_kind else None,
        })
    return out


def generate_comparison(rows, bound=None):
    """The "generate" rows measured: one dict per (implementation, prompt length) with `tokens_per_s`,
    `ms_per_token`, `ms_vs_shortest` (ms per token over the same implementation's at its shortest prompt) and,
    for xlnet-tf at a prompt length transformers also ran, `vs_transformers` (tokens/s ratio) with `met` against
    `bound` (GENERATE_TARGET's)."""
    bound = GENERATE_TARGET.bound if bound is None else bound
    measured = [r for r in rows if r["task"] in GENERATE_TASKS and r["status"] == "ok"]
    theirs = {r["seq_len"]: r for r in measured if r["implementation"] == "transformers"}
    shortest = {}
    for row in sorted(measured, key=lambda r: r["seq_len"]):
        shortest.setdefault(row["implementation"], row)
    out = []
    for row in measured:
        reference = theirs.get(row["seq_len"]) if row["implementation"] == "xlnet-tf" else None
        ratio = row["tokens_per_s"] / reference["tokens_per_s"] if reference else None
        out.append({"implementation": row["implementation"], "prompt_tokens": row["seq_len"],
                    "new_tokens": row["new_tokens"], "tokens_per_s": row["tokens_per_s"],
                    "ms_per_token": row["ms_per_token"],
                    "ms_vs_shortest": row["ms_per_token"] / shortest[row["implementation"]]["ms_per_token"],
                    "vs_transformers": ratio, "met": None if ratio is None else ratio >= bound})
    return out
