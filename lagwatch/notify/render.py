"""Words and Block Kit for a notification, shared by the Slack notifiers. Within Slack's limits: at most 50 blocks,
3000 characters per section, 10 fields."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from lagwatch.alerts import Notification

MAX_BLOCKS = 50
MAX_SECTION = 3000
MAX_ALERT_SECTIONS = 10
_ICON = {
    "critical": ":red_circle:",
    "warning": ":large_orange_circle:",
    "info": ":large_blue_circle:",
    "resolved": ":white_check_mark:",
}


def _cut(text: str, limit: int = MAX_SECTION) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def title(n: Notification) -> str:
    where = " / ".join(v for v in (n.group_labels.get("cluster"), n.group_labels.get("group")) if v) or n.group_key
    state = "RESOLVED" if n.kind == "resolved" else n.severity.upper()
    if n.storm is not None:
        return f"{state}: alert storm on {n.storm['cluster']}"
    return f"{state}: {where}"


def storm_text(n: Notification) -> str:
    """One line for a storm summary: how many groups, which rules."""
    assert n.storm is not None
    if n.kind == "resolved":
        return f"every alert group of the storm on {n.storm['cluster']} has resolved"
    rules = ", ".join(f"{rule} {count}" for rule, count in n.storm["alerts_by_rule"].items())
    return (
        f"{n.storm['groups_firing']} consumer groups of {n.storm['cluster']} started firing at once ({rules}); "
        f"worst: {', '.join(n.storm['worst_groups'][:5])}. Each group is tracked in the API and metrics."
    )


def fallback_text(n: Notification) -> str:
    """The plain text that notifications, screen readers and old clients show."""
    if n.storm is not None:
        return _cut(f"[{n.kind.upper()}] {title(n)}: {storm_text(n)}", 3000)
    shown = n.firing or [a for a in n.alerts if not a.get("muted")] or list(n.alerts)  # a muted one did not end
    rules = ", ".join(sorted({a["rule"] for a in shown}))
    first = shown[0]["summary"] if shown else ""
    return _cut(f"[{n.kind.upper()}] {title(n)} ({rules}): {first}", 3000)


def _figures(a: dict[str, Any]) -> list[str]:
    d = a.get("details", {})
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


def blocks(n: Notification, grafana_url: str | None = None) -> list[dict[str, Any]]:
    icon = _ICON.get("resolved" if n.kind == "resolved" else n.severity, "")
    out: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _cut(f"{title(n)}", 150)}},
        {
            "type": "section",
            "fields": [
                {"type": "mrkdwn", "text": f"*Cluster:*\n{n.group_labels.get('cluster', '-')}"},
                {"type": "mrkdwn", "text": f"*Group:*\n{n.group_labels.get('group') or '(cluster)'}"},
                {"type": "mrkdwn", "text": f"*Severity:*\n{icon} {n.severity}"},
                {"type": "mrkdwn", "text": f"*Firing:*\n{len(n.firing)} alert(s)"},
            ],
        },
    ]
    if n.storm is not None:
        out.append({"type": "section", "text": {"type": "mrkdwn", "text": _cut(storm_text(n))}})
    shown = list(n.alerts)[:MAX_ALERT_SECTIONS]
    for a in shown:
        if a["state"] != "resolved":
            mark = a["severity"]
        else:  # a muted one (silenced, inhibited) left the message, still firing
            mark = ":zzz: muted" if a.get("muted") else ":white_check_mark: resolved"
        lines = [f"*{a['rule']}* ({mark}): {a['summary']}", *_figures(a)]
        if a.get("runbook_url"):
            lines.append(f"<{a['runbook_url']}|Runbook>")
        out.append({"type": "section", "text": {"type": "mrkdwn", "text": _cut("\n".join(lines))}})
    if len(n.alerts) > len(shown):
        out.append(
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f"and {len(n.alerts) - len(shown)} more alert(s)"}],
            }
        )
    if grafana_url:
        try:
            url = grafana_url.format(**{k: v or "" for k, v in n.group_labels.items()})
        except (KeyError, IndexError, ValueError):
            url = grafana_url
        out.append(
            {
                "type": "actions",
                "elements": [{"type": "button", "text": {"type": "plain_text", "text": "Dashboard"}, "url": url}],
            }
        )
    out.append(
        {
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": f"lagwatch · {n.kind} · #{n.id} · {_iso(n.created_at)}"}],
        }
    )
    return out[:MAX_BLOCKS]


def thread_text(n: Notification) -> str:
    if n.kind == "resolved":
        ended = sorted({a["rule"] for a in n.alerts if not a.get("muted")})
        muted = sorted({a["rule"] for a in n.alerts if a.get("muted")} - set(ended))
        text = f":white_check_mark: Resolved: {', '.join(ended)}" if ended else ""
        if muted:  # still firing, silenced or inhibited: not resolved
            text += ("; " if text else "") + f":zzz: muted: {', '.join(muted)}"
        return text
    return (
        f"Still firing ({n.kind}): "
        + "; ".join(f"{a['rule']} ({a['severity']}): {a['summary']}" for a in n.firing)[:2900]
    )


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def _duration(seconds: float) -> str:
    from lagwatch.rules.text import duration

    return duration(seconds)
