"""``gym-llm train`` and ``gym-llm eval``: a training run from a :class:`TrainConfig`, and the
evaluation of a saved run."""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gym_llm.cli.arguments import PROG, CLIError, given_settings, read_config_file

# --- train ---------------------------------------------------------------------------------


def _train_config(args: argparse.Namespace) -> Any:
    config = config_from_file(args.config) if args.config is not None else None
    return _with_flags(config, args)


def config_from_file(path: str | Path) -> Any:
    """The ``TrainConfig`` of a run file (nested or the older flat keys); usage errors name
    the file and what is wrong in it."""
    from gym_llm.experiments.train_config import TrainConfig

    try:
        return TrainConfig.from_dict(read_config_file(path))
    except (TypeError, ValueError) as exc:
        raise CLIError(f"--config {path}: {exc} Fix the file.") from None


def _with_flags(config: Any, args: argparse.Namespace) -> Any:
    from gym_llm.experiments.train_config import TrainConfig

    try:
        return (config or TrainConfig()).with_settings(given_settings(args, args.config_fields))
    except (TypeError, ValueError) as exc:
        raise CLIError(f"invalid settings: {exc}") from None


def _default_run_dir(config: Any) -> Path:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", config.env).strip("-")
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{name}-{config.mode}-{stamp}"


def check_env_starts(
    env_id: str, env_kwargs: dict[str, Any], seed: int = 0, invalid_penalty: float = 0.0
) -> bool:
    """Build the env and start one episode, so that an unknown id, game, kwarg or setting fails
    here, before any model is loaded or file written (``--dry-run`` too); returns whether choice
    mode can play it (its actions are listed, or come with each state)."""
    import gymnasium as gym

    import gym_llm  # noqa: F401  (registers gym_llm/<Name>-v0)
    from gym_llm.envs.ecosystems import GAMES, MissingPackage
    from gym_llm.experiments.run import check_invalid_penalty
    from gym_llm.rl.common.vec_env import make_text_env

    shown = f"--env {env_id}" + (f" --env-kwargs {env_kwargs}" if env_kwargs else "")
    ids = (
        "Gymnasium ids: `python -c 'import gymnasium; gymnasium.pprint_registry()'`; "
        f"text games: {', '.join(p + '...' for p in GAMES)}"
    )
    try:
        vec = make_text_env(env_id, 1, env_kwargs=env_kwargs, seed=seed)
    except MissingPackage as exc:
        raise CLIError(f"{shown}: {exc}") from None
    except ImportError as exc:  # "module:Id" naming a module that is not installed
        raise CLIError(f"{shown}: {str(exc).rstrip('.')}. {ids}.") from None
    except gym.error.Error as exc:
        raise CLIError(f"{shown}: {str(exc).rstrip('.')}. {ids}.") from None
    except (TypeError, ValueError) as exc:
        raise CLIError(f"{shown}: {exc}") from None
    try:
        try:
            vec.reset()  # games check their name and parameters when they start
        except Exception as exc:  # a third-party game's own error, whatever its type
            raise CLIError(
                f"{shown}: the env did not start ({type(exc).__name__}: {exc}). Check the "
                "game's name and its env kwargs."
            ) from None
        try:
            check_invalid_penalty(invalid_penalty, env_id, vec.envs[0])
        except ValueError as exc:
            raise CLIError(str(exc)) from None
    finally:
        vec.close()  # a game's server (TextWorld-Express's Java) stops either way
    space = vec.action_space
    return bool(getattr(space, "actions", None) or getattr(space, "per_state", False))


#: Settings ``--resume`` lets differ from the run's config.
RESUMABLE_CHANGES = ("timesteps",)


def _resume_config(args: argparse.Namespace) -> tuple[Any, Path]:
    """The run's own config, with the flags given checked against it."""
    from gym_llm.configs import dotted

    run_dir = Path(args.resume)
    if not (run_dir / "config.json").is_file():
        raise CLIError(
            f"--resume {run_dir}: no config.json there. Pass the --out directory of a "
            f"`{PROG} train` run."
        )
    if args.out is not None or args.config is not None:
        raise CLIError("--resume continues RUN_DIR with its own config: drop --out and --config.")
    config = config_from_file(run_dir / "config.json")
    saved = dotted(config)
    given = given_settings(args, args.config_fields)
    conflicts = [
        f"--{name.replace('_', '-')} {value!r} (the run has {saved.get(name)!r})"
        for name, value in given.items()
        if name not in RESUMABLE_CHANGES and value != saved.get(name)
    ]
    if conflicts:
        raise CLIError(
            "--resume continues a run with its own settings; these flags differ: "
            + "; ".join(conflicts)
            + ". Drop them, or start a new run with --config "
            + f"{run_dir / 'config.json'} --out NEW_DIR."
        )
    return _with_flags(config, args), run_dir


