"""Sizes that keep the code readable (docs/architecture.md): no source file over 800 lines and
no function over 100, unless a comment at its head says why. For a function that comment is
the first line of its body (after the docstring) and starts with `# Long:`; for a file it is a
line starting with `# Long:` among its first 10. A file or function that grows past the limit
fails here, named with its size."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOPS = ("app", "ui", "plugins", "bench", "tests", "scripts", "packaging")
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 100
MARK = "# Long:"


def _sources():
    for top in TOPS:
        yield from sorted((REPO / top).rglob("*.py"))


def _says_why(lines, fn):
    """Whether the function's head holds a `# Long:` comment: in the comment lines before its
    first statement, or before the statement after its docstring."""
    body = fn.body
    firsts = [body[0].lineno]
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str) and len(body) > 1:
        firsts.append(body[1].lineno)
    for first in firsts:
        n = first - 1  # 1-based line number of the line above the statement
        while n > 0 and lines[n - 1].strip().startswith("#"):
            if lines[n - 1].strip().startswith(MARK):
                return True
            n -= 1
    return False


def oversized(path, root=REPO):
    """[(what, lines)] in one file over the limits without a comment that says why."""
    text = path.read_text()
    lines = text.split("\n")
    found = []
    n = text.count("\n")
    if n > MAX_FILE_LINES and not any(l.startswith(MARK) for l in lines[:10]):
        found.append((str(path.relative_to(root)), n))
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            size = node.end_lineno - node.lineno + 1
            if size > MAX_FUNCTION_LINES and not _says_why(lines, node):
                found.append((f"{path.relative_to(root)}:{node.lineno} {node.name}()", size))
    return found


def test_no_file_or_function_is_too_long_without_saying_why():
    found = [f for p in _sources() for f in oversized(p)]
    assert not found, "over the limits (files 800 lines, functions 100), with no '# Long:' " \
                      "comment at the head saying why: " + \
                      "; ".join(f"{what}: {n} lines" for what, n in found)


def test_the_check_finds_a_long_function_and_accepts_one_that_says_why(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    plain = tmp_path / "plain.py"
    plain.write_text("def f():\n" + body)
    assert oversized(plain, tmp_path) == [("plain.py:1 f()", MAX_FUNCTION_LINES + 1)]
    said = tmp_path / "said.py"
    said.write_text('def f():\n    """Doc."""\n    # Long: a reason.\n' + body)
    assert oversized(said, tmp_path) == []
    big = tmp_path / "big.py"
    big.write_text("x = 1\n" * (MAX_FILE_LINES + 1))
    assert oversized(big, tmp_path) == [("big.py", MAX_FILE_LINES + 1)]
