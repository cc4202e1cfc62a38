"""The one custom training loop (pretraining and fine-tuning) on any tf.distribute strategy.

One `tf.function` runs `steps_per_loop` optimizer steps per host call, as TPU training does. An optimizer step is
one `strategy.run` (one replicated program on a TPU): each replica takes its `grad_accum_steps` micro-batches,
carries Transformer-XL memory from micro-batch to micro-batch, accumulates the gradients, all-reduces them (and
the loss) once, clips them by their global norm and applies AdamW; with `jit_compile` that whole replica step is
one XLA function. Checkpoints (model, optimizer, step, dropout state, memory) are written every `save_every`
steps, on exit and on SIGTERM; rerunning resumes where the last one stopped.

A float16 model (the mixed_float16 policy: float32 master weights) trains with dynamic loss scaling, as Keras'
LossScaleOptimizer does it: the loss is multiplied by the scale before the backward pass and the all-reduced
gradients divided by it; a step whose gradients are not finite is skipped (no update: neither the optimizer,
its iteration count and so the learning-rate schedule, nor the step counter advance; its batch is consumed)
and the scale halved, down to 1; after `loss_scale_growth_steps` finite steps in a row the scale doubles. The
scale, its counter and the skipped steps are checkpointed (a resume is exact) and logged. The run stops as
diverged when the loss itself is not finite, or the gradients overflow at scale 1.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import shutil
import signal
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf

from xlnet_tf import files
from xlnet_tf.errors import UserError
from xlnet_tf.hardware import peak_memory_mb
from xlnet_tf.training import strategies
from xlnet_tf.training.optimization import WarmupLinearDecay, XLNetAdamW, layer_decay_multiplier
from xlnet_tf.training.summaries import TrainingLog

log = logging.getLogger(__name__)
CHECKPOINT_DIR = "checkpoints"


class TrainingDiverged(UserError):
    """The loss or the gradients became NaN or Inf; the last good checkpoint is kept."""


@dataclasses.dataclass(frozen=True)
class TrainingOptions:
    """Options of one training run (the loop's share of the run options).

    batch_size: global batch (all replicas) per micro-batch; grad_accum_steps micro-batches make one step.
    learning_rate: peak rate of a linear warm-up over `warmup_steps`, then linear decay to
    `end_lr_ratio * learning_rate` at `train_steps`. layer_decay: layer-wise learning-rate decay (1 = off).
    clip_norm: gradients are clipped by this global norm (0 = off). save_every: checkpoint period in steps.
    steps_per_loop: optimizer steps per host call (one compiled loop; logs and checkpoints happen between
    calls). 10 suits CPUs and GPUs; on TPUs, where every host call is a round trip to the TPU host, use a few
    hundred (the original XLNet ran 1000 per call). jit_compile: the whole replica step is one XLA function
    (one device, GPUs, TPUs; not several CPU replicas). initial_loss_scale, loss_scale_growth_steps: dynamic
    loss scaling of a float16 model (see the module docstring; the scale changes by a factor of 2, never below 1).
    """

    train_steps: int
    batch_size: int
    learning_rate: float = 1e-4
    warmup_steps: int = 0
    end_lr_ratio: float = 0.0
    weight_decay: float = 0.01
    adam_epsilon: float = 1e-6
    clip_norm: float = 1.0
    layer_decay: float = 1.0
    grad_accum_steps: int = 1
    steps_per_loop: int = 10
    save_every: int = 1000
    keep_checkpoints: int = 5
    jit_compile: bool = False
    seed: int = 0
    initial_loss_scale: float = 2.0 ** 15  # float16 only: Keras' LossScaleOptimizer's defaults
    loss_scale_growth_steps: int = 2000

    def __post_init__(self):
        for name in ("train_steps", "batch_size", "grad_accum_steps", "steps_per_loop", "save_every",
                     "keep_checkpoints"):
            if int(getattr(self, name)) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.learning_rate <= 0:
            raise UserError(f"--learning-rate must be > 0, got {self.learning_rate}")
        if not 0 < self.layer_decay <= 1:
            raise UserError(f"--layer-decay must be in (0, 1], got {self.layer_decay}")
        if self.initial_loss_scale < 1 or self.loss_scale_growth_steps < 1:
            raise UserError("--initial-loss-scale must be >= 1 and --loss-scale-growth-steps >= 1, got "
                            f"{self.initial_loss_scale} and {self.loss_scale_growth_steps}")

    def to_dict(self):
        return dataclasses.asdict(self)


def _merges_across_devices(strategy):
    """Whether the strategy's replica-context all-reduce is a merge_call (MirroredStrategy over CPUs), which cannot
    run inside an XLA function; on GPUs under XLA it is a collective op, and TPUs compile the replica step anyway."""
    mirrored = isinstance(strategy, (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy))
    return mirrored and not all("GPU" in device.upper() for device in strategy.extended.worker_devices)


class SingleStream:
    """The loop's input from a `dataset_fn(input_context, start_batch)` (pretraining): per-replica batches
    (`input_context.get_per_replica_batch_size`), deterministic given `start_batch` (micro-batches already
    read: the data a resumed run sees)."""

    def __init__(self, dataset_fn, accum, tokens_per_example, batch_size):
        self.dataset_fn, self.accum = dataset_fn, accum
        self.tokens_per_step = (tokens_per_example or 0) * batch_size * accum

    def dataset(self, input_context, start_step):
        return self.dataset_fn(input_context, start_step * self.accum)

    def token_counts(self, first_step, end_step):
        tokens = (end_step - first_step) * self.tokens_per_step
        return tokens, tokens


class Trainer:
    """Trains `build_model()` (built under the strategy's scope) on `dataset_fn(input_context, start_batch)`, or
    on `inputs`.

    build_model: returns a keras.Model taking a batch dict (and `mems=` when its run options have mem_len > 0)
    and returning a dict of outputs. loss_fn(outputs, batch) -> (sum of per-example losses, their weight) on
    one replica; the loop divides by the weight summed over replicas, so the loss is the same whatever the
    number of replicas. dataset_fn: see `SingleStream`. inputs: instead of dataset_fn, an object with
    `dataset(input_context, start_step)` (per-replica batches from step start_step on) and
    `token_counts(first_step, end_step)` -> (real tokens, padded positions); fine-tuning's
    `finetune.TaskInput`, whose batches are tuples of parts (one per length stratum, each its own static
    shape): the model runs on each part and the loss sums over them. model_kwargs: extra keyword arguments of
    every training call of the model (the pretrainer's `sequence_output=False`). hook: called as
    `hook(trainer, step, log)` (log: the run's `TrainingLog`) at every multiple of `hook.every` steps and at
    the last step, after that step's checkpoint; compiled calls end at those steps. It returns True to stop the run
    there (a checkpoint is saved; `stopped_early_at` is that step): fine-tuning's evaluation.
    """

    def __init__(self, strategy, build_model, loss_fn, dataset_fn, options: TrainingOptions, model_dir,
                 tokens_per_example=None, model_kwargs=None, inputs=None, hook=None):
        self.strategy = strategy
        self.hook = hook
        self.stopped_early_at = None
        self.model_kwargs = dict(model_kwargs or {})
        self.loss_fn = loss_fn
        self.inputs = inputs or SingleStream(dataset_fn, options.grad_accum_steps, tokens_per_example,
                                             options.batch_size)
        self.options = options
        self.model_dir = os.fspath(model_dir)
        replicas = strategy.num_replicas_in_sync
        if options.batch_size % replicas:
            raise UserError(f"--batch-size {options.batch_size} must be divisible by the {replicas} replicas")
        self.per_replica_batch = options.batch_size // replicas
        if options.jit_compile and replicas > 1 and _merges_across_devices(strategy):
            raise UserError("--jit-compile with several replicas needs GPUs or a TPU: MirroredStrategy's all-reduce "
                            "over CPU devices cannot run inside an XLA function; drop --jit-compile")
        self.chief = strategies.is_chief(strategy)
        with strategy.scope():
            self.model = build_model()
            config = getattr(self.model, "config", None)
            n_layer = getattr(config, "n_layer", 0)
            multiplier = None
            if options.layer_decay != 1.0:
                def multiplier(path):
                    return layer_decay_multiplier(path, n_layer, options.layer_decay)
            self.schedule = WarmupLinearDecay(
                options.learning_rate, options.warmup_steps, options.train_steps, options.end_lr_ratio
            )
            self.optimizer = XLNetAdamW(
                learning_rate=self.schedule, weight_decay=options.weight_decay, epsilon=options.adam_epsilon,
                lr_multiplier=multiplier,
            )
            self.optimizer.build(self.model.trainable_variables)
            # Advanced inside the replica step, by the first replica (as keras' own `iterations`).
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                                    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            self.loss_scaled = self.model.compute_dtype == "float16"
            self.loss_scale = self.good_steps = self.skipped_steps = None
            if self.loss_scaled:  # updated inside the replica step from all-reduced values: equal on every replica
                first = tf.VariableAggregation.ONLY_FIRST_REPLICA
                self.loss_scale = tf.Variable(float(options.initial_loss_scale), dtype=tf.float32, trainable=False,
                                              name="loss_scale", aggregation=first)
                self.good_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="loss_scale_good_steps",
                                              aggregation=first)
                self.skipped_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="skipped_steps",
                                                 aggregation=first)
        run_options = getattr(self.model, "run_options", None)
        self.mem_len = getattr(run_options, "mem_len", 0)
        # Dropout's random state (keras seed generators, whose copies on every replica hold the same value; masks
        # fold the replica in) is not among the weights: checkpoint it for exact resumes.
        weights = {id(v) for v in self.model.weights}
        random_state = [v.value for v in self.model.variables if id(v) not in weights]
        scaling = dict(loss_scale=self.loss_scale, loss_scale_good_steps=self.good_steps,
                       skipped_steps=self.skipped_steps) if self.loss_scaled else {}
        self.checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer, step=self.step,
                                              random_state=random_state, **scaling)
        directory = self.model_dir if self.chief else tempfile.mkdtemp(prefix="xlnet-tf-worker-")
        self._scratch = None if self.chief else directory
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, files.join(directory, CHECKPOINT_DIR), max_to_keep=options.keep_checkpoints,
            step_counter=self.step, checkpoint_name="ckpt",
        )
        self._stop_signal = None
        self._compiled = None
        self._train_loop = self._build_train_loop()

    # -- the compiled step ----------------------------------------------------------------------------------

    def _build_train_loop(self):
        strategy, model, optimizer, options = self.strategy, self.model, self.optimizer, self.options
        variables = model.trainable_variables
        accumulate = options.grad_accum_steps
        use_mems = self.mem_len > 0

        def forward_backward(batch, mems):
            """(this replica's share of the step loss, its gradients (None for variables the loss does not reach),
            the new memory) of one micro-batch: a dict, or a tuple of parts (length strata: one model call each)."""
            context = tf.distribute.get_replica_context()
            parts = batch if isinstance(batch, tuple) else (batch,)
            with tf.GradientTape() as tape:
                memory = {"mems": mems} if use_mems else {}
                loss_sum, weight = tf.constant(0.0), tf.constant(0.0)
                for part in parts:
                    outputs = model(part, training=True, **memory, **self.model_kwargs)
                    part_sum, part_weight = self.loss_fn(outputs, part)
                    loss_sum += tf.cast(part_sum, tf.float32)
                    weight += tf.cast(part_weight, tf.float32)
                # A count: no gradient flows back through this all-reduce.
                total_weight = context.all_reduce(tf.distribute.ReduceOp.SUM, tf.stop_gradient(weight))
                loss = tf.math.divide_no_nan(loss_sum, total_weight) / accumulate
                scaled = loss * self.loss_scale if self.loss_scaled else loss
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                     for g in tape.gradient(scaled, variables)]
            new_mems = outputs["new_mems"] if use_mems else mems
            return loss, grads, new_mems

        def clipped(grads):
            """The all-reduced gradients clipped by their global norm (when clip_norm > 0) -> (grads, norm)."""
            if options.clip_norm > 0:
                return tf.clip_by_global_norm(grads, options.clip_norm)
            return grads, tf.linalg.global_norm(grads)

        def apply(grads, kept):
            """Applies the gradients and advances the step (in a replica context)."""
            optimizer.apply(grads, [variables[i] for i in kept])
            self.step.assign_add(1)

        def apply_if(finite, grads, kept):
            """`apply` when `finite` (the same on every replica: the gradients are all-reduced). Where the strategy
            needs merge calls (optimizer.apply makes one), a replica-context cond cannot hold it: the cond runs in
            the cross-replica context and applies on every replica, as Keras' LossScaleOptimizer does."""
            if tf.__internal__.distribute.strategy_supports_no_merge_call():
                tf.cond(finite, lambda: apply(grads, kept), lambda: None)
                return

            def cross_replica(distribution, finite, grads):
                first = distribution.experimental_local_results(finite)[0]
                tf.cond(first, lambda: distribution.extended.call_for_each_replica(apply, args=(grads, kept)),
                        lambda: None)

            tf.distribute.get_replica_context().merge_call(cross_replica, args=(finite, grads))

        def scaled_update(grads, kept):
            """Dynamic loss scaling (see the module docstring) -> (norm, NaN for a skipped step; whether the run
            may go on)."""
            scale = tf.identity(self.loss_scale)
            grads = [g / tf.cast(scale, g.dtype) for g in grads]
            finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
            grads, norm = clipped(grads)
            apply_if(finite, grads, kept)
            # The scale's bookkeeping without control flow: halved on overflow, doubled after enough finite steps.
            grow = tf.logical_and(finite, self.good_steps + 1 >= options.loss_scale_growth_steps)
            self.loss_scale.assign(tf.where(finite, tf.where(grow, 2.0 * scale, scale), tf.maximum(0.5 * scale, 1.0)))
            self.good_steps.assign(tf.where(finite, tf.where(grow, tf.constant(0, tf.int64), self.good_steps + 1),
                                            tf.constant(0, tf.int64)))
            self.skipped_steps.assign_add(tf.where(finite, tf.constant(0, tf.int64), tf.constant(1, tf.int64)))
            return tf.where(finite, norm, float("nan")), tf.logical_or(finite, scale > 1.0)

        @tf.autograph.experimental.do_not_convert  # strategy.run would convert it (see train_loop)
        def replica_step(batches, mems):
            """One optimizer step on one replica: `batches` its grad_accum_steps micro-batches (a tuple), `mems` its
            memory (a list of [B, M, d], or empty) -> (step loss, global gradient norm, whether the run may go
            on), the same on every replica, and the new memory."""
            loss, grads = tf.constant(0.0), None
            for batch in batches:
                micro_loss, micro_grads, mems = forward_backward(batch, mems)
                loss += micro_loss
                grads = micro_grads if grads is None else [
                    None if g is None else g + m for g, m in zip(grads, micro_grads)]
            # Variables the loss does not reach (e.g. mask_emb when fine-tuning) are left alone.
            kept = [i for i, g in enumerate(grads) if g is not None]
            # The step's one all-reduce: the exact global gradient, and the loss with it.
            loss, *grads = tf.distribute.get_replica_context().all_reduce(
                tf.distribute.ReduceOp.SUM, [loss] + [grads[i] for i in kept])
            if self.loss_scaled:
                norm, healthy = scaled_update(grads, kept)
            else:
                grads, norm = clipped(grads)
                apply(grads, kept)
                healthy = tf.math.is_finite(norm)
            return loss, norm, tf.logical_and(healthy, tf.math.is_finite(loss)), mems

        if options.jit_compile:
            replica_step = tf.function(replica_step, jit_compile=True, autograph=False)
            self._compiled = replica_step

        # Nothing here needs autograph (no branch or loop on a tensor in Python): the host loop is the while loop
        # autograph would make of a `for` over tf.range, and the step is marked not to convert. Converting them cost
        # each cold process 0.5-1 s (tests/test_training_step.py checks that nothing is converted).
        @tf.function(autograph=False)
        def train_loop(iterator, mems, num_steps):
            def one_step(step, loss_total, norm, finite, mems):
                batches = tuple(next(iterator) for _ in range(accumulate))
                step_loss, norm, healthy, mems = strategy.run(replica_step, args=(batches, mems))
                # Already all-reduced: every replica holds the same value; take the first local one.
                step_loss, norm, healthy = (strategy.experimental_local_results(t)[0]
                                            for t in (step_loss, norm, healthy))
                return step + 1, loss_total + step_loss, norm, tf.logical_and(finite, healthy), mems

            start = (tf.constant(0, num_steps.dtype), tf.constant(0.0), tf.constant(0.0), tf.constant(True), mems)
            # maximum_iterations: the bound autograph gave the loop too (XLA, e.g. on a TPU, may need a known bound)
            _, loss_total, norm, finite, mems = tf.while_loop(lambda step, *_: step < num_steps, one_step, start,
                                                              maximum_iterations=tf.cast(num_steps, tf.int32))
            return loss_total / tf.cast(num_steps, tf.float32), norm, finite, mems

        return train_loop

    # -- memory ---------------------------------------------------------------------------------------------

    def _memory_shape(self):
        config = self.model.config
        return [self.per_replica_batch, self.mem_len, config.d_model]

    def initial_mems(self, saved=None):
        """Per-replica memory: zeros at the start (as the original), or what a checkpoint saved."""
        if not self.mem_len:
            return []
        dtype = self.model.compute_dtype
        n_layer = self.model.config.n_layer
        local = self.strategy.extended.worker_devices
        if saved is None:
            return self.strategy.run(tf.autograph.experimental.do_not_convert(
                lambda: [tf.zeros(self._memory_shape(), dtype) for _ in range(n_layer)]))

        def value_fn(context):
            index = context.replica_id_in_sync_group % len(local)
            return [tf.constant(saved[layer, index], dtype) for layer in range(n_layer)]

        return self.strategy.experimental_distribute_values_from_function(value_fn)

    def _mems_file(self, step):
        return files.join(self.model_dir, CHECKPOINT_DIR,
                          f"mems-{step}-worker{strategies.worker_id(self.strategy)}.npy")

    def _save(self, mems):
        step = int(self.step.numpy())
        if self.mem_len:
            per_layer = [np.stack([np.asarray(t, np.float32) for t in self.strategy.experimental_local_results(m)])
                         for m in mems]
            buffer = io.BytesIO()
            np.save(buffer, np.stack(per_layer))
            # Named by its step and written (whole) before the checkpoint's index, which is what makes a checkpoint
            # visible: the checkpoint a run resumes from always finds the memory of that same step.
            files.write_bytes(self._mems_file(step), buffer.getvalue())
        saved = self.manager.save(checkpoint_number=step)
        if self.mem_len:  # drop this worker's memory files of checkpoints the manager no longer keeps
            kept = {int(p.rsplit("-", 1)[1]) for p in self.manager.checkpoints}
            folder, mine = files.dirname(self._mems_file(step)), f"-worker{strategies.worker_id(self.strategy)}.npy"
            for name in files.listdir(folder):
                if name.startswith("mems-") and name.endswith(mine) and int(name.split("-")[1]) not in kept:
                    files.remove(files.join(folder, name))
        return saved

    # -- the host loop --------------------------------------------------------------------------------------

    def _restore(self):
        latest = tf.train.latest_checkpoint(files.join(self.model_dir, CHECKPOINT_DIR))
        if latest is None:
            return None
        self.checkpoint.read(latest).assert_existing_objects_matched()
        step = int(self.step.numpy())
        log.info("resuming from %s (step %d)", latest, step)
        if self.mem_len and files.exists(self._mems_file(step)):
            return np.load(io.BytesIO(files.read_bytes(self._mems_file(step))))
        if self.mem_len:
            log.warning("no saved memory for step %d: starting the memory from zeros", step)
        return None

    def data_iterator(self, start_step=0):
        """Per-replica batches of the input from step `start_step` on (counting the steps skipped by loss scaling,
        which consumed their batches), distributed by the strategy."""
        start = start_step + self.skipped()
        return iter(self.strategy.distribute_datasets_from_function(lambda ctx: self.inputs.dataset(ctx, start)))

    def skipped(self):
        """Steps skipped by dynamic loss scaling so far (0 without it)."""
        return int(self.skipped_steps.numpy()) if self.loss_scaled else 0

    def traced_programs(self):
        """How many programs the training step was traced into: the XLA-compiled replica step's traces with
        `jit_compile` (one XLA program each), else the host loop's."""
        return (self._compiled or self._train_loop).experimental_get_tracing_count()

    def run_steps(self, iterator, mems, count):
        """`count` optimizer steps in one compiled call, without checkpoints or logs (train() is built on
        it; benchmarks time it) -> (mean loss, last global grad norm, all finite, mems)."""
        return self._train_loop(iterator, mems, tf.constant(count))

    def _on_signal(self, signum, frame):
        self._stop_signal = signum
        log.warning("received signal %d: saving a checkpoint after the current steps", signum)

    def train(self):
        """Runs until `train_steps`; returns the list of logged records (step, loss, lr, grad_norm, ...)."""
        options = self.options
        saved_mems = self._restore()
        start = int(self.step.numpy())
        if start >= options.train_steps:
            log.info("already trained %d steps (--train-steps %d): nothing to do", start, options.train_steps)
            return []
        iterator = self.data_iterator(start)
        mems = self.initial_mems(saved_mems)
        summary = TrainingLog(self.model_dir, enabled=self.chief, total_steps=options.train_steps, initial=start)

        def checkpoint():
            self._save(mems)
            summary.flush()  # the log reaches an object store at every checkpoint

        previous = signal.signal(signal.SIGTERM, self._on_signal) if _main_thread() else None
        step = start
        records = []
        try:
            while step < options.train_steps and self._stop_signal is None:
                count = min(options.steps_per_loop, options.train_steps - step,
                            options.save_every - step % options.save_every)
                if self.hook is not None:
                    count = min(count, self.hook.every - step % self.hook.every)
                began, before = time.perf_counter(), step
                loss, norm, finite, mems = self.run_steps(iterator, mems, count)
                loss = float(loss)
                elapsed = time.perf_counter() - began
                if not bool(finite):
                    latest = self.manager.latest_checkpoint or "none yet"
                    scaled = (f" (float16, loss scale now {float(self.loss_scale.numpy()):g}: the loss itself was not "
                              "finite, or the gradients overflowed at loss scale 1)") if self.loss_scaled else ""
                    raise TrainingDiverged(
                        f"NaN or Inf in the loss or gradients between steps {step + 1} and {step + count}{scaled}; "
                        f"stopped without saving; the last good checkpoint is kept: {latest}"
                    )
                real, padded = self.inputs.token_counts(step, step + count)
                step = int(self.step.numpy())
                examples = count * options.batch_size * options.grad_accum_steps
                record = {
                    "step": step, "loss": loss, "learning_rate": float(self.schedule(step - 1)),
                    "grad_norm": float(norm), "examples_per_sec": examples / elapsed,
                }
                if self.loss_scaled:
                    record.update(loss_scale=float(self.loss_scale.numpy()), skipped_steps=self.skipped())
                if padded:  # real tokens, and the positions computed with their padding
                    record.update(tokens=real, padded_tokens=padded, tokens_per_sec=real / elapsed,
                                  padded_tokens_per_sec=padded / elapsed)
                record.update(peak_memory_mb(self.strategy))
                records.append(record)
                summary.write(record)
                # (A call whose steps were all skipped by loss scaling stays on its step: nothing new to save.)
                saved = step > before and (step % options.save_every == 0 or step >= options.train_steps)
                if saved:
                    checkpoint()
                if (self.hook is not None and step > before
                        and (step % self.hook.every == 0 or step >= options.train_steps)
                        and self.hook(self, step, summary)):
                    if not saved:
                        checkpoint()
                    self.stopped_early_at = step
                    break
            if self._stop_signal is not None:
                checkpoint()
                log.warning("stopped by signal %d at step %d; rerun the same command to resume", self._stop_signal, step)
        except KeyboardInterrupt:
            checkpoint()
            raise
        finally:
            summary.close()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            if self._scratch:
                shutil.rmtree(self._scratch, ignore_errors=True)
        self.mems = mems
        return records

    @property
    def stopped_by_signal(self):
        return self._stop_signal is not None


def _main_thread():
    import threading

    return threading.current_thread() is threading.main_thread() and sys.platform != "win32"
