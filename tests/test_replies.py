from __future__ import annotations

import copy
import json
import pickle

from gym_llm.replies import Reply, conversation_json, parse_messages


def test_a_reply_is_its_text_and_keeps_its_ids_through_pickle_and_copy() -> None:
    reply = Reply("hit", [5, 17])
    assert reply == "hit" and isinstance(reply, str) and reply.token_ids == (5, 17)
    for clone in (pickle.loads(pickle.dumps(reply)), copy.deepcopy(reply), copy.copy(reply)):
        assert isinstance(clone, Reply) and clone == "hit" and clone.token_ids == (5, 17)
    # A changed text is no longer what was sampled: it loses the ids.
    assert type(reply.upper()) is str and type(reply + "!") is str and type(str(reply)) is str


def test_conversations_round_trip_with_the_ids() -> None:
    messages = [
        {"role": "user", "content": "You see a door."},
        {"role": "assistant", "content": Reply("open it", [3, 9, 9])},
        {"role": "user", "content": "It opens."},
    ]
    text = conversation_json(messages)
    assert json.loads(text)[1] == {
        "role": "assistant",
        "content": "open it",
        "token_ids": [3, 9, 9],
    }
    assert "token_ids" not in json.loads(text)[0]
    back = parse_messages(json.loads(text))
    assert back == messages
    assert back is not None and getattr(back[1]["content"], "token_ids", None) == (3, 9, 9)
    assert not isinstance(back[0]["content"], Reply)


def test_malformed_conversations_are_not_conversations() -> None:
    good = {"role": "assistant", "content": "x"}
    for value in (
        [],
        "text",
        [{"role": "user"}],
        [{"role": "user", "content": 3}],
        [{**good, "token_ids": "1 2"}],
        [{**good, "token_ids": [1, -2]}],
        [{**good, "token_ids": [1.5]}],
        [{**good, "token_ids": [True]}],
    ):
        assert parse_messages(value) is None, value
    assert parse_messages([{**good, "token_ids": []}]) == [good]  # an empty reply is a reply
