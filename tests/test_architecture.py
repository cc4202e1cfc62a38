"""The shape of the code, checked from its text (nothing of it runs):

* the layering in .importlinter (text and data -> layers -> model -> heads and tasks -> training, export ->
  serving, pipelines -> cli; no import circle between the modules of any package), checked by import-linter's
  `lint-imports` on the installed layout, staged in a temporary folder (export/, serving/ and benchmarks/ as
  xlnet_tf.export, ...: setup.cfg's package_dir), and shown to fail when one import breaks it;
* no module imports another module's private name (`from x import _name`);
* the server split along TensorFlow Serving's seams stays split: no file of serving/ over MAX_LINES, the HTTP
  layer imports nothing of models, JSON bodies or gRPC (circles among serving's modules: the acyclic contract);
* each command's flags beside what it runs: xlnet_tf/cli.py defines no flag, and every command of the parser is a
  `Command` of xlnet_tf.commands whose flags and run function live in one module;
* every `tf.function` of the project says `autograph=False` (docs/development.md: nothing is converted)."""

from __future__ import annotations

import ast
import configparser
import glob
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CONTRACTS = os.path.join(ROOT, ".importlinter")
SERVING = os.path.join(ROOT, "serving")
MAX_LINES = 600
# What the HTTP/1.1 layer may import from its own package: framing, deadlines and error codes, nothing that knows
# a model, a JSON body or gRPC.
HTTP_LAYER = {"http_server.py": {"http_messages", "deadline", "errors"}, "http_messages.py": {"errors"}}


def check(label, value, bound, ok):
    print(f"  CHECK {label}: {value} (bound: {bound}) -> {'ok' if ok else 'FAILED'}")
    assert ok, f"{label}: {value} (bound: {bound})"


def modules():
    return sorted(glob.glob(os.path.join(SERVING, "*.py")))


def tree(path):
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), path)


def relative_imports(path):
    """The modules of this package that `path` imports (`from .X import ...`, `from . import X`), anywhere in it."""
    found = set()
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found.update([node.module] if node.module else [a.name for a in node.names])
    return found


def test_each_command_defines_its_flags_beside_what_it_runs():
    from xlnet_tf.cli import build_parser
    from xlnet_tf.commands import COMMANDS

    cli_flags = sum(1 for node in ast.walk(tree(os.path.join(ROOT, "xlnet_tf", "cli.py")))
                    if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"
                    and not (node.args and getattr(node.args[0], "value", "") == "--verbose"))
    check("flags defined in xlnet_tf/cli.py (--verbose, every command's, aside)", cli_flags, "0", cli_flags == 0)
    apart = [c.name for c in COMMANDS if c.add_arguments.__module__ != c.run.__module__]
    check("commands whose flags and run function live in different modules", apart, "none", not apart)
    parsed = list(next(a for a in build_parser()._actions if a.dest == "command").choices)
    check("the parser's commands", parsed, "COMMANDS' names, in order", parsed == [c.name for c in COMMANDS])


def test_no_file_of_the_server_is_over_the_limit():
    sizes = {os.path.basename(p): sum(1 for _ in open(p, encoding="utf-8")) for p in modules()}
    largest = sorted(sizes.items(), key=lambda item: -item[1])[:4]
    check("largest files of serving/ (lines)", largest, f"each <= {MAX_LINES}", max(sizes.values()) <= MAX_LINES)


def test_the_http_layer_knows_no_model_json_or_grpc():
    for name, allowed in HTTP_LAYER.items():
        used = sorted(relative_imports(os.path.join(SERVING, name)))
        check(f"serving/{name} imports from the package", used, f"within {sorted(allowed)}", set(used) <= allowed)
    rest = sorted(set().union(*(relative_imports(os.path.join(SERVING, p))
                                for p in ("rest_api.py", "rest_handler.py", "rest_json.py"))))
    check("the REST modules import the gRPC front end", "grpc_api" in rest, False, "grpc_api" not in rest)


def package_dirs():
    """setup.cfg's package_dir: installed package name -> folder in the repository."""
    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, "setup.cfg"))
    lines = [line.split("=") for line in parser["options"]["package_dir"].strip().splitlines()]
    return {name.strip(): folder.strip() for name, folder in lines}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The package's .py files laid out as they install (xlnet_tf/, xlnet_tf/export/, ...) -> that folder."""
    root = tmp_path_factory.mktemp("installed")
    for name, folder in package_dirs().items():
        source = os.path.join(ROOT, folder)
        for path in glob.glob(os.path.join(source, "**", "*.py"), recursive=True):
            relative = os.path.relpath(path, source)
            if relative.split(os.sep)[0] in ("__pycache__",) or (
                    name == "xlnet_tf" and relative.split(os.sep)[0] in ("export", "serving", "benchmarks")):
                continue
            target = root.joinpath(*name.split("."), relative)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    return root


def lint_imports(folder):
    """`lint-imports` with the repository's contracts on the package staged in `folder` -> (exit status, output)."""
    env = dict(os.environ, PYTHONPATH=str(folder))
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "lint-imports"), "--config", CONTRACTS,
                           "--no-cache"], cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.slow
