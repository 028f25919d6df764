"""Words and Block Kit for a notification, shared by the Slack notifiers, within Slack's documented limits: at most
50 blocks, a header's text 150 characters, a section's text 3000, at most 10 fields of 2000 each, a button's text 75
and its URL 3000. Every name and summary goes through lagwatch.escape here (the Slack boundary): none is markup, and
a long one is cut with a mark rather than refused (`invalid_blocks` dropped the alert at every group interval)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from lagwatch.alerts import AlertRecord, AlertState, Notification, NotificationKind
from lagwatch.escape import CUT_MARK, cut, slack_code, slack_text, url_component, visible

MAX_BLOCKS = 50
MAX_SECTION = 3000
MAX_FIELD = 2000
MAX_HEADER = 150
MAX_URL = 3000
MAX_FALLBACK = 3000  # Slack takes 40,000; notifications and screen readers show far less
MAX_ALERT_SECTIONS = 10
NAME_IN_TEXT = 200  # a name inside a sentence (a summary, a title): the Group field holds it whole, or nearly
_ICON = {
    "critical": ":red_circle:",
    "warning": ":large_orange_circle:",
    "info": ":large_blue_circle:",
    "resolved": ":white_check_mark:",
    "muted": ":zzz:",
    "regrouped": ":arrow_right:",
}


def _mrkdwn(text: str) -> dict[str, Any]:
    """A mrkdwn text object whose text is already escaped; `verbatim`: no bare URL or #channel made a link."""
    return {"type": "mrkdwn", "text": text, "verbatim": True}


def _plain(text: str, limit: int) -> dict[str, Any]:
    return {"type": "plain_text", "text": cut(visible(text), limit), "emoji": True}


def _summary(a: AlertRecord, limit: int) -> str:
    """An alert's summary as mrkdwn, at most `limit` characters: escaped, and its names in code spans (the group id
    where the summary first names it, its topic wherever it stands as a word), so that `*`, `_` or `~` in a name
    format nothing and the name reads as one."""
    summary, labels = a.summary, a.labels
    pieces: list[tuple[str, bool]] = []  # (text, is a name)
    group, topic = labels.get("group") or "", labels.get("topic") or ""
    at = summary.find(group) if group else -1
    rest = summary
    if at >= 0:
        pieces += [(summary[:at], False), (group, True)]
        rest = summary[at + len(group) :]
    if topic:  # topic names are [a-zA-Z0-9._-]: a whole word, not a part of another name
        for part in re.split(f"(?<![\\w.-])({re.escape(topic)})(?![\\w.-])", rest):
            pieces.append((part, part == topic))
    else:
        pieces.append((rest, False))
    out, size = [], 0
    for text, is_name in pieces:
        shown = slack_code(text, NAME_IN_TEXT) if is_name else slack_text(text)
        if size + len(shown) > limit:  # the rest, cut to fit (never a code span cut in half)
            out.append(slack_text(text, max(0, limit - size)) if not is_name else CUT_MARK[: max(0, limit - size)])
            break
        out.append(shown)
        size += len(shown)
    return "".join(out)


def outcome(n: Notification) -> str:
    """What a notification says happened, in every notifier alike: its kind, but `muted` for a "resolved" whose
    alerts all left the receiver's view silenced or inhibited, and `regrouped` for one whose alerts went on in other
    alert groups (`alerts.group_by` changed): they still fire, it is no resolution."""
    if n.kind == NotificationKind.RESOLVED and n.alerts:
        if all(a.muted for a in n.alerts):
            return "muted"
        if all(a.muted or a.regrouped for a in n.alerts):
            return "regrouped"
    return n.kind.value


def alert_state(a: AlertRecord) -> str:
    """An alert's state as a notification tells it: `muted` for one that left it silenced or inhibited."""
    return "muted" if a.muted else "regrouped" if a.regrouped else a.state.value


