"""gym_llm: fine-tune LLM agents with online RL in any Gymnasium environment."""

from gym_llm.models import MODEL_REGISTRY, ModelSpec, load_model
from gym_llm.spaces import TextActions, TextObservations

__version__ = "0.1.0"

__all__ = [
    "MODEL_REGISTRY",
    "ModelSpec",
    "TextActions",
    "TextObservations",
    "__version__",
    "load_model",
]
