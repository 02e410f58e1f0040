"""The distribution installs exactly one top-level import name, ``gym_llm`` (DESIGN.md)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from tests.paths import ROOT


def test_wheel_has_the_single_top_level_name_gym_llm(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    (wheel,) = tmp_path.glob("gym_llm-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {
        name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")
    }
    assert top_level == {"gym_llm"}
    assert "gym_llm/py.typed" in names
    assert "gym_llm/wrappers/action_parser.py" in names
    assert "gym_llm/envs/__init__.py" in names
    for module in ("policy/llm_policy.py", "rl/ppo/ppo.py", "rl/dqn/targets.py", "rl/common/vec_env.py",
                   "evaluation/exact.py",
                   "experiments/run.py", "cli/bench.py", "envs/tabular.py"):  # fmt: skip
        assert f"gym_llm/{module}" in names, f"{module} missing from the wheel"
    assert not any(
        n.startswith(("tests/", "benchmarks/", "llm_policy/", "wrappers/")) for n in names
    )


def test_imports_use_the_package_name() -> None:
    import gym_llm
    import gym_llm.envs
    import gym_llm.wrappers

    assert Path(gym_llm.__file__).parent.name == "llm_policy"
    assert Path(gym_llm.wrappers.__file__).parent.name == "wrappers"
    assert Path(gym_llm.envs.__file__).parent.name == "envs"
