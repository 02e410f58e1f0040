"""Blackjack with LlamaGym's hand-written loop, on gym_llm's ``Agent``.

The loop is LlamaGym's README example with one changed import; the agent trains with gym_llm's
PPO (exact token log-probs, per-turn rewards, value head). At the end the learned greedy strategy
is evaluated exactly (``gym_llm.evaluation.exact``: one question per decision state, then dynamic programming)
and printed as a basic-strategy chart.

    python examples/blackjack.py --episodes 400 --batch-size 16
    python examples/blackjack.py --sft-warm-start          # SFT on the optimal strategy first

On a 2-core CPU SmolLM2-135M plays about one episode per second; real training runs belong on a
GPU (``--device cuda``).
"""

from __future__ import annotations

import argparse
import re
from typing import Any

import gymnasium as gym
from tqdm import trange

from gym_llm import Agent
from gym_llm.evaluation.exact import (
    HIT,
    STICK,
    BlackjackState,
    blackjack_chart,
    blackjack_optimum,
    blackjack_states,
    blackjack_value,
)

ACTION_NAMES = ("stick", "hit")


class BlackjackAgent(Agent):
    def get_system_prompt(self) -> str:
        return "You are an expert blackjack player. Every turn, reply with one word: hit or stick."

    def format_observation(self, observation: Any) -> str:
        total, dealer, usable_ace = (int(x) for x in observation)
        ace = " (soft: you hold an ace counted as 11)" if usable_ace else ""
        card = "an ace" if dealer == 1 else f"a {dealer}"
        return f"Your total is {total}{ace}. The dealer shows {card}. Do you hit or stick?"

    def extract_action(self, response: str) -> Any:
        words = set(re.findall(r"[a-z]+", response.lower()))
        hit, stick = "hit" in words, bool(words & {"stick", "stand"})
        if hit != stick:
            return HIT if hit else STICK
        return None  # neither or both: the agent's parser rules (last mention), then a fallback


def optimal_demos(agent: Agent) -> list[dict[str, Any]]:
    """One chat record per decision state, answered with the optimal action (SFT warm start)."""
    _, best = blackjack_optimum()
    return [
        {
            "messages": [
                {"role": "system", "content": agent.get_system_prompt()},
                {"role": "user", "content": agent.format_observation(state)},
                {"role": "assistant", "content": ACTION_NAMES[best[state]]},
            ]
        }
        for state in blackjack_states()
    ]


def learned_strategy(agent: Agent) -> dict[BlackjackState, float]:
    """Probability of hitting in every decision state under the greedy policy (0.5 where no
    valid action could be read: the agent then plays a random action)."""
    states = blackjack_states()
    actions = agent.predict(states)
    return {
        state: 0.5 if action is None else float(action == HIT)
        for state, action in zip(states, actions, strict=True)
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--model", default="smollm2-135m", help="registry name, path or hub id")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, ...")
    parser.add_argument("--episodes", type=int, default=400, help="training episodes")
    parser.add_argument("--batch-size", type=int, default=16, help="episodes per PPO update")
    parser.add_argument("--mini-batch-size", type=int, default=16, help="turns per PPO step")
    parser.add_argument("--ppo-epochs", type=int, default=4, help="PPO epochs per update")
    parser.add_argument("--learning-rate", type=float, default=1e-4, help="LoRA learning rate")
    parser.add_argument("--max-new-tokens", type=int, default=8, help="reply length budget")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    parser.add_argument(
        "--invalid-penalty", type=float, default=0.0, help="reward added to unreadable replies"
    )
    parser.add_argument(
        "--sft-warm-start",
        action="store_true",
        help="fine-tune on the optimal strategy (or --sft-demos) before RL",
    )
    parser.add_argument(
        "--sft-demos", default=None, help="chat-messages JSONL for --sft-warm-start"
    )
    parser.add_argument(
        "--skip-baseline", action="store_true", help="skip the exact evaluation before training"
    )
    parser.add_argument("--seed", type=int, default=0, help="env and sampling seed")
    parser.add_argument(
        "--tensorboard-log", default=None, help="TensorBoard folder (e.g. runs/); off if unset"
    )
    parser.add_argument("--save", default=None, help="directory to save the trained agent to")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    agent = BlackjackAgent(
        args.model,
        None,
        args.device,
        generate_config={"max_new_tokens": args.max_new_tokens, "temperature": args.temperature},
        ppo_config={
            "batch_size": args.batch_size,
            "mini_batch_size": args.mini_batch_size,
            "learning_rate": args.learning_rate,
            "ppo_epochs": args.ppo_epochs,
            "seed": args.seed,
        },
        action_names=ACTION_NAMES,
        invalid_penalty=args.invalid_penalty,
        tensorboard_log=args.tensorboard_log,
    )
    if args.sft_warm_start:
        demos: Any = args.sft_demos or optimal_demos(agent)
        stats = agent.warm_start(demos)
        print(f"SFT warm start: {stats}")
    before = None if args.skip_baseline else blackjack_value(learned_strategy(agent))

    env = gym.make("Blackjack-v1")
    env.reset(seed=args.seed)
    for _ in trange(args.episodes, desc="episodes"):
        observation, info = env.reset()
        done = False
        while not done:
            action = agent.act(observation)
            observation, reward, terminated, truncated, info = env.step(action)  # noqa: RUF059
            agent.assign_reward(reward)
            done = terminated or truncated
        train_stats = agent.terminate_episode()
        if train_stats:
            print(
                f"update: mean return {train_stats['agent/mean_return']:+.3f}, approx_kl "
                f"{train_stats['train/approx_kl']:.4f}, invalid "
                f"{train_stats['agent/invalid_action_rate']:.0%}"
            )
    if args.save:
        agent.save(args.save)

    strategy = learned_strategy(agent.eval())
    optimum, _ = blackjack_optimum()
    print(f"\nExact expected return of the greedy strategy: {blackjack_value(strategy):+.4f}")
    random = blackjack_value(lambda _: 0.5)
    baseline = "skipped" if before is None else f"{before:+.4f}"
    print(f"(before training {baseline}, random {random:+.4f}, optimal {optimum:+.4f})\n")
    print(blackjack_chart(strategy))


if __name__ == "__main__":
    main()
