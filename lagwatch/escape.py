"""Where a name leaves lagwatch: one escaping function per output format, and nowhere else.

Group ids (and, on a shared cluster, much else) are chosen by any client that may connect, not by lagwatch's
operator: `<!channel>` in a group id paged a whole Slack channel, a newline forged a log line, an ANSI escape
coloured the operator's terminal. Data stays data in every format:

- `visible`: control characters (C0, DEL, C1), line and paragraph separators, and the bidirectional controls
  that reorder text on screen (the "Trojan Source" characters) are written as escapes (`\\n`, `\\x1b`, `\\u202e`):
  a text log keeps one event per line, and what is shown is what the name holds.
- `slack_text` (mrkdwn and the fallback `text`): `visible`, then `&`, `<` and `>` escaped, as Slack documents, and
  a backtick shown as U+02CB (it would open a code span running on into lagwatch's words).
  Mentions (`<!channel>`), links (`<https://x|click>`) and dates need a raw `<`, so none can be made from data.
  The text objects are also sent with `verbatim: true`, so Slack does not turn a bare URL into a link.
- `slack_code`: a name in a code span. Slack has no escape inside one, so a backtick in the name is shown as
  U+02CB (the modifier letter grave accent, which looks alike and cannot close the span).
- `url_component`: a value inside a URL (the Grafana button), percent-encoded whole.
- JSON outputs (the API, the webhook body, JSON logs) need nothing: the encoder escapes what JSON must.
Each cut keeps its text within a limit and says where it cut (CUT_MARK), so a long name still delivers.
"""

from __future__ import annotations

import re
from urllib.parse import quote

CUT_MARK = "…"
_BACKTICK_STAND_IN = "\u02cb"  # the modifier letter grave accent
# C0 controls, DEL, C1 controls, the line/paragraph separators, the bidirectional embeddings, overrides and
# isolates, and the zero-width (in)visibles that hide characters in a name; never U+200D, which joins emoji.
_HIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\u200b\u200e\u200f\ufeff]")
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    short = _SHORT.get(char)
    if short is not None:
        return short
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(text: str) -> str:
    """The text on one line, every character that could hide, move or forge text written as an escape. A
    backslash is left as it is: a name may hold `\\n` itself, and a log line stays one line either way."""
    return _HIDDEN.sub(_escaped, text)


_SLACK = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
# Outside a code span too, a backtick from a name would open one that runs on into lagwatch's own words.
_SLACK_TEXT = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "`": _BACKTICK_STAND_IN})


def slack_text(text: str, limit: int | None = None) -> str:
    """Text for Slack's mrkdwn or a message's fallback `text`: nothing in it is markup (a backtick is shown as
    U+02CB, as in a code span)."""
    shown = visible(text).replace("`", _BACKTICK_STAND_IN)
    return shown.translate(_SLACK) if limit is None else _cut_escaped(shown, limit)


def slack_code(name: str, limit: int | None = None) -> str:
    """A name in a code span it cannot break out of, at most `limit` characters with the backticks."""
    inner = visible(name).replace("`", _BACKTICK_STAND_IN)
    if not inner:
        return "` `"  # an empty name: an empty span would show two backticks
    return "`" + (inner.translate(_SLACK) if limit is None else _cut_escaped(inner, limit - 2)) + "`"


def _cut_escaped(text: str, limit: int) -> str:
    """`text` with `&<>` escaped, cut so that the escaped text, with the mark, is at most `limit` characters
    (an escape is never cut in half)."""
    escaped = text.translate(_SLACK)
    if len(escaped) <= limit:
        return escaped
    out: list[str] = []
    size = len(CUT_MARK)
    for char in text:
        piece = char.translate(_SLACK)
        if size + len(piece) > limit:
            break
        out.append(piece)
        size += len(piece)
    return "".join(out) + CUT_MARK


def cut(text: str, limit: int | None) -> str:
    """At most `limit` characters, the mark included when something was cut."""
    if limit is None or len(text) <= limit:
        return text
    return text[: max(0, limit - len(CUT_MARK))] + CUT_MARK


def url_component(value: str) -> str:
    """A value placed inside a URL: every reserved character encoded (`/`, `?`, `#`, `&` included)."""
    return quote(value, safe="")
