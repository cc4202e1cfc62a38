"""What a training run shows: a progress bar (or log lines off a terminal), TensorBoard scalars, a JSONL log
and a PNG of the training curves, all under the model directory (any filesystem: `xlnet_tf.files`; on an
object store the JSONL log is uploaded at every `flush()`, i.e. every checkpoint, not at every line)."""

from __future__ import annotations

import json
import logging
import os
import sys

import tensorflow as tf

from xlnet_tf import files

log = logging.getLogger(__name__)
LOG_FILE = "train_log.jsonl"
CURVE_FILE = "training_curve.png"


class TrainingLog:
    """Receives one record per host call: {"step", "loss", "learning_rate", "grad_norm", ...}."""

    def __init__(self, model_dir, enabled=True, total_steps=None, initial=0, name="train"):
        self.model_dir = os.fspath(model_dir)
        self.enabled = enabled
        self.bar = None
        self.writer = None
        if not enabled:
            return
        files.makedirs(self.model_dir)
        self.writer = tf.summary.create_file_writer(files.join(self.model_dir, name))
        self.lines = files.LineLog(files.join(self.model_dir, LOG_FILE))
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total_steps, initial=initial, unit="step", dynamic_ncols=True)
        self.total_steps = total_steps

    def write(self, record):
        if not self.enabled:
            return
        step = record["step"]
        with self.writer.as_default(step=step):
            for key, value in record.items():
                if key != "step":
                    tf.summary.scalar(key, value)
        self.lines.write(record)
        speed, padded = record.get("tokens_per_sec"), record.get("padded_tokens_per_sec")
        text = f"loss {record['loss']:.4f} lr {record['learning_rate']:.2e} |g| {record['grad_norm']:.2f}"
        if speed:
            text += f" {speed:,.0f} tok/s"
            if padded and padded > speed * 1.005:
                text += f" ({padded:,.0f} with padding)"
        memory = record.get("peak_device_memory_mb") or record.get("peak_host_memory_mb")
        if memory:
            text += f" peak mem {memory / 1024:.2f} GiB"
        if self.bar is not None:
            self.bar.update(step - self.bar.n)
            self.bar.set_postfix_str(text)
        else:
            log.info("step %d/%s %s", step, self.total_steps, text)

    def write_eval(self, record):
        """An evaluation during training: {"step", "eval": {metric: value}, "metric": the one that picks the best,
        ...}: a line of the JSONL log and TensorBoard scalars eval/<metric>."""
        if not self.enabled:
            return
        step = record["step"]
        with self.writer.as_default(step=step):
            for key, value in record["eval"].items():
                tf.summary.scalar(f"eval/{key}", value)
        self.lines.write(record)
        text = f"eval at step {step}: {record['metric']} {record['eval'].get(record['metric'], float('nan')):.4f}"
        text += " (best)" if record.get("best") else f" (best {record['best_value']:.4f} at step {record['best_step']})"
        if self.bar is not None:
            self.bar.write(text)
        else:
            log.info("%s", text)

    def flush(self):
        """Makes everything written so far durable in the model directory (the trainer calls it at every
        checkpoint)."""
        if self.enabled:
            self.writer.flush()
            self.lines.flush()

    def close(self):
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.close()
        self.writer.flush()
        self.lines.close()
        plot_training_curves(files.join(self.model_dir, LOG_FILE), files.join(self.model_dir, CURVE_FILE))


def read_log(path, kind="train"):
    """The records of a JSONL training log (any filesystem); [] when there is none. `kind`: "train" (one per host
    call: step, loss, ...), "eval" (evaluations during fine-tuning: records with an "eval" key) or None (all)."""
    if not files.exists(path):
        return []
    records = [json.loads(line) for line in files.read_text(path).splitlines() if line.strip()]
    if kind is None:
        return records
    return [r for r in records if ("eval" in r) == (kind == "eval")]


def plot_training_curves(log_path, png_path, title="training"):
    """Loss and learning rate against steps, from a JSONL training log, as a PNG (returns its path or None); with
    evaluations during training, a third panel: the metric that picks the best, its best marked."""
    records = read_log(log_path)
    if not records:
        return None
    from xlnet_tf.plots import pyplot, save_figure

    plt = pyplot()
    steps = [r["step"] for r in records]
    evals = [r for r in read_log(log_path, "eval") if r.get("metric") in r["eval"]]
    fig, axes = plt.subplots(1, 3 if evals else 2, figsize=(15 if evals else 10, 3.5))
    loss_ax, lr_ax = axes[:2]
    if evals:
        eval_ax, metric = axes[2], evals[-1]["metric"]
        evals = [r for r in evals if r["metric"] == metric]
        eval_ax.plot([r["step"] for r in evals], [r["eval"][metric] for r in evals], marker="o", color="tab:green")
        best = evals[-1]
        eval_ax.scatter([best["best_step"]], [best["best_value"]], s=120, facecolors="none", edgecolors="tab:red",
                        label=f"best: step {best['best_step']}")
        eval_ax.set_xlabel("step")
        eval_ax.set_ylabel(metric)
        eval_ax.set_title(f"eval {metric}")
        eval_ax.legend(loc="best", fontsize=8)
        eval_ax.grid(alpha=0.3)
    loss_ax.plot(steps, [r["loss"] for r in records], marker=".")
    loss_ax.set_xlabel("step")
    loss_ax.set_ylabel("loss")
    loss_ax.set_title(f"{title} loss")
    loss_ax.grid(alpha=0.3)
    lr_ax.plot(steps, [r["learning_rate"] for r in records], color="tab:orange")
    lr_ax.set_xlabel("step")
    lr_ax.set_ylabel("learning rate")
    lr_ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, png_path)
