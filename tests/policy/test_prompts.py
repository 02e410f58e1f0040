from __future__ import annotations

from typing import Any

import pytest

from gym_llm.policy.prompts import (
    RepliesLostError,
    build_messages,
    render_prompt,
    spliced_prompt_ids,
    system_text,
    user_text,
)
from gym_llm.replies import Reply
from gym_llm.spaces import TextActions, TextObservations
from gym_llm.testing import make_tiny_tokenizer

OBS_SPACE = TextObservations(instruction="Win at blackjack.")
ACT_SPACE = TextActions(["stick", "hit"], description="Answer 'stick' or 'hit'.")


def test_messages_put_instruction_in_system_and_question_after_observation() -> None:
    messages = build_messages("Total 15.", OBS_SPACE, ACT_SPACE, system_prompt="You are an expert.")
    assert messages == [
        {"role": "system", "content": "You are an expert.\n\nWin at blackjack."},
        {"role": "user", "content": "Total 15.\n\nAnswer 'stick' or 'hit'."},
    ]
    assert system_text(object()) == ""
    assert user_text("x", object()) == "x"
    assert build_messages("x", object(), object()) == [{"role": "user", "content": "x"}]


def test_render_with_chat_template() -> None:
    tokenizer = make_tiny_tokenizer()
    prompt = render_prompt(tokenizer, build_messages("Total 15.", OBS_SPACE, ACT_SPACE))
    assert prompt.startswith("<|im_start|>system\nWin at blackjack.<|im_end|>")
    assert prompt.endswith("<|im_start|>assistant\n")


def test_render_without_system_role_support() -> None:
    tokenizer = make_tiny_tokenizer()
    tokenizer.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}"
        "[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}[assistant] "
    )
    prompt = render_prompt(tokenizer, build_messages("Total 15.", OBS_SPACE, ACT_SPACE))
    assert prompt.startswith("[user] Win at blackjack.\n\nTotal 15.")


def test_render_without_any_template() -> None:
    class Plain:
        chat_template: Any = None

    prompt = render_prompt(Plain(), build_messages("Total 15.", OBS_SPACE, ACT_SPACE))
    assert (
        prompt
        == "System: Win at blackjack.\n\nUser: Total 15.\n\nAnswer 'stick' or 'hit'.\n\nAssistant:"
    )


#: Not a prefix-extension: the last user turn is marked, so every new turn rewrites an old one.
MARKS_THE_LATEST = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'user' and loop.last %}(latest) {% endif %}{{ m.content }}<|im_end|>\n"
    "{% endfor %}{{ '<|im_start|>assistant\n' }}"
)


def _encode(tokenizer: Any) -> Any:
    return lambda text: list(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_earlier_replies_keep_their_sampled_tokens_under_a_rewriting_template() -> None:
    tokenizer = make_tiny_tokenizer(words=["hit", "stick"])
    tokenizer.chat_template = MARKS_THE_LATEST
    encode = _encode(tokenizer)
    # " hit " as sampled: the decoded, stripped text "hit" encodes to other tokens.
    sampled = encode(" hit ")
    assert encode("hit") != sampled
    messages = [
        {"role": "user", "content": "Total 15."},
        {"role": "assistant", "content": Reply("hit", sampled)},
        {"role": "user", "content": "Total 19."},
    ]
    ids = spliced_prompt_ids(tokenizer, messages, encode)
    assert ids is not None
    before = "<|im_start|>user\nTotal 15.<|im_end|>\n<|im_start|>assistant\n"
    after = "<|im_end|>\n<|im_start|>user\n(latest) Total 19.<|im_end|>\n<|im_start|>assistant\n"
    assert ids == encode(before) + sampled + encode(after)
    # The first prompt is not a prefix of the second (the template moved the mark).
    first = render_prompt(tokenizer, messages[:1])
    assert "(latest) Total 15." in first and "(latest) Total 15." not in tokenizer.decode(ids)


def test_prompts_without_sampled_replies_are_left_to_the_caller() -> None:
    tokenizer = make_tiny_tokenizer()
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},  # e.g. a demonstration: text only
        {"role": "user", "content": "c"},
    ]
    assert spliced_prompt_ids(tokenizer, messages, _encode(tokenizer)) is None


def test_a_template_that_drops_replies_is_reported() -> None:
    tokenizer = make_tiny_tokenizer()
    tokenizer.chat_template = (
        "{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}\n{% endif %}{% endfor %}"
    )
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": Reply("b", [7])},
        {"role": "user", "content": "c"},
    ]
    with pytest.raises(RepliesLostError, match="placeholders of 1 replies"):
        spliced_prompt_ids(tokenizer, messages, _encode(tokenizer))
