"""The CPU's instruction sets and the bfloat16 warning: detection tested with injected /proc/cpuinfo flags."""

import json
import logging

import pytest

from xlnet_tf import hardware

AVX2_ONLY = frozenset("fpu sse4_2 avx avx2 fma".split())
AVX512_BF16 = AVX2_ONLY | {"avx512f", "avx512_vnni", "avx512_bf16"}
SAPPHIRE_RAPIDS = AVX2_ONLY | {"avx512f", "amx_tile", "amx_bf16", "amx_int8"}


class FakeStrategy:
    """Just what `hardware.accelerators` reads of a tf.distribute strategy."""

    def __init__(self, *devices):
        self.extended = type("Extended", (), {"worker_devices": devices})()


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: fpu avx2 avx512_bf16\n\n"
                       "processor\t: 1\nflags\t\t: fpu avx2 avx512_bf16\n")
    flags = hardware.cpu_flags(cpuinfo)
    print("parsed flags:", sorted(flags))
    assert flags == {"fpu", "avx2", "avx512_bf16"}
    assert hardware.cpu_flags(tmp_path / "missing") is None
    assert hardware.reported_flags(flags)["avx512_bf16"] and not hardware.reported_flags(flags)["amx_bf16"]
    assert hardware.reported_flags(None) is None


@pytest.mark.parametrize("flags, devices, warned", [
    (AVX2_ONLY, (), True),  # emulated bfloat16 on the CPU: the one case that warns
    (AVX512_BF16, (), False),
    (SAPPHIRE_RAPIDS, (), False),
    (AVX2_ONLY, ("/job:localhost/replica:0/task:0/device:GPU:0",), False),  # runs on the accelerator
    (AVX2_ONLY, ("/job:worker/replica:0/task:0/device:TPU:3",), False),
    (None, (), False),  # flags unknown (not Linux): no claim either way
])
def test_bfloat16_warning_exactly_without_native_bfloat16(flags, devices, warned, caplog):
    strategy = FakeStrategy(*devices, "/job:localhost/replica:0/task:0/device:CPU:0")
    with caplog.at_level(logging.WARNING, logger="xlnet_tf.hardware"):
        policy = hardware.precision_policy("bfloat16", strategy, flags=flags)
    messages = [r.getMessage() for r in caplog.records]
    native = None if flags is None else sorted(flags & {"avx512_bf16", "amx_bf16"})
    print(f"native bfloat16 flags {native}, accelerators {devices}: policy {policy}, warnings {len(messages)} "
          f"(expected {int(warned)})")
    assert policy == "mixed_bfloat16"
    assert len(messages) == int(warned)
    if warned:
        assert "5x SLOWER than float32" in messages[0] and "avx512_bf16" in messages[0] and "\n" not in messages[0]


def test_float32_never_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="xlnet_tf.hardware"):
        for precision in (None, "float32"):
            assert hardware.precision_policy(precision, FakeStrategy(), flags=AVX2_ONLY) is None
    assert not caplog.records


def test_a_cpu_strategy_counts_as_no_accelerator():
    import tensorflow as tf

    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    print("OneDeviceStrategy(/cpu:0) devices:", strategy.extended.worker_devices)
    assert hardware.accelerators(strategy) == ()
    assert hardware.bfloat16_warning(AVX2_ONLY, hardware.accelerators(strategy)) is not None


def test_benchmark_report_names_the_instruction_sets():
    from xlnet_tf.benchmarks.report import instruction_sets

    text = instruction_sets(hardware.reported_flags(AVX512_BF16))
    print(text)
    assert text.startswith("avx2, avx512f, avx512_vnni, avx512_bf16") and "not: amx_tile, amx_bf16, amx_int8" in text
    assert instruction_sets(None).startswith("unknown")


def test_peak_memory_reads_accelerators_then_resets_them(monkeypatch):
    """On GPUs / TPUs the log records the largest device peak since the last log line (TensorFlow's memory
    info, reset after reading); on a CPU-only run the process's peak resident size."""
    import tensorflow as tf

    peaks, resets = {"GPU:0": 3 * 2**30, "GPU:1": 5 * 2**30}, []
    monkeypatch.setattr(tf.config.experimental, "get_memory_info", lambda device: {"peak": peaks[device]})
    monkeypatch.setattr(tf.config.experimental, "reset_memory_stats", resets.append)
    gpus = FakeStrategy("/job:localhost/replica:0/task:0/device:GPU:0", "/job:localhost/replica:0/task:0/device:GPU:1")
    record = hardware.peak_memory_mb(gpus)
    print("two GPUs:", record, "reset:", resets)
    assert record == {"peak_device_memory_mb": 5 * 1024} and resets == ["GPU:0", "GPU:1"]
    cpu = hardware.peak_memory_mb(FakeStrategy("/job:localhost/replica:0/task:0/device:CPU:0"))
    print("CPU only:", cpu, "(bound > 50 MiB)")
    assert set(cpu) == {"peak_host_memory_mb"} and cpu["peak_host_memory_mb"] > 50


def test_the_logged_host_peak_never_reads_lower_than_before(monkeypatch):
    """VmHWM can read lower than it did (Linux keeps it lazily: the larger of a high-water mark updated at unmaps and
    the resident size now); a clean-clone run's pretraining log went 4195.734 -> 4195.703 MB between two lines and
    test_pretraining's check that the log's peaks never decrease failed. The log's host peak is the largest read so
    far in the process. Readings as the kernel gave them in that run."""
    readings = iter([4195.734375, 4195.703125, 4196.0])
    monkeypatch.setattr(hardware, "peak_resident_mb", lambda: next(readings))
    monkeypatch.setattr(hardware, "_HOST_PEAK_LOGGED_MB", [0.0])
    cpu = FakeStrategy("/job:localhost/replica:0/task:0/device:CPU:0")
    peaks = [hardware.peak_memory_mb(cpu)["peak_host_memory_mb"] for _ in range(3)]
    print(f"VmHWM read 4195.734, 4195.703, 4196.0 -> logged {peaks} (bound [4195.734375, 4195.734375, 4196.0])")
    assert peaks == [4195.734375, 4195.734375, 4196.0]


CHILD_PEAKS = """
import json, resource
from xlnet_tf import hardware
print(json.dumps([hardware.peak_resident_mb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024]))
"""


@pytest.mark.slow  # starts a process
def test_a_command_started_by_a_large_process_reports_its_own_peak():
    """The training log's and the benchmark workers' peak memory is the process's own (VmHWM): getrusage's
    ru_maxrss, which they read before, is inherited across exec from the process that started the program (the
    demo started by a test process logged 'peak mem 5.79 GiB', 0.94 GiB started from a shell)."""
    import subprocess
    import sys

    held = b"\x01" * (512 << 20)  # 512 MiB resident in this process while it starts the child
    done = subprocess.run([sys.executable, "-c", CHILD_PEAKS], capture_output=True, text=True, timeout=120)
    del held
    assert done.returncode == 0, done.stderr[-2000:]
    own, inherited = json.loads(done.stdout.splitlines()[-1])
    print(f"a child of a process holding 512 MiB: peak_resident_mb {own:.0f} MB (bound < 200), getrusage's "
          f"ru_maxrss {inherited:.0f} MB (>= 512: what the old reading reported)")
    assert own < 200 and inherited >= 512
