from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback, CheckpointCallback, EvalCallback
from stable_baselines3.common.evaluation import evaluate_policy

from gym_llm import PPO, LLMPolicy, make_text_env
from gym_llm.rl.common.checkpoint import resolve_class
from gym_llm.rl.common.checkpoint_files import CheckpointError
from gym_llm.rl.ppo.passes import UpdatePasses
from gym_llm.testing import save_tiny_model
from gym_llm.wrappers import ActionParserWrapper, TextObservationWrapper
from tests.builders import small_ppo
from tests.models import tiny_model_fixture

WORDS = ["apple", "banana", "cherry", "grape"]


model_dir = tiny_model_fixture("model_dir", WORDS)


def _ppo(model_dir: Path, mode: str = "choice", n_envs: int = 4, **kwargs: Any) -> PPO:
    policy = {"action_mode": mode, "max_new_tokens": 3, **kwargs.pop("policy_kwargs", {})}
    settings: dict[str, Any] = {"n_steps": 4, "batch_size": 8, "n_epochs": 1, "learning_rate": 1e-3}
    return small_ppo(model_dir, n_envs=n_envs, policy=policy, **{**settings, **kwargs})


@pytest.mark.parametrize("mode", ["choice", "generate"])
def test_first_minibatch_ratio_is_one(model_dir: Path, mode: str) -> None:
    """Invariant 1: log-probs at rollout == log-probs at training on the first minibatch."""
    model = _ppo(model_dir, mode)
    model.learn(16)
    assert model.first_ratio_error < 1e-5


@pytest.mark.parametrize("mode", ["choice", "generate"])
def test_learn_changes_only_lora_and_value_head(model_dir: Path, mode: str) -> None:
    """Invariant 3."""
    model = _ppo(model_dir, mode, ent_coef=0.01)
    with torch.no_grad():  # a critic that predicts 0.5: its loss has a gradient even when every
        model.policy.value_head.bias.fill_(0.5)  # reward of these 16 random replies is 0
    before = {n: p.detach().clone() for n, p in model.policy.named_parameters()}
    model.learn(16)
    changed = {n for n, p in model.policy.named_parameters() if not torch.equal(p, before[n])}
    assert changed, "nothing was trained"
    heads = ("value_head", "action_head")  # the action head: choice mode's default
    assert all("lora_" in n or n.startswith(heads) for n in changed), changed
    assert any(n.startswith("value_head") for n in changed)
    assert any("lora_B" in n for n in changed)


@pytest.mark.parametrize("mode", ["choice", "generate"])
def test_save_load_gives_identical_predictions(model_dir: Path, mode: str, tmp_path: Path) -> None:
    """Invariant 4, and the saved directory is small: no base weights, no pickles."""
    model = _ppo(model_dir, mode)
    model.learn(16)
    model.save(tmp_path / "agent")
    files = {p.name for p in (tmp_path / "agent").iterdir()}
    assert files == {"config.json", "policy.pt", "training_state.json"}
    trainable = sum(p.numel() for p in model.policy.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.policy.parameters())
    assert trainable < total
    loaded = PPO.load(tmp_path / "agent", device="cpu")
    obs = [f"Options: {', '.join(WORDS)}. Target: {w}." for w in WORDS]
    torch.manual_seed(1)
    a1, _ = model.predict(obs, deterministic=True)
    a2, _ = loaded.predict(obs, deterministic=True)
    assert list(a1) == list(a2)
    with torch.no_grad():
        np.testing.assert_allclose(
            model.policy.predict_values(obs).numpy(),
            loaded.policy.predict_values(obs).numpy(),
            atol=1e-6,
        )
    assert loaded.num_timesteps == model.num_timesteps
    opt_a, opt_b = model.policy.optimizer.state_dict(), loaded.policy.optimizer.state_dict()
    assert opt_a["state"].keys() == opt_b["state"].keys()
    # training continues from the loaded agent
    env = make_text_env("gym_llm/KeywordBandit-v0", n_envs=4, seed=1)
    resumed = PPO.load(tmp_path / "agent", env=env, device="cpu")
    resumed.learn(16, reset_num_timesteps=False)
    assert resumed.num_timesteps == model.num_timesteps + 16


