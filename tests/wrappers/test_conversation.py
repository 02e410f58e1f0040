"""The conversation in the PPO path: observations are the episode so far, the policy reads them
as a chat, a token budget keeps the first observation, and log-probs stay exact under a chat
template that rewrites earlier turns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from gym_llm import PPO, load_model, make_text_env
from gym_llm.replies import Reply
from gym_llm.wrappers import ActionParserWrapper, TextObservationWrapper
from gym_llm.wrappers.conversation import ConversationWrapper

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: Not a prefix-extension: user turns older than the previous exchange are shortened, so the
#: prompt of turn t is not the start of the prompt of turn t + 1.
REWRITING_TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>"
    "{% if m.role == 'user' and loop.revindex > 3 %}{{ m.content[:12] }}...{% else %}"
    "{{ m.content }}{% endif %}\n{% endfor %}<|assistant|>"
)


def _blackjack() -> gym.Env:
    return ActionParserWrapper(TextObservationWrapper(gym.make("Blackjack-v1", sab=False)))


def test_observations_are_the_episode_so_far() -> None:
    plain = _blackjack()
    env = ConversationWrapper(_blackjack())
    first, _ = env.reset(seed=0)
    assert json.loads(first) == [{"role": "user", "content": plain.reset(seed=0)[0]}]
    second = json.loads(env.step("hit")[0])
    assert second[:2] == [json.loads(first)[0], {"role": "assistant", "content": "hit"}]
    assert second[2] == {"role": "user", "content": plain.step("hit")[0]}
    assert env.observation_space.instruction  # the inner instruction is kept
    with pytest.raises(TypeError, match="TextObservationWrapper first"):
        ConversationWrapper(gym.make("Blackjack-v1"))


def _maze_agent(model_dir: Path, n_envs: int, mode: str, max_new_tokens: int, **ppo: Any) -> PPO:
    """PPO on TextMaze as a conversation, with the tiny model under the rewriting template."""
    model, tokenizer = load_model(str(model_dir))
    tokenizer.chat_template = REWRITING_TEMPLATE
    env = make_text_env("gym_llm/TextMaze-v0", n_envs, seed=0, conversation=True)
    policy_kwargs = {
        "model": model,
        "tokenizer": tokenizer,
        "action_mode": mode,
        "max_new_tokens": max_new_tokens,
    }
    return PPO("LLMPolicy", env, policy_kwargs=policy_kwargs, seed=0, **ppo)


def test_log_probs_stay_exact_under_a_template_that_rewrites_earlier_turns(
    tiny_model_dir: Path,
) -> None:
    agent = _maze_agent(tiny_model_dir, 2, "generate", 3, n_steps=6, batch_size=12, n_epochs=1)
    assert agent.policy.conversation  # read off the ConversationWrapper's space
    agent.learn(12)
    observations = agent.rollout_buffer.observations_text.ravel().tolist()
    assert any(len(json.loads(o)) >= 5 for o in observations)  # several turns in one prompt
    assert agent.first_ratio_error < 1e-4  # what was sampled is what is trained on


def _contains(ids: list[int], part: tuple[int, ...]) -> bool:
    return any(tuple(ids[i : i + len(part)]) == part for i in range(len(ids) - len(part) + 1))


@pytest.mark.parametrize("mode", ["generate", "choice"])
def test_the_policys_replies_reach_its_later_prompts_as_sampled(
    tiny_model_dir: Path, mode: str
) -> None:
    agent = _maze_agent(tiny_model_dir, 1, mode, 4, n_steps=2, batch_size=2)
    env, policy = agent.env, agent.policy
    encode = policy.prompts.encode
    observations = env.reset()
    with torch.inference_mode():
        step = policy.act(list(observations))
    reply = step.replies[0]
    assert isinstance(reply, Reply)
    if mode == "generate":  # the ids as sampled, up to the closing stop token
        sampled = tuple(int(t) for t in step.actions[0])
        assert sampled[: len(reply.token_ids)] == reply.token_ids
        assert len(sampled) - len(reply.token_ids) in (0, 1)
    else:  # the candidate tokens that were scored
        assert reply.token_ids == tuple(encode(str(reply)))
    # A reply whose tokens are not what its text encodes to (as sampling often gives).
    odd = Reply("north", encode(" north "))
    assert tuple(encode("north")) != odd.token_ids
    env.step(np.array([reply], dtype=object))
    latest = str(np.asarray(env.step(np.array([odd], dtype=object))[0], dtype=object)[0])
    messages = json.loads(latest)
    assert [m.get("token_ids") for m in messages[1::2]] == [
        list(reply.token_ids),
        list(odd.token_ids),
    ]
    ids = policy.prompt_ids(latest)
    assert _contains(ids, reply.token_ids) and _contains(ids, odd.token_ids)
    # Without the ids the text is encoded anew, and the odd reply's tokens are not there.
    plain = policy.prompt_ids(
        json.dumps([{k: m[k] for k in ("role", "content")} for m in messages])
    )
    assert not _contains(plain, odd.token_ids)


def test_the_token_budget_keeps_the_first_observation_and_the_latest(tiny_model_dir: Path) -> None:
    env = make_text_env("gym_llm/TextMaze-v0", 1, seed=0, conversation=True)
    agent = PPO(
        "LLMPolicy", env, n_steps=2, batch_size=2,
        policy_kwargs={"model": str(tiny_model_dir), "max_prompt_tokens": 800},
    )  # fmt: skip
    policy = agent.policy
    turns = [{"role": "user", "content": "RULES: reach the goal. " + "x" * 40}]
    for i in range(30):
        turns += [{"role": "assistant", "content": "up"}, {"role": "user", "content": f"turn {i}"}]
    observation = json.dumps(turns)
    ids = policy.prompt_ids(observation)
    text = policy.tokenizer.decode(ids)
    assert len(ids) <= 800 and policy.truncated_prompts == 1
    assert "RULES: reach the goal." in text and "turn 29" in text and "turn 0" not in text
    huge = json.dumps([{"role": "user", "content": "HEAD " + "y" * 5000 + " TAIL"}])
    text = policy.tokenizer.decode(policy.prompt_ids(huge))
    assert "HEAD" in text and "TAIL" in text and "characters cut" in text