def title(n: Notification) -> str:
    """Plain words (escaped by whoever shows them): the state and where."""
    names = (n.group_labels.get("cluster"), n.group_labels.get("group"))
    where = " / ".join(cut(v, NAME_IN_TEXT) for v in names if v) or cut(n.group_key, NAME_IN_TEXT)
    state = {"resolved": "RESOLVED", "muted": "MUTED", "regrouped": "REGROUPED"}.get(
        outcome(n), n.severity_text.upper()
    )
    if n.storm is not None:
        return f"{state}: alert storm on {n.storm.cluster}"
    return f"{state}: {where}"


def storm_text(n: Notification) -> str:
    """One line for a storm summary: how many groups, which rules (plain words)."""
    storm = n.storm
    assert storm is not None
    if n.kind == NotificationKind.RESOLVED:
        return f"every alert group of the storm on {storm.cluster} has resolved"
    rules = ", ".join(f"{rule} {count}" for rule, count in storm.alerts_by_rule.items())
    worst = ", ".join(cut(g, NAME_IN_TEXT) for g in storm.worst_groups[:5])
    return (
        f"{storm.groups_firing} consumer groups of {storm.cluster} started firing at once ({rules}); "
        f"worst: {worst}. Each group is tracked in the API and metrics."
    )


def fallback_text(n: Notification) -> str:
    """The message's `text`: what notifications, screen readers and old clients show (Slack parses it as mrkdwn)."""
    if n.storm is not None:
        return slack_text(f"[{outcome(n).upper()}] {title(n)}: {storm_text(n)}", MAX_FALLBACK)
    shown = n.firing or [a for a in n.alerts if not a.muted] or list(n.alerts)  # a muted one did not end
    rules = ", ".join(sorted({a.rule for a in shown}))
    first = cut(shown[0].summary, MAX_FALLBACK) if shown else ""
    return slack_text(f"[{outcome(n).upper()}] {title(n)} ({rules}): {first}", MAX_FALLBACK)


def _figures(a: AlertRecord) -> list[str]:
    d = a.details
    out = []
    if d.get("lag") is not None:
        out.append(f"*Lag:* {d['lag']:,} records")
    if d.get("lag_seconds") is not None:
        out.append(f"*Lag:* {_duration(float(d['lag_seconds']))}")
    if d.get("eta_s") is not None:
        out.append(f"*Catch-up ETA:* {_duration(float(d['eta_s']))}")
    elif d.get("falling_behind"):
        out.append("*Catch-up ETA:* never (falling behind)")
    if d.get("expires_at") is not None:
        out.append(
            f"*Offsets expire:* <!date^{int(d['expires_at'])}^{{date_short_pretty}} {{time}}|{_iso(float(d['expires_at']))}>"
        )
    worst = d.get("worst_partitions") or []
    if worst:
        out.append(
            "*Worst partitions:* "
            + ", ".join(f"{p['partition']}: {p['lag']:,}" for p in worst[:5] if p.get("lag") is not None)
        )
    return out


def _field(label: str, value: str | None, empty: str) -> dict[str, Any]:
    head = f"*{label}:*\n"
    return _mrkdwn(head + (empty if value is None else slack_code(value, MAX_FIELD - len(head))))


def _alert_section(a: AlertRecord) -> dict[str, Any]:
    if a.state != AlertState.RESOLVED:
        mark = a.severity.value
    else:  # a muted one (silenced, inhibited) left the message, still firing
        mark = ":zzz: muted" if a.muted else ":arrow_right: regrouped" if a.regrouped else ":white_check_mark: resolved"
    head = f"*{a.rule}* ({mark}): "
    tail = "\n".join(_figures(a))
    if a.runbook_url:  # the operator's URL, from the configuration: a link, with `|` and `>` kept out
        tail += ("\n" if tail else "") + f"<{slack_text(a.runbook_url).replace('|', '%7C')}|Runbook>"
    room = MAX_SECTION - len(head) - (len(tail) + 1 if tail else 0)
    text = head + _summary(a, max(room, 1)) + ("\n" + tail if tail else "")
    return {"type": "section", "text": _mrkdwn(text if len(text) <= MAX_SECTION else slack_text(text, MAX_SECTION))}


