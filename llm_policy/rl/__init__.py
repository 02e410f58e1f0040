"""LEARN: the text vec env, rollout storage, advantage estimators and losses (pure functions),
PPO, the LlamaGym-style Agent and the SFT warm start."""
