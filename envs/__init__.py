"""Text-native environments, registered with Gymnasium as ``gym_llm/<Name>-v0``."""
