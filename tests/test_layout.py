"""The layout's one rule that code can break silently: imports point one way along
spaces <- policy <- rl <- evaluation <- experiments <- cli (act -> learn -> score -> run -> command
line); ``wrappers`` and ``envs`` import only ``spaces``, ``replies``, ``wrappers`` and ``envs``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Layer of each part of ``gym_llm``; an import may point to the same layer or a lower one.
RANK = {"spaces": 0, "replies": 0, "wrappers": 0, "envs": 0, "policy": 1, "rl": 2, "evaluation": 3,
        "experiments": 4, "cli": 5}  # fmt: skip

#: Known backward imports, each with the change that removes it. Nothing may be added here.
KNOWN: set[tuple[str, str]] = set()


def _layer_of_file(path: Path) -> str | None:
    relative = path.relative_to(ROOT)
    if relative.parts[0] in ("wrappers", "envs"):
        return relative.parts[0]
    inner = relative.relative_to("llm_policy")
    if len(inner.parts) > 1:
        return inner.parts[0]
    return inner.stem if inner.stem in ("spaces", "replies") else None  # __init__, testing: any


def _imported_layers(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        names = (
            [node.module]
            if isinstance(node, ast.ImportFrom) and node.module
            else [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else []
        )
        for name in names:
            parts = name.split(".")
            if parts[0] == "gym_llm" and len(parts) > 1 and parts[1] in RANK:
                found.append((node.lineno, parts[1]))
    return found


def backward_imports() -> list[str]:
    problems = []
    files = [*ROOT.glob("llm_policy/**/*.py"), *ROOT.glob("wrappers/*.py"), *ROOT.glob("envs/*.py")]
    for path in sorted(files):
        layer = _layer_of_file(path)
        if layer is None:
            continue
        where = str(path.relative_to(ROOT / "llm_policy")) if "llm_policy" in path.parts else ""
        for line, target in _imported_layers(ast.parse(path.read_text())):
            if (where, target) in KNOWN:
                continue
            low = layer in ("wrappers", "envs")
            lowest = ("spaces", "replies", "wrappers", "envs")
            if (low and target not in lowest) or RANK[target] > RANK[layer]:
                problems.append(f"{path.relative_to(ROOT)}:{line}: {layer} imports {target}")
    return problems


def test_no_backward_imports() -> None:
    assert backward_imports() == []


def test_the_check_catches_a_backward_import(tmp_path: Path) -> None:
    tree = ast.parse("def f():\n    from gym_llm.cli.bench import main\n")
    assert _imported_layers(tree) == [(2, "cli")]  # imports inside functions count too


def test_every_subpackage_is_packaged() -> None:
    listed = (ROOT / "setup.cfg").read_text()
    for init in sorted(ROOT.glob("llm_policy/**/__init__.py")):
        parts = init.parent.relative_to(ROOT / "llm_policy").parts
        if not parts:
            continue
        package = ".".join(("gym_llm", *parts))
        assert f"{package}\n" in listed, f"add {package} to setup.cfg"


def test_package_docstring_example_runs() -> None:
    import doctest

    import gym_llm

    result = doctest.testmod(gym_llm)
    assert result.attempted >= 2 and result.failed == 0


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


def test_algorithms_follow_sb3s_layout() -> None:
    rl = ROOT / "llm_policy" / "rl"
    for package, modules in {
        "ppo": ("ppo", "rollout", "update", "buffer", "advantages", "losses", "checkpointing"),
        "dqn": ("dqn", "replay", "targets", "distill", "saving"),
        "common": ("vec_env", "checkpoint", "checkpoint_files", "distributed", "sharding"),
    }.items():
        for module in modules:
            assert (rl / package / f"{module}.py").is_file(), f"rl/{package}/{module}.py"
    # nothing of PPO's is left beside the packages (only the Agent, SFT and their files)
    loose = sorted(p.stem for p in rl.glob("*.py"))
    assert loose == [
        "__init__", "agent", "agent_config", "agent_saving", "demo_records", "episodes", "sft",
    ]  # fmt: skip
