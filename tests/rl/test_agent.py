"""The LlamaGym-style ``Agent``: the README loop, credit assignment, invalid actions, truncation,
save/load, KL early stopping and the SFT hooks, on tiny in-memory models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from gym_llm import Agent
from gym_llm.rl.common.run_state import global_rng_state, restore_global_rng_state
from gym_llm.testing import make_tiny_model, make_tiny_tokenizer
from tests.models import tiny_model_fixture

FAST = {"max_new_tokens": 4}


model_dir = tiny_model_fixture("model_dir", ["stick", "hit"])


class BlackjackAgent(Agent):
    def get_system_prompt(self) -> str:
        return "You are an expert blackjack player."

    def format_observation(self, observation: Any) -> str:
        return f"Your current total is {observation[0]}"

    def extract_action(self, response: str) -> Any:
        return 0 if "stick" in response else 1


class RaisingAgent(BlackjackAgent):
    """extract_action always fails, so every action goes through the invalid-action policy."""

    def extract_action(self, response: str) -> Any:
        raise RuntimeError("cannot read this")


def _agent(model_dir: Path, cls: type[Agent] = BlackjackAgent, **kwargs: Any) -> Agent:
    if "generate_config_dict" not in kwargs:
        kwargs.setdefault("generate_config", FAST)
    return cls(str(model_dir), None, "cpu", **kwargs)


def test_llamagym_readme_loop(model_dir: Path) -> None:
    """LlamaGym's README loop with only the import changed; rewards, turns and log-probs line up."""
    from tqdm import trange

    agent = BlackjackAgent(
        str(model_dir),
        None,
        "cpu",
        FAST,
        {"batch_size": 4, "mini_batch_size": 8, "ppo_epochs": 1, "seed": 0},
    )
    env = gym.make("Blackjack-v1")
    env.reset(seed=0)
    updates: list[dict[str, float]] = []
    for episode in trange(12):
        observation, info = env.reset()
        done = False
        paid: list[float] = []
        while not done:
            action = agent.act(observation)
            observation, reward, terminated, truncated, info = env.step(action)  # noqa: RUF059
            agent.assign_reward(reward)
            done = terminated or truncated
            # --- checks (not part of the README loop) ---
            paid.append(float(reward))
            assert agent.current_episode_rewards == paid  # each turn got what its step paid
            assert len(agent.current_episode_messages) == 1 + 2 * len(paid)  # system + exchanges
            assert [m["role"] for m in agent.current_episode_messages[-2:]] == ["user", "assistant"]
            turn = agent.current_episode_turns[-1]
            assert len(turn.tokens) == len(turn.log_probs) > 0
            assert turn.action == action
        train_stats = agent.terminate_episode()
        if train_stats:
            updates.append(train_stats)
            rollout = agent.last_rollout
            assert rollout is not None
            assert rollout.episode_starts[0, 0] == 1.0
        assert (episode + 1) % 4 != 0 or train_stats, "an update runs every 4 episodes"
    assert len(updates) == 3
    for stats in updates:
        assert stats["train/first_ratio_error"] < 1e-4
        assert stats["agent/episodes"] == 4
        assert {"train/approx_kl", "train/early_stopped", "train/epochs"} <= set(stats)


def test_returns_are_per_turn_discounted_gae(model_dir: Path) -> None:
    """Rewards [0, 1] at gamma 0.5, lambda 0.5 with the value head fixed at 0.25:
    deltas = [0 + 0.5*0.25 - 0.25, 1 - 0.25] = [-0.125, 0.75];
    advantages = [-0.125 + 0.25*0.75, 0.75] = [0.0625, 0.75]; returns = advantages + 0.25."""
    agent = _agent(model_dir, ppo_config={"batch_size": 1, "gamma": 0.5, "lam": 0.5})
    with torch.no_grad():
        agent.policy.value_head.bias.fill_(0.25)
    agent.act((12, 3, 0))
    agent.assign_reward(0.0)
    agent.act((15, 3, 0))
    agent.assign_reward(1.0)
    stats = agent.terminate_episode()
    rollout = agent.last_rollout
    assert stats and rollout is not None
    np.testing.assert_allclose(rollout.values[:, 0], [0.25, 0.25], atol=1e-6)
    np.testing.assert_allclose(rollout.rewards[:, 0], [0.0, 1.0])
    np.testing.assert_allclose(rollout.advantages[:, 0], [0.0625, 0.75], atol=1e-6)
    np.testing.assert_allclose(rollout.returns[:, 0], [0.3125, 1.0], atol=1e-6)
    assert rollout.episode_starts[:, 0].tolist() == [1.0, 0.0]


