"""Numbers that restate the reference script's defaults beside a use of the script.

The script's parser is the one home of its defaults: code reads one as ``parse_args([]).NAME``,
so that changing a default is one edit. ``make lint`` fails on a number equal to a parser default
(``add_argument(..., default=NUMBER)`` in the script's ``parse_args``) where it stands for it:

- an argument of one of the script's functions, by keyword or by position, whose parameter is
  named as a parser option and has no default of its own (the script's ``main`` passes the
  parser's value there): ``build(strategy, 2e-3)``, ``build(strategy, learning_rate=2e-3)``;
- a line, in Python, a notebook's code or TOML, whose comment says the number is the script's:
  ``64 * REPLICAS  # the script's default``, ``2e-3  # the script's --learning-rate``.

A number that only equals a default (a seed of 0, 8 replicas of a test's own) is not flagged:
nothing says it is the script's. Where the script cannot be imported (notebook 12_keras3_on_jax
runs JAX without TensorFlow) a test holds the literal to the parser instead
(tests/test_lesson_code_keras3_on_jax.py). ``python tools/script_defaults.py`` lists what it finds.
"""

from __future__ import annotations

import ast
import io
import json
import re
import sys
import tokenize
from pathlib import Path

import lessons
from notebook_files import ROOT
from script_parts import SCRIPT

__all__ = ["defaults", "functions", "problems", "stale_literals"]

# A comment that says its line's value is the script's: "the script's default", "script default",
# "the script's --learning-rate".
SAYS_SCRIPT = re.compile(r"\bscript(?:'s)?\b(?P<rest>.*)", re.IGNORECASE)
OPTION = re.compile(r"--([a-z][a-z0-9-]*)")
NUMBER = re.compile(r"(?<![\w.])[0-9][0-9_]*(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?(?![\w.])")
CHECKED = (".py", ".ipynb", ".toml")


