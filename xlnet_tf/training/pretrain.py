"""Permutation-LM (or MLM) pretraining: records from `create-pretraining-data` -> the training loop."""

from __future__ import annotations

import dataclasses
import logging

from xlnet_tf import files
from xlnet_tf.config import MODEL_SIZES, RunOptions, XLNetConfig
from xlnet_tf.errors import UserError
from xlnet_tf.hardware import precision_policy

log = logging.getLogger(__name__)
RUN_FILE = "pretraining_run.json"


@dataclasses.dataclass(frozen=True)
class PretrainingSetup:
    """What `xlnet-tf pretrain` needs besides the training options: data, model and objective."""

    data_dir: str
    model_dir: str
    config: XLNetConfig
    run_options: RunOptions
    num_predict: int
    objective: str = "plm"
    mixed_precision: str | None = None


def resolve_config(config_path=None, model_size=None, vocab_size=None):
    """The architecture from --config or --model-size (whose vocabulary follows the data's)."""
    if bool(config_path) == bool(model_size):
        raise UserError("give exactly one of --config and --model-size")
    if config_path:
        config = XLNetConfig.from_json(config_path)
    else:
        if model_size not in MODEL_SIZES:
            raise UserError(f"--model-size must be one of {sorted(MODEL_SIZES)}, got {model_size!r}")
        config = dataclasses.replace(MODEL_SIZES[model_size], n_token=vocab_size or MODEL_SIZES[model_size].n_token)
    if vocab_size and config.n_token < vocab_size:
        raise UserError(f"the config's n_token {config.n_token} is smaller than the data's vocabulary {vocab_size}")
    return config


# The permutation-LM loss reads only the query stream: training skips the last layer's content stream.
TRAINING_CALL = {"sequence_output": False}


def pretraining_loss(outputs, batch):
    """The Trainer's loss_fn for XLNetPretrainer: (summed cross-entropy, number of real targets)."""
    return outputs["loss_sum"], outputs["target_count"]


def run_pretraining(setup: PretrainingSetup, options, strategy):
    """Trains and returns the logged records. The model directory becomes a pretrained directory
    (`xlnet_config.json`, `spiece.model`, checkpoints/) that `XLNetPretrainer.from_pretrained` and
    `xlnet-tf finetune --init-checkpoint` read."""
    from xlnet_tf.data import pretraining_records
    from xlnet_tf.data.sampling import SamplingOptions
    from xlnet_tf.model import CONFIG_FILE, SPM_FILE, XLNetPretrainer
    from xlnet_tf.training.loop import Trainer

    metadata = pretraining_records.load_metadata(setup.data_dir)
    sampling = SamplingOptions(
        seq_len=metadata["seq_len"], reuse_len=metadata["reuse_len"], num_predict=setup.num_predict,
        objective=setup.objective,
    )
    files.makedirs(setup.model_dir)
    config_path = files.join(setup.model_dir, CONFIG_FILE)
    if files.exists(config_path) and XLNetConfig.from_json(config_path) != setup.config:
        raise UserError(f"{config_path} holds a different architecture than this run asks for")
    setup.config.to_json(config_path)
    spm, spm_copy = metadata.get("spm_model"), files.join(setup.model_dir, SPM_FILE)
    if spm and files.exists(spm) and not files.exists(spm_copy):
        files.copy(spm, spm_copy)
    files.write_json(files.join(setup.model_dir, RUN_FILE), {
        "run_options": setup.run_options.to_dict(), "training": options.to_dict(),
        "sampling": dataclasses.asdict(sampling), "data_dir": files.absolute(setup.data_dir),
        "mixed_precision": setup.mixed_precision}, sort_keys=False)

    dtype = precision_policy(setup.mixed_precision, strategy)

    def build_model():
        return XLNetPretrainer(setup.config, setup.run_options, dtype=dtype)

    def dataset_fn(input_context, start_batch):
        batch = input_context.get_per_replica_batch_size(options.batch_size)
        return pretraining_records.pretraining_dataset(
            setup.data_dir, batch, sampling, seed=options.seed, input_context=input_context, start_batch=start_batch
        )

    trainer = Trainer(strategy, build_model, pretraining_loss, dataset_fn, options, setup.model_dir,
                      tokens_per_example=metadata["seq_len"], model_kwargs=TRAINING_CALL)
    records = trainer.train()
    return trainer, records
