"""``gym_llm.configs``: dotted overrides of nested configs, checked names and types, the run file's
dict, and reading the flat run files written before the sections."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from gym_llm.configs import RUNTIME_ONLY, check_value, dotted, override, to_dict
from gym_llm.experiments.train_config import FLAT_KEYS, TrainConfig, read_flat
from tests.paths import FIXTURES


@dataclass
class Inner:
    rate: float = 0.1
    kind: Literal["a", "b"] = "a"
    handle: Any = field(default=None, metadata=RUNTIME_ONLY)

    def __post_init__(self) -> None:
        if self.rate < 0:
            raise ValueError(f"rate must be >= 0, got {self.rate}.")


@dataclass
class Outer:
    steps: int = 3
    name: str | None = None
    inner: Inner = field(default_factory=Inner)


def test_override_sets_nested_fields_by_dotted_name_or_section() -> None:
    base = Outer()
    changed = override(base, {"steps": 5, "inner.rate": 2})
    assert changed == Outer(steps=5, inner=Inner(rate=2.0)) and base == Outer()  # a copy
    assert isinstance(changed.inner.rate, float)  # an int accepted as a float
    assert override(base, {"inner": {"kind": "b"}}).inner.kind == "b"
    assert override(base, {"name": None}).name is None


def test_override_names_what_is_wrong() -> None:
    with pytest.raises(TypeError, match=r"'inner\.rat' is not a setting of Inner; .*inner\.rate"):
        override(Outer(), {"inner.rat": 1.0})
    with pytest.raises(TypeError, match=r"'stepz' is not a setting of Outer; .*inner\.\*"):
        override(Outer(), {"stepz": 1})
    with pytest.raises(TypeError, match=r"'steps\.x': 'steps' is a value, not a section"):
        override(Outer(), {"steps.x": 1})
    with pytest.raises(TypeError, match="'inner' is a section"):
        override(Outer(), {"inner": 3})
    with pytest.raises(TypeError, match="'steps' must be int, got 'many'"):
        override(Outer(), {"steps": "many"})
    with pytest.raises(TypeError, match=r"'inner\.kind' must be one of 'a', 'b', got 'c'"):
        override(Outer(), {"inner.kind": "c"})
    with pytest.raises(ValueError, match="rate must be >= 0"):  # the section's own validation
        override(Outer(), {"inner.rate": -1.0})
    with pytest.raises(TypeError, match="not a setting"):  # runtime-only: code sets it
        override(Outer(), {"inner.handle": "x"})


def test_run_file_dict_leaves_runtime_only_fields_out() -> None:
    assert to_dict(Outer()) == {"steps": 3, "name": None, "inner": {"rate": 0.1, "kind": "a"}}
    assert dotted(Outer()) == {"steps": 3, "name": None, "inner.rate": 0.1, "inner.kind": "a"}
    assert check_value("x", 1, float) == 1.0 and check_value("x", None, int | None) is None
    with pytest.raises(TypeError, match="'x' must be bool"):
        check_value("x", 1, bool)


def test_train_config_round_trips_through_its_run_file() -> None:
    config = TrainConfig(timesteps=512).with_settings(
        {"ppo.n_epochs": 2, "policy.action_mode": "generate", "policy.lora": {"r": 4}}
    )
    data = json.loads(json.dumps(config.as_dict()))
    assert set(data) >= {"policy", "ppo", "dqn"} and data["ppo"]["n_epochs"] == 2
    assert "tokenizer" not in data["policy"] and "optimizer_class" not in data["policy"]
    assert TrainConfig.from_dict(data) == config
    # the run's defaults where they differ from the components' own
    assert TrainConfig().ppo.n_steps == 32 and TrainConfig().dqn.batch_size == 64
    assert TrainConfig().mode == "choice"


@pytest.mark.parametrize("name", ["run_config_flat.json", "run_config_flat_dqn.json"])
def test_a_flat_run_file_from_before_the_sections_reads_the_same(name: str) -> None:
    flat = json.loads((FIXTURES / name).read_text())
    config = TrainConfig.from_dict(flat)
    assert set(flat) <= set(FLAT_KEYS) | {f for f in TrainConfig.__dataclass_fields__}
    if flat["algo"] == "ppo":  # written by the old TrainConfig with these settings
        assert config.policy.action_mode == "generate" and config.policy.max_new_tokens == 6
        assert config.policy.lora == {"r": 8, "lora_alpha": 16}  # lora_r=8: alpha 2r, as then
        assert config.policy.trainable_layers == 8 and config.policy.action_head is True
        assert (config.ppo.n_steps, config.ppo.batch_size, config.ppo.n_epochs) == (16, 32, 2)
        assert config.ppo.learning_rate == 1e-3 and config.ppo.ent_coef == "auto"
        assert config.ppo.gamma == 0.95 and config.ppo.fsdp is None  # False: as launched
        assert (config.seed, config.timesteps, config.env) == (3, 512, flat["env"])
    else:
        assert config.algo == "dqn" and config.env_kwargs == {"is_slippery": False}
        assert (config.dqn.beta, config.dqn.alpha, config.dqn.n_steps) == (1.0, 0.05, 3)
        assert config.dqn.target_update_interval == 500 and config.dqn.learning_starts == 16
        assert config.dqn.batch_size == 16 and config.dqn.distill_interval == 64
        assert config.dqn.learning_rate == 1e-4  # None meant DQN's default
    assert read_flat({"lora_r": 0})["policy.lora"] is None  # full fine-tuning
    assert read_flat({"ppo": {"n_epochs": 2}}) == {"ppo": {"n_epochs": 2}}  # nested: as is