def _quiet(*args: Any, **kwargs: Any) -> None:
    """``print`` in processes other than the main one: one process reports for the job."""


def _train(args: argparse.Namespace) -> int:
    if args.resume is not None:
        return _run_train(*_resume_config(args), args, resume=True)
    config = _train_config(args)
    run_dir = Path(args.out) if args.out is not None else _default_run_dir(config)
    return _run_train(config, run_dir, args, resume=False)


def _run_train(config: Any, run_dir: Path, args: argparse.Namespace, *, resume: bool) -> int:
    from gym_llm.experiments.run import check_processes

    try:  # the same refusals run() makes, as this command's errors
        main = check_processes(config, resume)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    say = print if main else _quiet
    # The main process writes config.json as the run starts; the others must not see that
    # as an earlier run.
    exists = main and (run_dir / "config.json").exists()
    if not resume and exists and not args.overwrite:
        raise CLIError(
            f"--out {run_dir} already holds a run (config.json). Choose another --out, or pass "
            "--overwrite to replace it."
        )
    listed = check_env_starts(config.env, config.env_kwargs, config.seed, config.invalid_penalty)
    from gym_llm.policy.arguments import scores_listed_actions

    if not listed and scores_listed_actions(config.mode):
        if not resume and not hasattr(args, "policy.action_mode") and args.config is None:
            # The default mode, on a game whose replies are free text: generate mode.
            config = config.with_settings({"policy.action_mode": "generate"})
            say(f"{config.env} takes free-text replies (no list of actions): generate mode")
        else:
            raise CLIError(
                f"--policy.action-mode choice needs an env that lists its actions; "
                f"{config.env} takes free-text replies: use --policy.action-mode generate."
            )
    if args.dry_run:
        print(json.dumps(config.as_dict(), indent=2))
        return 0

    from gym_llm.evaluation.curve import CurvePoint
    from gym_llm.experiments.run import run

    def report(point: CurvePoint) -> None:
        say(f"[{point.timesteps:>7} env steps, {point.wall_s:7.1f} s] {point.describe()}")

    if resume:
        from gym_llm.experiments.checkpoints import resumable_checkpoint
        from gym_llm.rl.common.checkpoint_files import latest_checkpoint

        if latest_checkpoint(run_dir / "checkpoints") is None:
            # Killed before its first checkpoint: nothing to continue, so the run starts over.
            say(f"{run_dir} has no checkpoint yet: starting the run from the beginning")
            resume = False
        else:
            try:
                checkpoint = resumable_checkpoint(run_dir)
            except FileNotFoundError as exc:
                raise CLIError(f"--resume: {exc}") from None
            say(f"Resuming {run_dir} from {checkpoint} up to {config.timesteps} env steps")
    else:
        say(f"Training {config.policy.model} on {config.env} ({config.mode} mode) -> {run_dir}")
    result = run(
        config, run_dir, progress_bar=main and not args.quiet, on_point=report, resume=resume
    )
    _report_result(say, config, run_dir, result)
    return 0


def _report_result(say: Callable[[str], None], config: Any, run_dir: Path, result: Any) -> None:
    """What a finished run reached, where it is, and the commands that come next."""
    from gym_llm.evaluation.monte_carlo import reference_returns

    references = reference_returns(config.env, config.env_kwargs, measure_random=False)
    say(f"Before training: {result.before.describe()}")
    say(f"After training:  {result.after.describe()}")
    if result.best is not None:
        say(
            f"Best point:      {result.best['value']:+.4f} ({result.best['kind']}) at "
            f"{result.best['timesteps']} env steps, kept in {result.best_path}"
        )
    if references:
        say("Reference: " + ", ".join(f"{k} {v:+.4f}" for k, v in references.items()))
    say(
        f"{result.timesteps} env steps in {result.train_wall_s:.1f} s on {result.device}"
        + (f" x {result.processes} processes" if result.processes > 1 else "")
        + ".\n"
        f"Run directory: {run_dir} (config.json, result.json, curve.png, agent/, tensorboard/"
        + (", best/" if result.best is not None else "")
        + (", checkpoints/" if config.checkpoint_every != 0 else "")
        + ")\n"
        f"  TensorBoard: tensorboard --logdir {run_dir / 'tensorboard'}\n"
        f"  Evaluate:    {PROG} eval --load {run_dir}\n"
        f"  Repeat:      {PROG} train --config {run_dir / 'config.json'} --out NEW_DIR\n"
        f"  Train more:  {PROG} train --resume {run_dir} --timesteps N"
    )


