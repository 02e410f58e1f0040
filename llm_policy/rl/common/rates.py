"""The LM's learning rates when none is given, shared by every algorithm that steps the LM."""

from __future__ import annotations

#: The LM's learning rate with LoRA when none is given. Measured on SmolLM2-135M with the
#: default LoRA (benchmarks/RESULTS.md, "HighLow"): 1e-4 left a number rule at 0.8-0.9 success
#: after 1,024 env steps in 4 seeds out of 4; 5e-4 reached 1.0 by 768 steps in all 4.
LORA_LEARNING_RATE = 5e-4
#: ... and without LoRA (every weight trains; LoRA's rates would wreck a pretrained model).
FULL_FINETUNE_LEARNING_RATE = 1e-5
