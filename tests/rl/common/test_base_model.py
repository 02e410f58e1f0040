"""Which models travel with their checkpoint, and their weights without LoRA's."""

from __future__ import annotations

from pathlib import Path

import torch

from gym_llm.rl.common.base_model import (
    BASE_MODEL_MARKER,
    base_state_dict,
    needs_base_model,
    resolve_model,
    save_base_model,
)
from gym_llm.testing import make_tiny_model, make_tiny_tokenizer


def test_which_models_travel_with_the_checkpoint(tmp_path: Path) -> None:
    assert needs_base_model(None) and needs_base_model("")
    assert not needs_base_model("smollm2-135m") and not needs_base_model(str(tmp_path))
    inside = tmp_path / "agent" / "base_model"
    inside.mkdir(parents=True)
    assert not needs_base_model(str(inside))  # not a checkpoint's base_model/ yet
    (tmp_path / "agent" / "config.json").write_text("{}")
    assert needs_base_model(str(inside))
    assert resolve_model(BASE_MODEL_MARKER, tmp_path / "agent") == str(inside)
    assert resolve_model("smollm2-135m", tmp_path) == "smollm2-135m"


def test_the_base_weights_leave_lora_out_and_load_as_a_model(tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    tokenizer = make_tiny_tokenizer(["stick", "hit"])
    model = make_tiny_model(len(tokenizer))
    original = {k: v.clone() for k, v in model.state_dict().items()}
    lm = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    state = base_state_dict(lm)
    assert set(state) == set(original) and not any("lora" in k for k in state)
    assert all(torch.equal(state[k], original[k]) for k in original)
    save_base_model(lm, tokenizer, tmp_path / "base", announce=False)
    again = AutoModelForCausalLM.from_pretrained(tmp_path / "base")
    assert all(torch.equal(again.state_dict()[k], original[k]) for k in original)
