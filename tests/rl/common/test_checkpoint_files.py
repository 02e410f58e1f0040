"""Bad checkpoints get clear errors and lose nothing; untrusted ones are inert (issue 17, items 5
and 6). Each error must name the file and say what to do."""

from __future__ import annotations

import errno
import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from gym_llm import PPO
from gym_llm.rl.common.checkpoint_files import (
    CheckpointError,
    CheckpointWriteError,
    latest_checkpoint,
    prune_checkpoints,
    write_directory,
    write_latest,
)
from gym_llm.testing import save_tiny_model
from tests.builders import small_ppo

WORDS = ["apple", "banana", "cherry", "grape"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(model dir, a saved agent dir)."""
    root = tmp_path_factory.mktemp("ckpt")
    model_dir = save_tiny_model(root / "model", words=WORDS)
    model = _ppo(model_dir, r=4)
    model.learn(8)
    model.save(root / "agent")
    return model_dir, root / "agent"


def _ppo(model_dir: Path, r: int) -> PPO:
    return small_ppo(model_dir, policy={"lora": {"r": r}}, n_steps=4, batch_size=8, n_epochs=1)


def _copy(agent: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(agent, target)
    return target


def test_truncated_or_corrupt_policy_file(saved: tuple[Path, Path], tmp_path: Path) -> None:
    agent = _copy(saved[1], tmp_path)
    data = (agent / "policy.pt").read_bytes()
    (agent / "policy.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"policy\.pt is damaged or truncated.*earlier"):
        PPO.load(agent, device="cpu")
    (agent / "policy.pt").write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match=r"policy\.pt"):
        PPO.load(agent, device="cpu")


def test_missing_weights_file(saved: tuple[Path, Path], tmp_path: Path) -> None:
    agent = _copy(saved[1], tmp_path)
    (agent / "policy.pt").unlink()
    with pytest.raises(FileNotFoundError, match=r"policy\.pt is missing.*config\.json"):
        PPO.load(agent, device="cpu")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c.update(format="gym_llm.PPO/2"), r"newer gym_llm.*pip install -U"),
        (lambda c: c.update(format="other.Thing/1"), "not a saved gym_llm PPO agent"),
        (lambda c: c.update(future_setting=1), r"does not know: \['future_setting'\]"),
        (lambda c: c["hyperparameters"].update(new_knob=2), "hyperparameters.new_knob"),
        (lambda c: c.pop("policy_kwargs"), r"lacks \['policy_kwargs'\]"),
    ],
)
def test_config_from_a_newer_version_or_with_unknown_keys(
    saved: tuple[Path, Path], tmp_path: Path, edit: Any, message: str
) -> None:
    agent = _copy(saved[1], tmp_path)
    config = json.loads((agent / "config.json").read_text())
    edit(config)
    (agent / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=message):
        PPO.load(agent, device="cpu")


def test_damaged_config_json(saved: tuple[Path, Path], tmp_path: Path) -> None:
    agent = _copy(saved[1], tmp_path)
    (agent / "config.json").write_text('{"format": "gym_llm.PPO/1", ')
    with pytest.raises(CheckpointError, match=r"config\.json is not valid JSON"):
        PPO.load(agent, device="cpu")


def test_checkpoint_of_another_lora_rank(saved: tuple[Path, Path]) -> None:
    model_dir, agent = saved
    other = _ppo(model_dir, r=8)
    with pytest.raises(CheckpointError, match=r"LoRA rank 4.*this policy .* LoRA rank 8"):
        other.load_policy_state(agent)


def test_checkpoint_of_another_model(saved: tuple[Path, Path], tmp_path: Path) -> None:
    bigger = save_tiny_model(tmp_path / "bigger", words=WORDS, hidden_size=48)
    other = _ppo(bigger, r=4)
    with pytest.raises(CheckpointError, match=r"does not fit this policy.*saved for model"):
        other.load_policy_state(saved[1])


class _Payload:
    """Unpickling this would create a file (it must never happen)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_is_refused_without_running(
    saved: tuple[Path, Path], tmp_path: Path
) -> None:
    agent = _copy(saved[1], tmp_path)
    marker = tmp_path / "pwned"
    with (agent / "policy.pt").open("wb") as file:
        torch.save({"trainable": _Payload(marker), "optimizer": {}}, file)
    with pytest.raises(CheckpointError, match="refuses to unpickle"):
        PPO.load(agent, device="cpu")
    assert not marker.exists()
    # The same bytes through plain pickle would have run it: the test's payload is real.
    with (agent / "policy.pt").open("wb") as file:
        pickle.dump(_Payload(marker), file)
    with pytest.raises(CheckpointError, match="refuses to unpickle"):
        PPO.load(agent, device="cpu")
    assert not marker.exists()


def test_full_disk_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    write_directory(target, {"a.txt": lambda p: p.write_text("old")})

    def full(path: Path) -> None:
        path.write_text("partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(CheckpointWriteError, match=r"No space left.*previous checkpoint.*intact"):
        write_directory(target, {"a.txt": lambda p: p.write_text("new"), "b.pt": full})
    assert (target / "a.txt").read_text() == "old" and not (target / "b.pt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # no temporary directory left


def test_full_disk_during_ppo_save(saved: tuple[Path, Path], tmp_path: Path) -> None:
    agent = saved[1]
    target = _copy(agent, tmp_path)
    before = (target / "policy.pt").read_bytes()
    model = PPO.load(target, device="cpu")
    original = torch.save

    def no_space(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    torch.save = no_space
    try:
        with pytest.raises(CheckpointWriteError, match=str(target)):
            model.save(target)
    finally:
        torch.save = original
    assert (target / "policy.pt").read_bytes() == before
    PPO.load(target, device="cpu")


def test_a_replacement_cut_short_is_finished_next_time(tmp_path: Path) -> None:
    target = tmp_path / "agent"
    write_directory(target, {"a.txt": lambda p: p.write_text("old")})
    os.replace(target, tmp_path / ".agent.old")  # killed between the two renames
    (tmp_path / ".agent-dead").mkdir()  # and a temporary directory of a killed write
    write_directory(target, {"a.txt": lambda p: p.write_text("new")})
    assert (target / "a.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent"]


def test_latest_pointer_and_rotation(tmp_path: Path) -> None:
    directory = tmp_path / "checkpoints"
    assert latest_checkpoint(directory) is None
    for steps in (8, 16, 24):
        write_directory(
            directory / str(steps),
            {"config.json": lambda p: p.write_text("{}"), "policy.pt": lambda p: p.write_text("")},
        )
        if steps < 24:  # 24 is complete but its pointer move was cut short
            write_latest(directory, str(steps))
    assert (directory / "latest").read_text().strip() == "16"
    assert latest_checkpoint(directory) == directory / "24"
    (directory / ".24-dead").mkdir()
    removed = prune_checkpoints(directory, keep=2)
    assert sorted(p.name for p in removed) == [".24-dead", "8"]
    assert sorted(p.name for p in directory.iterdir()) == ["16", "24", "latest"]
