"""Evaluation during fine-tuning (`finetune --eval-every N` / `--eval-every-epoch`): the eval file is scored at
step boundaries by the task's metrics, the best checkpoint by one of them is kept beside the last (MODEL_DIR/best:
model.ckpt, xlnet_config.json and best.json), training may stop early, and `evaluate --all-checkpoints` scores
every checkpoint of a directory. best.json also holds what a resumed run needs (the best value, the evaluations
since it, the last evaluated step)."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import tempfile

from xlnet_tf import files, tasks
from xlnet_tf.errors import UserError
from xlnet_tf.tasks import BEST_DIR, BEST_FILE, read_best

log = logging.getLogger(__name__)
ALL_CHECKPOINTS_FILE = "eval_all_checkpoints.json"  # `evaluate --all-checkpoints`, in MODEL_DIR
LOWER_IS_BETTER = ("mse", "loss")  # metric names (or their endings) where lower is better


@dataclasses.dataclass(frozen=True)
class EvalSchedule:
    """When fine-tuning scores its eval file: every `every` steps or, with `every_epoch`, every ceil(training rows /
    batch size) steps, and at the last step; the best checkpoint by `best_metric` (None: the task's
    `best_metric`) is kept; `patience` evaluations in a row without improvement stop the run (None: never)."""

    every: int | None = None
    every_epoch: bool = False
    best_metric: str | None = None
    patience: int | None = None

    @property
    def enabled(self):
        return bool(self.every or self.every_epoch)

    def check(self, task_name, eval_file):
        """Refuses flags that do not go together (UserError naming the flag)."""
        if self.every is not None and self.every < 1:
            raise UserError(f"--eval-every must be at least 1, got {self.every}")
        if self.every and self.every_epoch:
            raise UserError("give one of --eval-every and --eval-every-epoch")
        for flag, given in (("--eval-every", self.every), ("--eval-every-epoch", self.every_epoch)):
            if given and not eval_file:
                raise UserError(f"{flag} needs --eval-file (the file scored during training)")
        if self.patience is not None:
            if not self.enabled:
                raise UserError("--early-stopping-patience needs an evaluation schedule: --eval-every N or "
                                "--eval-every-epoch (and --eval-file)")
            if self.patience < 1:
                raise UserError(f"--early-stopping-patience must be at least 1, got {self.patience}")
        if self.best_metric is not None:
            if not self.enabled:
                raise UserError("--best-metric needs an evaluation schedule: --eval-every N or --eval-every-epoch")
            check_metric(task_name, self.best_metric)

    def metric(self, task_name):
        return self.best_metric or tasks.get(task_name).best_metric

    def steps(self, rows, batch_size):
        """Steps between evaluations for `rows` training rows."""
        return self.every or max(1, math.ceil(rows / batch_size))


def check_metric(task_name, name, flag="--best-metric"):
    """UserError listing the task's metric names when `name` is not one of them."""
    names = tasks.get(task_name).metric_names
    if name not in names:
        raise UserError(f"{flag} {name!r} is not a metric of task {task_name}; its metrics: {', '.join(names)}")


def higher_is_better(metric):
    return not any(metric == name or metric.endswith(f"_{name}") for name in LOWER_IS_BETTER)


def improves(value, best, higher):
    """Whether `value` beats `best` (None: no best yet; NaN never beats a number)."""
    if best is None or (isinstance(best, float) and math.isnan(best)):
        return not math.isnan(value) or best is None
    return value > best if higher else value < best


def scalars(metrics):
    """The metrics that are single numbers (TensorBoard scalars, the one-line summaries)."""
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def metric_value(metrics, metric):
    if metric not in metrics:
        raise UserError(f"--best-metric {metric}: this evaluation has no such metric; it has "
                        f"{', '.join(scalars(metrics))}")
    return float(metrics[metric])


