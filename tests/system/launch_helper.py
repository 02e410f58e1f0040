"""A data-parallel run from Python, for ``torchrun`` in the tests: the usual single-process script,
unchanged, started as two processes.

``python -m torch.distributed.run --standalone --nproc-per-node 2 tests/launch_helper.py MODE
MODEL_DIR OUT_DIR`` where MODE is

- ``learn``: ``PPO(LLMPolicy, env).learn(64)`` then ``save``; each process writes
  ``OUT_DIR/rank<r>.pt`` (its trainable weights) and ``rank<r>.json`` (its step count and the
  digest of the observations it trained on);
- ``fail``: the same, but process 1 raises in the middle of training;
- ``full`` and ``fsdp``: ``learn`` fine-tuning every weight (``lora=None``), unsharded and
  sharded (FSDP), with a ``save`` to ``OUT_DIR/middle`` half-way, in generate mode on
  GuessNumber when ENV is ``generate``; the report adds the elements of the weights this
  process holds between updates. Then the saved agent is loaded into a new one (sharded the
  same way), which trains 16 more env steps: ``rank<r>-continued.pt``. ``fsdp-env``: ``fsdp``
  as the launcher's environment says (``accelerate launch --use_fsdp``).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch
from stable_baselines3.common.callbacks import BaseCallback

from gym_llm import PPO, LLMPolicy, make_text_env
from gym_llm.rl.common.distributed import barrier, rank, world_size
from gym_llm.rl.common.sharding import local

PLANTED = "planted failure in process 1"


class FailInProcessOne(BaseCallback):
    def _on_step(self) -> bool:
        if rank() == 1 and self.num_timesteps >= 24:
            raise RuntimeError(PLANTED)
        return True


def main(mode: str, model_dir: str, out: str, env_kind: str = "choice") -> None:
    torch.set_num_threads(1)
    env_id = "gym_llm/GuessNumber-v0" if env_kind == "generate" else "gym_llm/KeywordBandit-v0"
    env = make_text_env(env_id, n_envs=2, seed=0)
    full = mode in ("full", "fsdp", "fsdp-env")
    model = PPO(
        LLMPolicy,
        env,
        n_steps=4,
        batch_size=8,
        n_epochs=1,
        seed=0,
        device="cpu",
        learning_rate=1e-2 if full else None,
        fsdp={"fsdp": True, "fsdp-env": None}.get(mode, False),  # None: as the launcher says
        # SGD with momentum for the full runs: its update is linear in the gradient, so sharded
        # and whole runs agree to float rounding (Adam's g / sqrt(v) would amplify the rounding
        # of tiny gradients), and its momentum is state that a save must gather.
        policy_kwargs={
            "model": model_dir,
            "lora": None if full else {"r": 4},
            **(
                {"optimizer_class": torch.optim.SGD, "optimizer_kwargs": {"momentum": 0.9}}
                if full
                else {}
            ),
        },
    )
    if full:  # a save between two learn() calls must leave the training state as it was
        model.learn(32)
        model.save(Path(out) / "middle")
        model.learn(32, reset_num_timesteps=False)
    else:
        model.learn(64, callback=FailInProcessOne() if mode == "fail" else None)
    model.save(Path(out) / "agent")
    torch.save(model.policy.trainable_state_dict(), Path(out) / f"rank{rank()}.pt")
    seen = "\n".join(str(o) for o in model.rollout_buffer.observations_text.ravel())
    report = {
        "world_size": world_size(),
        "num_timesteps": model.num_timesteps,
        "observations": hashlib.sha256(seen.encode()).hexdigest(),
        "episodes": len(model.ep_info_buffer or []),
        "shared_prefix": len(model.policy.shared_prefix),
        "held_elements": sum(
            local(p).numel() for p in model.policy.optimizer.param_groups[0]["params"]
        ),
        "replicated_elements": sum(  # what every process holds whole (the action head)
            p.numel() for p in model.policy.optimizer.param_groups[0]["params"] if local(p) is p
        ),
    }
    (Path(out) / f"rank{rank()}.json").write_text(json.dumps(report))
    if full:  # loaded (weights and momentum) into a new agent, which trains on
        fsdp = {"fsdp": True, "fsdp-env": None}.get(mode, False)
        barrier()  # unsharded, save returns at once off the main process: wait for the files
        loaded = PPO.load(Path(out) / "agent", env=env, device="cpu", fsdp=fsdp)
        loaded.learn(16)
        weights = loaded.policy.trainable_state_dict()
        torch.save(weights, Path(out) / f"rank{rank()}-continued.pt")


if __name__ == "__main__":
    main(*sys.argv[1:5])
    if torch.distributed.is_initialized():  # the results are written: leave without gloo's
        from gym_llm.rl.common.distributed import leave_job  # teardown (its docstring)

        leave_job()