def test_episodes_are_cut_between_episodes(model_dir: Path) -> None:
    """Two one-turn episodes in one update: the second's reward must not flow into the first."""
    agent = _agent(model_dir, ppo_config={"batch_size": 2, "gamma": 1.0, "lam": 1.0})
    for reward in (0.0, 1.0):
        agent.act((12, 3, 0))
        agent.assign_reward(reward)
        agent.terminate_episode()
    assert agent.last_rollout is not None
    np.testing.assert_allclose(agent.last_rollout.returns[:, 0], [0.0, 1.0], atol=1e-6)


def test_config_keys(model_dir: Path) -> None:
    agent = _agent(
        model_dir,
        ppo_config_dict={
            "batch_size": 3,
            "mini_batch_size": 5,
            "ppo_epochs": 2,
            "lam": 0.9,
            "cliprange": 0.1,
            "init_kl_coef": 0.0,
            "learning_rate": 3e-4,
        },
        generate_config_dict={"max_new_tokens": 3, "temperature": 0.7, "pad_token_id": 0},
    )
    assert agent.episodes_per_update == 3
    assert agent.ppo.batch_size == 5 and agent.ppo.n_epochs == 2
    assert agent.ppo.gae_lambda == 0.9 and agent.ppo.clip_range_value == 0.1
    assert agent.policy.max_new_tokens == 3 and agent.policy.temperature == 0.7
    with pytest.raises(ValueError, match=r"Unknown ppo_config key.*'bogus'.*mini_batch_size"):
        _agent(model_dir, ppo_config={"bogus": 1})
    with pytest.raises(ValueError, match=r"Unknown generate_config key.*num_beams.*max_new_tokens"):
        _agent(model_dir, generate_config={"num_beams": 4})
    with pytest.raises(ValueError, match="not both"):
        _agent(model_dir, ppo_config={}, ppo_config_dict={})
    with pytest.warns(UserWarning, match="top_p.*top_k.*exact log-prob"):
        _agent(model_dir, generate_config={"max_new_tokens": 4, "top_p": 0.6, "top_k": 0})


def test_invalid_actions(model_dir: Path) -> None:
    agent = _agent(
        model_dir,
        RaisingAgent,
        action_names=["stick", "hit"],
        fallback_action=0,
        invalid_penalty=-0.5,
        ppo_config={"batch_size": 1},
    )
    json_reply = agent.to_action('I think {"action": "hit"}')
    assert (json_reply.action, json_reply.source, json_reply.penalty) == (1, "parser:json", 0.0)
    assert "RuntimeError" in (json_reply.error or "")
    assert agent.to_action("Action: stick").source == "parser:pattern"
    gibberish = agent.to_action("zzz")
    assert (gibberish.action, gibberish.source, gibberish.penalty) == (0, "fallback", -0.5)
    # Penalty and env reward land on the same turn; the counts reach the stats.
    agent.policy.act = lambda *a, **k: _fixed_step(agent, "zzz")
    assert agent.act((12, 3, 0)) == 0
    agent.assign_reward(1.0)
    assert agent.current_episode_rewards == [0.5]
    stats = agent.terminate_episode()
    assert stats["agent/invalid_actions"] == 1 and stats["agent/invalid_action_rate"] == 1.0
    assert stats["agent/extract_failures"] == 1 and stats["agent/parser_recovered"] == 0

    class OutOfRange(BlackjackAgent):
        def extract_action(self, response: str) -> Any:
            return 7

    out = _agent(model_dir, OutOfRange, action_space=gym.spaces.Discrete(2))
    outcome = out.to_action("I pick 1")  # no action_names: the numbers are the names
    assert outcome.action == 1 and outcome.source == "parser:mention"
    random = out.to_action("zzz")
    assert random.source == "fallback" and random.action in (0, 1)
    strict = _agent(model_dir, OutOfRange, action_space=gym.spaces.Discrete(2), on_invalid="raise")
    with pytest.raises(ValueError, match="returned 7, not in Discrete"):
        strict.to_action("hit")
    blind = _agent(model_dir, RaisingAgent)
    with pytest.raises(ValueError, match=r"before any valid one.*action_space"):
        blind.to_action("hit")
    with pytest.raises(ValueError, match="fallback_action 5 is not in"):
        _agent(model_dir, action_names=["stick", "hit"], fallback_action=5)
    with pytest.raises(RuntimeError, match="before act"):
        blind.assign_reward(1.0)


