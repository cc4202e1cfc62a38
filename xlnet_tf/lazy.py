"""Lazy public names for packages whose import must stay cheap (no TensorFlow until a name is used)."""

import importlib


def lazy_getattr(package, names):
    """A module-level `__getattr__` for `package` that imports `names[attr]` (a module path) on first use."""

    def __getattr__(attr):
        if attr in names:
            value = getattr(importlib.import_module(names[attr]), attr)
            setattr(importlib.import_module(package), attr, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {attr!r}")

    return __getattr__
