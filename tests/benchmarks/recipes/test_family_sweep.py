"""The family sweep's bookkeeping, one run on a tiny model, and the diagnosis's pure measures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.recipes.family_sweep import _done, summarize
from benchmarks.studies.diagnose_learning import (
    gradient_geometry,
    head_gradients,
    margin_step,
    ridge_loo_accuracy,
)


def _row(task: str, seed: int, arm: str, gaps: list[float]) -> dict[str, object]:
    curve = [{"env_steps": 128 * i, "gap": g} for i, g in enumerate(gaps)]
    return {"task": task, "seed": seed, "arm": arm, "curve": curve,
            "start_gap": gaps[0], "final_gap": gaps[-1]}  # fmt: skip


def test_summary_counts_seeds_that_reach_the_target(tmp_path: Path) -> None:
    path = tmp_path / "sweep.jsonl"
    rows = [
        _row("compare-p0-s1", 0, "head", [0.0, 0.5, 0.95]),
        _row("compare-p0-s1", 1, "head", [0.0, 0.92, 0.8]),  # reached, then fell back: counts
        _row("compare-p0-s1", 2, "head", [0.0, 0.1, 0.2]),
        _row("compare-p0-s1", 0, "defaults", [0.0, 0.0, 0.0]),
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = {(r["task"], r["arm"]): r for r in summarize(path)}
    head = table["compare-p0-s1", "head"]
    assert (head["seeds"], head["reached"], head["median_steps"]) == (3, 2, 256)
    assert table["compare-p0-s1", "defaults"]["reached"] == 0
    assert summarize(path, target=0.99)[1]["reached"] == 0
    assert _done(path) == {("compare-p0-s1", s, "head") for s in range(3)} | {
        ("compare-p0-s1", 0, "defaults")
    }
    assert _done(tmp_path / "absent.jsonl") == set()


def test_summary_counts_runs_held_at_the_budget_and_twice_it(tmp_path: Path) -> None:
    from benchmarks.recipes.family_sweep import budget, markdown

    assert budget("dice-p0-s1") == 4096 and budget("walk-p0-s0") == budget("ice-p1-s0") == 2048
    path = tmp_path / "sweep.jsonl"
    # weather's budget is 2,048 = point 16 of these 128-step curves; twice it is point 32
    rows = [
        _row("weather-p0-s0", 0, "q", [0.0] + [0.95] * 32),  # held
        _row("weather-p0-s0", 1, "q", [0.0] * 16 + [0.95] * 16 + [0.5]),  # reached late, fell
        _row("weather-p0-s0", 2, "q", [0.0] * 20 + [0.95]),  # past the budget, then cut short
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (row,) = summarize(path)
    assert (row["reached"], row["within_budget"], row["held"], row["to_twice_budget"]) == (
        3, 2, 1, 2,
    )  # fmt: skip
    assert "held 1 of 2" in markdown([row])
    short = {**row, "to_twice_budget": 0, "held": 0}
    assert "held" not in markdown([short])  # no run went to twice the budget: nothing said


def test_a_claims_own_budget_replaces_the_kinds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The grid's held-out claim is made at 4,096, not the walking kinds' 2,048: a run first
    at the target at 2,304 is within that budget and holds at 4,096 and 8,192."""
    from benchmarks.recipes.family_sweep import main

    path = tmp_path / "sweep.jsonl"
    row = _row("grid-p2-s100", 0, "auto", [0.0] * 18 + [0.95] * 47)  # first at 2,304; to 8,192
    path.write_text(json.dumps(row) + "\n")
    (kind,) = summarize(path)
    assert (kind["within_budget"], kind["held"], kind["budget"]) == (0, 0, 2048)
    main(["summarize", str(path), "--budget", "4096"])
    out = capsys.readouterr().out
    assert "(1 within 4096)" in out and "held 1 of 1" in out
    main(["summarize", str(path), "--budget", "4096", "--per-seed"])
    assert "grid-p2-s100 (4,096)" in capsys.readouterr().out


