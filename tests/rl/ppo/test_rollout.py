"""The rollout monitor's advice when a policy ignores its input (no model)."""

from __future__ import annotations

from types import SimpleNamespace

from gym_llm.rl.ppo.rollout import collapse_remedies


def test_remedies_name_only_what_is_not_already_on() -> None:
    bare = SimpleNamespace(
        action_head=None, actions_list=["a", "b"], calibrated=False, scores_listed_actions=True
    )
    assert collapse_remedies(bare) == (
        "policy_kwargs={'action_head': True}, policy_kwargs={'choice_calibration': True}, "
        "an entropy bonus (ent_coef, or ent_coef='auto')"
    )
    on = SimpleNamespace(
        action_head=object(), actions_list=["a"], calibrated=True, scores_listed_actions=True
    )
    assert collapse_remedies(on) == "an entropy bonus (ent_coef, or ent_coef='auto')"
    free_text = SimpleNamespace(  # generate mode with no list: neither applies
        action_head=None, actions_list=None, calibrated=False, scores_listed_actions=False
    )
    assert collapse_remedies(free_text) == "an entropy bonus (ent_coef, or ent_coef='auto')"
