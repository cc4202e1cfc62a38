"""TensorFlow distribution strategies by name: one_device, mirrored, multi_worker, tpu, or auto."""

from __future__ import annotations

import json
import logging
import os

import tensorflow as tf

from xlnet_tf.errors import UserError

log = logging.getLogger(__name__)
STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker", "tpu")


def _workers_in_tf_config():
    try:
        cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    except json.JSONDecodeError as error:
        raise UserError(f"TF_CONFIG is not valid JSON ({error})") from None
    return len(cluster.get("worker", [])) + len(cluster.get("chief", []))


def make_strategy(name="auto", tpu=None, cpu_devices=2):
    """A `tf.distribute.Strategy`.

    one_device: the first GPU, else the CPU. mirrored: all local GPUs, or (without GPUs) `cpu_devices` logical
    CPU devices; this must run before TensorFlow initialises its devices. multi_worker: from `TF_CONFIG`.
    tpu: `TPUClusterResolver(tpu)` (a name, a grpc:// address, or "local"). auto: tpu when `tpu` or TPU_NAME
    is set, multi_worker when TF_CONFIG names several workers, mirrored with several GPUs, else one_device.
    """
    if name not in STRATEGIES:
        raise UserError(f"--strategy must be one of {', '.join(STRATEGIES)}, got {name!r}")
    if name == "auto":
        if tpu or os.environ.get("TPU_NAME"):
            name = "tpu"
        elif _workers_in_tf_config() > 1:
            name = "multi_worker"
        elif len(tf.config.list_physical_devices("GPU")) > 1:
            name = "mirrored"
        else:
            name = "one_device"
        log.info("--strategy auto picked %s", name)
    if name == "one_device":
        gpus = tf.config.list_logical_devices("GPU")
        return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
    if name == "mirrored":
        if tf.config.list_physical_devices("GPU"):
            return tf.distribute.MirroredStrategy()
        cpu = tf.config.list_physical_devices("CPU")[0]
        try:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(cpu_devices)]
            )
        except RuntimeError:
            log.warning("TensorFlow devices were already initialised; using the existing logical CPUs")
        devices = [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(
            devices=devices, cross_device_ops=tf.distribute.ReductionToOneDevice()
        )
    if name == "multi_worker":
        if _workers_in_tf_config() < 1:
            raise UserError("--strategy multi_worker needs TF_CONFIG with a cluster of workers")
        return tf.distribute.MultiWorkerMirroredStrategy()
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or os.environ.get("TPU_NAME"))
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


TPU_STEPS_PER_LOOP = 1000  # the original's --iterations on TPU
STEPS_PER_LOOP = 10


def default_steps_per_loop(strategy):
    """Optimizer steps per host call when --steps-per-loop is not given: 1000 under TPUStrategy (every host
    call is a round trip to the TPU host; the loop runs on the device), else 10 (a log line every 10 steps)."""
    return TPU_STEPS_PER_LOOP if isinstance(strategy, tf.distribute.TPUStrategy) else STEPS_PER_LOOP


def is_chief(strategy):
    """Whether this worker writes the shared model directory (always true outside multi-worker training)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    return task_type is None or task_type == "chief" or (task_type == "worker" and task_id == 0)


def worker_id(strategy):
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return 0
    return int(resolver.task_id or 0)
