"""The policy's distribution math, checked against torch.distributions on random logits."""

from __future__ import annotations

import torch

from gym_llm.policy.sampling import categorical_evaluation, token_evaluation


def test_categorical_evaluation_matches_torch_distributions() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 4, generator=gen)
    index = torch.tensor([0, 3, 1, 2, 3])
    log_prob, entropy, _ = categorical_evaluation(logits, index)
    dist = torch.distributions.Categorical(logits=logits)
    assert log_prob.shape == (5, 1)
    torch.testing.assert_close(log_prob.squeeze(-1), dist.log_prob(index))
    torch.testing.assert_close(entropy, dist.entropy())


def test_token_evaluation_scales_by_temperature_and_ignores_padding() -> None:
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 4, 7, generator=gen)  # one column more than the replies: ignored
    reply = torch.tensor([[1, 2, 3], [4, 0, 0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    log_prob, valid, entropy = token_evaluation(logits, reply, mask, temperature=2.0)
    dist = torch.distributions.Categorical(logits=logits[:, :3] / 2.0)
    expected = dist.log_prob(reply) * mask
    torch.testing.assert_close(log_prob, expected)
    assert valid.tolist() == [[True, True, True], [True, False, False]]
    per_token = dist.entropy()
    torch.testing.assert_close(entropy[0], per_token[0].mean())
    torch.testing.assert_close(entropy[1], per_token[1, 0])  # the padded tokens do not count