def _dashboard_url(template: str, labels: Mapping[str, str]) -> str | None:
    """The Grafana link with this group's labels percent-encoded in it; None when it would be over Slack's limit
    (a cut URL would lead somewhere else)."""
    try:
        url = template.format(**{k: url_component(v or "") for k, v in labels.items()})
    except (KeyError, IndexError, ValueError):
        url = template
    return url if len(url) <= MAX_URL else None


def blocks(n: Notification, grafana_url: str | None = None) -> list[dict[str, Any]]:
    icon = _ICON.get(outcome(n) if n.kind == NotificationKind.RESOLVED else n.severity_text, "")
    out: list[dict[str, Any]] = [
        {"type": "header", "text": _plain(title(n), MAX_HEADER)},
        {
            "type": "section",
            "fields": [
                _field("Cluster", n.group_labels.get("cluster"), "-"),
                _field("Group", n.group_labels.get("group"), "(cluster)"),
                _mrkdwn(f"*Severity:*\n{icon} {n.severity_text}"),
                _mrkdwn(f"*Firing:*\n{len(n.firing)} alert(s)"),
            ],
        },
    ]
    if n.storm is not None:
        out.append({"type": "section", "text": _mrkdwn(slack_text(storm_text(n), MAX_SECTION))})
    shown = list(n.alerts)[:MAX_ALERT_SECTIONS]
    out += [_alert_section(a) for a in shown]
    if len(n.alerts) > len(shown):
        out.append({"type": "context", "elements": [_mrkdwn(f"and {len(n.alerts) - len(shown)} more alert(s)")]})
    url = _dashboard_url(grafana_url, n.group_labels) if grafana_url else None
    if url:
        out.append(
            {
                "type": "actions",
                "elements": [{"type": "button", "text": {"type": "plain_text", "text": "Dashboard"}, "url": url}],
            }
        )
    out.append(
        {
            "type": "context",
            "elements": [_mrkdwn(f"lagwatch · {outcome(n)} · #{n.id} · {_iso(n.created_at)}")],
        }
    )
    return out[:MAX_BLOCKS]


def thread_text(n: Notification) -> str:
    """A thread reply's text (mrkdwn, escaped); "" when there is nothing to say in one."""
    if n.storm is not None:  # a storm's summary names no alerts: it says the storm (its end had an empty reply)
        icon = ":white_check_mark: " if n.kind == NotificationKind.RESOLVED else ""
        return slack_text(icon + storm_text(n), MAX_SECTION)
    if n.kind == NotificationKind.RESOLVED:
        ended = sorted({a.rule for a in n.alerts if not a.muted and not a.regrouped})
        muted = sorted({a.rule for a in n.alerts if a.muted} - set(ended))
        moved = sorted({a.rule for a in n.alerts if a.regrouped} - set(ended) - set(muted))
        text = f":white_check_mark: Resolved: {', '.join(ended)}" if ended else ""
        if muted:  # still firing, silenced or inhibited: not resolved
            text += ("; " if text else "") + f":zzz: muted: {', '.join(muted)}"
        if moved:  # still firing, told in another alert group's message now
            text += ("; " if text else "") + f":arrow_right: regrouped (alerts.group_by changed): {', '.join(moved)}"
        return text
    parts, room = [], MAX_SECTION - 100
    for a in n.firing:
        head = f"{a.rule} ({a.severity}): "
        part = head + _summary(a, max(1, room - len(head)))
        room -= len(part) + 2
        if room <= 0:
            break
        parts.append(part)
    return f"Still firing ({n.kind.value}): " + "; ".join(parts)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def _duration(seconds: float) -> str:
    from lagwatch.rules.text import duration

    return duration(seconds)