def test_agents_saved_before_trainable_layers_existed_still_load(
    model_dir: Path, tmp_path: Path
) -> None:
    """Those agents had LoRA on every layer and no advantage scale: without the key they load as
    all layers (not the new "auto" default, whose LoRA weights they would not match)."""
    import json

    model = _ppo(model_dir, policy_kwargs={"trainable_layers": None})
    model.learn(16)
    model.save(tmp_path / "agent")
    config_file = tmp_path / "agent" / "config.json"
    config = json.loads(config_file.read_text())
    assert config["policy_kwargs"]["trainable_layers"] is None
    del config["policy_kwargs"]["trainable_layers"]
    config_file.write_text(json.dumps(config))
    state = torch.load(tmp_path / "agent" / "policy.pt", weights_only=True)
    del state["advantage_scale"]
    torch.save(state, tmp_path / "agent" / "policy.pt")
    loaded = PPO.load(tmp_path / "agent", device="cpu")
    assert loaded.policy.trainable_layers is None and loaded.policy.top is None
    obs = [f"Options: {', '.join(WORDS)}. Target: {w}." for w in WORDS]
    with torch.no_grad():
        np.testing.assert_allclose(
            model.policy.predict_values(obs).numpy(),
            loaded.policy.predict_values(obs).numpy(),
            atol=1e-6,
        )
    assert loaded.advantage_scale.count < 1  # a fresh scale


def test_the_default_policy_is_lora_on_the_top_layers_and_saves_as_such(
    model_dir: Path, tmp_path: Path
) -> None:
    """PPO(LLMPolicy, env) with only a model: LoRA (the registry's settings, r=16) on the top
    quarter of the layers, recorded with its effective settings so a load rebuilds the same."""
    import json

    env = make_text_env("gym_llm/KeywordBandit-v0", n_envs=2, seed=0)
    model = PPO(LLMPolicy, env, n_steps=2, batch_size=4, policy_kwargs={"model": str(model_dir)})
    policy = model.policy
    assert policy.uses_lora and policy.trainable_layers == 1 and policy.uses_rollout_states
    assert policy.lora_settings is not None and policy.lora_settings["r"] == 16
    model.learn(4)
    model.save(tmp_path / "agent")
    saved = json.loads((tmp_path / "agent" / "config.json").read_text())["policy_kwargs"]
    assert saved["lora"]["r"] == 16 and saved["trainable_layers"] == 1
    assert "layers_to_transform" not in saved["lora"]  # trainable_layers says that
    loaded = PPO.load(tmp_path / "agent", device="cpu")
    names = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert names == {n for n, p in loaded.policy.named_parameters() if p.requires_grad}
    with pytest.raises(ValueError, match="lora must be 'default'"):
        _ppo(model_dir, policy_kwargs={"lora": "r16"})


def test_save_load_keeps_the_advantage_scale(model_dir: Path, tmp_path: Path) -> None:
    model = _ppo(model_dir)
    model.learn(32)
    model.save(tmp_path / "agent")
    loaded = PPO.load(tmp_path / "agent", device="cpu")
    assert loaded.policy.trainable_layers == model.policy.trainable_layers == 1  # "auto"
    assert loaded.advantage_scale.count == pytest.approx(model.advantage_scale.count)
    assert float(loaded.advantage_scale.var) == pytest.approx(float(model.advantage_scale.var))