# --- eval ----------------------------------------------------------------------------------


def _find_run(path: Path) -> tuple[Path, Path]:
    """``(agent directory, config.json of the run)`` for a run directory, its ``agent/`` or one
    of its ``best/`` or ``checkpoints/<steps>/``."""
    hint = (
        "Pass the --out directory of a `gym-llm train` run (it holds config.json and agent/), "
        "its best/, or one of its checkpoints/<steps>/ directories."
    )
    if not path.exists():
        raise CLIError(f"--load {path}: no such directory. {hint}")
    if not path.is_dir():
        raise CLIError(f"--load {path} is a file, not a run directory. {hint}")
    if (path / "agent" / "policy.pt").is_file() and (path / "config.json").is_file():
        return path / "agent", path / "config.json"
    if (path / "policy.pt").is_file():  # agent/, best/ or checkpoints/<steps>/
        for run_dir in (path.parent, path.parent.parent):
            is_run = (run_dir / "agent").is_dir() or (run_dir / "checkpoints").is_dir()
            if is_run and (run_dir / "config.json").is_file():
                return path, run_dir / "config.json"
        raise CLIError(
            f"--load {path} is an agent, but no run config.json was found next to it. {hint}"
        )
    raise CLIError(f"--load {path} holds no agent (no agent/policy.pt). {hint}")


def _eval(args: argparse.Namespace) -> int:
    if args.episodes < 1:
        raise CLIError(f"--episodes must be >= 1, got {args.episodes}.")
    agent_dir, config_path = _find_run(Path(args.load))
    config = config_from_file(config_path)
    env_id, env_kwargs = config.env, config.env_kwargs
    n_envs = args.n_envs or config.n_envs
    seed = args.seed if args.seed is not None else config.seed + 20_000
    out = Path(args.out) if args.out is not None else config_path.parent / "eval.json"

    from gym_llm import make_text_env
    from gym_llm.evaluation.exact import exact_evaluation_supported, exact_policy_value
    from gym_llm.evaluation.monte_carlo import evaluate, reference_returns
    from gym_llm.experiments.agents import load_agent
    from gym_llm.experiments.run import device_name, versions

    print(f"Evaluating {agent_dir} on {env_id} {env_kwargs or ''}")
    start = time.perf_counter()
    model = load_agent(agent_dir, device=args.device)
    env = make_text_env(env_id, n_envs, env_kwargs=env_kwargs, seed=seed)
    stats = evaluate(model, env, args.episodes, deterministic=not args.stochastic)
    env.close()
    half = 1.96 * stats.sem
    print(f"Monte-Carlo ({'sampled' if args.stochastic else 'greedy'}): {stats}")
    exact = None
    if args.exact and exact_evaluation_supported(env_id, env_kwargs):
        exact = exact_policy_value(model, env_id, env_kwargs)
        print(f"Exact expected return (greedy): {exact:+.4f}")
    references = reference_returns(env_id, env_kwargs, measure_random=False)
    if references:
        print("Reference: " + ", ".join(f"{k} {v:+.4f}" for k, v in references.items()))
    report = {
        "agent": str(agent_dir),
        "env": env_id,
        "env_kwargs": env_kwargs,
        "episodes": stats.episodes,
        "seed": seed,
        "deterministic": not args.stochastic,
        "monte_carlo": stats.as_dict(),
        "ci95": [stats.mean - half, stats.mean + half],
        "exact": exact,
        "references": references,
        "num_timesteps": int(model.num_timesteps),
        "device": device_name(model.device),
        "versions": versions(),
        "wall_s": time.perf_counter() - start,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"Wrote {out}")
    return 0
