"""String helpers shared by the wrappers, the envs and the policy."""

from __future__ import annotations

import re
import unicodedata

#: Turkish dotless ı and dotted İ: no Unicode normalisation or case fold maps them to ASCII i/I,
#: yet regular expressions under ``re.IGNORECASE`` match them against ``i``.
_TURKISH_I = str.maketrans({"ı": "i", "İ": "I"})
#: A combining dot above left on a soft-dotted letter (``i̇``: what lower-casing ``İ`` gives).
_DOT_ABOVE = re.compile("(?<=[ij])\u0307")


def fold(text: str) -> str:
    """``text`` in the one form that names and replies are compared in: ``ı``/``İ`` made
    ``i``/``I``, NFKC (full-width letters, ligatures and the long s ``ſ`` become ASCII), case
    folded, and format characters (zero-width spaces and joiners, soft hyphens, bidi marks)
    dropped. Idempotent: ``fold(fold(s)) == fold(s)``.

    Naively ``text.lower()`` under ``re.IGNORECASE`` matching: the regex finds ``fırst`` for
    ``first`` but the lower-cased match is still ``fırst``, which names no action.

    >>> fold("ＨİT"), fold("ſtıck"), fold("le\u00adft"), fold("Straße")
    ('hit', 'stick', 'left', 'strasse')
    """
    text = unicodedata.normalize("NFKC", text.translate(_TURKISH_I)).casefold()
    text = "".join(c for c in text if unicodedata.category(c) != "Cf")
    text = _DOT_ABOVE.sub("", text).translate(_TURKISH_I)
    return unicodedata.normalize("NFKC", text)


#: How :func:`cut_middle` marks the cut (with the number of characters left out).
CUT_MARK = "\n[... {} characters cut ...]\n"


def cut_middle(text: str, limit: int, head_share: float = 1 / 3) -> str:
    """``text`` in at most ``limit`` characters: its head (``head_share`` of the room: the rules
    and goal come first) and its tail (the latest state comes last), with a mark saying how much
    was cut in between."""
    if len(text) <= limit:
        return text
    room = limit - len(CUT_MARK.format(len(text)))
    head = int(room * head_share)
    tail = room - head
    cut = len(text) - head - tail
    return text[:head] + CUT_MARK.format(cut) + text[len(text) - tail :]