def _fixed_step(agent: Agent, reply: str) -> Any:
    from gym_llm.policy.llm_policy import PolicyStep

    ids = agent.tokenizer(reply, add_special_tokens=False)["input_ids"]
    return PolicyStep(
        replies=[reply],
        actions=[np.asarray(ids, dtype=np.int64)],
        token_log_probs=[np.full(len(ids), -1.0, dtype=np.float32)],
        values=torch.zeros(1),
    )


def test_truncation_keeps_system_prompt_and_latest_turns(model_dir: Path) -> None:
    agent = _agent(model_dir, max_context_tokens=160, action_names=["stick", "hit"])
    system = agent.get_system_prompt()
    for step in range(6):
        agent.act((10 + step, 2, 0))
        agent.assign_reward(0.0)
    assert len(agent.current_episode_messages) == 1 + 2 * 6  # the episode itself is complete
    turns = agent.current_episode_turns
    assert turns[0].dropped_exchanges == 0 and turns[-1].dropped_exchanges > 0
    for turn in turns:
        prompt = agent.policy.prompt_text(turn.prompt)
        assert len(agent.policy.prompt_ids(turn.prompt)) <= 160
        assert prompt.count(system) == 1 and prompt.index(system) < prompt.index("user")
        messages = json.loads(turn.prompt)
        assert messages[-1]["role"] == "user"
        assert [m["role"] for m in messages] == ["user", "assistant"] * (len(messages) // 2) + [
            "user"
        ]
    # The policy renders the conversation with the model's own chat template.
    conversation = json.loads(turns[2].prompt)
    assert agent.policy.prompt_text(turns[2].prompt) == agent.tokenizer.apply_chat_template(
        [{"role": "system", "content": system}, *conversation],
        tokenize=False,
        add_generation_prompt=True,
    )
    last = json.loads(turns[-1].prompt)
    assert last[-1]["content"] == "Your current total is 15"
    assert "Your current total is 10" not in turns[-1].prompt  # the oldest exchange went first
    # The shared-prefix KV cache still finds the system prompt in conversation prompts.
    prefix = agent.policy.shared_prefix
    assert prefix and all(agent.policy.prompt_ids(t.prompt)[: len(prefix)] == prefix for t in turns)
    assert system in agent.tokenizer.decode(prefix)


def test_earlier_replies_reach_later_prompts_as_sampled(model_dir: Path) -> None:
    agent = _agent(model_dir)
    agent.act((12, 2, 0))
    agent.act((15, 2, 0))
    first, second = agent.current_episode_turns
    sampled = [int(t) for t in first.tokens]
    recorded = json.loads(second.prompt)[1]["token_ids"]
    assert recorded == sampled[: len(recorded)] and len(sampled) - len(recorded) in (0, 1)
    ids = agent.policy.prompt_ids(second.prompt)
    n = len(recorded)
    assert any(ids[i : i + n] == recorded for i in range(len(ids) - n + 1))


