"""The documentation stays true: README.md is a short landing page, every relative link in README.md and docs/
resolves (files and #anchors), the MkDocs site builds with --strict, docs/cli.md is what docs/gen_cli.py writes
from the parser now, and every `xlnet-tf ...` command line shown in README.md, docs/ and serving/README.md parses
with the current parser (nothing runs). The Quickstart itself runs in tests/test_guides.py.

Cheap: no TensorFlow, one `mkdocs build` (a few seconds).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
import unicodedata

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
README_MAX_LINES = 250
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
SNIPPET = re.compile(r'^--8<--\s+"([^"]+)"\s*$')
SHELL_FENCES = ("sh", "bash", "shell", "console")


def check(label, value, bound, ok):
    print(f"  CHECK {label}: {value} (bound: {bound}) -> {'ok' if ok else 'FAILED'}")
    assert ok, f"{label}: {value} (bound: {bound})"


def markdown_files():
    """README.md, serving/README.md and every page under docs/ (paths relative to the repository root)."""
    found = ["README.md", os.path.join("serving", "README.md")]
    for folder, dirs, names in os.walk(os.path.join(ROOT, "docs")):
        dirs.sort()
        found += [os.path.relpath(os.path.join(folder, n), ROOT) for n in sorted(names) if n.endswith(".md")]
    return found


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def expand_snippets(path, text):
    """The page as MkDocs sees it: a `--8<-- "FILE"` or `--8<-- "FILE:SECTION"` line is that file (or the lines
    between its `[start:SECTION]` / `[end:SECTION]` markers); paths are relative to the repository root."""
    out = []
    for line in text.split("\n"):
        match = SNIPPET.match(line.strip())
        if not match:
            out.append(line)
            continue
        target, _, section = match.group(1).partition(":")
        lines = read(target).split("\n")
        if section:
            start = next(i for i, x in enumerate(lines) if f"[start:{section}]" in x)
            end = next(i for i, x in enumerate(lines) if f"[end:{section}]" in x)
            lines = lines[start + 1:end]
        out += lines
    return "\n".join(out)


def prose_lines(text, blank_code=True):
    """(line number, line) outside fenced code blocks, with inline code spans blanked (unless not
    `blank_code`)."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        match = FENCE.match(line)
        if match:
            if fence is None:
                fence = match.group(1)[0]
            elif match.group(1)[0] == fence and not match.group(2):
                fence = None
            continue
        if fence is None:
            yield number, re.sub(r"`[^`]*`", "``", line) if blank_code else line


def code_blocks(text):
    """(info string, [lines]) of every fenced code block."""
    blocks, fence, info, lines = [], None, "", []
    for line in text.split("\n"):
        match = FENCE.match(line)
        if match and fence is None:
            fence, info, lines = match.group(1)[0], match.group(2), []
        elif match and match.group(1)[0] == fence and not match.group(2):
            blocks.append((info, lines))
            fence = None
        elif fence is not None:
            lines.append(line)
    return blocks


def _slug_github(text):
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _slug_mkdocs(text):
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path):
    """Every anchor a heading of `path` (snippets expanded) gets on GitHub or in the MkDocs site."""
    found, seen = set(), {}
    for _, line in prose_lines(expand_snippets(path, read(path)), blank_code=False):
        match = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        title = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", match.group(2))
        title = re.sub(r"[*_`]", lambda m: m.group(0) if m.group(0) == "_" else "", title)
        for slug in {_slug_github(title), _slug_mkdocs(title)}:
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def test_readme_is_a_landing_page():
    text = read("README.md")
    lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    check("README.md lines", lines, f"<= {README_MAX_LINES}", lines <= README_MAX_LINES)
    first = code_blocks(text)[0]
    commands = [line.split("#")[0].strip() for line in first[1] if line.strip()]
    check("the README's first two commands", commands[:2], "['make demo', 'make test']",
          commands[:2] == ["make demo", "make test"])
    check("a '## Quickstart' section", "## Quickstart" in text.split("\n"), True, "## Quickstart" in text.split("\n"))


