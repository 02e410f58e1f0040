"""Checkpoint files on disk: directories written all or nothing, tensors read without ever
unpickling an object, and errors that name the file and the fix.

A run that is killed (``SIGKILL``, power loss, full disk) at any moment must leave the previous
checkpoint loadable, and a checkpoint from elsewhere must not be able to run code on load.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch


class CheckpointError(ValueError):
    """A saved agent that cannot be loaded as it is: damaged, foreign, or from a newer version.
    The message names the file and what to do."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (full disk, no permission); the previous one is intact."""


def _fsync(path: Path) -> None:
    """Flush a file or a directory entry to disk (a no-op where the OS cannot open directories)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_directory(
    path: str | os.PathLike[str], files: Mapping[str, Callable[[Path], object]]
) -> None:
    """Write a checkpoint directory all or nothing: each ``files[name](file_path)`` writes into a
    temporary sibling directory, whose files are flushed to disk before it replaces ``path`` (the
    old one is removed only after the new one is in place). A process killed at any point leaves
    either the old directory or the new one: the next call finishes a replacement that was cut
    short (``.<name>.old`` back in place) and clears dead temporary directories."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    backup = target.with_name(f".{target.name}.old")
    if backup.exists() and not target.exists():  # killed between the two renames below
        os.replace(backup, target)
    for stale in target.parent.glob(f".{target.name}-*"):  # killed while writing
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        try:
            for name, write in files.items():
                write(tmp / name)
                _fsync(tmp / name)
            _fsync(tmp)
        except OSError as exc:
            kept = (
                f"the previous checkpoint in {target} is intact"
                if target.exists()
                else ("nothing was written")
            )
            raise CheckpointWriteError(
                exc.errno,
                f"Could not write the checkpoint {target} ({exc.strerror or exc}); {kept}. "
                "Free disk space or choose another directory, then save again.",
            ) from exc
        if target.exists():
            os.replace(target, backup)
        os.replace(tmp, target)
        _fsync(target.parent)
        shutil.rmtree(backup, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def agent_path(path: str | os.PathLike[str]) -> Path:
    """The directory of a saved agent, from what an SB3 user types: ``agent.zip`` (SB3's file
    name, and the ``*_steps.zip`` of SB3's ``CheckpointCallback``) means the directory
    ``agent``, unless a directory of that very name exists."""
    target = Path(path)
    if target.suffix == ".zip" and not target.is_dir():
        return target.with_suffix("")
    return target


def write_agent_directory(
    path: str | os.PathLike[str],
    texts: Mapping[str, str],
    tensors: Mapping[str, Any],
    extra_json: Mapping[str, Any] | None = None,
    directories: Mapping[str, Callable[[Path], None]] | None = None,
) -> None:
    """A saved agent's directory, all or nothing (:func:`write_directory`): each of ``texts``
    (``config.json``, ...) as written, a JSON file per ``extra_json`` entry, ``tensors`` as
    ``policy.pt``, and each of ``directories`` written by its function (``base_model/``)."""
    import json

    path = agent_path(path)
    files = dict(texts)
    files.update({name: json.dumps(data, indent=2) for name, data in (extra_json or {}).items()})

    def write(file: Path) -> None:
        if file.name == "policy.pt":
            torch.save(dict(tensors), file)
        else:
            file.write_text(files[file.name])

    writers: dict[str, Callable[[Path], object]] = dict.fromkeys([*files, "policy.pt"], write)
    writers.update(directories or {})
    write_directory(path, writers)


def read_tensors(directory: str | os.PathLike[str], device: torch.device) -> dict[str, Any]:
    """``policy.pt``: tensors only (``weights_only=True``: no pickled object is ever run), with
    an error naming the file when it is missing, damaged or holds anything but tensors."""
    file = agent_path(directory) / "policy.pt"
    if not file.is_file():
        raise FileNotFoundError(
            f"{file} is missing: {directory} has a config.json but no weights. Load another "
            "checkpoint (run_dir/checkpoints/) or save the agent again."
        )
    try:
        state = torch.load(file, map_location=device, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"{file} holds objects other than tensors, which gym_llm never writes and refuses "
            f"to unpickle (nothing in it was run): a tampered or foreign file. ({exc})"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError, KeyError) as exc:
        raise CheckpointError(
            f"{file} is damaged or truncated ({type(exc).__name__}: {exc}). Load an earlier "
            "checkpoint (run_dir/checkpoints/) or the run's agent/ directory."
        ) from None
    if not isinstance(state, dict) or "trainable" not in state or "optimizer" not in state:
        raise CheckpointError(f"{file} is not a gym_llm policy file (no trainable weights).")
    return state


#: The file in a checkpoints directory that names the newest complete checkpoint.
LATEST = "latest"


def write_latest(directory: Path, name: str) -> None:
    """Point ``directory/latest`` at the checkpoint ``name``: written beside it and renamed
    over it, so the pointer always names a checkpoint that was complete when it moved."""
    tmp = directory / f".{LATEST}.tmp"
    tmp.write_text(name + "\n")
    _fsync(tmp)
    os.replace(tmp, directory / LATEST)
    _fsync(directory)


def _numbered(directory: Path) -> list[Path]:
    """The checkpoint directories named by their env steps, oldest first."""
    found = [p for p in directory.iterdir() if p.is_dir() and p.name.isdigit()]
    return sorted(found, key=lambda p: int(p.name))


def latest_checkpoint(directory: Path) -> Path | None:
    """The newest complete checkpoint in ``directory``: the highest-numbered one. A checkpoint
    directory only ever appears by an atomic rename, so every numbered one is complete, also one
    whose move of ``latest`` a kill cut short (``latest`` is for people and tools)."""
    numbered = _numbered(directory) if directory.is_dir() else []
    return numbered[-1] if numbered else None


def prune_checkpoints(directory: Path, keep: int) -> list[Path]:
    """Remove all but the ``keep`` newest checkpoints (never the one ``latest`` names) and the
    temporary directories of writes that were killed; returns what was removed."""
    pointer = directory / LATEST
    named = directory / pointer.read_text().strip() if pointer.is_file() else None
    numbered = _numbered(directory)
    removed = [p for p in numbered[: max(0, len(numbered) - keep)] if p != named]
    removed += [p for p in directory.glob(".*-*") if p.is_dir()]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed
