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
    task.check_setup(setup)


def build_head_model(task, config, run_options=None, dtype=None, **head):
    """The head model of the task named `task` (`Task.build_model`): classification (num_labels), regression,
    squad (squad_head "beam", the original's, or "simple"; start_n_top, end_n_top), race (multiple choice),
    token-classification (num_labels), multi-label (num_labels: each label's own sigmoid over the
    classification logits)."""
    return get(task).build_model(config, run_options, dtype=dtype, **head)


def read_finetune_config(path):
    """`finetune_config.json` of a fine-tuned directory (any filesystem)."""
    from xlnet_tf.heads import FINETUNE_FILE

    meta = files.join(os.fspath(path), FINETUNE_FILE)
    if not files.exists(meta):
        raise ConfigError(f"{path}: no {FINETUNE_FILE} (not a fine-tuned model directory)")
    try:
        data = json.loads(files.read_text(meta))
    except json.JSONDecodeError as error:
        raise ConfigError(f"{meta}:{error.lineno}: not valid JSON ({error.msg})") from None
    if data.get("task") not in TASK_NAMES:
        raise ConfigError(f"{meta}: task must be one of {TASK_NAMES}, got {data.get('task')!r}")
    return data


def load_finetuned(path, dtype=None, **run_options):
    """(model, finetune_config) from a fine-tuned directory; keyword arguments are RunOptions fields and win over
    the run options the directory records (run_options.json)."""
    from xlnet_tf.heads import head_arguments, restore_head
    from xlnet_tf.model import load_run_options, read_model_config

    finetune_config = read_finetune_config(path)
    model = build_head_model(finetune_config["task"], read_model_config(path), load_run_options(path, **run_options),
                             dtype=dtype, **head_arguments(finetune_config))
    restore_head(model, path)
    return model, finetune_config
