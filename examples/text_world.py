"""A TextWorld text adventure played with free-text commands, trained with gym_llm's ``Agent``.

The model types commands ("open the chest", "go north") in generate mode; the game's score is the
reward (TextWorld reports a running score, so each turn earns its increase). Needs the optional
``textworld`` extra:

    pip install "gym_llm[textworld]"
    python examples/text_world.py --episodes 50

TextWorld builds the ``jericho`` Z-machine interpreter from source when it installs, so a C
compiler (gcc or clang) and ``make`` must be present; it runs on Linux and macOS (Windows: WSL).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from gym_llm import Agent

MAX_COMMAND_CHARS = 80

INSTALL_HELP = (
    "examples/text_world.py needs TextWorld, which is not installed. Install the optional extra:\n"
    '    pip install "gym_llm[textworld]"      (or: pip install textworld)\n'
    "TextWorld compiles its `jericho` dependency (a Z-machine interpreter) during installation,\n"
    "so a C compiler (gcc or clang) and make must be available; Linux or macOS (on Windows use "
    "WSL)."
)


class TextWorldAgent(Agent):
    def get_system_prompt(self) -> str:
        return (
            "You are playing a text adventure game. Each turn you read what happens and reply "
            "with exactly one short command, such as 'go north', 'open chest' or 'take key'. "
            "Reply with the command only."
        )

    def format_observation(self, observation: Any) -> str:
        return str(observation).strip()

    def extract_action(self, response: str) -> Any:
        # The game's Z-machine interpreter reads plain ASCII: a NUL byte hangs it and other bytes
        # from an untrained model have crashed it (seen with textworld 1.7.0), so keep printable
        # ASCII only, and a sane length.
        printable = re.sub(r"[^ -~\n]", "", response)
        lines = [line.strip(" \t\"'`.>") for line in printable.strip().splitlines()]
        command = next((line for line in lines if line), "")[:MAX_COMMAND_CHARS]
        return command.lower() or None  # empty reply: fall back to "look"


def require_textworld() -> Any:
    """The ``textworld`` module, or exit with install instructions."""
    if importlib.util.find_spec("textworld") is None:
        print(INSTALL_HELP, file=sys.stderr)
        raise SystemExit(2)
    return importlib.import_module("textworld")


def make_game(textworld: Any, directory: Path, seed: int, rooms: int, quest_length: int) -> str:
    """Generate a small game file with TextWorld's generator."""
    options = textworld.GameOptions()
    options.seeds = seed
    options.nb_rooms = rooms
    options.nb_objects = rooms * 2
    options.quest_length = quest_length
    if "path" in inspect.signature(textworld.make).parameters:  # newer: make(options, path)
        game_file, _ = textworld.make(options, str(directory / "game.z8"))
    else:  # older: the folder is an option
        options.path = str(directory)
        game_file, _ = textworld.make(options)
    return str(game_file)


def make_env(textworld: Any, game_file: str, max_steps: int) -> Any:
    """A TextWorld env for one game; ``step`` returns ``(obs, score, done, infos)``."""
    twgym = importlib.import_module("textworld.gym")
    infos = textworld.EnvInfos(max_score=True, won=True, lost=True)
    env_id = twgym.register_game(game_file, infos, max_episode_steps=max_steps)
    if hasattr(twgym, "make"):  # TextWorld >= 1.6 keeps its own registry
        return twgym.make(env_id)
    return importlib.import_module("gym").make(env_id)


def play(agent: Agent, env: Any, train: bool) -> tuple[float, dict[str, float]]:
    """One episode; returns the final score and the training stats (if an update ran)."""
    observation, _ = env.reset()
    done, last_score = False, 0.0
    while not done:
        command = agent.act(observation)
        observation, score, done, _ = env.step(command)
        agent.assign_reward(float(score) - last_score)
        last_score = float(score)
    return last_score, agent.terminate_episode(train=train)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--model", default="smollm2-135m", help="registry name, path or hub id")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, ...")
    parser.add_argument("--episodes", type=int, default=50, help="training episodes")
    parser.add_argument("--batch-size", type=int, default=4, help="episodes per PPO update")
    parser.add_argument("--max-steps", type=int, default=20, help="commands per episode")
    parser.add_argument("--max-new-tokens", type=int, default=12, help="command length budget")
    parser.add_argument("--max-context-tokens", type=int, default=1024, help="prompt budget")
    parser.add_argument("--game", default=None, help="an existing game file (.z8/.ulx)")
    parser.add_argument("--rooms", type=int, default=2, help="rooms of a generated game")
    parser.add_argument("--quest-length", type=int, default=2, help="steps of its quest")
    parser.add_argument("--seed", type=int, default=0, help="game generation seed")
    parser.add_argument("--tensorboard-log", default=None, help="TensorBoard folder; off if unset")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    textworld = require_textworld()
    from tqdm import trange

    with tempfile.TemporaryDirectory(prefix="gym_llm-textworld-") as tmp:
        game = args.game or make_game(
            textworld, Path(tmp), args.seed, args.rooms, args.quest_length
        )
        env = make_env(textworld, game, args.max_steps)
        agent = TextWorldAgent(
            args.model,
            None,
            args.device,
            generate_config={"max_new_tokens": args.max_new_tokens},
            ppo_config={"batch_size": args.batch_size, "mini_batch_size": 8, "seed": args.seed},
            max_context_tokens=args.max_context_tokens,
            fallback_action="look",
            tensorboard_log=args.tensorboard_log,
        )
        before, _ = play(agent.eval(), env, train=False)
        agent.train()
        for _ in trange(args.episodes, desc="episodes"):
            _, stats = play(agent, env, train=True)
            if stats:
                print(
                    f"update: mean score {stats['agent/mean_return']:.2f}, turns/episode "
                    f"{stats['agent/mean_turns_per_episode']:.1f}, approx_kl "
                    f"{stats['train/approx_kl']:.4f}"
                )
        after, _ = play(agent.eval(), env, train=False)
        print(f"Greedy score: before training {before:g}, after {after:g}")
        env.close()


if __name__ == "__main__":
    main()
