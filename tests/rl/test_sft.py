"""SFT warm start: demonstrations (reading, writing, reference policies) and ``warm_start``.

Every model here is a tiny random Llama from ``gym_llm.testing``; the real-model comparison is
``benchmarks/recipes/sft_vs_ppo.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import torch

from gym_llm import PPO, LLMPolicy, TextObservations, make_text_env
from gym_llm.envs.keyword_bandit import KeywordBanditEnv
from gym_llm.evaluation.exact import blackjack_optimum, blackjack_states
from gym_llm.experiments.demos import make_demos
from gym_llm.policy.prompts import build_messages, render_prompt
from gym_llm.rl.sft import DemoError, read_demos, sft_examples, warm_start
from gym_llm.testing import make_tiny_model, make_tiny_tokenizer, save_tiny_model
from gym_llm.wrappers import ActionParserWrapper, TextObservationWrapper

WORDS = ["apple", "banana", "cherry"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _bandit() -> KeywordBanditEnv:
    env = KeywordBanditEnv(options=WORDS)
    # A short instruction keeps the byte-level prompts short, so training takes seconds.
    env.observation_space = TextObservations(64, instruction="Say the target.")
    return env


def _bandit_records() -> list[dict[str, Any]]:
    env = _bandit()
    return [
        {
            "messages": [
                *build_messages(env.observation_for(t), env.observation_space, env.action_space),
                {"role": "assistant", "content": t},
            ]
        }
        for t in WORDS
    ]


def _bandit_agent(tmp_path: Path, lora: dict[str, Any] | None, mode: str = "choice") -> PPO:
    model_dir = save_tiny_model(tmp_path / "model", words=WORDS, hidden_size=64)
    env = make_text_env(_bandit, n_envs=2, seed=0)
    return PPO(
        LLMPolicy,
        env,
        policy_kwargs={
            "model": str(model_dir),
            "lora": lora,
            "action_mode": mode,
            "max_new_tokens": 3,
        },
        n_steps=2,
        batch_size=4,
        seed=0,
        device="cpu",
    )


def _success(agent: PPO) -> float:
    """Exact success: one greedy question per target (as gym_llm.evaluation.exact.keyword_bandit_value)."""
    env = _bandit()
    replies, _ = agent.predict([env.observation_for(t) for t in WORDS], deterministic=True)
    return sum(env.score(str(r), t) for r, t in zip(replies, WORDS, strict=True)) / len(WORDS)


# --- read_demos ----------------------------------------------------------------------------------


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD = json.dumps(
    {
        "messages": [
            {"role": "system", "content": "Play."},
            {"role": "user", "content": "Your hand totals 15."},
            {"role": "assistant", "content": "hit"},
            {"role": "user", "content": "Your hand totals 19."},
            {"role": "assistant", "content": "stick"},
        ]
    }
)


def test_read_demos_reads_records_and_skips_blank_lines(tmp_path: Path) -> None:
    records = read_demos(_write(tmp_path / "d.jsonl", [GOOD, "", GOOD]))
    assert len(records) == 2
    assert records[0]["messages"][2] == {"role": "assistant", "content": "hit"}


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("{not json", "not valid JSON"),
        ('{"turns": []}', 'no "messages" key'),
        ('{"messages": []}', "non-empty list"),
        ('{"messages": [{"role": "bot", "content": "x"}]}', "role 'bot'"),
        ('{"messages": [{"role": "user"}]}', '"role" and "content"'),
        ('{"messages": [{"role": "assistant", "content": "hit"}]}', "must follow a user message"),
        ('{"messages": [{"role": "user", "content": "hi"}]}', "no assistant message"),
        (
            '{"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]}',
            "only the first",
        ),
        ('{"messages": [{"role": "user", "content": 3}]}', "must be a string"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_read_demos_errors_name_file_and_line(tmp_path: Path, line: str, expected: str) -> None:
    path = _write(tmp_path / "bad.jsonl", [GOOD, "", line])
    with pytest.raises(DemoError, match=expected) as info:
        read_demos(path)
    assert f"{path}:3" in str(info.value)


def test_read_demos_missing_or_empty_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="make_demos"):
        read_demos(tmp_path / "nope.jsonl")
    with pytest.raises(DemoError, match="no demonstrations"):
        read_demos(_write(tmp_path / "empty.jsonl", [""]))


def test_in_memory_records_are_checked() -> None:
    tokenizer = make_tiny_tokenizer()
    with pytest.raises(DemoError, match=r"demos\[1\]"):
        sft_examples([json.loads(GOOD), {"messages": "hit"}], tokenizer)
    with pytest.raises(TypeError, match="JSONL path or a list"):
        sft_examples(json.loads(GOOD), tokenizer)  # one record, not a list of them


# --- sft_examples: the tokens SFT trains on are the policy's ------------------------------------


def test_examples_use_the_policy_prompt_tokens_and_mask_all_but_the_reply(tmp_path: Path) -> None:
    agent = _bandit_agent(tmp_path, lora=None)
    policy, tokenizer = agent.policy, agent.policy.tokenizer
    examples = sft_examples(_bandit_records(), tokenizer)
    assert len(examples) == len(WORDS)
    for example, word in zip(examples, WORDS, strict=True):
        prompt = policy.prompt_ids(_bandit().observation_for(word))
        reply = tokenizer(word, add_special_tokens=False)["input_ids"]
        assert example["input_ids"] == [*prompt, *reply, tokenizer.eos_token_id]
        assert example["completion_mask"] == [0] * len(prompt) + [1] * (len(reply) + 1)


def test_multi_turn_records_give_one_example_per_reply() -> None:
    tokenizer = make_tiny_tokenizer()
    examples = sft_examples([json.loads(GOOD)], tokenizer)
    assert len(examples) == 2
    messages = json.loads(GOOD)["messages"]
    second_prompt = tokenizer(render_prompt(tokenizer, messages[:4]), add_special_tokens=False)
    assert examples[1]["input_ids"][: len(second_prompt["input_ids"])] == second_prompt["input_ids"]
    assert sum(examples[1]["completion_mask"]) == len(tokenizer("stick")["input_ids"]) + 1


# --- make_demos ----------------------------------------------------------------------------------


def _blackjack_views() -> tuple[dict[str, tuple[int, int, int]], tuple[str, ...], str]:
    """Observation text -> state, the action names and the system prompt the policy sees."""
    text_env = TextObservationWrapper(gym.make("Blackjack-v1", sab=False))
    parser = ActionParserWrapper(text_env)
    states = {text_env.format(s): s for s in blackjack_states()}
    return states, parser.action_space.actions, text_env.instruction


def test_blackjack_episode_demos_play_the_optimal_strategy(tmp_path: Path) -> None:
    path = tmp_path / "bj.jsonl"
    lines = make_demos("Blackjack-v1", 30, path, seed=1, env_kwargs={"sab": False})
    records = read_demos(path)
    assert lines == len(records) >= 30  # at least one decision per episode
    states, names, instruction = _blackjack_views()
    _, best = blackjack_optimum()
    replies = []
    for record in records:
        system, user, assistant = record["messages"]
        assert system == {"role": "system", "content": instruction}
        observation, _, question = user["content"].partition("\n\n")
        assert question.startswith("What do you do?")
        replies.append(assistant["content"])
        assert assistant["content"] == names[best[states[observation]]]
    assert set(replies) == {"hit", "stick"}
    # The same seed gives the same file.
    make_demos("Blackjack-v1", 30, tmp_path / "again.jsonl", seed=1, env_kwargs={"sab": False})
    assert (tmp_path / "again.jsonl").read_text() == path.read_text()


def test_balanced_blackjack_demos_cover_every_state_once(tmp_path: Path) -> None:
    path = tmp_path / "bj.jsonl"
    assert make_demos("Blackjack-v1", 1, path, balanced=True) == 280
    states, names, _ = _blackjack_views()
    _, best = blackjack_optimum()
    seen = {}
    for record in read_demos(path):
        observation = record["messages"][1]["content"].partition("\n\n")[0]
        seen[states[observation]] = record["messages"][2]["content"]
    assert seen == {s: names[best[s]] for s in blackjack_states()}
    # Episodes weight states by how often play visits them: 200 of them repeat common hands and
    # miss rare ones (measured: 307 turns, 137 distinct states).
    lines = make_demos("Blackjack-v1", 200, tmp_path / "ep.jsonl")
    observations = [r["messages"][1]["content"] for r in read_demos(tmp_path / "ep.jsonl")]
    assert lines == len(observations) > len(set(observations))
    assert len(set(observations)) < 280


def test_keyword_bandit_demos_answer_the_target(tmp_path: Path) -> None:
    path = tmp_path / "kb.jsonl"
    assert make_demos("gym_llm/KeywordBandit-v0", 12, path, seed=0) == 12
    env = gym.make("gym_llm/KeywordBandit-v0")
    for record in read_demos(path):
        system, user, assistant = record["messages"]
        assert system["content"] == env.observation_space.instruction
        target = user["content"].split("Target: ")[1].split(".")[0]
        assert assistant["content"] == target
    assert make_demos("gym_llm/KeywordBandit-v0", 12, path, balanced=True) == 4


def test_demo_prompts_are_the_policy_prompts(tmp_path: Path, tiny_model_dir: Path) -> None:
    path = tmp_path / "bj.jsonl"
    make_demos("Blackjack-v1", 3, path, env_kwargs={"sab": False})
    env = make_text_env("Blackjack-v1", 1, env_kwargs={"sab": False})
    agent = PPO(LLMPolicy, env, policy_kwargs={"model": str(tiny_model_dir)}, device="cpu")
    for record in read_demos(path):
        observation = record["messages"][1]["content"].partition("\n\n")[0]
        prompt = render_prompt(agent.policy.tokenizer, record["messages"][:2])
        assert prompt == agent.policy.prompt_text(observation)


def test_reference_action_envs(tmp_path: Path) -> None:
    """Text envs with ``reference_action()`` (gym_llm/GuessNumber-v0, gym_llm/TextMaze-v0)."""
    ids = [i for i in ("gym_llm/GuessNumber-v0", "gym_llm/TextMaze-v0") if i in gym.registry]
    if not ids:
        pytest.skip("no env with reference_action() is registered yet")
    for env_id in ids:
        path = tmp_path / "ref.jsonl"
        lines = make_demos(env_id, 3, path, seed=0)
        records = read_demos(path)
        assert lines == len(records) >= 3
        # Replay the same episodes and check each reply is the reference action's name.
        env = gym.make(env_id)
        text_env = TextObservationWrapper(env)
        names = ActionParserWrapper(text_env).action_space.actions
        text, _ = text_env.reset(seed=0)
        for record in records:
            if record["messages"][1]["content"].partition("\n\n")[0] != text:
                text, _ = text_env.reset()  # the next episode
            assert record["messages"][1]["content"].partition("\n\n")[0] == text
            action = int(env.unwrapped.reference_action())
            assert record["messages"][2]["content"] == names[action]
            text, *_ = text_env.step(action)
        balanced = make_demos(env_id, 3, tmp_path / "bal.jsonl", seed=0, balanced=True)
        users = [r["messages"][1]["content"] for r in read_demos(tmp_path / "bal.jsonl")]
        assert balanced == len(set(users)) <= lines


def test_make_demos_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"CartPole-v1.*Supported: Blackjack-v1.*KeywordBandit"):
        make_demos("CartPole-v1", 1, tmp_path / "x.jsonl")
    with pytest.raises(ValueError, match=r"No-Such-Env-v0.*Supported"):
        make_demos("No-Such-Env-v0", 1, tmp_path / "x.jsonl")
    with pytest.raises(ValueError, match="sab=False"):
        make_demos("Blackjack-v1", 1, tmp_path / "x.jsonl", env_kwargs={"sab": True})
    with pytest.raises(ValueError, match="episodes must be >= 1"):
        make_demos("Blackjack-v1", 0, tmp_path / "x.jsonl")


# --- warm_start ----------------------------------------------------------------------------------


def test_warm_start_teaches_a_random_model_keyword_bandit(tmp_path: Path) -> None:
    """A random model cannot solve KeywordBandit; SFT on the target replies makes it."""
    agent = _bandit_agent(tmp_path, lora=None)
    value_head = {k: v.clone() for k, v in agent.policy.value_head.state_dict().items()}
    before = _success(agent)
    assert before < 0.7  # measured: a random model answers one word whatever the target
    demos = tmp_path / "demos.jsonl"
    demos.write_text("".join(json.dumps(r) + "\n" for r in _bandit_records() * 8))
    stats = warm_start(agent.policy, demos, epochs=30, learning_rate=3e-3, batch_size=8)
    after = _success(agent)
    assert after >= before + 0.3 and after >= 0.9, (before, after, stats)
    assert stats["sft/examples"] == 24 and stats["sft/steps"] == 90
    assert stats["sft/final_loss"] < stats["sft/loss"]
    for name, tensor in agent.policy.value_head.state_dict().items():
        assert torch.equal(tensor, value_head[name]), name


def test_warm_start_trains_only_the_lora_adapter(tmp_path: Path) -> None:
    agent = _bandit_agent(tmp_path, lora={"r": 4, "lora_alpha": 8, "init_lora_weights": False})
    before = {n: p.detach().clone() for n, p in agent.policy.named_parameters()}
    grads = {n: p.requires_grad for n, p in agent.policy.named_parameters()}
    warm_start(agent.policy, _bandit_records(), epochs=1, learning_rate=1e-2, batch_size=3)
    for name, p in agent.policy.named_parameters():
        changed = not torch.equal(p.detach(), before[name])
        assert changed == ("lora_" in name), name
        assert p.requires_grad == grads[name], name


@pytest.mark.parametrize("mode", ["choice", "generate"])
def test_cached_and_uncached_log_probs_agree_after_warm_start(tmp_path: Path, mode: str) -> None:
    """TRL turns on activation checkpointing and ``use_cache=False`` by default; either breaks
    the policy's prefix KV cache. After a warm start, log-probs with and without it must agree,
    in inference and in training mode."""
    agent = _bandit_agent(tmp_path, lora={"r": 4, "lora_alpha": 8}, mode=mode)
    policy = agent.policy
    use_cache = policy.lm.config.use_cache
    policy.set_training_mode(False)
    warm_start(policy, _bandit_records(), epochs=2, learning_rate=1e-2, batch_size=3)
    assert policy.lm.config.use_cache == use_cache
    assert not policy.lm.get_base_model().is_activation_checkpointing
    assert "forward" not in vars(policy.lm.get_base_model())  # TRL's fused head is removed
    assert not policy.training and not policy.lm.training  # as before the warm start
    observations = [_bandit().observation_for(t) for t in WORDS]
    assert policy.shared_prefix  # the cache is in use
    with torch.no_grad():
        step = policy.act(observations)
    for training in (False, True):
        policy.set_training_mode(training)
        with torch.set_grad_enabled(training):
            cached = policy.evaluate_actions(observations, step.actions)
            prefix, policy.prompts.shared_prefix = policy.prompts.shared_prefix, []
            try:
                whole = policy.evaluate_actions(observations, step.actions)
            finally:
                policy.prompts.shared_prefix = prefix
        torch.testing.assert_close(cached.token_log_probs, whole.token_log_probs)
        torch.testing.assert_close(cached.values, whole.values)
        sampled = torch.zeros_like(cached.token_log_probs)
        for row, lps in enumerate(step.token_log_probs):
            sampled[row, : len(lps)] = torch.as_tensor(lps)
        torch.testing.assert_close(cached.token_log_probs.detach(), sampled, atol=1e-5, rtol=0)


def test_warm_start_on_a_plain_model(tmp_path: Path) -> None:
    tokenizer = make_tiny_tokenizer(WORDS)
    model = make_tiny_model(len(tokenizer))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with pytest.raises(ValueError, match="tokenizer"):
        warm_start(model, _bandit_records())
    stats = warm_start(
        model,
        _bandit_records(),
        tokenizer=tokenizer,
        max_steps=2,
        batch_size=2,
        output_dir=tmp_path / "sft",
    )
    assert stats["sft/steps"] == 2 and stats["sft/examples"] == 3
    assert any(not torch.equal(p, before[n]) for n, p in model.named_parameters())
    assert (tmp_path / "sft" / "trainer_state.json").is_file()
    assert not model.training
    with pytest.raises(ValueError, match="epochs > 0 or max_steps > 0"):
        warm_start(model, _bandit_records(), tokenizer=tokenizer, epochs=0)


def test_train_run_with_sft_demos(tmp_path: Path) -> None:
    """``TrainConfig(sft_demos=...)``: SFT after the "before" evaluation, recorded in result.json."""
    from gym_llm.experiments.run import TrainConfig, run

    model_dir = save_tiny_model(tmp_path / "model", words=["apple", "banana", "cherry", "grape"])
    demos = tmp_path / "kb.jsonl"
    make_demos("gym_llm/KeywordBandit-v0", 1, demos, balanced=True)
    config = TrainConfig(
        env="gym_llm/KeywordBandit-v0",
        timesteps=4,
        n_envs=2,
        eval_episodes=0,
        eval_points=0,
        device="cpu",
        sft_demos=str(demos),
        sft_epochs=1,
    ).with_settings(
        {"policy.model": str(model_dir), "ppo.n_steps": 2, "ppo.batch_size": 4, "ppo.n_epochs": 1}
    )
    result = run(config, tmp_path / "run", progress_bar=False)
    data = json.loads((tmp_path / "run" / "result.json").read_text())
    assert data["sft"]["sft/examples"] == 4
    assert data["after_sft"]["exact"] is not None and data["after_sft"]["timesteps"] == 0
    assert result.after_sft is not None and len(result.curve) == 3  # before, after SFT, after
    assert data["config"]["sft_demos"] == str(demos)


def test_cli_demos_writes_what_make_demos_writes(tmp_path: Path) -> None:
    from gym_llm.cli.commands import main

    out = tmp_path / "cli.jsonl"
    args = ["demos", "--env", "Blackjack-v1", "--env-kwargs", "sab=False", "--out", str(out)]
    assert main([*args, "--episodes", "20", "--seed", "3"]) == 0
    make_demos("Blackjack-v1", 20, tmp_path / "api.jsonl", seed=3, env_kwargs={"sab": False})
    assert out.read_text() == (tmp_path / "api.jsonl").read_text()
    assert main([*args, "--episodes", "1", "--balanced"]) == 0
    assert len(read_demos(out)) == 280


def test_shared_prefix_loss_trains_like_trl(monkeypatch: pytest.MonkeyPatch) -> None:
    """The prompt head every example shares is encoded once per batch; the weights after a few
    steps must be those of TRL's own full-sequence loss."""
    import gym_llm.rl.sft as sft

    tokenizer = make_tiny_tokenizer(WORDS)
    records = _bandit_records() * 2
    assert sft._shared_prefix_length(sft_examples(records, tokenizer)) >= 8

    def train(shared: bool) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
        if not shared:
            monkeypatch.setattr(sft, "_MIN_SHARED_PREFIX", 10**9)
        model = make_tiny_model(len(tokenizer), seed=0)
        stats = warm_start(
            model, records, tokenizer=tokenizer, max_steps=3, batch_size=4, learning_rate=1e-2
        )
        return stats, {n: p.detach().clone() for n, p in model.named_parameters()}

    shared_stats, shared = train(True)
    full_stats, full = train(False)
    assert shared_stats["sft/shared_prefix_tokens"] >= 8
    assert full_stats["sft/shared_prefix_tokens"] == 0
    assert shared_stats["sft/loss"] == pytest.approx(full_stats["sft/loss"], rel=1e-4)
    init = dict(make_tiny_model(len(tokenizer), seed=0).named_parameters())
    for name, tensor in full.items():
        # Adam divides by the gradient's running RMS, which turns float noise in near-zero
        # gradients into visible differences, so compare at 1% of the moves (~3e-2).
        assert (tensor - init[name]).abs().max() > 1e-2, name
        torch.testing.assert_close(shared[name], tensor, atol=3e-4, rtol=0)
