from __future__ import annotations

from typing import Any

from gym_llm.policy.prompts import build_messages, render_prompt, system_text, user_text
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
