"""A tiny model trained from scratch with PPO climbs from chance on KeywordBandit.

The model is randomly initialised, so it cannot already solve the task: success starts near
chance (measured, not assumed) and must reach >= 0.9, and must still be far above chance at
the end.

Generate mode samples from the whole vocabulary, so a random model must first discover the
option words at all. Its tokenizer is therefore limited to the characters the prompts use (about
60 tokens instead of about 300), and an entropy bonus keeps it exploring once it has found one
word. Replies are one token: with two, the entropy bonus pays for a junk first token and the
word moves to the second, where one target at a time got stuck on a wrong word (measured,
seeds 2 and 3: 0.67 for 10,000 steps). A pretrained model brings these priors itself.

**Robust to the machine, not to one lucky random stream.** Float rounding differs between
CPUs (AVX2 vs AVX-512) and thread counts, so the same seed follows another trajectory on another
machine: a test that passes for one seed passes by luck. Every setting here was checked over
seeds 0-19 (model initialisation, envs and sampling all seeded; ``python -m
benchmarks.recipes.learning_sweep``, table in benchmarks/RESULTS.md): all forty runs reached 0.9 by half
the steps given here and ended at 1.0; one generate run dipped to 0.66 for one evaluation on the
way, so the end is checked against 0.6 (far above chance), not 0.9. ``test_learning_sweep``
re-runs seeds 0-9 (``make test-slow``). Choice mode runs with the library's defaults as they
are now (choice calibration on; every layer trains here, so no action head): re-checked over
seeds 0-19, all 20 reached 1.0 by 1,000 env steps and ended at 1.0
(``results/learning-sweep-cpu-defaults-calibrated.json``). Generate mode with its default
replies among the listed actions (``"constrained"``, choice mode's settings): seeds 0-19 all
reached 0.9 by 1,000 of the 2,000 env steps and ended at 1.0
(``results/learning-sweep-constrained.json``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.recipes.learning_recipes import check_keyword_bandit, train_keyword_bandit


@pytest.mark.parametrize("mode", ["choice", "generate", "constrained"])
def test_keyword_bandit_is_learned(tmp_path: Path, mode: str) -> None:
    check_keyword_bandit(*train_keyword_bandit(tmp_path, mode))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("mode", ["choice", "generate", "constrained"])
def test_learning_sweep(tmp_path: Path, mode: str, seed: int) -> None:
    """The same check on seeds 0-9: what keeps the default test honest on other machines."""
    check_keyword_bandit(*train_keyword_bandit(tmp_path, mode, seed))


@pytest.mark.slow
def test_embedded_smollm2_learns_keyword_bandit(tmp_path: Path) -> None:
    """The real model (what `make demo` trains): it answers the first option whatever the
    target before training (exact success 0.25); measured 1.0 after 256 env steps on 2 CPU cores."""
    from gym_llm.cli.demo import DEMO_SETTINGS
    from gym_llm.experiments.run import TrainConfig, run

    settings = {**DEMO_SETTINGS, "timesteps": 384, "eval_points": 0}
    config = TrainConfig(env="gym_llm/KeywordBandit-v0", eval_episodes=0, device="cpu")
    config = config.with_settings(settings)
    result = run(config, tmp_path / "run", progress_bar=False)
    assert result.before.exact is not None and result.after.exact is not None
    assert result.before.exact <= 0.5
    assert result.after.exact >= 0.75 and result.after.exact > result.before.exact