def test_every_relative_link_resolves():
    broken, checked = [], 0
    for path in markdown_files():
        text = read(path)
        for number, line in prose_lines(text):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
                    continue  # http(s)://, mailto:: not ours to check offline
                checked += 1
                file_part, _, anchor = target.partition("#")
                resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
                where = f"{path}:{number}: {target}"
                if not os.path.exists(os.path.join(ROOT, resolved)):
                    broken.append(f"{where} (no file {resolved})")
                elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
                    broken.append(f"{where} (no heading #{anchor} in {resolved})")
    print("\n".join(broken))
    check("relative links checked", checked, ">= 100", checked >= 100)
    check("broken relative links", len(broken), "0", not broken)


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path):
    try:
        import mkdocs  # noqa: F401
        import material  # noqa: F401
    except ImportError:
        pytest.fail("mkdocs and mkdocs-material are in the `test` extra: pip install -e '.[test]'")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    warnings = [line for line in (run.stdout + run.stderr).splitlines() if "WARNING" in line or "ERROR" in line]
    print("\n".join(warnings))
    check("mkdocs build --strict exit status", run.returncode, "0", run.returncode == 0)
    pages = sum(1 for _, _, names in os.walk(tmp_path / "site") for n in names if n == "index.html")
    check("pages built", pages, ">= 25", pages >= 25)