def test_save_load_and_model_objects(model_dir: Path, tmp_path: Path) -> None:
    agent = _agent(model_dir, ppo_config={"batch_size": 1, "learning_rate": 1e-2})
    agent.act((14, 5, 0))
    agent.assign_reward(1.0)
    assert agent.terminate_episode()
    agent.save(tmp_path / "agent")
    assert {p.name for p in (tmp_path / "agent").iterdir()} == {
        "agent.json",
        "config.json",
        "training_state.json",
        "episodes.json",
        "policy.pt",
    }
    loaded = BlackjackAgent.load(tmp_path / "agent", device="cpu")
    prompt = json.dumps([{"role": "user", "content": "Your current total is 14"}])
    for policy in (agent.policy, loaded.policy):
        policy.set_training_mode(False)
    reply = agent.policy.predict(prompt, deterministic=True)[0]
    assert loaded.policy.predict(prompt, deterministic=True)[0] == reply
    with torch.no_grad():
        assert torch.equal(
            agent.policy.predict_values([prompt]), loaded.policy.predict_values([prompt])
        )
    assert loaded.episodes_per_update == 1 and loaded.ppo.learning_rate == 1e-2
    assert agent.eval().predict([(14, 5, 0)]) == loaded.predict([(14, 5, 0)])
    with pytest.raises(FileNotFoundError, match=r"agent.save"):
        BlackjackAgent.load(tmp_path)

    tokenizer = make_tiny_tokenizer(["stick", "hit"])
    in_memory = BlackjackAgent(make_tiny_model(len(tokenizer)), tokenizer, "cpu", FAST)
    assert in_memory.act((12, 2, 0)) in (0, 1)
    # Built from a model object that nothing names: saved with its base weights, loads back.
    in_memory.save(tmp_path / "object.zip")  # SB3's spelling: the directory "object"
    assert (tmp_path / "object" / "base_model" / "config.json").is_file()
    assert (
        json.loads((tmp_path / "object" / "config.json").read_text())["policy_kwargs"]["model"]
        == "./base_model"
    )
    moved = tmp_path / "moved"
    (tmp_path / "object").rename(moved)  # the base weights travel with the checkpoint
    reloaded = BlackjackAgent.load(moved, device="cpu")
    assert reloaded.eval().predict([(14, 5, 0)]) == in_memory.eval().predict([(14, 5, 0)])
    reloaded.save(tmp_path / "again")  # a loaded one carries them on to its own saves
    assert (tmp_path / "again" / "base_model" / "config.json").is_file()
    with pytest.raises(ValueError, match="needs its tokenizer"):
        BlackjackAgent(make_tiny_model(len(tokenizer)), None, "cpu")
    # A model object loaded from a path is saved by that path.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from_path = BlackjackAgent(
        AutoModelForCausalLM.from_pretrained(model_dir),
        AutoTokenizer.from_pretrained(model_dir),
        "cpu",
        FAST,
    )
    from_path.save(tmp_path / "by-path")
    saved = json.loads((tmp_path / "by-path" / "config.json").read_text())
    assert saved["policy_kwargs"]["model"] == str(model_dir)
    assert "tokenizer" not in saved["policy_kwargs"]


def test_target_kl_stops_early_and_logs(model_dir: Path, tmp_path: Path) -> None:
    agent = _agent(
        model_dir,
        use_target_kl=True,
        ppo_config={
            "batch_size": 2,
            "mini_batch_size": 1,
            "ppo_epochs": 4,
            "target_kl": 1e-9,
            "learning_rate": 1e-2,
        },
        tensorboard_log=tmp_path / "tb",
    )
    assert agent.ppo.target_kl == 1e-9
    for reward in (1.0, -1.0):
        agent.act((12, 3, 0))
        agent.assign_reward(reward)
        stats = agent.terminate_episode()
    assert stats["train/early_stopped"] == 1
    assert stats["train/epochs"] < 4
    assert list((tmp_path / "tb").glob("Agent_1/events.out.tfevents.*"))
    assert _agent(model_dir, use_target_kl=True).ppo.target_kl == 0.1
    assert _agent(model_dir).ppo.target_kl is None


def test_eval_mode_is_greedy_and_does_not_train(model_dir: Path) -> None:
    agent = _agent(model_dir, ppo_config={"batch_size": 1}).eval()
    first = agent.act((12, 3, 0))
    reply = agent.current_episode_messages[-1]["content"]
    agent.assign_reward(1.0)
    assert agent.terminate_episode() == {}
    assert agent.episodes == []
    agent.act((12, 3, 0))
    assert agent.current_episode_messages[-1]["content"] == reply
    assert agent.current_episode_turns[-1].action == first
    agent.terminate_episode()
    assert agent.train().training