def test_an_agent_with_its_own_optimizer_class_saves_and_loads(
    model_dir: Path, tmp_path: Path
) -> None:
    sgd = {"optimizer_class": torch.optim.SGD, "optimizer_kwargs": {"momentum": 0.9}}
    model = _ppo(model_dir, policy_kwargs=sgd)
    model.learn(16)
    model.save(tmp_path / "agent")
    loaded = PPO.load(tmp_path / "agent", device="cpu")
    assert type(loaded.policy.optimizer) is torch.optim.SGD
    assert loaded.policy.optimizer.defaults["momentum"] == 0.9
    assert resolve_class("<class 'torch.optim.sgd.SGD'>") is torch.optim.SGD  # older saves
    with pytest.raises(CheckpointError, match="cannot be imported here"):
        resolve_class("no_such_module:Adam")


def test_failed_save_keeps_previous_checkpoint(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _ppo(model_dir)
    model.save(tmp_path / "agent")
    saved = (tmp_path / "agent" / "policy.pt").read_bytes()

    def boom(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", boom)
    with pytest.raises(OSError, match="disk full"):
        model.save(tmp_path / "agent")
    assert (tmp_path / "agent" / "policy.pt").read_bytes() == saved
    assert [p.name for p in tmp_path.iterdir()] == ["agent"]


def test_single_wrapped_env_and_non_text_error(model_dir: Path) -> None:
    env = ActionParserWrapper(TextObservationWrapper(gym.make("Blackjack-v1", sab=False)))
    model = PPO(
        LLMPolicy,
        env,
        policy_kwargs={"model": str(model_dir), "lora": {"r": 2}},
        n_steps=2,
        batch_size=2,
        device="cpu",
    )
    assert model.n_envs == 1
    model.learn(2)
    with pytest.raises(TypeError, match="ActionParserWrapper\\(TextObservationWrapper\\(env\\)\\)"):
        PPO(LLMPolicy, gym.make("CartPole-v1"), policy_kwargs={"model": str(model_dir)})
    with pytest.raises(TypeError, match="not a model object"):
        PPO(LLMPolicy, env, policy_kwargs={"model": object()})


def test_callbacks_logging_and_evaluate_policy(model_dir: Path, tmp_path: Path) -> None:
    calls: list[str] = []

    class Recorder(BaseCallback):
        def _on_step(self) -> bool:
            calls.append("step")
            return True

        def _on_rollout_end(self) -> None:
            calls.append("rollout_end")

    eval_env = make_text_env("gym_llm/KeywordBandit-v0", n_envs=2, seed=9)
    callbacks = [
        Recorder(),
        EvalCallback(
            eval_env,
            n_eval_episodes=4,
            eval_freq=4,
            log_path=str(tmp_path / "eval"),
            best_model_save_path=str(tmp_path / "best"),
            verbose=0,
        ),
        CheckpointCallback(save_freq=4, save_path=str(tmp_path / "ckpt"), name_prefix="agent"),
    ]
    model = _ppo(model_dir, tensorboard_log=str(tmp_path / "tb"), kl_coef=0.1, target_kl=10.0)
    model.learn(32, callback=callbacks, progress_bar=True)
    assert calls.count("step") == 8 and calls.count("rollout_end") == 2
    assert (tmp_path / "eval" / "evaluations.npz").is_file()
    # SB3's "best model" is a PPO.save directory that loads back
    assert PPO.load(tmp_path / "best" / "best_model", device="cpu").num_timesteps > 0
    assert list((tmp_path / "ckpt").iterdir())
    logged = model.logger.name_to_value
    for key in (
        "train/approx_kl",
        "train/clip_fraction",
        "train/entropy_loss",
        "train/value_loss",
        "train/policy_gradient_loss",
        "train/explained_variance",
        "train/kl_ref",
    ):
        assert key in logged, key
    assert list((tmp_path / "tb").rglob("events.out.tfevents.*"))
    mean, std = evaluate_policy(model, eval_env, n_eval_episodes=8)
    assert 0.0 <= mean <= 1.0 and std >= 0


def test_invalid_actions_are_logged(model_dir: Path) -> None:
    model = _ppo(model_dir, "generate", policy_kwargs={"reply_constraint": "off"})
    model.learn(16)
    # an untrained tiny model mostly babbles in free text: most replies cannot be parsed
    assert model.invalid_action_rate > 0.5
    constrained = _ppo(model_dir, "generate")  # the default where the env lists its actions
    constrained.learn(16)
    assert constrained.policy.reply_constraint == "action"
    assert constrained.invalid_action_rate == 0.0


def test_target_kl_stops_early(model_dir: Path) -> None:
    model = _ppo(model_dir, n_epochs=5, target_kl=1e-12, learning_rate=0.05, batch_size=4)
    model.learn(16)
    assert model.logger.name_to_value["train/early_stopped"] == 1
    assert model.logger.name_to_value["train/epochs"] < 5


@pytest.mark.parametrize("update", ["target", "clip"])
def test_the_target_update_reads_its_kl_from_the_rollout_policy(
    model_dir: Path, update: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The target update holds each observation's rollout distribution over the listed actions,
    so the passes read its KL (logged, and what ``target_kl`` stops on) exactly from them; the
    clipped surrogate's stays the k3 estimate from the moves played (no distributions given).
    That the passes' figure is then the exact KL is checked in ``test_behaviour``."""
    model = _ppo(model_dir, policy_update=update, n_epochs=2)
    given: list[dict[str, torch.Tensor] | None] = []
    accumulate = model.passes.accumulate

    def spy(*args: Any, **kwargs: Any) -> Any:
        given.append(inspect.signature(accumulate).bind(*args, **kwargs).arguments["old_probs"])
        return accumulate(*args, **kwargs)

    monkeypatch.setattr(model.passes, "accumulate", spy)
    model.learn(16)
    assert given, "the update ran no pass"
    if update == "clip":
        assert given == [None] * len(given)
        return
    rollout = model.rollout_action_probs
    for old in given:
        assert old is not None and set(old) == set(rollout)
        for observation, row in old.items():
            np.testing.assert_allclose(row.numpy(), rollout[observation], rtol=1e-6)


def test_from_spaces_builds_an_agent_without_an_env(model_dir: Path) -> None:
    """The public way to build PPO without an env (Agent and PPO.load use it), then train it
    once an env is set."""
    env = make_text_env("gym_llm/KeywordBandit-v0", n_envs=2, seed=0)
    model = PPO.from_spaces(
        env.observation_space,
        env.action_space,
        n_envs=2,  # the envs it will train on (SB3's set_env checks the count)
        n_steps=2,
        batch_size=4,
        seed=0,
        device="cpu",
        policy_kwargs={"model": str(model_dir), "lora": {"r": 4}},
    )
    assert model.env is None and model.n_envs == 2
    assert isinstance(model.policy, LLMPolicy) and model.rollout_buffer.n_envs == 2
    replies, _ = model.predict([f"Options: {', '.join(WORDS)}. Target: apple."])
    assert replies[0] in WORDS
    model.set_env(env)
    model.learn(4)
    assert model.num_timesteps == 4


def test_load_into_a_raw_env_gives_the_wrapping_advice(model_dir: Path, tmp_path: Path) -> None:
    model = _ppo(model_dir)
    model.save(tmp_path / "agent")
    with pytest.raises(TypeError, match="text-in/text-out"):
        PPO.load(tmp_path / "agent", env=gym.make("FrozenLake-v1"), device="cpu")


@pytest.mark.parametrize("rows", [1, 3])
def test_passes_split_by_memory_give_the_one_pass_update(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch, rows: int
) -> None:
    """Turns grouped by observation into passes of a few rows each (ordered by length and cut
    where they pad least) step the weights as one pass over the whole minibatch does (the loss
    is a sum over turns)."""
    whole = _ppo(model_dir, batch_size=16, n_epochs=2)
    whole.learn(16)
    monkeypatch.setattr(UpdatePasses, "rows_per_pass", lambda self, observations, actions: rows)
    split = _ppo(model_dir, batch_size=16, n_epochs=2)
    split.learn(16)
    assert whole.turns_per_pass == 16 and split.turns_per_pass < 16
    assert split.first_ratio_error < 1e-5  # invariant 1 through the reordered passes
    params = dict(split.policy.named_parameters())
    for name, param in whole.policy.named_parameters():
        if param.requires_grad:
            torch.testing.assert_close(param, params[name], atol=1e-5, rtol=0, msg=name)


def _learn_recording(model: PPO, keys: tuple[str, ...]) -> tuple[list[str], dict[str, list[float]]]:
    """``model.learn(32)`` with every logged value of ``keys`` kept, and the input-ignored
    warnings it raised."""
    from stable_baselines3.common.logger import Logger

    seen: dict[str, list[float]] = {key: [] for key in keys}
    logger = Logger(folder=None, output_formats=[])
    record = logger.record

    def keep(key: str, value: Any, exclude: Any = None) -> None:
        if key in seen:
            seen[key].append(float(value))
        record(key, value, exclude)

    logger.record = keep
    model.set_logger(logger)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.learn(32)
    return [str(w.message) for w in caught if "ignores its input" in str(w.message)], seen


def test_a_policy_that_ignores_its_input_is_flagged_once(tmp_path: Path) -> None:
    model_dir = save_tiny_model(tmp_path / "m", words=["low", "high"])
    env = make_text_env("gym_llm/HighLow-v0", 2, seed=0)

    def run(temperature: float) -> tuple[list[str], list[float]]:
        # The floor on every move (on by default here) would lift the cornered action after the
        # first update, and the alarm would rightly stop: off, the policy stays collapsed.
        model = PPO(
            "LLMPolicy", env, n_steps=8, batch_size=16, seed=0, device="cpu", min_action_prob=0,
            policy_kwargs={
                "model": str(model_dir), "temperature": temperature, "choice_calibration": False
            },
        )  # fmt: skip
        warned, seen = _learn_recording(model, ("rollout/input_ignored",))
        return warned, seen["rollout/input_ignored"]

    # An untrained tiny model at a very low temperature: the same near-certain action everywhere.
    warned, seen = run(0.01)
    assert len(warned) == 1  # once per run, with what to try (not what is on already)
    assert "'choice_calibration': True" in warned[0] and "action_head" not in warned[0]
    assert seen == [1.0, 1.0]
    warned, seen = run(1.0)  # exploring: not flagged
    assert warned == [] and seen == [0.0, 0.0]


def test_generate_mode_estimates_the_figures_from_parsed_replies(tmp_path: Path) -> None:
    """Generate mode has no distribution to read: the figures come from the actions the parser
    took, and the alarm fires when every observation got the same one."""
    import dataclasses

    model_dir = save_tiny_model(tmp_path / "m", words=["low", "high"])
    env = make_text_env("gym_llm/HighLow-v0", 2, seed=0)

    def run(reply: Any) -> tuple[list[str], dict[str, list[float]]]:
        model = PPO(
            "LLMPolicy", env, n_steps=8, batch_size=16, seed=0, device="cpu",
            policy_kwargs={"model": str(model_dir), "action_mode": "generate",
                           "max_new_tokens": 2},
        )  # fmt: skip
        act = model.policy.act

        def scripted(observations: Any, deterministic: bool = False) -> Any:
            step = act(observations, deterministic)  # the sampled tokens train as usual
            return dataclasses.replace(step, replies=[reply(str(o)) for o in observations])

        model.policy.act = scripted
        return _learn_recording(model, ("rollout/input_ignored", "rollout/mutual_information"))

    warned, seen = run(lambda obs: "low")  # the same action in every observation
    assert len(warned) == 1 and seen["rollout/input_ignored"] == [1.0, 1.0]
    assert seen["rollout/mutual_information"] == [0.0, 0.0]
    digits = "0123456789"
    warned, seen = run(
        lambda obs: "low" if int(next(c for c in obs if c in digits)) < 5 else "high"
    )
    assert warned == [] and seen["rollout/input_ignored"] == [0.0, 0.0]
    assert min(seen["rollout/mutual_information"]) > 0.1
