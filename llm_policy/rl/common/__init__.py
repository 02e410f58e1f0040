"""What every algorithm here shares: the text vec env, the saved-agent format and its files, the
run's random state, the rollout diagnostics, and the multi-process helpers."""
