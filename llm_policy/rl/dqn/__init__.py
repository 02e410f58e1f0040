"""Off-policy value learning on the language model's features, with the model's prior.

The math lives in :mod:`gym_llm.rl.dqn.targets` (pure torch, tested without a model).
"""
