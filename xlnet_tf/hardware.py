"""What the machine offers for a precision: the CPU's instruction sets (from /proc/cpuinfo) and the dtype
policy of `--mixed-precision`, with a warning where bfloat16 or float16 would be emulated or slow.

On a CPU without native bfloat16 instructions (AVX512_BF16 or AMX-BF16), TensorFlow emulates bfloat16
matmuls: XLNet-base inference measured 57 tokens/s in bfloat16 against 293 in float32 on an AVX2-only CPU,
while an AVX-512-BF16 CPU runs bfloat16 about 1.7x faster than float32.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

CPUINFO = "/proc/cpuinfo"
# Instruction sets reported beside benchmark figures (their /proc/cpuinfo names).
REPORTED_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
NATIVE_BFLOAT16 = ("avx512_bf16", "amx_bf16")
# Intel's AMX: tile registers, and bfloat16 matmuls on them (several times AVX512_BF16's rate).
AMX_FLAGS = ("amx_tile", "amx_bf16")


def cpu_flags(cpuinfo=CPUINFO):
    """The instruction-set flags of the first CPU in `cpuinfo`, a frozenset; None where the file cannot be read
    (not Linux)."""
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        return None
    return frozenset()


def reported_flags(flags):
    """{flag: present} for REPORTED_FLAGS, or None when the flags are unknown."""
    return None if flags is None else {flag: flag in flags for flag in REPORTED_FLAGS}


def bfloat16_warning(flags, accelerators=()):
    """The one-line warning for bfloat16 on this machine, or None: only when the run is on the CPU (no
    `accelerators`) and the CPU's `flags` are known and lack native bfloat16."""
    if accelerators or flags is None or any(flag in flags for flag in NATIVE_BFLOAT16):
        return None
    return ("--mixed-precision bfloat16 on a CPU without native bfloat16 (no avx512_bf16 or amx_bf16 in "
            "/proc/cpuinfo): TensorFlow emulates it, about 5x SLOWER than float32 (XLNet-base inference 57 vs 293 "
            "tokens/s measured on an AVX2-only CPU); leave out --mixed-precision to run in float32")


def accelerators(strategy):
    """The GPU / TPU devices a tf.distribute strategy runs on (empty for CPU-only runs)."""
    devices = getattr(strategy.extended, "worker_devices", ()) if strategy is not None else ()
    return tuple(d for d in devices if d.upper().rsplit("DEVICE:", 1)[-1].split(":")[0] in ("GPU", "TPU"))


_READ = object()


def float16_warning(strategy=None):
    """The one-line warning for float16 on this machine, or None: a run on the CPU (emulated, slower than float32)
    or a TPU (no float16 units), or on a GPU without float16 tensor cores (compute capability below 7.0)."""
    devices = accelerators(strategy)
    if any("TPU" in device.upper() for device in devices):
        return "--mixed-precision float16 on a TPU: TPUs compute in bfloat16; use --mixed-precision bfloat16"
    if not devices:
        return ("--mixed-precision float16 on a CPU: TensorFlow emulates float16 matmuls, slower than float32; "
                "float16 pays on GPUs with tensor cores (V100, T4, A100, ...); leave out --mixed-precision here")
    import tensorflow as tf

    slow = []
    for gpu in tf.config.list_physical_devices("GPU"):
        capability = (tf.config.experimental.get_device_details(gpu) or {}).get("compute_capability")
        if capability and tuple(capability) < (7, 0):
            slow.append(f"{gpu.name} (compute capability {capability[0]}.{capability[1]})")
    if slow:
        return (f"--mixed-precision float16 on {', '.join(slow)}: no float16 tensor cores (they start at compute "
                "capability 7.0, V100 / T4), so float16 runs at about float32's speed")
    return None


def precision_policy(mixed_precision, strategy=None, flags=_READ):
    """The Keras dtype policy of `--mixed-precision`: "mixed_bfloat16" for "bfloat16", "mixed_float16" for
    "float16" (the training loop then scales the loss), else None (float32), logging `bfloat16_warning` /
    `float16_warning` when it applies (`flags`: the CPU's, read from /proc/cpuinfo by default; None =
    unknown)."""
    if mixed_precision == "float16":
        warning = float16_warning(strategy)
        if warning:
            log.warning(warning)
        return "mixed_float16"
    if mixed_precision != "bfloat16":
        return None
    warning = bfloat16_warning(cpu_flags() if flags is _READ else flags, accelerators(strategy))
    if warning:
        log.warning(warning)
    return "mixed_bfloat16"


_HOST_PEAK_LOGGED_MB = [0.0]  # the largest host peak `peak_memory_mb` has returned in this process


def peak_memory_mb(strategy=None):
    """Peak memory since the last call, for the training log: {"peak_device_memory_mb": ...} (the largest of the
    strategy's GPUs / TPUs, from TensorFlow's memory info, whose peak is then reset) or, on a CPU-only run,
    {"peak_host_memory_mb": ...} (this process's peak resident size so far, `peak_resident_mb`, never less than
    an earlier call's). Empty when neither can be read."""
    import tensorflow as tf

    devices = [device.rsplit("device:", 1)[-1] for device in accelerators(strategy)]
    peaks = []
    for device in devices:
        try:
            peaks.append(tf.config.experimental.get_memory_info(device)["peak"])
            tf.config.experimental.reset_memory_stats(device)
        except (ValueError, tf.errors.OpError):  # a device without memory statistics
            continue
    if peaks:
        return {"peak_device_memory_mb": max(peaks) / 2**20}
    if devices:
        return {}
    peak = peak_resident_mb()
    if peak is None:
        return {}
    _HOST_PEAK_LOGGED_MB[0] = max(_HOST_PEAK_LOGGED_MB[0], peak)  # VmHWM can read lower: `peak_resident_mb`
    return {"peak_host_memory_mb": _HOST_PEAK_LOGGED_MB[0]}


def _status_mb(field):
    """A size field of /proc/self/status ("VmRSS", "VmHWM") in MB; None where it cannot be read (not Linux)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return None


def resident_mb():
    """This process's resident size now, MB; None where it cannot be read."""
    return _status_mb("VmRSS")


def peak_resident_mb():
    """This process's peak resident size so far, MB: the peak of its own memory (VmHWM), not getrusage's
    ru_maxrss, which a program inherits across exec from the process that started it (a command started by a
    6 GB test process reported 6 GB); ru_maxrss where /proc cannot be read; None on neither. Linux keeps VmHWM
    lazily (the larger of a high-water mark updated at unmaps and the resident size now), so a later reading can
    be a little lower; `peak_memory_mb` keeps the training log's never decreasing."""
    peak = _status_mb("VmHWM")
    if peak is not None:
        return peak
    try:
        import resource
    except ImportError:  # not a Unix
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
