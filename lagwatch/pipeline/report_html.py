"""The report as one HTML file a person opens in a browser: tables and inline SVG plots, no script, no network.

matplotlib draws the plots (lag over time with the thresholds and the incidents shaded; the distribution per group
as box plots; alerts per day; the noisiest groups' alerts on a time line), written as SVG text into the page, so the
file stays self-contained and sharp at any zoom.

Every colour that means something is in a `<figure class="chart">` with its legend (`<figcaption class="legend">`,
one swatch per colour, in the very colour drawn); the heat table's colours are steps of a scale, each in the
legend. Neutral greys (axes, grid, text) mean nothing. tests/test_report_spark.py checks all of it in Chromium.
"""

from __future__ import annotations

import html
import io
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lagwatch.pipeline.alerting import (
    NO_TEAM,
    SEVERITIES,
    Alerting,
    FiredAlert,
    NotificationDay,
    Tally,
    expiry_warned_at,
    severity_of,
)
from lagwatch.pipeline.whatif import CandidateTotals, RuleComparison, ranked

MAX_TABLE_ROWS = 200  # beyond this a table goes into a collapsed <details>: the Parquet files have everything

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px auto; max-width: 1180px;
       color: #1d2430; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 32px; border-bottom: 1px solid #dde;
     padding-bottom: 4px; }
