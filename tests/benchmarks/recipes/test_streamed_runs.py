"""``benchmarks/recipes/streamed_runs.py``: points streamed as measured, a cut-off run never credited with a
budget it did not reach, the table, the plots and the TensorBoard diagnostics."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from benchmarks.recipes.streamed_runs import first_reaching, main, seed_series, value_at, wobble
from gym_llm.rl.dqn.config import DQNConfig


def test_run_streams_points_then_summarize_plots_and_diagnostics(
    tiny_model_dir: Path, tmp_path: Path, one_torch_thread: None
) -> None:
    jsonl = tmp_path / "suite.jsonl"
    totals = main(
        [
            "run", "--model", str(tiny_model_dir), "--env", "FrozenLake-v1", "--env-kwargs",
            "is_slippery=False", "--timesteps", "16", "--every", "8", "--n-envs", "2",
            "--n-steps", "4", "--batch-size", "4", "--epochs", "1", "--estimator", "gigpo",
            "--set", "policy.value_normalization=true", 'policy.lora={"r": 4}', "ppo.ent_coef=auto",
            "--device", "cpu",
            "--jsonl", str(jsonl), "--run-dir", str(tmp_path / "run"),
        ]
    )  # fmt: skip
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [r["env_steps"] for r in rows[:-1]] == [0, 8, 16]
    assert rows[-1]["done"] and rows[-1]["env_steps"] == 16 == totals["env_steps"]
    assert {r["estimator"] for r in rows} == {"gigpo"} and {r["n_epochs"] for r in rows} == {1}
    assert {r["batch_size"] for r in rows} == {4}  # not the recorded 32: the row says so
    assert not {"ent_coef", "learning_rate"} & set(rows[0])  # the recorded ones: left out
    assert all(0.0 <= r["value"] <= 1.0 for r in rows)  # FrozenLake's exact goal probability
    settings = {"policy.value_normalization": True, "policy.lora": {"r": 4}, "ppo.ent_coef": "auto"}
    assert all(r["set"] == settings for r in rows)  # ent_coef=auto over --ent-coef's 0.01
    assert (tmp_path / "run" / "config.json").read_text().count('"ent_coef": "auto"') == 1

    table = main(["summarize", str(jsonl), "--plots", str(tmp_path / "plots")])
    # a setting that is not the default names its own learner
    learner = "gigpo, n_epochs 1, batch_size 4, policy.value_normalization True, "
    learner += "policy.lora {'r': 4}, ppo.ent_coef auto"
    learner += " (choice, 4)"
    assert f"| FrozenLake-v1 is_slippery=False | {learner} | 1 |" in table
    assert "not reached" in table  # 16 steps never reach the 2,048-step budget
    assert (tmp_path / "plots" / "FrozenLake-v1-is_slippery=False.png").stat().st_size > 0

    csv = tmp_path / "diag.csv"
    count = main(["diagnostics", str(tmp_path / "run"), "--every", "1", "--csv", str(csv)])
    lines = csv.read_text().splitlines()
    assert lines[0].startswith("run,env_steps,ep_rew_mean,state_entropy,mutual_information")
    assert "value_offset,grad_norm,value_grad_norm" in lines[0]
    assert count == len(lines) - 1 >= 2


def test_dqn_runs_record_their_settings_and_the_distilled_lm(
    tiny_model_dir: Path, tmp_path: Path, one_torch_thread: None
) -> None:
    jsonl = tmp_path / "dqn.jsonl"
    main(
        [
            "run", "--algo", "dqn", "--set", "dqn.beta=1", "dqn.distill_interval=16",
            "--model", str(tiny_model_dir), "--env", "FrozenLake-v1", "--env-kwargs",
            "is_slippery=False", "--timesteps", "32", "--every", "16", "--n-envs", "2",
            "--device", "cpu", "--jsonl", str(jsonl), "--run-dir", str(tmp_path / "run"),
        ]
    )  # fmt: skip
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    settings = rows[0]["dqn"]
    # SB3 DQN's settings scaled to the 32-step budget, replayed as often as its one-env DQN
    assert settings["dqn.learning_starts"] == 3 and settings["dqn.gradient_steps"] == 2
    assert settings["dqn.beta"] == 1 and rows[-1]["done"] and "n_epochs" not in rows[0]
    assert 0.0 <= rows[-1]["distilled_value"] <= 1.0
    table = main(["summarize", str(jsonl)])
    assert "| dqn beta=1 (choice, 8) | 1 | +1.000 @ 2048 |" in table


def test_value_at_needs_the_budget_reached() -> None:
    points = [
        {"env_steps": 0, "value": 0.0},
        {"env_steps": 1024, "value": 0.5},
        {"env_steps": 2048, "value": 1.0},
        {"done": True, "env_steps": 2048, "value": 1.0},
    ]
    assert value_at(points, 1500) == 0.5  # the last point at or before the budget
    assert value_at(points, 2048) == 1.0
    assert value_at(points, 4096) is None  # cut off before the budget: no credit
    assert first_reaching(points, 0.5) == points[1]
    assert first_reaching(points, 1.5) is None


def test_several_seeds_run_in_turn_in_one_process(
    tiny_model_dir: Path, tmp_path: Path, one_torch_thread: None
) -> None:
    jsonl = tmp_path / "seeds.jsonl"
    main(
        [
            "run", "--model", str(tiny_model_dir), "--env", "FrozenLake-v1", "--env-kwargs",
            "is_slippery=False", "--timesteps", "8", "--every", "8", "--n-envs", "2",
            "--n-steps", "4", "--batch-size", "4", "--epochs", "1", "--seeds", "3", "4",
            "--device", "cpu", "--jsonl", str(jsonl), "--run-dir", str(tmp_path / "run"),
        ]
    )  # fmt: skip
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [(r["seed"], r.get("done", False)) for r in rows] == [
        (3, False), (3, False), (3, True), (4, False), (4, False), (4, True)
    ]  # fmt: skip
    assert (tmp_path / "run" / "seed3").is_dir() and (tmp_path / "run" / "seed4").is_dir()


def test_resume_goes_on_from_the_checkpoint_and_writes_no_point_twice(
    tiny_model_dir: Path, tmp_path: Path, one_torch_thread: None
) -> None:
    jsonl, run_dir = tmp_path / "cut.jsonl", tmp_path / "run"
    flags = [
        "run", "--model", str(tiny_model_dir), "--env", "FrozenLake-v1", "--env-kwargs",
        "is_slippery=False", "--timesteps", "16", "--every", "8", "--n-envs", "2",
        "--n-steps", "4", "--batch-size", "4", "--epochs", "1", "--device", "cpu",
        "--seeds", "3", "4", "--jsonl", str(jsonl), "--run-dir", str(run_dir),
    ]  # fmt: skip
    main(flags)
    uncut = [json.loads(line) for line in jsonl.read_text().splitlines()]
    # A session that ends mid-run: seed 3 finished, seed 4 cut after its point at 8 env steps,
    # its newest checkpoint at 8 (the one at 16 is gone with the cut).
    cut = [r for r in uncut if r["seed"] == 3 or (r["env_steps"] <= 8 and not r.get("done"))]
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in cut))
    checkpoints = run_dir / "seed4" / "checkpoints"
    shutil.rmtree(checkpoints / "16")
    (checkpoints / "latest").write_text("8")
    main([*flags, "--resume"])
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [(r["seed"], r["env_steps"], r.get("done", False)) for r in rows] == [
        (3, 0, False), (3, 8, False), (3, 16, False), (3, 16, True),
        (4, 0, False), (4, 8, False), (4, 16, False), (4, 16, True),
    ]  # fmt: skip
    assert [r["value"] for r in rows] == [r["value"] for r in uncut]  # the same run, continued
    # A seed with points but nothing to go on from is refused, not joined to a new trajectory.
    shutil.rmtree(checkpoints)
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in cut))
    with pytest.raises(SystemExit, match="no checkpoint"):
        main([*flags, "--resume"])


def test_the_mean_curve_ends_where_every_seed_got() -> None:
    def points(n: int) -> list[dict[str, float]]:
        return [{"env_steps": 512 * i, "value": float(i)} for i in range(n)]

    mean, *rest = seed_series("gae", [(0, points(5)), (1, points(5)), (2, points(3))])
    assert not rest and list(mean.steps) == [0, 512, 1024]
    assert mean.label == "gae: mean of 3 seeds (to 1024, where every seed got); thin: each seed"
    # each seed's own curve goes with the mean, to its own last point
    assert [len(steps) for steps, _ in mean.members] == [5, 5, 3]
    assert list(seed_series("gae", [(0, points(3))] * 3)[0].means) == [0.0, 1.0, 2.0]
    assert [s.label for s in seed_series("gae", [(4, points(2))])] == ["gae seed 4"]


def test_a_family_task_is_held_when_at_its_target_at_the_budget_and_at_twice_it(
    tmp_path: Path,
) -> None:
    # weather-p0-s0: random 0.5, optimum 0.8, so 90 % of the gap is 0.77; its budget is 2,048
    base = {"env": "gym_llm/Family-v0", "env_kwargs": "task=weather-p0-s0", "estimator": "gae",
            "mode": "choice", "n_steps": 8, "algo": "dqn", "dqn": {}}  # fmt: skip
    curves = {0: (0.5, 0.8, 0.8), 1: (0.5, 0.8, 0.5), 2: (0.5, 0.6, 0.8)}
    lines = [
        json.dumps(base | {"seed": seed, "env_steps": steps, "value": value, "train_s": 1.0})
        for seed, values in curves.items()
        for steps, value in zip((0, 2048, 4096), values, strict=True)
    ]
    jsonl = tmp_path / "family.jsonl"
    jsonl.write_text("\n".join(lines) + "\n")
    row = next(line for line in main(["summarize", str(jsonl)]).splitlines() if "weather" in line)
    cells = [cell.strip() for cell in row.split("|")]
    assert cells[4] == "+0.770 @ 2048"
    assert cells[5] == "2 of 3"  # seeds 0 and 1 reached it within the budget
    assert cells[6] == "1 of 3"  # only seed 0 is there at 2,048 and at 4,096
    # points at 2,048 and 4,096: sds 0, 0.15, 0.1; below 0.77: seed 1 at 4,096, seed 2 at 2,048
    assert cells[7] == "0.083; 2 of 6"


def test_wobble_is_the_spread_and_the_dips_from_the_budget_on() -> None:
    points = [{"env_steps": s, "value": v} for s, v in ((0, 0.0), (4, 1.0), (8, 0.5), (12, 1.0))]
    sd, below, n = wobble([*points, {"done": True, "env_steps": 12}], 4, 0.9)
    assert (below, n) == (1, 3) and sd == pytest.approx(np.std([1.0, 0.5, 1.0]))
    assert wobble(points, 100, 0.9)[1:] == (0, 0)


def test_dqn_runs_can_take_the_library_defaults(
    tiny_model_dir: Path, tmp_path: Path, one_torch_thread: None
) -> None:
    jsonl = tmp_path / "dqn.jsonl"
    main(
        [
            "run", "--algo", "dqn", "--dqn-base", "library", "--set", "dqn.average_tau=0.5",
            "--model", str(tiny_model_dir), "--env", "FrozenLake-v1", "--env-kwargs",
            "is_slippery=False", "--timesteps", "32", "--every", "32", "--n-envs", "2",
            "--device", "cpu", "--jsonl", str(jsonl), "--run-dir", str(tmp_path / "run"),
        ]
    )  # fmt: skip
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert rows[0]["dqn"] == {"dqn.average_tau": 0.5} and rows[0]["dqn_base"] == "library"
    saved = json.loads((tmp_path / "run" / "config.json").read_text())["dqn"]
    defaults = DQNConfig()  # everything not set is the library's default
    assert saved["average_tau"] == 0.5
    assert saved["target_update_interval"] == defaults.target_update_interval
    assert saved["gradient_steps"] == defaults.gradient_steps
    # an arm on the library's defaults is told apart by the settings it changed
    assert "| dqn beta=0, average_tau 0.5 (choice, 8) |" in main(["summarize", str(jsonl)])


def test_summarize_judges_against_a_target_given_instead_of_the_suites(tmp_path: Path) -> None:
    base = {"env": "FrozenLake-v1", "env_kwargs": "is_slippery=True", "estimator": "auto",
            "mode": "choice", "n_steps": 64, "train_s": 1.0}  # fmt: skip
    jsonl = tmp_path / "rows.jsonl"
    rows = [
        base | {"seed": seed, "env_steps": steps, "value": value}
        for seed, values in ((0, (0.1, 0.55, 0.52)), (1, (0.1, 0.65, 0.45)))
        for steps, value in zip((0, 8192, 16384), values, strict=True)
    ]
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    suite = main(["summarize", str(jsonl)])
    assert "| +0.600 @ 8192 | 1 of 2 | 0 of 2 |" in suite  # the suite's (DQN's) 0.60
    own = main(["summarize", str(jsonl), "--target", "0.5", "--plots", str(tmp_path / "p")])
    assert "| +0.500 @ 8192 | 2 of 2 | 1 of 2 |" in own  # seed 1 falls to 0.45 at twice it
    assert (tmp_path / "p" / "FrozenLake-v1-is_slippery=True.png").stat().st_size > 0
