"""Train SmolLM2 with gym_llm's PPO on TextArena's GuessTheNumber (single player).

    pip install "gym_llm[textarena]"
    python examples/textarena_guess.py --timesteps 512

Everything TextArena-specific is in ``gym_llm.envs.textarena_env`` (observations from
``get_observation()``, the reward from ``close()``, a fresh game per episode). The model answers
in free text (generate mode); TextArena reads the number in square brackets.
"""

from __future__ import annotations

import argparse

from gym_llm import PPO, make_text_env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--game", default="GuessTheNumber-v0", help="a TextArena single-player game id"
    )
    parser.add_argument("--model", default="smollm2-135m", help="registry name or local path")
    parser.add_argument("--timesteps", type=int, default=512, help="env steps to train")
    parser.add_argument("--n-envs", type=int, default=4, help="games played side by side")
    args = parser.parse_args(argv)
    try:
        import textarena  # noqa: F401

        from gym_llm.envs import textarena_env
    except ImportError:
        raise SystemExit('This example needs TextArena: pip install "gym_llm[textarena]"') from None
    env = make_text_env(lambda: textarena_env(args.game), args.n_envs, seed=0)
    model = PPO(
        "LLMPolicy", env, n_steps=16, batch_size=32,
        policy_kwargs={"model": args.model, "max_new_tokens": 16}, seed=0,
    )  # fmt: skip
    model.learn(args.timesteps, progress_bar=True)
    observations = env.reset()
    print(model.predict(list(observations))[0])  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
