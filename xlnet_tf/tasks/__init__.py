"""The fine-tuning tasks by name: one module per task, one object per task (`base.Task`) that owns what the task
means (inputs and labels, reading, the head and loss, predictions and metrics, the export's signatures, its own
flags). finetune / evaluate / predict / export / convert / the CLI ask `get(name)` instead of comparing names.

A new task: its module here, imported below with its object in `_TASKS`. Cheap to import (no numpy or
TensorFlow): the CLI lists TASK_NAMES.
"""

import json
import os

from xlnet_tf import files
from xlnet_tf.arguments import suggestion
from xlnet_tf.config import ConfigError
from xlnet_tf.errors import UserError
from xlnet_tf.tasks import classification, language_model, multi_label, race, squad, token_classification

_TASKS = {task.name: task for task in (
    classification.CLASSIFICATION,
    classification.REGRESSION,
    squad.SQUAD,
    race.RACE,
    token_classification.TOKEN_CLASSIFICATION,
    multi_label.MULTI_LABEL,
)}
TASK_NAMES = tuple(_TASKS)  # `xlnet-tf finetune --task`, in this order
LANGUAGE_MODEL = language_model.LANGUAGE_MODEL  # task "lm": a language model exported for generation


def get(name):
    """The fine-tuning task named `name` (UserError naming the valid ones for another name)."""
    if name not in _TASKS:
        raise UserError(f"task must be one of {', '.join(TASK_NAMES)}, got {name!r}{suggestion(name, TASK_NAMES)}")
    return _TASKS[name]


def _listed(words):
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def check_setup(setup):
    """Refuses a FinetuneSetup that sets the options of other tasks than its own (UserError naming their flags
    and the tasks that take them), then what its task refuses (`Task.check_setup`)."""
    task = get(setup.task)
    offered = []
    for other in _TASKS.values():
        offered += [options for options in other.options if options not in offered]
    for options in offered:
        if options not in task.options and options.given(setup):
            takers = [name for name, other in _TASKS.items() if options in other.options]
            raise UserError(f"{_listed(options.flags)} are for --task {_listed(takers)}")
    if task.min_text_pieces:
        specials = task.min_seq_len({}) - 1  # a row's special tokens: <sep> <cls>, and a pair's second <sep>
        pair = bool((setup.columns or {}).get("text_b") is not None)
        useful = specials + pair + task.min_text_pieces
        if setup.max_seq_len < useful:
            raise UserError(f"--max-seq-len {setup.max_seq_len} leaves {max(setup.max_seq_len - specials - pair, 0)} "
                            f"pieces of text per row beside its special tokens, too few to learn from; the smallest "
                            f"useful value is {useful} ({task.min_text_pieces} pieces of text; 128 is usual, and batches "
                            f"are padded by length (--bucket-boundaries auto), so a larger value costs little on "
                            f"short texts)")
    task.check_setup(setup)


def build_head_model(task, config, run_options=None, dtype=None, **head):
    """The head model of the task named `task` (`Task.build_model`): classification (num_labels), regression,
    squad (squad_head "beam", the original's, or "simple"; start_n_top, end_n_top), race (multiple choice),
    token-classification (num_labels), multi-label (num_labels: each label's own sigmoid over the
    classification logits)."""
    return get(task).build_model(config, run_options, dtype=dtype, **head)


def export_in(path):
    """(the SavedModel to give `predict --export-dir`, what `path` is in a few words) when `path` looks like an
    export (xlnet-tf export's BASE/NAME/VERSION, or BASE/NAME holding numbered versions: the latest), else None."""
    path = os.fspath(path)
    if files.exists(files.join(path, "saved_model.pb")):
        return path, "an exported SavedModel (saved_model.pb)"
    try:
        names = files.listdir(path) if files.isdir(path) else []
    except OSError:
        return None
    versions = sorted(int(name.strip("/")) for name in names if name.strip("/").isdigit()
                      and files.exists(files.join(path, name.strip("/"), "saved_model.pb")))
    if not versions:
        return None
    listed = ", ".join(map(str, versions))
    return (files.join(path, str(versions[-1])),
            f"a folder of exported versions ({listed}; the latest: {versions[-1]})")


