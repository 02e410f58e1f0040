"""The design rules a newcomer relies on, checked as properties of the code (never file names):
imports point one way, classes are composed rather than sliced into chains of base classes,
each class sets what it reads, the action mode is one room (``policy/``), no import-path
aliases, and functions stay readable. ``docs/development.md`` explains each rule."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import gym_llm
from tests.paths import ROOT

#: Where each part of ``gym_llm`` lives in the repository.
FOLDERS = {"gym_llm": ROOT / "llm_policy", "wrappers": ROOT / "wrappers", "envs": ROOT / "envs"}
#: The package order (rule 1): a module may import its own level or a lower one, never a higher.
LEVEL = {
    "spaces": 0, "text": 0, "replies": 0, "testing": 0, "configs": 0, "grammar": 0,
    "wrappers": 1, "envs": 2, "policy": 3, "rl": 4,
    "evaluation": 5, "experiments": 6, "cli": 7,
}  # fmt: skip
#: Lines a function body may take (docstring aside) before it stops reading as one idea.
FUNCTION_LINES = 80
#: Functions allowed past FUNCTION_LINES, each with why; this list may only shrink.
LONG_FUNCTIONS = {
    # Declarative: one add_argument per flag. They go when the flags come from the configs.
    ("cli/bench.py", "build_parser"),
    ("cli/commands.py", "build_parser"),
    # One run end to end; splits along its phases once TrainConfig nests the components'.
    ("experiments/run.py", "run"),
    # Builds the policy's parts in their order (heads, prompts, runner, strategy), one
    # keyword per line in each call.
    ("policy/llm_policy.py", "__init__"),
    ("rl/sft.py", "warm_start"),
}
#: A module past this many lines is reported (a prompt to look again, not a failure).
MODULE_LINES = 800


def _sources() -> Iterator[tuple[str, Path]]:
    """``(package-relative name, path)`` of every library module, e.g. ``("rl/ppo/ppo.py", ...)``."""
    for part, folder in FOLDERS.items():
        for path in sorted(folder.rglob("*.py")):
            relative = path.relative_to(folder).as_posix()
            yield (relative if part == "gym_llm" else f"{part}/{relative}"), path


def _level(name: str) -> int | None:
    """The package level of a module named ``gym_llm.x...`` or a repository-relative path."""
    head = name.removeprefix("gym_llm.").replace("/", ".").split(".")[0].removesuffix(".py")
    return LEVEL.get(head)


def _imports(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``(line, module)`` of every ``gym_llm`` import, inside functions too; a name from the
    lazy public API (``from gym_llm import PPO``) counts as the module it lives in."""
    lazy: dict[str, str] = getattr(gym_llm, "_LAZY", {})
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gym_llm"):
            if node.module != "gym_llm":
                yield node.lineno, node.module
                continue
            for alias in node.names:
                yield node.lineno, lazy.get(alias.name, f"gym_llm.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("gym_llm."):
                    yield node.lineno, alias.name


def test_imports_point_one_way() -> None:
    backward = []
    for name, path in _sources():
        own = _level(name)
        if own is None:
            continue
        for line, module in _imports(ast.parse(path.read_text())):
            target = _level(module)
            if target is not None and target > own:
                backward.append(f"{name}:{line} imports {module}")
    assert not backward, "imports against the package order:\n" + "\n".join(backward)


def test_the_order_check_catches_a_backward_import() -> None:
    code = "def f():\n    from gym_llm import PPO\n    import gym_llm.cli.commands\n"
    found = [_level(m) for _, m in _imports(ast.parse(code))]
    assert found == [LEVEL["rl"], LEVEL["cli"]] and _level("policy/x.py") == LEVEL["policy"]


def _library_classes() -> list[type]:
    classes: dict[str, type] = {}
    for info in pkgutil.walk_packages(gym_llm.__path__, "gym_llm."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if inspect.isclass(value) and value.__module__ == info.name:
                classes[f"{value.__module__}.{value.__qualname__}"] = value
    return list(classes.values())


def _in_library(cls: type) -> bool:
    return cls.__module__.startswith("gym_llm.")


def test_classes_are_composed_not_sliced_into_base_classes() -> None:
    """At most one in-library level of inheritance: a class may subclass a library class that
    has no library base itself (exceptions, and the ``Agent`` users subclass, aside)."""
    deep = []
    for cls in _library_classes():
        if issubclass(cls, BaseException):
            continue
        for base in cls.__mro__[1:]:
            if _in_library(base) and any(_in_library(b) for b in base.__mro__[1:]):
                deep.append(f"{cls.__qualname__} -> {base.__qualname__} -> ...")
                break
    assert not deep, "library classes more than one level deep:\n" + "\n".join(deep)


def _external_attributes(cls: type) -> set[str]:
    """Names an external base class (SB3, torch, Gymnasium) provides: its class attributes and
    whatever its methods assign to ``self``."""
    names: set[str] = set()
    for base in cls.__mro__[1:]:
        if _in_library(base) or base is object:
            continue
        names.update(dir(base))
        try:
            source = inspect.getsource(base)
        except (OSError, TypeError):
            continue
        names.update(re.findall(r"self\.(\w+)\s*(?::[^=\n]*)?=", source))
    return names


def _self_reads_and_writes(cls: type) -> tuple[dict[str, int], set[str]]:
    try:
        tree = ast.parse(inspect.cleandoc("\n" + inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}, set()
    reads: dict[str, int] = {}
    writes: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id not in ("self", "cls"):
                continue
            if isinstance(node.ctx, ast.Store | ast.Del):
                writes.add(node.attr)
            else:
                reads.setdefault(node.attr, node.lineno)
        elif isinstance(node, ast.Call) and node.args:
            called = getattr(node.func, "id", None) or getattr(node.func, "attr", "")
            first = node.args[0]
            if called == "setattr" and getattr(first, "id", "") == "self":
                writes.add("*")  # names set dynamically: not checked
            elif called in ("register_buffer", "register_parameter") and isinstance(
                first, ast.Constant
            ):
                writes.add(str(first.value))
    for method in ast.walk(tree):  # __new__ sets the attributes of the object it makes
        if isinstance(method, ast.FunctionDef) and method.name == "__new__":
            for node in ast.walk(method):
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                    writes.add(node.attr)
    body = tree.body[0]
    assert isinstance(body, ast.ClassDef)
    for item in body.body:  # methods, properties, class attributes and annotations
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
            writes.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            if item.value is not None or not _is_declaration_only(item):
                writes.add(item.target.id)
        elif isinstance(item, ast.Assign):
            writes.update(t.id for t in item.targets if isinstance(t, ast.Name))
    return reads, writes


def _is_declaration_only(item: ast.AnnAssign) -> bool:
    """A bare annotation (``x: int``) declares an attribute someone else must set."""
    return item.value is None


def test_each_class_sets_the_attributes_it_reads() -> None:
    """A class reads only what it (or an external base such as SB3's) assigns, so nobody has to
    look in another file to learn where a value comes from. Dataclasses, named tuples,
    protocols and exceptions are records, not parts."""
    unset = []
    for cls in _library_classes():
        if issubclass(cls, BaseException) or getattr(cls, "_is_protocol", False):
            continue
        if "__dataclass_fields__" in vars(cls) or hasattr(cls, "_fields"):
            continue
        reads, writes = _self_reads_and_writes(cls)
        if "*" in writes:
            continue
        provided = writes | _external_attributes(cls)
        for base in cls.__mro__[1:]:
            if _in_library(base):
                provided |= _self_reads_and_writes(base)[1]
        missing = sorted(name for name in reads if name not in provided)
        if missing:
            unset.append(f"{cls.__module__}.{cls.__qualname__} reads {missing}")
    assert not unset, "attributes read but set elsewhere:\n" + "\n".join(unset)


def _branches_on_mode(tree: ast.AST) -> Iterator[int]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            literals = [
                s.value
                for side in sides
                for s in (
                    [side] if not isinstance(side, ast.Tuple | ast.List | ast.Set) else side.elts
                )
                if isinstance(s, ast.Constant)
            ]
            if {"choice", "generate"} & set(literals):
                yield node.lineno
        elif (
            isinstance(node, ast.Attribute)
            and node.attr == "action_mode"
            and isinstance(node.ctx, ast.Load)
        ):
            yield node.lineno


def test_nothing_outside_policy_branches_on_the_action_mode() -> None:
    """The action mode is one room: callers ask the policy what it can do
    (``scores_listed_actions``, ``chooses_among_listed``) instead of reading its mode."""
    found = [
        f"{name}:{line}"
        for name, path in _sources()
        if not name.startswith("policy/")
        for line in _branches_on_mode(ast.parse(path.read_text()))
    ]
    assert not found, "action_mode branches outside policy/:\n" + "\n".join(found)


def test_the_mode_check_catches_a_branch() -> None:
    code = "if policy.action_mode == 'choice':\n    pass\nok = mode in ('generate', 'x')\n"
    assert sorted(set(_branches_on_mode(ast.parse(code)))) == [1, 3]


def test_no_import_path_aliases() -> None:
    """When something moves every reference moves with it: no module ``__getattr__`` (but the
    package's lazy public API) and nothing written into ``sys.modules`` or ``sys.meta_path``."""
    aliases = []
    for name, path in _sources():
        source = path.read_text()
        tree = ast.parse(source)
        lazy_api = name == "__init__.py"
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == "__getattr__" and not lazy_api:
                aliases.append(f"{name}: module __getattr__")
        if re.search(r"sys\.(meta_path|modules)\s*(\[|\.(append|insert))", source):
            aliases.append(f"{name}: writes sys.modules or sys.meta_path")
    assert not aliases, "\n".join(aliases)


def _function_lengths() -> Iterator[tuple[str, str, int]]:
    for name, path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                body = node.body
                if (
                    body
                    and isinstance(body[0], ast.Expr)
                    and isinstance(getattr(body[0], "value", None), ast.Constant)
                ):
                    body = body[1:]  # the docstring
                if body:
                    yield name, node.name, body[-1].end_lineno - body[0].lineno + 1


def test_functions_stay_readable() -> None:
    long = {(name, function): lines for name, function, lines in _function_lengths()}
    over = {k: v for k, v in long.items() if v > FUNCTION_LINES and k not in LONG_FUNCTIONS}
    assert not over, f"functions past {FUNCTION_LINES} lines: {over}"
    stale = {k for k in LONG_FUNCTIONS if long.get(k, 0) <= FUNCTION_LINES}
    assert not stale, f"no longer long, take them off LONG_FUNCTIONS: {stale}"


def test_long_modules_are_reported() -> None:
    """Reported, not failed: a long module is a prompt to look again, never a reason to split
    one idea across files to meet a number."""
    long = [
        (name, n)
        for name, path in _sources()
        if (n := len(path.read_text().splitlines())) > MODULE_LINES
    ]
    if long:
        warnings.warn(f"modules past {MODULE_LINES} lines: {long}", stacklevel=1)
    assert all(n < 3 * MODULE_LINES for _, n in long), long


@pytest.mark.parametrize("folder", ["policy", "rl", "wrappers", "envs", "evaluation"])
def test_no_print_below_experiments(folder: str) -> None:
    """Library code returns values and logs; only the CLI and the experiment runners print."""
    printing = [
        f"{name}:{node.lineno}"
        for name, path in _sources()
        if name.startswith(f"{folder}/")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "print"
    ]
    assert not printing, printing


def test_every_subpackage_is_packaged() -> None:
    listed = (ROOT / "setup.cfg").read_text()
    for init in sorted(ROOT.glob("llm_policy/**/__init__.py")):
        parts = init.parent.relative_to(ROOT / "llm_policy").parts
        name = ".".join(("gym_llm", *parts))
        assert f"    {name}\n" in listed, f"{name} is missing from setup.cfg's packages"


def test_package_docstring_example_runs() -> None:
    import doctest

    failures, _ = doctest.testmod(gym_llm, verbose=False)
    assert failures == 0


def test_wrappers_and_envs_import_without_torch_transformers_or_sb3() -> None:
    import subprocess
    import sys

    code = (
        "import sys, gym_llm.wrappers, gym_llm.envs\n"
        "heavy = [m for m in ('torch', 'transformers', 'stable_baselines3') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "from gym_llm import PPO, LLMPolicy, Agent, make_text_env, load_model\n"
        "assert 'torch' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