def test_per_seed_table_reads_each_run_at_the_budget_and_twice_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks.recipes.family_sweep import main

    path = tmp_path / "sweep.jsonl"
    rows = [  # 128 env steps per point: weather's budget 2,048 is point 16
        _row("weather-p0-s0", 0, "q", [0.0] + [0.95] * 32),
        _row("weather-p0-s0", 2, "q", [0.0] * 16 + [-0.5] * 5),
        _row("weather-p0-s0", 3, "q", [0.0] * 16 + [0.899] * 17 + [0.95]),
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    main(["summarize", str(path), "--per-seed"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| task (budget) | arm | seed 0 | seed 2 | seed 3 | held |"
    assert lines[2] == (
        "| weather-p0-s0 (2,048) | q | 0.95 → 0.95 (128) | −0.50 → – (never) "
        "| 0.899 → 0.899 (4,224) | 1 of 2 |"
    )  # 0.899 is below 0.9: three decimals, never "0.90"


def test_geometry_tells_shared_from_opposite_gradients() -> None:
    same = np.tile([1.0, 2.0, 3.0], (4, 1))
    assert gradient_geometry(same) == pytest.approx(0.0)
    assert gradient_geometry(np.array([[1.0, 0.0], [-1.0, 0.0]])) == pytest.approx(1.0)
    # two states that need opposite actions with the same logit gradient cancel out
    per_action = np.array([[[1.0, 0.0], [-1.0, 0.0]], [[1.0, 0.0], [-1.0, 0.0]]])
    cancel = margin_step(per_action, right=np.array([0, 1]))
    assert cancel["efficiency"] == pytest.approx(0.0, abs=1e-9)
    apart = np.array([[[1.0, 0.0], [-1.0, 0.0]], [[0.0, -1.0], [0.0, 1.0]]])
    moved = margin_step(apart, right=np.array([0, 1]))
    assert moved["efficiency"] == pytest.approx(2**-0.5) and moved["min"] > 0


def test_head_gradients_and_the_probe() -> None:
    features = np.array([[2.0, 0.0], [0.0, 3.0]])
    grads = head_gradients(features, 2)  # (state, action, 2 x 3)
    np.testing.assert_allclose(grads[0, 0], [1.0, 0.0, 0.5, -1.0, 0.0, -0.5])
    np.testing.assert_allclose(grads[0, 1], -grads[0, 0])
    rng = np.random.default_rng(0)
    labels = np.repeat([0, 1], 10)
    separable = rng.normal(size=(20, 5)) + labels[:, None] * 4.0
    assert ridge_loo_accuracy(separable, labels) == 1.0
    assert ridge_loo_accuracy(rng.normal(size=(20, 5)), labels) < 0.8


def test_arms_split_policy_ppo_and_parser_settings() -> None:
    from benchmarks.recipes.family_sweep import parse_arm

    assert parse_arm("defaults") == ("defaults", {}, {}, {})
    arm = parse_arm("head:policy.action_head=true,ppo.ent_coef=0.05,ppo.n_epochs=4")
    assert arm == ("head", {"action_head": True}, {"ent_coef": 0.05, "n_epochs": 4}, {})
    arm = parse_arm("gen:policy.action_mode=generate,parser.invalid_penalty=-0.1")
    assert arm == ("gen", {"action_mode": "generate"}, {}, {"invalid_penalty": -0.1})
    arm = parse_arm('list:policy.lora={"r": 2, "target_modules": ["q_proj", "v_proj"]}')
    assert arm[1] == {"lora": {"r": 2, "target_modules": ["q_proj", "v_proj"]}}
    with pytest.raises(ValueError, match="--arms bad"):
        parse_arm("bad:policy.action_head")
    with pytest.raises(ValueError, match="--arms flat: 'action_head': give settings as"):
        parse_arm("flat:action_head=true")


def test_steps_to_fit_counts_until_every_state_is_right() -> None:
    import torch

    from benchmarks.studies.diagnose_learning import steps_to_fit

    labels = np.array([0, 1, 0, 1])
    easy = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]) * 10
    steps = steps_to_fit(easy, labels, 2)
    assert steps is not None and steps >= 1
    same = torch.ones(4, 2)  # nothing tells the states apart: never all right
    assert steps_to_fit(same, labels, 2, max_steps=20) is None


def test_markdown_has_a_column_per_arm(tmp_path: Path) -> None:
    from benchmarks.recipes.family_sweep import markdown

    path = tmp_path / "sweep.jsonl"
    rows = [
        _row("walk-p0-s0", 0, "head", [0.0, 0.95]),
        _row("walk-p0-s0", 0, "defaults", [0.0, 0.0]),
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = markdown(summarize(path))
    assert text.splitlines()[0] == "| task | defaults | head |"
    assert "1 of 1, median 128; gap 0.00 → 0.95" in text and "0 of 1; gap 0.00 → 0.00" in text


def test_summarize_pools_files_and_writes_a_plot_per_task(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks.recipes.family_sweep import main

    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text(json.dumps(_row("grid-p1-s1", 0, "ep4", [0.0, 0.95])) + "\n")
    rows = [
        _row("grid-p1-s1", 1, "ep4", [0.0, 0.5]),
        _row("walk-p0-s0", 0, "defaults", [0.0, 0.2]),
        _row("grid-p1-s1", 2, "old", [0.0, 0.99]),
    ]
    second.write_text("".join(json.dumps(r) + "\n" for r in rows))
    plots = ["--plots", str(tmp_path / "plots")]
    main(["summarize", str(first), str(second), "--rename", "old=ep4", *plots])
    out = capsys.readouterr().out
    assert "grid-p1-s1" in out and " 2 of 3 " in out  # both files' seeds pooled, "old" renamed
    assert "old" not in out
    with pytest.raises(SystemExit, match="OLD=NEW"):
        main(["summarize", str(first), "--rename", "old"])
    pngs = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert pngs == ["curves-grid-p1-s1.png", "curves-walk-p0-s0.png"]
    assert all((tmp_path / "plots" / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


def test_a_run_takes_parser_settings_and_resumes(tiny_model_dir: Path, tmp_path: Path) -> None:
    from benchmarks.recipes.family_sweep import main

    rows = tmp_path / "rows.jsonl"
    arm = "gen:policy.action_mode=generate,policy.max_new_tokens=4,parser.invalid_penalty=-1.0"
    command = ["run", "--tasks", "threshold-p0-s0", "--seeds", "0", "--arms", arm,
               "--model", str(tiny_model_dir), "--n-envs", "2", "--n-steps", "4",
               "--batch-size", "8", "--steps", "8", "--every", "8", "--jsonl", str(rows)]  # fmt: skip
    main(command)
    (row,) = [json.loads(line) for line in rows.read_text().splitlines()]
    assert row["settings"]["parser"] == {"invalid_penalty": -1.0}
    assert row["settings"]["policy"] == {"action_mode": "generate", "max_new_tokens": 4}
    assert [p["env_steps"] for p in row["curve"]] == [0, 8]
    assert 0.0 <= row["curve"][1]["invalid_action_rate"] <= 1.0
    points = [json.loads(line) for line in (tmp_path / "rows.points.jsonl").read_text().split("\n")
              if line]  # fmt: skip
    assert [p["point"]["env_steps"] for p in points] == [0, 8]  # each point as it was measured
    assert points[1]["point"]["gap"] == row["curve"][1]["gap"] and points[0]["arm"] == "gen"
    main(command)  # the run is in the file: skipped, nothing appended
    assert len(rows.read_text().splitlines()) == 1


def test_summarize_counts_cut_short_runs_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks.recipes.family_sweep import main
    from benchmarks.recipes.sweep_points import append_point

    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(_row("walk-p0-s0", 0, "head", [0.0, 0.95])) + "\n")
    for seed, gaps in [(0, [0.0, 0.95]), (1, [0.0, 0.91]), (2, [0.1])]:
        for i, gap in enumerate(gaps):  # seed 0 finished; seeds 1 and 2 were cut short
            append_point(tmp_path / "rows.points.jsonl", "walk-p0-s0", seed, "head",
                         {"env_steps": 128 * i, "gap": gap})  # fmt: skip
    main(["summarize", str(rows)])
    assert "(cut short)" not in capsys.readouterr().out
    main(["summarize", str(rows), "--cut-short"])
    lines = capsys.readouterr().out.splitlines()
    assert any("head (cut short)" in line and " 1 of 2 " in line for line in lines)
    assert any(line.split()[1] == "head" and " 1 of 1 " in line for line in lines)
    with pytest.raises(SystemExit, match="is a points file"):  # a glob that caught it
        main(["summarize", str(rows), str(tmp_path / "rows.points.jsonl")])


def test_first_action_word_verdicts() -> None:
    import doctest

    import benchmarks.studies.first_action_word as faw

    assert doctest.testmod(faw).failed == 0
    assert faw.first_action([3, 4, 3], {4: 1, 3: 0}) == 0
    verdicts = [faw.verdict(f, p) for f, p in [(None, None), (0, 0), (0, 1), (1, None), (None, 1)]]
    assert verdicts == ["none", "agree", "disagree", "invalid", "parsed without an action word"]