def read_finetune_config(path):
    """`finetune_config.json` of a fine-tuned directory (any filesystem)."""
    from xlnet_tf.heads import FINETUNE_FILE

    meta = files.join(os.fspath(path), FINETUNE_FILE)
    if not files.exists(meta):
        export = export_in(path)
        if export is not None:
            raise ConfigError(f"{path}: no {FINETUNE_FILE}: {export[1]}, not a fine-tuned model directory; predict "
                              f"reads exports with `xlnet-tf predict --export-dir {export[0]}` (evaluate and export "
                              "take the directory finetune wrote, its --model-dir)")
        raise ConfigError(f"{path}: no {FINETUNE_FILE} (not a fine-tuned model directory)")
    try:
        data = json.loads(files.read_text(meta))
    except json.JSONDecodeError as error:
        raise ConfigError(f"{meta}:{error.lineno}: not valid JSON ({error.msg})") from None
    if data.get("task") not in TASK_NAMES:
        raise ConfigError(f"{meta}: task must be one of {TASK_NAMES}, got {data.get('task')!r}")
    return data


def load_finetuned(path, dtype=None, checkpoint=None, **run_options):
    """(model, finetune_config) from a fine-tuned directory; keyword arguments are RunOptions fields and win over
    the run options the directory records (run_options.json). `checkpoint`: which weights (`choose_checkpoint`;
    None: the best when evaluation during training kept one, else the last)."""
    from xlnet_tf.heads import head_arguments, restore_head
    from xlnet_tf.model import load_run_options, read_model_config

    finetune_config = read_finetune_config(path)
    model = build_head_model(finetune_config["task"], read_model_config(path), load_run_options(path, **run_options),
                             dtype=dtype, **head_arguments(finetune_config))
    chosen = choose_checkpoint(path, checkpoint)
    if chosen["restore"] == "prefix":  # a checkpoint file (prefix) given with --checkpoint PATH
        status = model._checkpoint().read(chosen["path"])
        status.assert_existing_objects_matched()
        status.expect_partial()
    else:
        restore_head(model, chosen["path"])
    return model, finetune_config


BEST_DIR = "best"  # MODEL_DIR/best: the best checkpoint kept by evaluation during training
BEST_FILE = "best.json"
CHECKPOINT_CHOICES = ("best", "last")


def read_best(path):
    """MODEL_DIR/best/best.json of a fine-tuned directory, or None (no evaluation during training)."""
    meta = files.join(os.fspath(path), BEST_DIR, BEST_FILE)
    if not files.exists(meta):
        return None
    return json.loads(files.read_text(meta))


def choose_checkpoint(path, checkpoint=None):
    """Which weights of fine-tuned directory `path` to load: `checkpoint` "best" (MODEL_DIR/best), "last" (the
    latest of checkpoints/), a directory or a checkpoint prefix; None: the best when there is one, else the last.
    -> {"checkpoint": "best" / "last" / the path, "path", "restore": "directory" or "prefix", "step", "metric",
    "value", "given": whether it was asked for or a best exists (then commands say which they used)}."""
    path = os.fspath(path)
    best = read_best(path)
    choice = checkpoint or ("best" if best is not None else "last")
    out = {"checkpoint": choice, "path": path, "restore": "directory", "step": None, "metric": None, "value": None,
           "given": checkpoint is not None or best is not None}
    if choice == "best":
        if best is None:
            raise UserError(f"{path}: no {BEST_DIR}/{BEST_FILE} (kept by `finetune --eval-every`); give "
                            "--checkpoint last")
        return {**out, "path": files.join(path, BEST_DIR), "step": best["step"], "metric": best["metric"],
                "value": best["value"]}
    if choice == "last":
        import tensorflow as tf

        latest = tf.train.latest_checkpoint(files.join(path, "checkpoints"))
        if latest is not None:
            out["step"] = int(latest.rsplit("-", 1)[1])
            last = (best or {}).get("last") or {}
            if best is not None and last.get("step") == out["step"]:
                out.update(metric=best["metric"], value=last["metrics"].get(best["metric"]))
        return out
    if files.isdir(choice):
        return {**out, "path": choice}
    if files.exists(choice + ".index"):
        tail = choice.rsplit("-", 1)[-1]
        return {**out, "path": choice, "restore": "prefix", "step": int(tail) if tail.isdigit() else None}
    raise UserError(f"--checkpoint must be best, last, a directory or a checkpoint prefix (PREFIX.index), got "
                    f"{checkpoint!r}")


def describe_checkpoint(chosen):
    """One line: which checkpoint a command used (step, and the metric's value when known)."""
    figures = [f"step {chosen['step']}"] if chosen["step"] is not None else []
    if chosen["value"] is not None:
        figures.append(f"{chosen['metric']} {chosen['value']:.6g}")
    where = f" ({', '.join(figures)})" if figures else ""
    return f"checkpoint: {chosen['checkpoint']}{where}: {chosen['path']}"
