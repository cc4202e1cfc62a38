"""The benchmark's outputs: a text table on stdout, report.md (the same table and the targets, for the README),
results.json (everything measured) and throughput.png (tokens/s per case)."""

from __future__ import annotations

import json
import os

from xlnet_tf.benchmarks.suite import REFERENCES

COLUMNS = ("implementation", "task", "T", "precision", "XLA", "tokens/s", "ms/step", "GFLOP/s", "% peak",
           "peak MB", *(f"x {r}" for r in REFERENCES), "bf16 rel err")


def _number(value, digits=0):
    return "" if value is None else f"{value:,.{digits}f}"


def table_rows(results):
    """(the table as lists of strings, footnotes): a case that did not run shows its status in the tokens/s
    column and its reason in a numbered footnote."""
    rows, notes = [], []
    for row in results["rows"]:
        head = [row["implementation"], row["task"], str(row["seq_len"]), row["precision"], "yes" if row["xla"] else "no"]
        if row["status"] != "ok":
            notes.append(f"({len(notes) + 1}) {row['label']}: {row['status']}: {row.get('error', '')}".strip())
            rows.append(head + [f"{row['status']} ({len(notes)})"] + [""] * (len(COLUMNS) - len(head) - 1))
            continue
        fraction = row.get("peak_fraction")
        rows.append(head + [
            _number(row["tokens_per_s"]), _number(row["median_s"] * 1000), _number(row["gflops"]),
            "" if fraction is None else f"{100 * fraction:.0f}%", _number(row.get("peak_mb")),
            *(_number(row.get(f"vs_{r}"), 2) for r in REFERENCES),
            "" if row.get("rel_error_vs_float32") is None else f"{row['rel_error_vs_float32']:.1e}",
        ])
    return rows, notes


def target_lines(results):
    lines = []
    for target in results["targets"]:
        sign = "<=" if target["at_most"] else ">="
        verdict = {True: "MET", False: "NOT MET", None: "NOT MEASURED"}[target["met"]]
        value = "-" if target["value"] is None else f"{target['value']:.2f}"
        lines.append(f"{verdict:12s} {target['target']}: {value} (bound {sign} {target['bound']}) - {target['detail']}")
    return lines


def header_lines(results):
    machine, peaks = results["machine"], results["matmul_peak_gflops"]
    versions = ", ".join(f"{k} {v}" for k, v in machine["versions"].items() if v)
    peak = ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in peaks.items()) or "not measured"
    options = results["options"]
    return [
        f"machine: {machine['cpu']}, {machine['cores']} cores, Python {machine['python']}; {versions}",
        f"matmul peak (2048x2048 in TensorFlow, same run): {peak}",
        f"batch {options['batch_size']}, model {options['size']}, median of {options['iterations']} timed steps after "
        f"{options['warmup']} warm-up"
        + (f" ({options['long_iterations']} after 1 at T={options['long_seq_len']})" if options["long_seq_len"] else "")
        + "; "
        f"ratios: tokens/s over the reference's best float32 mode for the same task and T; run took "
        f"{results['wall_s'] / 60:.1f} min",
    ]


def format_text(results):
    body, notes = table_rows(results)
    rows = [list(COLUMNS)] + body
    widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(len(COLUMNS))]
    lines = header_lines(results) + [""]
    for row in rows:
        lines.append("  ".join(cell.rjust(width) if i >= 5 else cell.ljust(width)
                               for i, (cell, width) in enumerate(zip(row, widths))).rstrip())
    return "\n".join(lines + notes + [""] + target_lines(results))


def format_markdown(results):
    lines = [f"- {line}" for line in header_lines(results)] + ["", "| " + " | ".join(COLUMNS) + " |",
                                                               "|" + "---|" * len(COLUMNS)]
    body, notes = table_rows(results)
    lines += ["| " + " | ".join(row) + " |" for row in body]
    lines += [""] + [f"{note}  " for note in notes]
    lines += ["", "Targets:", ""] + [f"- {line}" for line in target_lines(results)]
    return "\n".join(lines) + "\n"


def plot_throughput(results, path):
    """Horizontal bars of tokens/s, one per case that ran, grouped by task and length."""
    from xlnet_tf.plots import pyplot, save_figure

    plt = pyplot()
    order = {task: i for i, task in enumerate(("inference", "finetune", "pretrain"))}
    rows = sorted((r for r in results["rows"] if r["status"] == "ok"),
                  key=lambda r: (order.get(r["task"], 9), r["seq_len"]))  # each task's cases side by side
    if not rows:
        return None
    labels = [f"{r['task']} T={r['seq_len']} | {r['implementation']} {r['precision']}{' XLA' if r['xla'] else ''}"
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