def test_sft_warm_start_and_replay(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    demos = [
        {
            "messages": [
                {"role": "system", "content": "You are an expert blackjack player."},
                {"role": "user", "content": "Your current total is 20"},
                {"role": "assistant", "content": "stick"},
            ]
        }
    ]
    with pytest.raises(ValueError, match="sft_demos"):
        _agent(model_dir, sft_warm_start=True)
    agent = _agent(model_dir, sft_warm_start=True, sft_demos=demos, sft_kwargs={"max_steps": 1})
    assert agent.sft_stats["sft/steps"] == 1

    import gym_llm.rl.sft

    calls: list[tuple[Any, dict[str, Any]]] = []

    def fake_warm_start(target: Any, records: Any, **kwargs: Any) -> dict[str, float]:
        calls.append((records, kwargs))
        return {"sft/loss": 0.5}

    monkeypatch.setattr(gym_llm.rl.sft, "warm_start", fake_warm_start)
    replay = _agent(model_dir, sft_replay=0.25, ppo_config={"batch_size": 4, "ppo_epochs": 1})
    for reward in (0.0, 1.0, -1.0, 0.5):
        replay.act((12, 3, 0))
        replay.assign_reward(reward)
        stats = replay.terminate_episode()
    assert len(calls) == 1
    records, kwargs = calls[0]
    assert kwargs == {"epochs": 1}
    assert len(records) == 1  # the top 25% of 4 episodes
    messages = records[0]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant"]
    assert stats["agent/replay_loss"] == 0.5 and stats["agent/replay_episodes"] == 1


def _play(agent: Agent, env: gym.Env[Any, Any], episodes: int) -> list[dict[str, float]]:
    stats = []
    for _ in range(episodes):
        observation, _ = env.reset()
        done = False
        while not done:
            observation, reward, terminated, truncated, _ = env.step(agent.act(observation))
            agent.assign_reward(reward)
            done = terminated or truncated
        stats.append(agent.terminate_episode())
    return stats


def test_save_between_updates_then_load_continues_the_same_training(
    model_dir: Path, tmp_path: Path, one_torch_thread: None
) -> None:
    """Issue 17: agent.save mid-training -> load -> continue, as if it had never stopped."""
    config = {"batch_size": 4, "mini_batch_size": 4, "ppo_epochs": 1, "seed": 0}
    agent = BlackjackAgent(str(model_dir), None, "cpu", FAST, config)
    env = gym.make("Blackjack-v1")
    env.reset(seed=0)
    assert not any(_play(agent, env, 2))  # two episodes collected, no update yet
    agent.save(tmp_path / "mid")
    saved_rng = global_rng_state()  # what the original samples with from here on
    loaded = BlackjackAgent.load(tmp_path / "mid", device="cpu")  # (building it draws numbers)
    assert len(loaded.episodes) == 2
    first, second = agent.episodes[0].turns[0], loaded.episodes[0].turns[0]
    assert np.array_equal(first.tokens, second.tokens)
    assert np.array_equal(first.log_probs, second.log_probs)
    assert first.log_probs.dtype == second.log_probs.dtype
    updates, replies = [], []
    for each in (loaded, agent):  # the loaded one first: load() must have restored the state
        if each is agent:
            restore_global_rng_state(saved_rng)
        each_env = gym.make("Blackjack-v1")
        each_env.reset(seed=1)
        updates.append([s for s in _play(each, each_env, 2) if s])
        assert each.last_rollout is not None
        replies.append(each.last_rollout.replies.reshape(-1).tolist())
    assert len(updates[0]) == len(updates[1]) == 1  # the update ran after the 4th episode
    assert replies[0] == replies[1]  # the same samples: load() restored the random state
    a, b = agent.policy.trainable_state_dict(), loaded.policy.trainable_state_dict()
    for key in a:  # the update recomputes the rollout's cached hidden states from the prompts
        torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6)
