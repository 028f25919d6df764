"""The report as one HTML file a person opens in a browser: tables and inline SVG plots, no script, no network.

matplotlib draws the plots (lag over time with the thresholds and the incidents shaded; the distribution per group
as box plots), written as SVG text into the page, so the file stays self-contained and sharp at any zoom.
"""

from __future__ import annotations

import html
import io
import math
import warnings
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

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
"""


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
    """White at 0, amber at a few percent, red at 20% and more of the time over the threshold."""
    if share <= 0:
        return "#ffffff"
    x = min(1.0, math.sqrt(share / 0.2))
    red, green, blue = 255, int(240 - 170 * x), int(200 - 170 * x)
    return f"#{red:02x}{green:02x}{blue:02x}"


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
                tds.append('<td style="background:#f4f4f4"></td>')
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
    return text


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
        ax.plot(times, values, color="#2b6cb0", linewidth=1.1)
        if values.isna().all():  # offsets never known: say so, on the group's own time axis (not 1970's)
            ax.text(0.5, 0.5, "lag unknown at every poll", transform=ax.transAxes, ha="center", fontsize=8)
            if len(times):
                ax.set_xlim(times.min(), times.max() + pd.Timedelta(seconds=1))
        if t is not None:
            warning = t.warning_seconds if seconds else t.warning_offsets
            critical = t.critical_seconds if seconds else t.critical_offsets
            top = values.max()
            for level, color in ((warning, "#d69e2e"), (critical, "#c53030")):
                if level is not None and level <= max(0.0 if top != top else float(top), 1.0) * 1.5:
                    ax.axhline(level, color=color, linewidth=0.9, linestyle="--")
        mine_incidents = incidents[(incidents["cluster"] == cluster) & (incidents["group"] == group)]
        for r in mine_incidents.itertuples():
            end = r.ended_at if r.ended_at == r.ended_at and r.ended_at is not None else mine["t"].max()
            ax.axvspan(
                pd.to_datetime(r.started_at, unit="s", utc=True),
                pd.to_datetime(end, unit="s", utc=True),
                color="#feb2b2",
                alpha=0.35,
                linewidth=0,
            )
        ax.set_title(_name(cluster, group, clusters), fontsize=9, loc="left")
        ax.set_ylabel("lag (s)" if seconds else "lag (records)", fontsize=8)
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
               boxprops={"facecolor": "#bee3f8", "edgecolor": "#2b6cb0"},
               medianprops={"color": "#1a365d"}, flierprops={"marker": "x", "markeredgecolor": "#c53030"})  # fmt: skip
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
    parts = [
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{_e(title)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="sub">From the lag history lake recorded by lagwatch. Generated '
        f"{datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}. Times are UTC.</p>",
        '<div class="cards">' + "".join(f"<div class=card><b>{v}</b><span>{_e(k)}</span></div>" for v, k in cards),
        "</div>",
        "<h2>Share of time over the warning threshold (SLO), per group and day</h2>",
        '<p class="note">Share of polls at which any topic of the group had lag or lag seconds at or over the lag '
        "rule's warning threshold (hover a cell for the share over critical).</p>",
        _slo_table(daily, clusters) if len(daily) else '<p class="note">No group was polled in this range.</p>',
    ]
    if chosen and series is not None:
        parts += [
            "<h2>Lag over time</h2>",
            f'<p class="note">The {len(chosen)} groups with the most time over warning. Lag seconds when lagwatch '
            "could measure them, unless the lag rule has thresholds in records only; else records; dashed lines: warning (amber) and critical (red) thresholds; shaded: "
            "incidents.</p>",
            _quietly(_lag_over_time, series, chosen, incidents, rules_of, clusters),
        ]
    if chosen and distribution is not None:
        parts += ["<h2>Distribution per group</h2>", _quietly(_distribution_plot, distribution, chosen, clusters)]
    parts.append("<h2>Incidents and catch-up</h2>")
    parts.append(
        '<p class="note">A run of polls over the warning threshold; catch-up: from the peak to the first poll back '
        "under it.</p>"
    )
    ordered = incidents.sort_values(["ongoing", "duration_s"], ascending=False) if len(incidents) else incidents
    parts.append(
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
        )
    )
    parts.append(f"<h2>Offset expiry near misses (within {_fmt_duration(expiry_margin_s)})</h2>")
    parts.append(
        '<p class="note">Groups whose committed offsets came this close to being deleted under the brokers\' '
        "offsets.retention.minutes.</p>"
    )
    nm = near_misses.sort_values("min_time_to_expiry_s") if len(near_misses) else near_misses
    parts.append(
        _table(
            ["group", "day", "closest", "at", "would have expired at"],
            [
                [
                    _e(_name(r.cluster, r.group, clusters)),
                    _e(r.date),
                    _fmt_duration(r.min_time_to_expiry_s),
                    _fmt_time(r.nearest_at),
                    _fmt_time(r.expires_at),
                ]
                for r in nm.itertuples()
            ],
            bad=[r.min_time_to_expiry_s <= 0 for r in nm.itertuples()],
        )
    )
    parts.append("<h2>Worst partitions</h2>")
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
    parts.append("<h2>Per group and day</h2>")
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