def _generator():
    spec = importlib.util.spec_from_file_location("gen_cli", os.path.join(ROOT, "docs", "gen_cli.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_generated_from_the_parser():
    expected = _generator().render()
    current = read(os.path.join("docs", "cli.md"))
    differ = [i + 1 for i, (a, b) in enumerate(zip(current.split("\n"), expected.split("\n"))) if a != b]
    check("docs/cli.md equals `python docs/gen_cli.py`'s output", f"first differing line {differ[:1]}"
          if differ or current != expected else "equal", "equal (regenerate it with `python docs/gen_cli.py`)",
          current == expected)


def command_lines(text):
    """Every `xlnet-tf ...` command in the shell blocks of `text`, as argument lists (continuations joined,
    comments dropped; `VAR=value` prefixes, `&`, `&&`, `;` and `|` split off)."""
    found = []
    for info, lines in code_blocks(text):
        if info not in SHELL_FENCES:
            continue
        joined, current = [], ""
        for line in lines:
            if line.rstrip().endswith("\\"):
                current += line.rstrip()[:-1] + " "
                continue
            joined.append(current + line)
            current = ""
        for line in joined:
            try:
                words = shlex.split(line, comments=True)
            except ValueError as error:
                raise AssertionError(f"unparseable shell line {line!r}: {error}") from None
            command = []
            for word in words + [";"]:
                if word in ("&", "&&", ";", "|", "||"):
                    if command:
                        found.append(command)
                    command = []
                elif command or word == "xlnet-tf":
                    command.append(word)
        found = [c for c in found if c and c[0] == "xlnet-tf"]
    return found


def parse(argv):
    """None when `argv` (without 'xlnet-tf') parses as `main` would parse it, else argparse's message. A command
    shown with `...` (the rest of its flags elided) may lack its required flags; `[--flag VALUE]` (an optional
    part) is parsed as `--flag VALUE`."""
    import argparse

    from xlnet_tf.arguments import leaf_parser
    from xlnet_tf.cli import build_parser

    argv = [word[1:] if word.startswith("[") else word for word in argv]
    argv = [word[:-1] if word.endswith("]") and "[" not in word else word for word in argv]
    elided = "..." in argv
    argv = [word for word in argv if word != "..."]
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            parser = build_parser()
            args, extra = parser.parse_known_args(argv)
            if extra and not getattr(args, "runner", None):
                leaf_parser(parser, args).unrecognized(extra)
    except SystemExit as error:
        message = stderr.getvalue().strip().splitlines()[-1] if stderr.getvalue().strip() else str(error)
        if elided and "the following arguments are required" in message:
            return None
        return message
    except argparse.ArgumentError as error:
        return str(error)
    return None


def test_every_command_line_shown_parses():
    failures, total, commands = [], 0, set()
    for path in markdown_files():
        for argv in command_lines(expand_snippets(path, read(path))):
            total += 1
            commands.add(argv[1] if len(argv) > 1 else "")
            message = parse(argv[1:])
            if message:
                failures.append(f"{path}: {shlex.join(argv)}\n    -> {message}")
    print("\n".join(failures))
    check("xlnet-tf command lines in README.md, docs/ and serving/README.md", total, ">= 60", total >= 60)
    from xlnet_tf.cli import build_parser

    every = set(build_parser()._subparsers._group_actions[0].choices)
    check("commands never shown", sorted(every - commands), "[] (every command of the parser)", every <= commands)
    check("command lines that do not parse", len(failures), "0", not failures)


def test_the_development_guide_shows_every_test_files_time_budget():
    """docs/development.md's budget table is tests/conftest.py's BUDGETS_S, and every test file has a budget (the
    table's rows, or the DEFAULT_BUDGET_S of the files it lists)."""
    from conftest import BUDGETS_S, DEFAULT_BUDGET_S

    text = read(os.path.join(ROOT, "docs", "development.md"))
    table = text[text.index("<!-- budgets: start -->"):text.index("<!-- budgets: end -->")]
    shown = {name: int(seconds) for name, seconds in re.findall(r"^\| `(test_\w+\.py)` \| (\d+) \|$", table, re.M)}
    others = table.split("Every other file", 1)[1]
    shown.update({name: DEFAULT_BUDGET_S for name in re.findall(r"`(test_\w+\.py)`", others)})
    check("the page's budgets equal BUDGETS_S", sorted(set(shown.items()) ^ set(BUDGETS_S.items())), "[]",
          shown == BUDGETS_S)
    files = sorted(name for name in os.listdir(os.path.join(ROOT, "tests")) if re.fullmatch(r"test_\w+\.py", name))
    check("test files without a budget", sorted(set(files) - set(BUDGETS_S)), "[]", set(files) <= set(BUDGETS_S))
    total = sum(BUDGETS_S.values())
    check("the budgets' sum, seconds of test time (two workers: about half of it in wall time)", total,
          "<= 2400 (20 minutes with two workers)", total <= 2400)


# A process that spends `seconds` of CPU, then (when it has one) waits for a line on stdin.
BURN = """import sys, time
end = time.process_time() + float(sys.argv[1])
while time.process_time() < end:
    pass
"""


@pytest.mark.slow
def test_a_tests_cpu_time_counts_the_processes_it_started():
    """docs/development.md: every run prints each file's CPU time, that of the test processes and of every process
    they started (tests/conftest.py `_tree_cpu_seconds`): a child still running counts, a grandchild its parent
    waited for counts, and a child the test waited for keeps counting once it has ended."""
    from conftest import _tree_cpu_seconds

    child_code = (BURN + "import subprocess\nsubprocess.run([sys.executable, '-c', sys.argv[2], sys.argv[1]])\n"
                  "print('burnt', flush=True)\nsys.stdin.readline()\n")
    before = _tree_cpu_seconds()
    child = subprocess.Popen([sys.executable, "-c", child_code, "0.4", BURN], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "burnt"
        running = _tree_cpu_seconds() - before  # the child's 0.4 s and its ended grandchild's 0.4 s
    finally:
        child.communicate("end\n", timeout=60)
    ended = _tree_cpu_seconds() - before
    print(f"CPU counted with the child running {running:.2f} s, after it ended {ended:.2f} s (bounds: each in "
          f"[0.75, 2.5]: 0.4 s the child, 0.4 s the grandchild it waited for, plus two interpreters' start-up, "
          f"less the clock ticks' rounding; after >= while running - 0.05)")
    assert 0.75 <= running <= 2.5 and 0.75 <= ended <= 2.5 and ended >= running - 0.05


def test_graph_ops_built_in_a_test_process_keep_no_traceback():
    """docs/development.md: the test processes build graph ops without the stack that built them
    (tests/conftest.py `op_tracebacks_off`, unless XLNET_TF_TEST_OP_TRACEBACKS=1), so that the speed-up it gives
    cannot go away unnoticed with a new TensorFlow; the same graph computes the same."""
    import tensorflow as tf

    from conftest import OP_TRACEBACKS_ENV

    kept = os.environ.get(OP_TRACEBACKS_ENV) == "1"
    graph = tf.Graph()
    with graph.as_default():
        total = tf.constant([1.5, 2.5]) * 2.0 + 1.0
    traceback = total.op.traceback
    check(f"frames kept for an op built here ({OP_TRACEBACKS_ENV}={'1' if kept else 'unset'})",
          None if traceback is None else len(traceback), "> 0" if kept else "None",
          (traceback is not None and len(traceback) > 0) if kept else traceback is None)
    with tf.compat.v1.Session(graph=graph) as session:
        values = session.run(total).tolist()
    check("what the graph computes", values, "[4.0, 6.0]", values == [4.0, 6.0])