def _number(node: ast.AST) -> float | None:
    """The value of a literal int or float (a negative one too), else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    return None


def defaults(script_text: str) -> dict[str, tuple[str, float]]:
    """``{dest: (option, default)}`` of the numeric defaults ``parse_args`` gives the parser."""
    tree = ast.parse(script_text)
    found = {}
    for function in tree.body:
        if not (isinstance(function, ast.FunctionDef) and function.name == "parse_args"):
            continue
        for call in ast.walk(function):
            if not (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == "add_argument"
                and call.args
                and isinstance(call.args[0], ast.Constant)
            ):
                continue
            keywords = {k.arg: k.value for k in call.keywords}
            value = _number(keywords["default"]) if "default" in keywords else None
            if value is None:
                continue
            option = call.args[0].value
            dest = option.lstrip("-").replace("-", "_")
            if isinstance(keywords.get("dest"), ast.Constant):
                dest = keywords["dest"].value
            found[dest] = (option, value)
    return found


def functions(script_text: str) -> dict[str, dict[str, bool]]:
    """``{function: {parameter: has a default}}`` of the script's top-level functions, the
    parameters in order."""
    found = {}
    for node in ast.parse(script_text).body:
        if isinstance(node, ast.FunctionDef):
            positional = [*node.args.posonlyargs, *node.args.args]
            first_default = len(positional) - len(node.args.defaults)
            params = {a.arg: i >= first_default for i, a in enumerate(positional)}
            for arg, default in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True):
                params[arg.arg] = default is not None
            found[node.name] = params
    return found


def _script_names(tree: ast.AST, module: str) -> tuple[dict[str, str], set[str]]:
    """The script's functions as this code names them (``{local name: function}``), and the
    names the module itself goes by (``import train_tpu as t``)."""
    imported, aliases = {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == module:
            imported |= {(a.asname or a.name): a.name for a in node.names}
        elif isinstance(node, ast.Import):
            aliases |= {a.asname or a.name for a in node.names if a.name == module}
    return imported, aliases


def _called(call: ast.Call, imported: dict[str, str], aliases: set[str]) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return imported.get(func.id)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.attr if func.value.id in aliases else None
    return None


def _arguments(call: ast.Call, params: dict[str, bool]):
    """``(parameter, value node)`` of each argument the call passes, positions matched to the
    signature until a ``*args``."""
    for name, node in zip(params, call.args, strict=False):
        if isinstance(node, ast.Starred):
            break
        yield name, node
    for keyword in call.keywords:
        if keyword.arg is not None:
            yield keyword.arg, keyword.value


def _comment_claims(comment: str, found: dict[str, tuple[str, float]]) -> list[str]:
    """The parser attributes a comment says its line's value is: those whose option it names
    after "script('s)", or every one when it says "default" there without naming one."""
    said = SAYS_SCRIPT.search(comment)
    if not said:
        return []
    rest = said.group("rest")
    options = {option: dest for dest, (option, _) in found.items()}
    named = [options[f"--{o}"] for o in OPTION.findall(rest) if f"--{o}" in options]
    if named:
        return named
    return list(found) if re.search(r"\bdefault", rest, re.IGNORECASE) else []


def _python_lines(code: str) -> dict[int, tuple[list[float], str]]:
    """``{line: (numbers in the code, comment)}`` of the lines that have a comment."""
    numbers, comments = {}, {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type == tokenize.NUMBER:
                try:
                    value = ast.literal_eval(token.string)
                except ValueError:  # an imaginary or otherwise odd literal
                    continue
                numbers.setdefault(token.start[0], []).append(value)
            elif token.type == tokenize.COMMENT:
                comments[token.start[0]] = token.string
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return {}
    return {line: (numbers.get(line, []), comment) for line, comment in comments.items()}


def _claimed(numbers, comment, found, where, line) -> list[str]:
    out = []
    for dest in _comment_claims(comment, found):
        option, default = found[dest]
        if any(n == default and type(n) is not bool for n in numbers):
            out.append(_message(where, line, default, option, dest))
    return out


def _message(where: str, line: int, value: float, option: str, dest: str) -> str:
    return (
        f"{where}, line {line}: {value:g} restates the script's {option} default; "
        f"read it from the parser, parse_args([]).{dest}"
    )


def problems(
    code: str,
    where: str,
    found: dict,
    signatures: dict,
    module: str = "train_tpu",
    imports: str = "",
) -> list[str]:
    """What restates a default in one piece of Python (a file, or a notebook's code cell), named
    ``where`` in the messages; ``imports``: import lines from elsewhere (a notebook's other
    cells) that say which names are the script's."""
    out = []
    try:
        tree = ast.parse(f"{code}\n{imports}")
    except SyntaxError:
        tree = None
    if tree is not None:
        imported, aliases = _script_names(tree, module)
        last = len(code.split("\n"))
        for call in ast.walk(tree):
            if not isinstance(call, ast.Call) or call.lineno > last:
                continue
            function = _called(call, imported, aliases)
            params = signatures.get(function)
            if params is None:
                continue
            for name, node in _arguments(call, params):
                value = _number(node)
                if name in found and not params.get(name, True) and value == found[name][1]:
                    out.append(_message(where, node.lineno, value, found[name][0], name))
    for line, (numbers, comment) in sorted(_python_lines(code).items()):
        out += _claimed(numbers, comment, found, where, line)
    return sorted(set(out), key=out.index)


def _toml_problems(text: str, where: str, found: dict) -> list[str]:
    out = []
    for line, content in enumerate(text.splitlines(), 1):
        code, hash_, comment = content.partition("#")
        if hash_:
            numbers = [float(n.replace("_", "")) for n in NUMBER.findall(code)]
            out += _claimed(numbers, comment, found, where, line)
    return out


def _notebook_code(text: str) -> list[tuple[int, str]]:
    """``(cell index, source)`` of a notebook's code cells, IPython's ``!`` and ``%`` lines
    blanked (they are not Python)."""
    cells = []
    for index, cell in enumerate(json.loads(text)["cells"]):
        if cell["cell_type"] == "code":
            source = "".join(cell["source"])
            lines = ["" if s.lstrip().startswith(("!", "%")) else s for s in source.split("\n")]
            cells.append((index, "\n".join(lines)))
    return cells


def _imports(code: str) -> str:
    """The import statements of some code, one a line."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return ""
    wanted = (ast.Import, ast.ImportFrom)
    return "\n".join(ast.unparse(n) for n in ast.walk(tree) if isinstance(n, wanted))


def stale_literals(files: dict[str, str], script_text: str, script_name: str) -> list[str]:
    """Every problem in ``files`` (``{path: text}``), the script itself left out."""
    found, signatures = defaults(script_text), functions(script_text)
    module = Path(script_name).stem
    out = []
    for name, text in sorted(files.items()):
        if name == script_name or not name.endswith(CHECKED):
            continue
        if name.endswith(".toml"):
            out += _toml_problems(text, name, found)
        elif name.endswith(".py"):
            out += problems(text, name, found, signatures, module)
        else:
            cells = _notebook_code(text)
            # The script's names are imported once for the whole notebook.
            imports = "\n".join(_imports(source) for _, source in cells)
            for index, source in cells:
                where = f"{name}, cell {index}"
                out += problems(source, where, found, signatures, module, imports)
    return out


def main() -> int:
    script_name = str(SCRIPT.relative_to(ROOT))
    stale = stale_literals(
        lessons.texts(ROOT, ("tests/data/",)), SCRIPT.read_text(encoding="utf-8"), script_name
    )
    for line in stale:
        print(line)
    if stale:
        print(f"{len(stale)} number(s) restate a default of {script_name}'s parser.")
        return 1
    print(f"No number restates a default of {script_name}'s parser.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