.sub { color: #5b6474; margin-top: 0; }
.cards { display: flex; gap: 12px; flex-wrap: wrap; margin: 16px 0; }
.card { border: 1px solid #dde; border-radius: 8px; padding: 10px 14px; min-width: 130px; }
.card b { display: block; font-size: 22px; } .card span { color: #5b6474; font-size: 12px; }
table { border-collapse: collapse; font-size: 12.5px; margin: 8px 0; }
th, td { padding: 3px 8px; border-bottom: 1px solid #eef; text-align: right; white-space: nowrap; }
th { background: #f4f6fa; position: sticky; top: 0; } td.l, th.l { text-align: left; }
tr.bad td { color: #b3261e; } .note { color: #5b6474; font-size: 12.5px; }
svg { max-width: 100%; height: auto; }
figure.chart { margin: 8px 0 16px; } figure.chart table { margin-bottom: 4px; }
.legend { display: flex; flex-wrap: wrap; gap: 6px 16px; font-size: 12px; color: #1d2430; margin: 4px 0; }
.legend .key { display: inline-flex; align-items: center; gap: 6px; }
.legend i.sw { display: inline-block; width: 18px; height: 12px; border: 1px solid #999; }
.legend i.line { height: 0; border: 0; border-top: 3px solid; width: 22px; }
.legend i.dash { height: 0; border: 0; border-top: 3px dashed; width: 22px; }
.legend b.scale { font-weight: 600; margin-right: 4px; }
"""

# The colours the page draws with, each named in a legend where it is used.
LAG_LINE = "#2b6cb0"
WARNING = "#d69e2e"
CRITICAL = "#c53030"
INFO = "#3182ce"
INCIDENT_SHADE = "#feb2b2"
BOX_FACE, BOX_EDGE, BOX_MEDIAN = "#bee3f8", "#2b6cb0", "#1a365d"
BAD_TEXT = "#b3261e"  # the CSS of tr.bad
NOT_POLLED = "#f4f4f4"
SEVERITY_COLOURS = {"critical": CRITICAL, "warning": WARNING, "info": INFO}
HEAT_SATURATES = 0.2  # a fifth of the time over warning and more: the darkest red
# The heat table's scale: (upper bound of the share, colour, label). A cell takes the first step its share is
# under; colours are the old continuous ramp's at each step's middle, so a reader can tell steps apart.
HEAT_STEPS: tuple[tuple[float, str, str], ...] = (
    (0.0, "#ffffff", "0 %"),
    (0.01, "#ffd5ad", "under 1 %"),
    (0.05, "#ffae86", "1-5 %"),
    (0.10, "#ff875f", "5-10 %"),
    (HEAT_SATURATES, "#ff5c34", "10-20 %"),
    (math.inf, "#ff461e", "20 % and more"),
)


def _fmt_int(v: Any) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{round(float(v)):,}"


def _fmt_share(v: Any) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.1%}"


def _fmt_duration(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    s = round(float(v))
    if s < 0:
        return "passed"
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {s:02d}s" if minutes else f"{s}s"


def _fmt_time(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return datetime.fromtimestamp(float(v), UTC).strftime("%Y-%m-%d %H:%M")


def _e(v: Any) -> str:
    return html.escape(str(v))


def _name(cluster: str, group: str, clusters: int) -> str:
    return group if clusters == 1 else f"{cluster}/{group}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1, bad: Sequence[bool] = ()) -> str:
    head = "".join(f'<th class="l">{_e(h)}</th>' if i < left else f"<th>{_e(h)}</th>" for i, h in enumerate(headers))
    body = []
    for n, row in enumerate(rows):
        cls = ' class="bad"' if n < len(bad) and bad[n] else ""
        cells = "".join(f'<td class="l">{c}</td>' if i < left else f"<td>{c}</td>" for i, c in enumerate(row))
        body.append(f"<tr{cls}>{cells}</tr>")
    if not rows:
        return '<p class="note">None.</p>'
    text = f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body[:MAX_TABLE_ROWS])}</tbody></table>"
    if len(rows) > MAX_TABLE_ROWS:
        rest = "".join(body[MAX_TABLE_ROWS:])
        text += (
            f"<details><summary>{len(rows) - MAX_TABLE_ROWS} more rows</summary>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{rest}</tbody></table></details>"
        )
    return text


def _svg(fig: Any) -> str:
    buffer = io.StringIO()
    # No metadata block: no creation date (the same data draws the same SVG), no RDF namespaces.
    fig.savefig(
        buffer,
        format="svg",
        bbox_inches="tight",
        metadata={"Creator": None, "Date": None, "Format": None, "Type": None},
    )
    import matplotlib.pyplot as plt

    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and doctype: the SVG lives inside HTML


def _heat(share: float) -> str:
    """The heat table's colour for a share of time over warning: the step of HEAT_STEPS it falls in."""
    if share <= 0:
        return HEAT_STEPS[0][1]
    return next(colour for bound, colour, _ in HEAT_STEPS[1:] if share < bound or bound == math.inf)


def _key(colour: str, label: str, kind: str = "sw") -> str:
    """One legend entry: a swatch drawn in `colour` (a box, a line or a dashed line), and what it means."""
    style = f"background:{colour}" if kind == "sw" else f"border-top-color:{colour}"
    return f'<span class="key"><i class="{kind}" style="{style}"></i>{_e(label)}</span>'


def _legend(keys: Sequence[str], scale: str = "") -> str:
    head = f'<b class="scale">{_e(scale)}</b>' if scale else ""
    return f'<figcaption class="legend">{head}{"".join(keys)}</figcaption>'


def _chart(body: str, legend: str, name: str) -> str:
    """A table or plot whose colours mean something, with its legend."""
    return f'<figure class="chart" id="{_e(name)}">{body}{legend}</figure>'


def _with_bad(table: str, meaning: str, name: str) -> list[str]:
    """A table whose rows may be red (class bad): with its legend when some are."""
    if 'class="bad"' not in table:
        return [table]
    return [_chart(table, _legend([_key(BAD_TEXT, f"red rows: {meaning}")]), name)]


def _severity_keys(severities: Sequence[str] = SEVERITIES) -> list[str]:
    return [_key(SEVERITY_COLOURS[s], s) for s in severities]


def _slo_table(daily: Any, clusters: int) -> str:
    dates = sorted(daily["date"].unique())
    order = daily.groupby(["cluster", "group"])["share_over_warning"].mean().sort_values(ascending=False).index.tolist()
    cells = {(r.cluster, r.group, r.date): r for r in daily.itertuples()}
    head = '<th class="l">group</th>' + "".join(f"<th>{_e(d[5:])}</th>" for d in dates)
    body = []
    for cluster, group in order:
        tds = []
        for d in dates:
            r = cells.get((cluster, group, d))
            if r is None:
                tds.append(f'<td style="background:{NOT_POLLED}"></td>')
                continue
            title = f"{_fmt_share(r.share_over_critical)} over critical; lag p99 {_fmt_int(r.lag_p99)}"
            tds.append(
                f'<td style="background:{_heat(r.share_over_warning)}" title="{_e(title)}">'
                f"{_fmt_share(r.share_over_warning)}</td>"
            )
        body.append(f'<tr><td class="l">{_e(_name(cluster, group, clusters))}</td>{"".join(tds)}</tr>')
    rows = "".join(body[:MAX_TABLE_ROWS])
    text = f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
    if len(body) > MAX_TABLE_ROWS:
        text += f'<p class="note">{len(body) - MAX_TABLE_ROWS} more groups in group_daily.parquet.</p>'
    keys = [_key(colour, label) for _, colour, label in HEAT_STEPS] + [_key(NOT_POLLED, "not polled that day")]
    legend = _legend(keys, f"share of the day's polls over warning (saturates at {HEAT_SATURATES:.0%}):")
    return _chart(text, legend, "slo-chart")


def _lag_over_time(
    series: Any,
    chosen: Sequence[tuple[str, str]],
    incidents: Any,
    rules_of: Mapping[str, Mapping[str, Any] | None],
    clusters: int,
) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    import pandas as pd  # type: ignore[import-untyped]

    from lagwatch.pipeline.thresholds import thresholds_of

    columns = 3 if len(chosen) > 4 else max(1, min(2, len(chosen)))
    rows = math.ceil(len(chosen) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 2.5 * rows), squeeze=False)
    for ax in axes.flat[len(chosen) :]:
        ax.set_visible(False)
    for ax, (cluster, group) in zip(axes.flat, chosen, strict=False):
        mine = series[(series["cluster"] == cluster) & (series["group"] == group)]
        times = pd.to_datetime(mine["t"], unit="s", utc=True)
        rules = rules_of.get(cluster)
        t = thresholds_of(rules, cluster, group, "") if rules is not None else None
        # Seconds when lagwatch measured them, unless the rule judges this group in records only: the thresholds
        # drawn must be the ones the shading (incidents) comes from.
        by_records = t is not None and t.warning_seconds is None and t.critical_seconds is None
        by_records = by_records and t is not None and (t.warning_offsets, t.critical_offsets) != (None, None)
        seconds = bool(mine["lag_seconds"].notna().any()) and not by_records
        values = mine["lag_seconds"] if seconds else mine["lag"]
        ax.plot(times, values, color=LAG_LINE, linewidth=1.1)
        if values.isna().all():  # offsets never known: say so, on the group's own time axis (not 1970's)
            ax.text(0.5, 0.5, "lag unknown at every poll", transform=ax.transAxes, ha="center", fontsize=8)
            if len(times):
                ax.set_xlim(times.min(), times.max() + pd.Timedelta(seconds=1))
        if t is not None:
            warning = t.warning_seconds if seconds else t.warning_offsets
            critical = t.critical_seconds if seconds else t.critical_offsets
            top = values.max()
            for level, color in ((warning, WARNING), (critical, CRITICAL)):
                if level is not None and level <= max(0.0 if top != top else float(top), 1.0) * 1.5:
                    ax.axhline(level, color=color, linewidth=0.9, linestyle="--")
        mine_incidents = incidents[(incidents["cluster"] == cluster) & (incidents["group"] == group)]
        for r in mine_incidents.itertuples():
            end = r.ended_at if r.ended_at == r.ended_at and r.ended_at is not None else mine["t"].max()
            ax.axvspan(
                pd.to_datetime(r.started_at, unit="s", utc=True),
                pd.to_datetime(end, unit="s", utc=True),
                color=INCIDENT_SHADE,
                alpha=0.35,
                linewidth=0,
            )
        ax.set_title(_name(cluster, group, clusters), fontsize=9, loc="left")
        ax.set_ylabel("lag (s)" if seconds else "lag (records)", fontsize=8)
        ax.set_xlabel("time (UTC)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(mdates.AutoDateLocator()))  # type: ignore[no-untyped-call]
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.25)
    fig.tight_layout()
    return _svg(fig)


def _distribution_plot(distribution: Any, chosen: Sequence[tuple[str, str]], clusters: int) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 0.42 * len(chosen) + 1.2), squeeze=False)
    labels = [_name(c, g, clusters) for c, g in chosen]
    by_key = {(r["cluster"], r["group"]): r for r in distribution.to_dict("records")}
    for ax, column, unit in ((axes[0][0], "lag_seconds", "lag (s)"), (axes[0][1], "lag", "lag (records)")):
        stats = []
        for (cluster, group), label in zip(chosen, labels, strict=True):
            r = by_key.get((cluster, group))
            q = r[f"{column}_q"] if r is not None else None
            if r is None or q is None or (isinstance(q, float) and math.isnan(q)) or len(q) != 4:
                stats.append(
                    {"label": f"{label} (unknown)", "whislo": 0, "q1": 0, "med": 0, "q3": 0, "whishi": 0, "fliers": []}
                )
                continue
            stats.append(
                {
                    "label": label,
                    "whislo": r[f"{column}_min"],
                    "q1": q[0],
                    "med": q[1],
                    "q3": q[2],
                    "whishi": q[3],
                    "fliers": [r[f"{column}_max"]] if r[f"{column}_max"] > q[3] else [],
                }
            )
        ax.bxp(stats[::-1], orientation="horizontal", showfliers=True, patch_artist=True,
               boxprops={"facecolor": BOX_FACE, "edgecolor": BOX_EDGE},
               medianprops={"color": BOX_MEDIAN}, flierprops={"marker": "x", "markeredgecolor": CRITICAL})  # fmt: skip
        ax.set_xlabel(f"{unit}: box p25-p75, line median, whiskers min-p99, x the maximum", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(axis="x", alpha=0.25)
    fig.tight_layout()
    return _svg(fig)


def _quietly(plot: Any, *args: Any) -> str:
    """A plot without matplotlib's warning per glyph its font lacks (a group named in CJK draws boxes in the plots;
    the tables show the name as it is)."""
    import matplotlib

    # Names drawn as they are: Kafka allows `$` in a group id, and matplotlib took `cost$_a_b$y` for math (and
    # failed on it: the whole report failed).
    with warnings.catch_warnings(), matplotlib.rc_context({"text.parse_math": False}):
        warnings.filterwarnings("ignore", message="Glyph .* missing from font", category=UserWarning)
        return str(plot(*args))


@dataclass(frozen=True)
class AlertingView:
    """The daemon's alerting over the range (lagwatch.pipeline.alerting), as the page shows it."""

    summary: Alerting
    alerts: Sequence[FiredAlert]  # every incident of the range: the time line and the near misses' warnings
    ranges: Mapping[str, tuple[float, float]]  # per cluster, the first and last poll
    team_label: str
    notifications: Sequence[NotificationDay] = ()  # the `recorded` replay's, when a backtest was given
    notifications_from: str | None = None  # where they come from, said on the page


@dataclass(frozen=True)
class BacktestView:
    """A backtest's comparison (its `_comparison/` and `_incidents/`) and its replay's notifications."""

    path: str
    totals: Sequence[CandidateTotals]
    rules: Mapping[str, Sequence[RuleComparison]]
    notifications: Sequence[NotificationDay] = field(default_factory=tuple)


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:,.1f}"


def _alerts_per_day_plot(view: AlertingView) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    days = view.summary.days
    fig, ax = plt.subplots(figsize=(max(5.0, 0.55 * len(days) + 2), 2.6))
    x = list(range(len(days)))
    bottom = [0] * len(days)
    for severity in reversed(SEVERITIES):  # critical on top, where the eye lands
        heights = [d.fired.get(severity, 0) for d in days]
        ax.bar(x, heights, bottom=bottom, color=SEVERITY_COLOURS[severity], width=0.7, linewidth=0)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set_xticks(x, [d.day[5:] for d in days])
    ax.set_xlabel("day (UTC)", fontsize=8)
    ax.set_ylabel("alerts fired", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(axis="y", alpha=0.25)
    fig.tight_layout()
    return _svg(fig)


def _time_line_plot(view: AlertingView, clusters: int) -> str:
    """Each of the noisiest groups' alerts as a bar from firing to resolution, coloured by severity."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    noisy = view.summary.noisiest
    fig, ax = plt.subplots(figsize=(11.5, 0.36 * len(noisy) + 1.3))
    from lagwatch.pipeline.alerting import firing_span

    rows = {(g.cluster, g.group): n for n, g in enumerate(reversed(noisy))}
    for x in view.alerts:
        row = rows.get((x.incident.cluster, x.incident.group or ""))
        if row is None:
            continue
        start, end = firing_span(x.incident, view.ranges)
        ax.broken_barh(
            [(mdates.date2num(datetime.fromtimestamp(start, UTC)), max(end - start, 1.0) / 86400)],  # type: ignore[no-untyped-call]
            (row - 0.38, 0.76),
            facecolors=SEVERITY_COLOURS[severity_of(x.incident)],
            linewidth=0,
        )
    ax.set_yticks(list(rows.values()), [_name(c, g, clusters) for c, g in rows])
    ax.set_ylim(-0.7, len(rows) - 0.3)
    first = min(a for a, _ in view.ranges.values())
    last = max(b for _, b in view.ranges.values())
    ax.set_xlim(datetime.fromtimestamp(first, UTC), datetime.fromtimestamp(max(last, first + 60), UTC))  # type: ignore[arg-type]
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(mdates.AutoDateLocator()))  # type: ignore[no-untyped-call]
    ax.set_xlabel("time (UTC)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(axis="x", alpha=0.25)
    fig.tight_layout()
    return _svg(fig)


def _tally_rows(tallies: Sequence[Tally]) -> list[list[str]]:
    return [
        [_e(t.name), f"{t.alerts:,}", f"{t.pages:,}", _hours(t.firing_s), _fmt_duration(t.median_s),
         _fmt_duration(t.longest_s), f"{t.groups:,}"]
        for t in tallies
    ]  # fmt: skip


def _alerting_sections(view: AlertingView, clusters: int) -> list[str]:
    a = view.summary
    parts = [
        '<h2 id="alerting">Alerting: what the daemon raised</h2>',
        '<p class="note">From the alert transitions the daemon recorded in the lake. An alert is one incident, from '
        "firing to resolution; a page is an alert that reached critical. Time firing is summed over alerts "
        "(alert-hours: two alerts of one group firing at once count twice), up to the range's last poll for "
        "those still firing.</p>",
    ]
    if a.empty:
        return [*parts, '<p class="note">The daemon raised no alert in this range.</p>']
    parts.append('<h2 id="alerts-per-day">Alerts, pages and notifications per day</h2>')
    parts.append(
        _chart(
            _quietly(_alerts_per_day_plot, view),
            _legend(_severity_keys(), "alerts fired that day, by the highest severity reached:"),
            "alerts-per-day-chart",
        )
    )
    notes: dict[str, NotificationDay] = {n.day: n for n in view.notifications}
    kinds = sorted({k for n in view.notifications for k in n.kinds})
    head = ["day", "alerts", *SEVERITIES, "pages", "alert-hours firing"]
    # "sent": notifications, by kind and in all (the table fits the page: "notifications: resolved" did not)
    head += [f"sent: {k}" for k in kinds] + (["sent"] if kinds else [])
    rows = []
    for d in a.days:
        n = notes.get(d.day)
        row = [_e(d.day), f"{d.alerts:,}", *(f"{d.fired.get(s, 0):,}" for s in SEVERITIES), f"{d.pages:,}"]
        row.append(_hours(d.firing_s))
        row += [f"{n.kinds.get(k, 0) if n else 0:,}" for k in kinds] + ([f"{n.total if n else 0:,}"] if kinds else [])
        rows.append(row)
    parts.append(_table(head, rows))
    if view.notifications_from:
        parts.append(f'<p class="note">Notifications sent (by kind, and in all): {_e(view.notifications_from)}.</p>')
    else:
        parts.append(
            '<p class="note">Notifications are not in the lake (it records alert transitions, not deliveries): '
            "give <code>--backtest</code> a backtest's output that replayed <code>recorded</code> to count them as "
            "the daemon's configuration sends them.</p>"
        )
    parts.append('<h2 id="alerts-per-rule">Alerts per rule</h2>')
    head = ["rule", "alerts", "pages", "alert-hours firing", "median firing", "longest", "groups"]
    parts.append(_table(head, _tally_rows(a.rules)))
    label = view.team_label
    parts.append(f'<h2 id="alerts-per-team">Alerts per team (routing label <code>{_e(label)}</code>)</h2>')
    parts.append(
        f'<p class="note">The value of the alert\'s <code>{_e(label)}</code> label, which rule overrides add for '
        f"routing; {_e(NO_TEAM)}: alerts without it.</p>"
    )
    parts.append(_table([label, *head[1:]], _tally_rows(a.teams)))
    parts.append('<h2 id="noisiest-groups">Noisiest groups</h2>')
    parts.append(
        _table(
            ["group", label, "alerts", "pages", "alert-hours firing", "rules"],
            [
                [
                    _e(_name(g.cluster, g.group, clusters)),
                    _e(g.team or ""),
                    f"{g.alerts:,}",
                    f"{g.pages:,}",
                    _hours(g.firing_s),
                    _e(", ".join(g.rules)),
                ]
                for g in a.noisiest
            ],
        )
    )
    parts.append('<h2 id="time-firing">Time firing: the noisiest groups\' alerts</h2>')
    parts.append(
        _chart(
            _quietly(_time_line_plot, view, clusters),
            _legend(_severity_keys(), "one bar per alert, firing to resolution, by the highest severity reached:"),
            "time-firing-chart",
        )
    )
    return parts


def _backtest_section(view: BacktestView) -> list[str]:
    parts = [
        '<h2 id="backtest">Backtest: candidates beside what the daemon raised</h2>',
        f'<p class="note">From the backtest at {_e(view.path)} (its own range). Ranked by pages, then pages lost, then '
        "alerts; the daemon's figures in brackets. Merged: the daemon's alerts one replayed alert carries with "
        "another; split: replayed alerts that are a further piece of one of the daemon's.</p>",
    ]
    head = ["rank", "config", "pages", "pages +", "pages -", "alerts", "alerts +", "alerts -", "merged", "split",
            "earlier", "later", "median shift"]  # fmt: skip
    parts.append(
        _table(
            head,
            [
                [
                    str(n),
                    _e(t.config),
                    f"{t.pages_replayed:,} ({t.pages_recorded:,})",
                    f"{t.pages_gained:,}",
                    f"{t.pages_lost:,}",
                    f"{t.alerts_replayed:,} ({t.alerts_recorded:,})",
                    f"{t.alerts_gained:,}",
                    f"{t.alerts_lost:,}",
                    f"{t.merged:,}",
                    f"{t.split:,}",
                    f"{t.earlier:,}",
                    f"{t.later:,}",
                    "" if t.median_shift_s is None else f"{t.median_shift_s:+.1f} s",
                ]
                for n, t in enumerate(ranked(view.totals), 1)
            ],
            left=2,
        )
    )
    for config, rows in view.rules.items():
        parts.append(f"<h3>{_e(config)}: per rule and the highest severity reached</h3>")
        parts.append(
            _table(
                ["rule", "severity", "daemon", "replay", "gained", "lost", "merged", "split", "other sev", "pages +",
                 "pages -", "earlier", "median", "worst", "later", "median", "worst"],
                [
                    [_e(r.rule), _e(r.severity), str(r.recorded), str(r.replayed), str(r.gained), str(r.lost),
                     str(r.merged), str(r.split), str(r.other_severity), str(r.pages_gained), str(r.pages_lost),
                     str(r.earlier), _fmt_duration(r.earlier_median_s), _fmt_duration(r.earlier_worst_s),
                     str(r.later), _fmt_duration(r.later_median_s), _fmt_duration(r.later_worst_s)]
                    for r in rows
                ],
                left=2,
            )
        )  # fmt: skip
    if view.notifications:
        configs = sorted({n.config for n in view.notifications})
        by = {(n.config, n.day): n.total for n in view.notifications}
        days = sorted({n.day for n in view.notifications})
        parts.append("<h3>Notifications per day, per config (every kind: firing, update, repeat, resolved)</h3>")
        parts.append(_table(["day", *configs], [[_e(d), *(f"{by.get((c, d), 0):,}" for c in configs)] for d in days]))
    return parts


def render(
    daily: Any,
    worst: Any,
    incidents: Any,
    near_misses: Any,
    series: Any,
    distribution: Any,
    chosen: Sequence[tuple[str, str]],
    rules_of: Mapping[str, Mapping[str, Any] | None],
    expiry_margin_s: float,
    title: str,
    alerting: AlertingView | None = None,
    backtest: BacktestView | None = None,
) -> str:
    clusters = int(daily["cluster"].nunique()) if len(daily) else 1
    groups = daily.groupby(["cluster", "group"]).ngroups if len(daily) else 0
    breached = int((daily["share_over_warning"] > 0).sum()) if len(daily) else 0
    cards = [
        (f"{groups:,}", "groups"),
        (f"{daily['date'].nunique() if len(daily) else 0}", "days"),
        (f"{int(daily['polls'].sum()) if len(daily) else 0:,}", "group polls"),
        (f"{breached:,}", "group-days over warning"),
        (f"{len(incidents):,}", "incidents"),
        (f"{len(near_misses):,}", "expiry near misses"),
    ]
    if alerting is not None:
        cards += [
            (f"{alerting.summary.alerts:,}", "alerts raised"),
            (f"{alerting.summary.pages:,}", "pages"),
            (_hours(alerting.summary.firing_s), "alert-hours firing"),
        ]
    parts = [
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{_e(title)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="sub">From the lag history lake recorded by lagwatch. Generated '
        f"{datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}. Times are UTC.</p>",
        '<div class="cards">' + "".join(f"<div class=card><b>{v}</b><span>{_e(k)}</span></div>" for v, k in cards),
        "</div>",
    ]
    # What paged comes first: with a thousand groups, the heat table below runs to 200 rows.
    if alerting is not None:
        parts += _alerting_sections(alerting, clusters)
    parts += [
        '<h2 id="slo">Share of time over the warning threshold (SLO), per group and day</h2>',
        '<p class="note">Share of polls at which any topic of the group had lag or lag seconds at or over the lag '
        "rule's warning threshold (hover a cell for the share over critical).</p>",
        _slo_table(daily, clusters) if len(daily) else '<p class="note">No group was polled in this range.</p>',
    ]
    if chosen and series is not None:
        lag_keys = [
            _key(LAG_LINE, "lag (seconds, or records where the rule judges records only)", "line"),
            _key(WARNING, "warning threshold", "dash"),
            _key(CRITICAL, "critical threshold", "dash"),
            _key(INCIDENT_SHADE, "incident: polls over warning"),
        ]
        parts += [
            '<h2 id="lag-over-time">Lag over time</h2>',
            f'<p class="note">The {len(chosen)} groups with the most time over warning. Lag seconds when lagwatch '
            "could measure them, unless the lag rule has thresholds in records only; else records.</p>",
            _chart(
                _quietly(_lag_over_time, series, chosen, incidents, rules_of, clusters),
                _legend(lag_keys),
                "lag-over-time-chart",
            ),
        ]
    if chosen and distribution is not None:
        box_keys = [
            f'<span class="key"><i class="sw" style="background:{BOX_FACE};border-color:{BOX_EDGE}"></i>'
            "p25-p75 (whiskers: min-p99)</span>",
            _key(BOX_MEDIAN, "median", "line"),
            _key(CRITICAL, "x: the maximum, beyond p99", "line"),
        ]
        parts += [
            '<h2 id="distribution">Distribution per group</h2>',
            _chart(
                _quietly(_distribution_plot, distribution, chosen, clusters), _legend(box_keys), "distribution-chart"
            ),
        ]
    parts.append('<h2 id="incidents">Incidents and catch-up</h2>')
    parts.append(
        '<p class="note">A run of polls over the warning threshold; catch-up: from the peak to the first poll back '
        "under it.</p>"
    )
    ordered = incidents.sort_values(["ongoing", "duration_s"], ascending=False) if len(incidents) else incidents
    parts += _with_bad(
        _table(
            ["group", "started", "peak lag", "peak lag (s)", "peak at", "ended", "lasted", "catch-up", "critical"],
            [
                [
                    _e(_name(r.cluster, r.group, clusters)),
                    _fmt_time(r.started_at),
                    _fmt_int(r.peak_lag),
                    _fmt_duration(r.peak_lag_seconds),
                    _fmt_time(r.peak_at),
                    "ongoing" if r.ongoing else _fmt_time(r.ended_at),
                    _fmt_duration(r.duration_s),
                    _fmt_duration(r.catch_up_s),
                    "yes" if r.critical else "",
                ]
                for r in ordered.itertuples()
            ],
            bad=[bool(r.critical) for r in ordered.itertuples()],
        ),
        "reached the critical threshold",
        "incidents-table",
    )
    parts.append(
        f'<h2 id="expiry-near-misses">Offset expiry near misses (within {_fmt_duration(expiry_margin_s)})</h2>'
    )
    parts.append(
        '<p class="note">Groups whose committed offsets came this close to being deleted under the brokers\' '
        "offsets.retention.minutes. Warned: when the daemon's <code>expiry</code> (or <code>expired</code>) alert "
        "for the group fired, if it fired that day.</p>"
    )
    nm = near_misses.sort_values("min_time_to_expiry_s") if len(near_misses) else near_misses
    fired = alerting.alerts if alerting is not None else ()

    def warned(r: Any) -> str:
        if alerting is None:
            return "(alerts not read)"
        at = expiry_warned_at(fired, r.cluster, r.group, r.date)
        if at is None:
            return "no"
        ahead = float(r.expires_at) - at if r.expires_at == r.expires_at and r.expires_at is not None else None
        return _fmt_time(at) + (f" ({_fmt_duration(ahead)} before)" if ahead is not None and ahead > 0 else "")

    parts += _with_bad(
        _table(
            ["group", "day", "closest", "at", "would have expired at", "warned"],
            [
                [
                    _e(_name(r.cluster, r.group, clusters)),
                    _e(r.date),
                    _fmt_duration(r.min_time_to_expiry_s),
                    _fmt_time(r.nearest_at),
                    _fmt_time(r.expires_at),
                    _e(warned(r)),
                ]
                for r in nm.itertuples()
            ],
            bad=[r.min_time_to_expiry_s <= 0 for r in nm.itertuples()],
        ),
        "the expiry time passed while lagwatch watched (the offsets may be gone)",
        "expiry-table",
    )
    if backtest is not None:
        parts += _backtest_section(backtest)
    parts.append('<h2 id="worst-partitions">Worst partitions</h2>')
    top = worst.sort_values("lag_max", ascending=False).head(MAX_TABLE_ROWS) if len(worst) else worst
    parts.append(
        _table(
            ["group", "day", "topic", "partition", "max lag", "p95 lag", "max lag (s)"],
            [
                [
                    _e(_name(r.cluster, r.group, clusters)),
                    _e(r.date),
                    _e(r.topic),
                    str(r.partition),
                    _fmt_int(r.lag_max),
                    _fmt_int(r.lag_p95),
                    _fmt_duration(r.lag_seconds_max),
                ]
                for r in top.itertuples()
            ],
            left=3,
        )
    )
    parts.append('<h2 id="per-group-and-day">Per group and day</h2>')
    parts.append(
        _table(
            [
                "group",
                "day",
                "polls",
                "lag p50",
                "p95",
                "p99",
                "max",
                "lag s p50",
                "p95",
                "p99",
                "max",
                "over warn",
                "over crit",
                "nearest expiry",
            ],
            [
                [
                    _e(_name(r.cluster, r.group, clusters)),
                    _e(r.date),
                    _fmt_int(r.polls),
                    _fmt_int(r.lag_p50),
                    _fmt_int(r.lag_p95),
                    _fmt_int(r.lag_p99),
                    _fmt_int(r.lag_max),
                    _fmt_duration(r.lag_seconds_p50),
                    _fmt_duration(r.lag_seconds_p95),
                    _fmt_duration(r.lag_seconds_p99),
                    _fmt_duration(r.lag_seconds_max),
                    _fmt_share(r.share_over_warning),
                    _fmt_share(r.share_over_critical),
                    _fmt_duration(r.min_time_to_expiry_s),
                ]
                for r in daily.sort_values(["share_over_warning", "lag_max"], ascending=False).itertuples()
            ],
            left=2,
        )
    )
    parts.append("</body></html>")
    return "\n".join(parts)