def write_best(model_dir, model, config, state):
    """Publishes MODEL_DIR/best: the model's weights (model.ckpt), its xlnet_config.json and best.json (`state`),
    replacing the previous best whole (`model.write_pretrained`)."""
    import tensorflow as tf

    from xlnet_tf.model import write_pretrained

    with tempfile.TemporaryDirectory(prefix="xlnet-tf-best-") as scratch:
        staged = os.path.join(scratch, BEST_FILE)
        files.write_json(staged, state, sort_keys=False)
        write_pretrained(files.join(model_dir, BEST_DIR), config, tf.train.Checkpoint(model=model),
                         extra_files=[staged])


class DuringTraining:
    """The `Trainer` hook of evaluation during fine-tuning: called at every `every` steps and at the last, it scores
    the model (`evaluate(model)` -> the task's metrics), logs the figures, keeps the best checkpoint and returns
    whether to stop (patience). Resumed (best.json present), it goes on from the recorded state: the best value,
    the evaluations since it; steps already evaluated are not evaluated again."""

    def __init__(self, model_dir, task_name, schedule: EvalSchedule, every, evaluate, config):
        self.model_dir, self.every, self.evaluate, self.config = model_dir, every, evaluate, config
        self.metric = schedule.metric(task_name)
        self.higher = higher_is_better(self.metric)
        self.patience = schedule.patience
        self.state = read_best(model_dir) or {}
        if self.state and self.state.get("metric") != self.metric:
            raise UserError(f"{files.join(model_dir, BEST_DIR, BEST_FILE)} keeps the best by "
                            f"{self.state.get('metric')}, not {self.metric}: give --best-metric "
                            f"{self.state.get('metric')}, or remove {files.join(model_dir, BEST_DIR)}")
        self.last = self.state.get("last")  # {"step", "metrics"} of the latest evaluation
        self.stopped = None  # (step, why) when patience stopped the run

    @property
    def exhausted(self):
        """Whether an earlier run already stopped early (a rerun has nothing to do)."""
        return bool(self.patience and self.state.get("evaluations_without_improvement", 0) >= self.patience)

    def __call__(self, trainer, step, summary):
        if step <= self.state.get("last_evaluated_step", 0):
            return False  # a resumed run passing a step the interrupted one evaluated: counted then
        metrics = self.evaluate(trainer.model)
        value = metric_value(metrics, self.metric)
        best = self.state.get("value")
        improved = improves(value, best, self.higher)
        waited = 0 if improved else self.state.get("evaluations_without_improvement", 0) + 1
        self.last = {"step": step, "metrics": metrics}
        if improved:
            self.state.update(step=step, metric=self.metric, value=value, metrics=metrics,
                              higher_is_better=self.higher)
        self.state.update(evaluations_without_improvement=waited, last_evaluated_step=step, patience=self.patience,
                          last=self.last)
        stop = bool(self.patience) and waited >= self.patience
        record = {"step": step, "eval": scalars(metrics), "metric": self.metric, "best": improved,
                  "best_step": self.state["step"], "best_value": self.state["value"]}
        if stop:
            why = (f"{waited} evaluations in a row without improvement of {self.metric} over "
                   f"{self.state['value']:.6g} (step {self.state['step']}; --early-stopping-patience "
                   f"{self.patience})")
            self.stopped = (step, why)
            self.state["stopped_early"] = {"step": step, "why": why}
            record["early_stopping"] = why
        if getattr(trainer, "chief", True):  # every worker evaluates (the inference is collective); the chief writes
            if improved:
                write_best(self.model_dir, trainer.model, self.config, self.state)
            else:
                files.write_json(files.join(self.model_dir, BEST_DIR, BEST_FILE), self.state, sort_keys=False)
        summary.write_eval(record)
        if stop:
            log.warning("early stopping at step %d: %s", step, why)
        return stop

    def results(self):
        """eval_results.json of the run: the best's metrics, its step and "checkpoint": "best"; the last
        evaluation's under "last"."""
        return {**self.state["metrics"], "step": self.state["step"], "checkpoint": "best", "metric": self.metric,
                "last": {**self.last["metrics"], "step": self.last["step"]} if self.last else None}