def test_the_import_contracts_hold(installed):
    status, output = lint_imports(installed)
    print(output[-3000:])
    kept = [line.strip() for line in output.splitlines() if line.rstrip().endswith("KEPT")]
    check("lint-imports exit status", status, "0", status == 0)
    check("contracts kept", len(kept), "2 (layers, acyclic)", len(kept) == 2)


@pytest.mark.slow
def test_an_import_against_the_layering_breaks_the_contract(installed, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(installed, broken)
    with open(broken / "xlnet_tf" / "layers" / "positions.py", "a", encoding="utf-8") as f:
        f.write("\n\ndef _bad():\n    from xlnet_tf.training import loop  # noqa: F401\n")
    status, output = lint_imports(broken)
    print(output[-3000:])
    check("lint-imports exit status with layers/positions.py importing training.loop", status, "1", status == 1)
    named = "xlnet_tf.layers.positions -> xlnet_tf.training.loop" in output
    check("the report names the import", named, True, named)
    circle = tmp_path / "circle"
    shutil.copytree(installed, circle)
    with open(circle / "xlnet_tf" / "data" / "labels.py", "a", encoding="utf-8") as f:
        f.write("\n\ndef _bad():\n    from xlnet_tf.data import readers  # noqa: F401\n")
    with open(circle / "xlnet_tf" / "data" / "readers.py", "a", encoding="utf-8") as f:
        f.write("\n\nfrom xlnet_tf.data import labels  # noqa: E402,F401\n")
    status, output = lint_imports(circle)
    check("lint-imports exit status with data.labels <-> data.readers", status, "1", status == 1)
    broken_names = [line.strip() for line in output.splitlines() if line.rstrip().endswith("BROKEN")]
    check("contracts broken by the circle", broken_names, "the acyclic one",
          len(broken_names) == 1 and "circles" in broken_names[0])


def test_no_module_imports_a_private_name_of_another(installed):
    crossing = []
    for path in sorted(glob.glob(str(installed / "**" / "*.py"), recursive=True)):
        for node in ast.walk(tree(path)):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                crossing += [f"{os.path.relpath(path, installed)}: {node.module or '.'}.{a.name}"
                             for a in node.names if a.name.startswith("_") and not a.name.endswith("__")]
    check("private names imported from another module", crossing, "none", not crossing)


# ----------------------------------------------------------------------------------------------------
# Nothing of the project is converted by autograph (docs/development.md, "Where a run's time goes")

# Other projects' models, traced as their own users trace them (keras-hub's and Model Garden's code may need it).
OTHERS = {os.path.join("xlnet_tf", "benchmarks", "run_keras_hub.py"),
          os.path.join("xlnet_tf", "benchmarks", "run_model_garden.py")}


def tf_function_sites(module):
    """Every `tf.function` in a parsed module (`ast.parse`) -> [(line, converts)]: each `tf.function(...)` call or
    decorator, and each bare `@tf.function`; `converts` unless the call says `autograph=False`."""
    def is_tf_function(node):
        return (isinstance(node, ast.Attribute) and node.attr == "function" and isinstance(node.value, ast.Name)
                and node.value.id == "tf")

    sites = []
    for node in ast.walk(module):
        if isinstance(node, ast.Call) and is_tf_function(node.func):
            off = any(k.arg == "autograph" and isinstance(k.value, ast.Constant) and k.value.value is False
                      for k in node.keywords)
            sites.append((node.lineno, not off))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            sites += [(d.lineno, True) for d in node.decorator_list if is_tf_function(d)]
    return sites


def test_every_tf_function_of_the_project_is_traced_without_autograph(installed):
    """Every `tf.function` in the project's source says `autograph=False` (its loops are `tf.while_loop`s, its
    branches `tf.cond`s): converting costs a process tenths of a second per function tree. The functions handed to
    `strategy.run` or `tf.data` are checked as the training step runs (tests/test_training_step.py)."""
    samples = {"@tf.function\ndef f(x):\n    return x\n": 1,
               "f = tf.function(lambda x: x, jit_compile=True)\n": 1,
               "f = tf.function(lambda x: x, autograph=True)\n": 1,
               "f = tf.function(lambda x: x, autograph=False)\n": 0,
               "@tf.function(input_signature=[], autograph=False)\ndef f():\n    return 1\n": 0}
    for source, want in samples.items():
        got = sum(converts for _, converts in tf_function_sites(ast.parse(source)))
        check(f"the check on {source.splitlines()[0]!r}: functions autograph would convert", got, want, got == want)
    sites, converted = 0, []
    for path in sorted(glob.glob(str(installed / "**" / "*.py"), recursive=True)):
        if os.path.relpath(path, installed) in OTHERS:
            continue
        found = tf_function_sites(tree(path))
        sites += len(found)
        converted += [f"{os.path.relpath(path, installed)}:{line}" for line, converts in found if converts]
    check(f"tf.function uses in the package (but {', '.join(sorted(OTHERS))}), and those autograph would convert",
          (sites, converted), "(more than 20, [])", sites > 20 and not converted)
