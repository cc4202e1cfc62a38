"""The two configuration objects: the architecture (bound to a checkpoint) and run options (bound to a run).

`XLNetConfig` reads and writes the published `xlnet_config.json`; `RunOptions` holds what may change from one
run to the next with the same weights (dropout, memory length, attention type, ...), as the original
`XLNetConfig` / `RunConfig` split.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

from xlnet_tf import files
from xlnet_tf.errors import UserError

# "gelu" is the tanh approximation used by the published TF code; "gelu_exact" is the erf form that
# transformers' XLNet calls "gelu". Converters keep their source's meaning.
FF_ACTIVATIONS = ("relu", "gelu", "gelu_exact")
ATTN_TYPES = ("bi", "uni")
# The run options a model directory records (run_options.json, beside xlnet_config.json): what its source ran
# with and what changes its outputs; loading the directory takes them as defaults. Dropout, recompute and
# initializer_range belong to each run and are never recorded.
RECORDED_RUN_OPTIONS = ("mem_len", "reuse_len", "bi_data", "clamp_len", "same_length", "attn_type")
# Those of them that a fine-tuned (head) model computes with: each changes every row's outputs on its own. Not
# these: bi_data (backward positions for the second half of a batch) makes a row's output depend on its place in
# the batch, which length buckets, packing, replicas and serving do not keep, and the original fine-tunes without
# it; mem_len / reuse_len decide the memory a next call reads, and heads return none.
HEAD_RUN_OPTIONS = ("clamp_len", "same_length", "attn_type")
RECOMPUTE_MODES = ("none", "blocks", "attention")  # see RunOptions.recompute
# The original's --init_std (0.02), the normal initialiser's stddev at the published widths (d_model 768 and 1024).
PUBLISHED_INIT_STD = 0.02
PUBLISHED_INIT_WIDTH = 768


class ConfigError(UserError):
    """A configuration file or value that cannot be used; the message names the file or field."""


def _check_fields(cls, data, source):
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {unknown}; allowed: {sorted(names)}")


@dataclasses.dataclass(frozen=True)
class XLNetConfig:
    """XLNet architecture, with the published `xlnet_config.json` keys.

    n_token: vocabulary size; d_model: hidden size; n_layer: number of blocks; n_head / d_head: attention
    heads and their size; d_inner: feed-forward size; ff_activation: "relu", "gelu" (tanh approximation,
    as the original) or "gelu_exact" (erf); untie_r: one set of relative-attention biases per layer (True)
    or one set shared by all layers (False).
    """

    n_token: int = 32000
    d_model: int = 1024
    n_layer: int = 24
    n_head: int = 16
    d_head: int = 64
    d_inner: int = 4096
    ff_activation: str = "gelu"
    untie_r: bool = True

    def __post_init__(self):
        for name in ("n_token", "d_model", "n_layer", "n_head", "d_head", "d_inner"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"XLNetConfig.{name} must be a positive integer, got {value!r}")
        if self.ff_activation not in FF_ACTIVATIONS:
            raise ConfigError(
                f"XLNetConfig.ff_activation must be one of {FF_ACTIVATIONS}, got {self.ff_activation!r}"
            )
        if not isinstance(self.untie_r, bool):
            raise ConfigError(f"XLNetConfig.untie_r must be true or false, got {self.untie_r!r}")

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data, source="XLNetConfig"):
        _check_fields(cls, data, source)
        try:
            return cls(**data)
        except ConfigError as error:
            raise ConfigError(f"{source}: {error}") from None

    @classmethod
    def from_json(cls, path):
        """Reads a published-style `xlnet_config.json`."""
        path = os.fspath(path)
        if not files.exists(path):
            raise ConfigError(f"{path}: no such config file")
        try:
            data = json.loads(files.read_text(path))
        except json.JSONDecodeError as error:
            raise ConfigError(f"{path}:{error.lineno}: not valid JSON ({error.msg})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a JSON object")
        return cls.from_dict(data, source=path)

    def to_json(self, path):
        """Writes `xlnet_config.json` (any filesystem; published whole, its folder created)."""
        files.write_json(path, self.to_dict())


# Published sizes (XLNet-base and -large) and a tiny one for tests and the demo.
MODEL_SIZES = {
    "tiny": XLNetConfig(n_token=32000, d_model=64, n_layer=2, n_head=4, d_head=16, d_inner=256),
    "base": XLNetConfig(n_token=32000, d_model=768, n_layer=12, n_head=12, d_head=64, d_inner=3072),
    "large": XLNetConfig(n_token=32000, d_model=1024, n_layer=24, n_head=16, d_head=64, d_inner=4096),
}


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """Options bound to a run rather than to the weights.

    dropout / dropatt: dropout rates on activations / attention probabilities; mem_len: how many hidden
    states each layer caches for the next segment (0 = no memory); reuse_len: how many leading positions of
    the current segment are cached (0 = all); bi_data: the first half of the batch uses forward relative
    positions and the second half backward ones; clamp_len: relative distances are clamped to this (-1 = no
    clamp); same_length: with "uni", every position attends to the same number of keys; attn_type: "bi"
    (bidirectional) or "uni" (causal); initializer_range: stddev of the normal initialiser (None: `init_std`'s
    default for the model's width: the original's 0.02 at the published widths, more for narrower models); recompute: what
    training recomputes in the backward pass instead of keeping ("none"; "blocks": every block's activations
    from its inputs; "attention": only the [B, N, Q, K] attention scores and probabilities).
    """

    dropout: float = 0.1
    dropatt: float = 0.1
    mem_len: int = 0
    reuse_len: int = 0
    bi_data: bool = False
    clamp_len: int = -1
    same_length: bool = False
    attn_type: str = "bi"
    initializer_range: float | None = None
    recompute: str = "none"

    def __post_init__(self):
        for name in ("dropout", "dropatt"):
            value = getattr(self, name)
            if not 0.0 <= float(value) < 1.0:
                raise ConfigError(f"RunOptions.{name} must be in [0, 1), got {value!r}")
        for name in ("mem_len", "reuse_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ConfigError(f"RunOptions.{name} must be an integer >= 0, got {value!r}")
        if not isinstance(self.clamp_len, int) or self.clamp_len < -1:
            raise ConfigError(f"RunOptions.clamp_len must be -1 (no clamp) or >= 0, got {self.clamp_len!r}")
        if self.attn_type not in ATTN_TYPES:
            raise ConfigError(f"RunOptions.attn_type must be one of {ATTN_TYPES}, got {self.attn_type!r}")
        if self.recompute not in RECOMPUTE_MODES:
            raise ConfigError(f"RunOptions.recompute must be one of {RECOMPUTE_MODES}, got {self.recompute!r}")
        if self.initializer_range is not None and not self.initializer_range > 0:
            raise ConfigError(f"RunOptions.initializer_range must be > 0 (or None: the width's default), got "
                              f"{self.initializer_range!r}")

    def to_dict(self):
        return dataclasses.asdict(self)

    def init_std(self, d_model):
        """The normal initialiser's stddev for a model of width `d_model`: `initializer_range` when given, else
        the original's 0.02 at the published widths (768, 1024) and 0.02 * sqrt(768 / d_model) below 768, so that
        a narrower model starts with the same weight scale relative to its fan-in (a tiny model of d_model 64:
        0.069). At 0.02, such a model's weights move by ~lr / 0.02 of their size per Adam step (10% at 2e-3), its
        attention stays uniform and its new heads learn no more than the label prior in hundreds of steps."""
        if self.initializer_range is not None:
            return self.initializer_range
        return PUBLISHED_INIT_STD * max(1.0, math.sqrt(PUBLISHED_INIT_WIDTH / d_model))

    @classmethod
    def from_dict(cls, data, source="RunOptions"):
        _check_fields(cls, data, source)
        try:
            return cls(**data)
        except ConfigError as error:
            raise ConfigError(f"{source}: {error}") from None

    def replace(self, **changes):
        return self.from_dict({**self.to_dict(), **changes})

    def recorded(self):
        """The RECORDED_RUN_OPTIONS that differ from the defaults: what a saved directory's run_options.json holds."""
        defaults = RunOptions()
        return {name: getattr(self, name) for name in RECORDED_RUN_OPTIONS
                if getattr(self, name) != getattr(defaults, name)}


def head_run_options(recorded):
    """Recorded run options (a dict) -> (those a head model computes with: HEAD_RUN_OPTIONS, the others)."""
    kept = {k: v for k, v in recorded.items() if k in HEAD_RUN_OPTIONS}
    return kept, {k: v for k, v in recorded.items() if k not in HEAD_RUN_OPTIONS}
