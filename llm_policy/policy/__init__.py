"""ACT: observation strings -> replies, exact token log-probs and values (:class:`LLMPolicy`
in :mod:`gym_llm.policy.llm_policy`), and what it is built from: model loading, prompts, the KV
caches, packed frozen weights."""
