"""The module paths from before the subpackages (``gym_llm.exact``, ``gym_llm.sft``, ...,
``gym_llm.rl.update``) as aliases of the moved modules, so user code, saved runs and ``python -m gym_llm.demo`` keep working.

An alias is the moved module itself (one object under two names), not a copy: patching
``gym_llm.exact.X`` patches what the library uses. No file per old name, so the folder tree shows
only the layout.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import CodeType, ModuleType

#: Old module name (under ``gym_llm.``) -> where it lives now.
MOVED: dict[str, str] = {
    "prompts": "policy.prompts",
    "models": "policy.models",
    "kv_cache": "policy.kv_cache",
    "packed_linear": "policy.packed_linear",
    "top_layers": "policy.top_layers",
    "vec_env": "rl.common.vec_env",
    "buffer": "rl.ppo.buffer",
    "advantages": "rl.ppo.advantages",
    "losses": "rl.ppo.losses",
    "ppo": "rl.ppo",
    "agent": "rl.agent",
    "sft": "rl.sft",
    "diagnostics": "rl.common.diagnostics",
    "exact": "evaluation.exact",
    "baselines": "evaluation.baselines",
    "training": "experiments.run",
    "plots": "experiments.plots",
    "curves": "experiments.curves",
    "compare": "cli.bench",
    "demo": "cli.demo",
    # PPO's modules and the shared ones moved into rl/ppo/ and rl/common/ (SB3's layout)
    "rl.update": "rl.ppo.update",
    "rl.rollout": "rl.ppo.rollout",
    "rl.buffer": "rl.ppo.buffer",
    "rl.advantages": "rl.ppo.advantages",
    "rl.losses": "rl.ppo.losses",
    "rl.target_update": "rl.ppo.target_update",
    "rl.entropy_control": "rl.ppo.entropy_control",
    "rl.training_state": "rl.ppo.training_state",
    "rl.data_parallel": "rl.ppo.data_parallel",
    "rl.vec_env": "rl.common.vec_env",
    "rl.checkpoint": "rl.common.checkpoint",
    "rl.checkpoint_files": "rl.common.checkpoint_files",
    "rl.distributed": "rl.common.distributed",
    "rl.sharding": "rl.common.sharding",
    "rl.run_state": "rl.common.run_state",
    "rl.diagnostics": "rl.common.diagnostics",
}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """Already executed under its new name."""

    def get_code(self, fullname: str) -> CodeType | None:
        # ``python -m gym_llm.demo`` runs the moved module's code as __main__.
        spec = importlib.util.find_spec(self.target)
        loader = spec.loader if spec is not None else None
        return (
            loader.get_code(self.target)
            if isinstance(loader, importlib.abc.InspectLoader)
            else None
        )

    def is_package(self, fullname: str) -> bool:
        return False


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        prefix, _, name = fullname.partition(".")
        if prefix != "gym_llm" or name not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(f"gym_llm.{MOVED[name]}"))


def install() -> None:
    """Put the alias finder on ``sys.meta_path`` once."""
    if not any(isinstance(finder, _AliasFinder) for finder in sys.meta_path):
        sys.meta_path.append(_AliasFinder())
