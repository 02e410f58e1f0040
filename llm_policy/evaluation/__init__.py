"""SCORE: how good a policy is: Monte-Carlo episodes (:mod:`gym_llm.evaluation.monte_carlo`),
exact dynamic programming over an env's dynamics where they are known, reference returns, and
SB3 baselines on the raw env."""
