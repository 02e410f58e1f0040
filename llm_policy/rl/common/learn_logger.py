"""The logger a ``learn()`` call sets up, as SB3's, without the empty ``SB3-<time>`` folder SB3
leaves in the temp directory at every call that writes nothing to disk."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.logger import HumanOutputFormat, KVWriter, Logger
from stable_baselines3.common.utils import configure_logger


def learn_logger(
    verbose: int, tensorboard_log: str | None, tb_log_name: str, reset_num_timesteps: bool
) -> Logger:
    """SB3's ``configure_logger``: TensorBoard under ``tensorboard_log`` when given (a new
    ``<tb_log_name>_<n>`` run, or the last one continued), stdout when ``verbose``; with no
    TensorBoard, no folder at all."""
    if tensorboard_log is not None:
        return configure_logger(verbose, tensorboard_log, tb_log_name, reset_num_timesteps)
    formats: list[KVWriter] = [HumanOutputFormat(sys.stdout)] if verbose >= 1 else []
    return Logger(folder=None, output_formats=formats)


@contextmanager
def learn_logging(
    model: BaseAlgorithm, tb_log_name: str, reset_num_timesteps: bool
) -> Iterator[None]:
    """Around SB3's ``_setup_learn``: the model's logger for this call from :func:`learn_logger`,
    unless the user set one (``set_logger``), which SB3 keeps as well."""
    if model._custom_logger:
        yield
        return
    model._logger = learn_logger(
        model.verbose, model.tensorboard_log, tb_log_name, reset_num_timesteps
    )
    model._custom_logger = True  # SB3 keeps it through _setup_learn ...
    try:
        yield
    finally:
        model._custom_logger = False  # ... and the next call sets up its own again
