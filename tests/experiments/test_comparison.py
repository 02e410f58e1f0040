"""gym-llm bench: env specs, the run plan, and the CSV / summary / PNG it writes."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import pytest

from gym_llm.cli.bench import build_parser, main
from gym_llm.experiments.comparison import ComparisonConfig, Row, parse_agents, plan
from gym_llm.experiments.report import env_table
from gym_llm.experiments.specs import EnvSpec, parse_env_spec, parse_envs

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_env_spec_parses_kwargs_with_types() -> None:
    spec = parse_env_spec("FrozenLake-v1:is_slippery=False,map_name=4x4")
    assert spec == EnvSpec("FrozenLake-v1", {"is_slippery": False, "map_name": "4x4"})
    assert parse_env_spec("CliffWalking-v1:max_episode_steps=100").kwargs == {
        "max_episode_steps": 100
    }
    assert parse_env_spec("CartPole-v1") == EnvSpec("CartPole-v1")
    assert spec.slug == "FrozenLake-v1-is_slippery=False-map_name=4x4"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Nope-v9", "unknown env id 'Nope-v9'"),
        (":is_slippery=False", "no env id"),
        ("FrozenLake-v1:is_slippery", "cannot read 'is_slippery'"),
        ("FrozenLake-v1:colour=red", "does not take these kwargs"),
    ],
)
def test_bad_env_specs_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_env_spec(text)


def test_suite_and_agents() -> None:
    suite = parse_envs(["suite"])
    assert EnvSpec("Blackjack-v1", {"sab": False}) in suite
    assert EnvSpec("CliffWalking-v1", {"max_episode_steps": 100}) in suite
    assert len(parse_envs(["suite", "CartPole-v1"])) == len(suite) + 1
    # the task family's splits are groups too, one spec per task
    from gym_llm.envs.family import HELD_OUT

    held = parse_envs(["family-held-out"])
    assert [s.kwargs["task"] for s in held] == list(HELD_OUT)
    assert {s.id for s in held} == {"gym_llm/Family-v0"}
    assert parse_envs(["family-tuning"]) != held
    assert parse_agents("random, ppo") == ["random", "ppo"]
    with pytest.raises(ValueError, match="choose a comma-separated list"):
        parse_agents("random,a2c")


def test_cli_errors_exit_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--envs", "Nope-v9", "--no-progress"])
    assert exit_info.value.code == 2
    assert "unknown env id" in capsys.readouterr().err


def test_help_shows_every_flag_with_its_default() -> None:
    parser = build_parser()
    text = parser.format_help()
    flags = [
        a
        for a in parser._actions
        if a.option_strings and a.dest != "help" and a.help != argparse.SUPPRESS
    ]
    for action in flags:
        assert action.option_strings[-1] in text
    assert text.count("(default:") >= len(flags)


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_classic_run_writes_csv_summary_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "out"
    common = ["--eval-episodes", "4", "--random-episodes", "50", "--curve-points", "1"]
    common += ["--out", str(out), "--no-progress"]
    lake_args = ["--envs", "FrozenLake-v1:is_slippery=False", "--agents", "random,ppo,dqn"]
    lake_args += ["--budget", "32", "--classic-budget", "48", "--seeds", "0", "1"]
    assert main([*lake_args, *common]) == 0
    # A second invocation adds its env beside the first one's rows.
    cart_args = ["--envs", "CartPole-v1", "--agents", "random,dqn", "--budget", "32"]
    cart_args += ["--classic-budget", "0", "--seeds", "0", "1"]
    assert main([*cart_args, *common]) == 0
    rows = _read(out / "results.csv")
    lake = [r for r in rows if r["env"] == "FrozenLake-v1"]
    cart = [r for r in rows if r["env"] == "CartPole-v1"]
    # exact random play runs once; PPO and DQN at two budgets x two seeds
    assert sorted((r["agent"], r["budget"]) for r in lake) == sorted(
        [("random", "0")] + [(a, b) for a in ("ppo", "dqn") for b in ("32", "48") for _ in (0, 1)]
    )
    assert sorted(r["agent"] for r in cart) == ["dqn", "dqn", "random", "random"]  # MC: per seed
    for row in rows:
        curve = json.loads(row["curve"])
        assert int(row["env_steps"]) <= int(row["budget"])
        assert curve[-1][0] == int(row["env_steps"])
        assert float(row["value"]) == pytest.approx(curve[-1][1])
    assert {r["eval_kind"] for r in lake} == {"exact"} and {r["eval_kind"] for r in cart} == {"mc"}
    assert all(r["success"] != "" for r in lake) and all(r["success"] == "" for r in cart)
    summary = (out / "summary.md").read_text()
    assert "### FrozenLake-v1 (is_slippery=False)" in summary and "### CartPole-v1" in summary
    assert "optimum 1.000" in summary and "optimum 500.0" in summary
    assert summary.count("| SB3 PPO (MlpPolicy) |") == 2
    assert summary.count("| SB3 DQN (MlpPolicy) |") == 3
    for name in ("FrozenLake-v1-is_slippery=False.png", "CartPole-v1.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.suffix for p in out.iterdir()) == [".csv", ".md", ".png", ".png"]

    # Re-running an env's agent replaces its rows instead of duplicating them.
    assert main(["--envs", "FrozenLake-v1:is_slippery=False", "--agents", "random", *common]) == 0
    again = _read(out / "results.csv")
    assert len(again) == len(rows)
    assert sum(r["agent"] == "random" and r["env"] == "FrozenLake-v1" for r in again) == 1


def test_llm_agents_through_training_run(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    status = main(
        [
            "--envs", "FrozenLake-v1:is_slippery=False",
            "--agents", "llm-zero-shot,llm-choice",
            "--model", str(tiny_model_dir),
            "--budget", "8", "--llm", "n_envs=2", "ppo.n_steps=2",
            "ppo.batch_size=4", "ppo.micro_batch_size=4",
            "--seeds", "0", "--out", str(out), "--no-progress",
        ]
    )  # fmt: skip
    assert status == 0
    rows = {r["agent"]: r for r in _read(out / "results.csv")}
    assert set(rows) == {"llm-zero-shot", "llm-choice"}
    trained = rows["llm-choice"]
    assert int(trained["env_steps"]) == 8 and trained["eval_kind"] == "exact"
    assert trained["model"] == str(tiny_model_dir) and trained["success"] != ""
    assert json.loads(trained["curve"])[0][0] == 0
    assert 0.0 <= float(rows["llm-zero-shot"]["value"]) <= 1.0
    assert sorted(p.suffix for p in out.iterdir()) == [".csv", ".md", ".png"]  # no weights


def test_llm_dqn_through_training_run(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    status = main(
        [
            "--envs", "FrozenLake-v1:is_slippery=False", "--agents", "llm-dqn",
            "--model", str(tiny_model_dir), "--budget", "32", "--llm", "n_envs=2",
            "dqn.beta=1", "--seeds", "0", "--out", str(out), "--no-progress",
        ]
    )  # fmt: skip
    assert status == 0
    (row,) = _read(out / "results.csv")
    assert row["agent"] == "llm-dqn" and int(row["env_steps"]) == 32
    assert row["eval_kind"] == "exact" and 0.0 <= float(row["value"]) <= 1.0
    assert "LLM features + gym_llm DQN" in (out / "summary.md").read_text()


def _row(agent: str, value: float, success: float | None, seed: int = 0, wall: float = 1.0) -> Row:
    return Row(
        "CliffWalking-v1", "{}", agent, 128, seed, 128, value, 0.0, "exact", 0, success, wall,
        "CPU", "", [(0, -1000.0, 0.0), (64, -500.0, wall / 2), (128, value, wall)],
    )  # fmt: skip


def test_summary_flags_a_gap_closed_without_reaching_the_goal() -> None:
    refs = {"random": -1083.0, "optimum": -13.0}
    lines = "\n".join(
        env_table(
            "CliffWalking-v1",
            [_row("ppo", -100.0, 0.0), _row("ppo", -100.0, 0.0, seed=1), _row("dqn", -13.0, 1.0)],
            refs,
        )
    )
    assert "| SB3 PPO (MlpPolicy) | 128 | 128 | 2 | -100.0 ± 0.000 | 92% | 0.0% ⚠ |" in lines
    assert "closes 92% of the gap but reaches the goal in 0.0% of episodes" in lines
    assert "| SB3 DQN (MlpPolicy) | 128 | 128 | 1 | -13.000 | 100% | 100.0% |" in lines


def test_summary_gives_the_time_to_target() -> None:
    """To target: env steps and training seconds until the curve first closed 90% of the gap
    (-120 here), averaged over the seeds that got there."""
    refs = {"random": -1083.0, "optimum": -13.0}
    rows = [
        _row("ppo", -100.0, 0.0, wall=10.0),
        _row("ppo", -13.0, 1.0, seed=1, wall=30.0),
        _row("dqn", -500.0, 0.0),
        _row("random", -1083.0, None),
    ]
    lines = "\n".join(env_table("CliffWalking-v1", rows, refs))
    assert "Target: -120.0 (90% of the gap)" in lines
    assert "| 128 steps, 20 s (2/2) |" in lines
    assert "| not reached (0/1) |" in lines
    assert "| -1083.0 | 0% | — | — |" in lines  # random: no curve to time
    loose = "\n".join(env_table("CliffWalking-v1", rows, refs, target_gap=0.5))
    assert "Target: -548.0 (50% of the gap)" in loose
    assert "| 64 steps, 10 s (2/2) |" in loose  # -500 at 64 steps closes half the gap


def test_zero_shot_comes_from_the_trained_runs_first_evaluation_off_tabular_envs(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    status = main(
        [
            "--envs", "Blackjack-v1:sab=False",
            "--agents", "llm-zero-shot,llm-choice",
            "--model", str(tiny_model_dir),
            "--budget", "4", "--llm", "n_envs=2", "ppo.n_steps=2", "ppo.batch_size=4",
            "ppo.micro_batch_size=4", "eval_points=0",
            "--seeds", "0", "--out", str(out), "--no-progress",
        ]
    )  # fmt: skip
    assert status == 0
    rows = _read(out / "results.csv")
    zero = [r for r in rows if r["agent"] == "llm-zero-shot"]
    trained = [r for r in rows if r["agent"] == "llm-choice"]
    assert len(zero) == 1 and len(trained) == 1
    assert float(zero[0]["value"]) == pytest.approx(json.loads(trained[0]["curve"])[0][1])
    assert zero[0]["eval_kind"] == "exact" and zero[0]["env_steps"] == "0"


def test_plan_runs_deterministic_agents_once_and_usual_budgets_on_the_first_seeds() -> None:
    args = ComparisonConfig.from_namespace(
        build_parser().parse_args(["--seeds", "0", "1", "2", "--classic-seeds", "1"])
    )
    agents = ["random", "ppo", "llm-zero-shot", "llm-choice"]
    jobs = [
        (j.agent, j.budget, j.seed, j.zero_shot) for j in plan([EnvSpec("Taxi-v4")], agents, args)
    ]
    assert jobs == [
        ("random", 0, 0, False),
        ("ppo", 128, 0, False),
        ("ppo", 128, 1, False),
        ("ppo", 128, 2, False),
        ("ppo", 10_000, 0, False),
        ("llm-zero-shot", 0, 0, False),  # tabular: evaluated on its own, for its goal probability
        ("llm-choice", 128, 0, False),
        ("llm-choice", 128, 1, False),
        ("llm-choice", 128, 2, False),
    ]
    cart = [(j.agent, j.seed, j.zero_shot) for j in plan([EnvSpec("CartPole-v1")], agents, args)]
    assert ("llm-choice", 2, True) in cart  # Monte-Carlo: zero-shot from every trained run
    assert all(agent != "llm-zero-shot" for agent, _, _ in cart)


def test_the_llm_settings_reach_the_runs_and_the_action_head_choice_runs_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from gym_llm.experiments.comparison_runs import llm_config

    given = ["--llm", "policy.action_head=true", "policy.choice_calibration=true", "ppo.n_epochs=3"]
    config = ComparisonConfig.from_namespace(build_parser().parse_args(given))
    spec = EnvSpec("gym_llm/Family-v0", {"task": "compare-p0-s1"})
    choice = llm_config(spec, "choice", 128, 0, config)
    assert choice.policy.action_head and choice.policy.choice_calibration
    assert choice.ppo.n_epochs == 3 and choice.ppo.ent_coef == 0.01  # the suite's, kept
    generate = llm_config(spec, "generate", 128, 0, config)
    assert not generate.policy.action_head and not generate.policy.choice_calibration
    assert generate.ppo.n_epochs == 3
    plain = ComparisonConfig.from_namespace(build_parser().parse_args([]))
    small = llm_config(spec, "choice", 16, 0, plain)
    assert not small.policy.action_head and small.ppo.n_epochs == 2
    assert small.n_envs * small.ppo.n_steps <= 16 and small.timesteps <= 16  # capped by budget
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--llm", "ppo.n_epoch=3"])
    assert "'ppo.n_epoch' is not a setting of PPOConfig" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--llm-epochs", "3"])
    assert "--llm-epochs is now --llm ppo.n_epochs=N" in capsys.readouterr().err
