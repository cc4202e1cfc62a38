"""The shape of the code, checked from its text (nothing runs): the server split along TensorFlow Serving's seams
stays split (no file of serving/ over MAX_LINES; the HTTP layer imports nothing of models, JSON bodies or gRPC),
and no serving module uses another module's private name or closes an import circle."""

from __future__ import annotations

import ast
import glob
import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
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
    """(module imported from this package, names, inside a function?) for each `from .X import ...`."""
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.ImportFrom) and child.level == 1:
                if child.module:
                    found.append((child.module, [a.name for a in child.names], inner))
                else:  # from . import a, b
                    found.extend((a.name, [], inner) for a in child.names)
            visit(child, inner)

    visit(tree(path), False)
    return found


def test_no_file_of_the_server_is_over_the_limit():
    sizes = {os.path.basename(p): sum(1 for _ in open(p, encoding="utf-8")) for p in modules()}
    largest = sorted(sizes.items(), key=lambda item: -item[1])[:4]
    check("largest files of serving/ (lines)", largest, f"each <= {MAX_LINES}", max(sizes.values()) <= MAX_LINES)


def test_the_http_layer_knows_no_model_json_or_grpc():
    for name, allowed in HTTP_LAYER.items():
        used = sorted({module for module, _, _ in relative_imports(os.path.join(SERVING, name))})
        check(f"serving/{name} imports from the package", used, f"within {sorted(allowed)}", set(used) <= allowed)
    rest = sorted({m for p in ("rest_api.py", "rest_handler.py", "rest_json.py")
                   for m, _, _ in relative_imports(os.path.join(SERVING, p))})
    check("the REST modules import the gRPC front end", "grpc_api" in rest, False, "grpc_api" not in rest)


def cycles(graph):
    """Every cycle of `graph` (module -> modules it imports), each as a list from its smallest module."""
    found = set()

    def walk(path):
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == path[0]:
                found.add(tuple(path))
            elif nxt not in path and nxt > path[0]:
                walk(path + [nxt])

    for start in sorted(graph):
        walk([start])
    return sorted(list(c) for c in found)


def test_no_private_name_crosses_a_module_and_no_import_circle():
    """Imports inside functions count: a lazy import (kept where it spares a command TensorFlow's start-up) must
    not close a circle either."""
    crossing, graph = [], {}
    for path in modules():
        name = os.path.basename(path)[:-3]
        for module, names, _ in relative_imports(path):
            crossing += [f"{name}.py: {module}.{n}" for n in names if n.startswith("_")]
            graph.setdefault(name, set()).add(module.split(".")[0])
    check("private names imported from another serving module", crossing, "none", not crossing)
    found = cycles(graph)
    check("import circles among serving/ modules (imports in functions included)", found, "none", not found)


def test_the_circle_finder_finds_circles():
    graph = {"core": {"config"}, "config": {"errors"}, "errors": set(), "server": {"core", "cli"}, "cli": {"server"},
             "a": {"b"}, "b": {"c"}, "c": {"a"}}
    found = cycles(graph)
    check("circles found in a made-up graph", found, "[['a', 'b', 'c'], ['cli', 'server']]",
          found == [["a", "b", "c"], ["cli", "server"]])
