"""Tiny models and tokenizers built in memory, for tests that must never touch a model hub.

A byte-level tokenizer (every UTF-8 byte is a token, plus whole-word tokens for the words you
pass) and a Llama-architecture model with a few thousand parameters: enough to exercise every
code path (chat templates, padding, LoRA, KV caches) in milliseconds on a CPU.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def make_tiny_tokenizer(words: Iterable[str] = (), alphabet: str | None = None) -> Any:
    """A byte-level BPE tokenizer with a ChatML template, built without any download.

    ``words`` become single tokens (when preceded by a space or at the start of a text), so a
    tiny model can learn to emit a whole action name in one step.

    ``alphabet`` limits the base vocabulary to the UTF-8 bytes of these characters (default: all
    256 bytes). A randomly initialised model explores its whole vocabulary, so a 40-token
    vocabulary instead of 300 is what makes free-text RL from scratch feasible in a test; text
    outside the alphabet is dropped by the tokenizer, so include every character your prompts use
    (a space is always included).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    base = sorted(pre_tokenizers.ByteLevel.alphabet())
    if alphabet is not None:
        alphabet += " "  # word tokens are built on the space marker, so it is always kept
        mapped = {
            p
            for p, _ in pre_tokenizers.ByteLevel(
                add_prefix_space=False, use_regex=False
            ).pre_tokenize_str("".join(sorted(set(alphabet))))
        }
        allowed = set("".join(mapped))
        base = [char for char in base if char in allowed]
    vocab: dict[str, int] = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for char in base:
        vocab[char] = len(vocab)
    merges: list[tuple[str, str]] = []
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    for word in dict.fromkeys(words):
        if alphabet is not None and not set(word) <= set(alphabet):
            raise ValueError(f"make_tiny_tokenizer word {word!r} uses characters not in alphabet.")
        pieces = [p for p, _ in byte_level.pre_tokenize_str(word)]
        if len(pieces) != 1 or len(pieces[0]) < 2:
            raise ValueError(f"make_tiny_tokenizer words must be single words, got {word!r}.")
        prefix = pieces[0][0]
        for char in pieces[0][1:]:
            if prefix + char not in vocab:
                merges.append((prefix, char))
                vocab[prefix + char] = len(vocab)
            prefix += char
        space = byte_level.pre_tokenize_str(" ")[0][0]
        if space + prefix not in vocab:  # " word" becomes one token too
            merges.append((space, prefix))
            vocab[space + prefix] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = byte_level
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )
    fast.chat_template = CHATML_TEMPLATE
    fast.padding_side = "left"
    return fast


def make_tiny_model(
    vocab_size: int, *, hidden_size: int = 32, layers: int = 2, heads: int = 4, seed: int = 0
) -> Any:
    """A randomly initialised Llama model small enough for unit tests."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=SPECIAL_TOKENS.index("<|im_end|>"),
        pad_token_id=SPECIAL_TOKENS.index("<|endoftext|>"),
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def save_tiny_model(
    directory: str | Path,
    *,
    words: Iterable[str] = (),
    alphabet: str | None = None,
    **kwargs: Any,
) -> Path:
    """Build a tiny model + tokenizer and save them where ``load_model(directory)`` finds them."""
    directory = Path(directory)
    tokenizer = make_tiny_tokenizer(words, alphabet)
    model = make_tiny_model(len(tokenizer), **kwargs)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
