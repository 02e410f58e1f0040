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
