"""The `report` job: every figure equals a direct pandas computation over the same lake, and the HTML page renders
in a real browser (Debian's headless Chromium) with its plots, self-contained.

The lake is written by the daemon's own lake writer after each step of the daemon's own pipeline, fed with 26 hours
of synthetic polls (two dates): a steady group, a group with two incidents, and an idle group whose offsets come
within hours of expiring before a consumer returns."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

pa = pytest.importorskip("pyarrow")
pd = pytest.importorskip("pandas")
import pyarrow.dataset as ds  # noqa: E402

from lagwatch.lake import LakeConfig  # noqa: E402
from lagwatch.lake.writer import LakeWriter  # noqa: E402
from lagwatch.model import TopicPartition  # noqa: E402
from tests.helm_tool import ROOT  # noqa: E402
from tests.synthetic import Pipeline, group, snapshot  # noqa: E402

T0 = 1_793_966_400.0  # 2026-11-06T12:00:00Z: 12 h on the first date, 14 h on the next
POLL_S = 60.0
POLLS = 26 * 60
RULES: dict[str, Any] = {
    "lag": {
        "warning": {"offsets": 1000, "seconds": 600},
        "critical": {"offsets": 4000, "seconds": 1800},
        "for_s": 120,
    },
    "expiry": {"retention_minutes": 600},  # 10 h: the idle group comes within 2 h of losing its offsets
    "overrides": [
        {"match": {"group": "steady"}, "rules": {"lag": {"warning": {"offsets": 200}}}},
        {"match": {"group": "laggy|idle"}, "labels": {"team": "payments"}},  # routing only: no threshold changes
    ],
}
# What the rules above resolve to, written out by hand (the test must not share the job's resolver).
THRESHOLDS = {  # group -> (warning offsets, warning seconds, critical offsets, critical seconds)
    "steady": (200, 600.0, 4000, 1800.0),
    "laggy": (1000, 600.0, 4000, 1800.0),
    "idle": (1000, 600.0, 4000, 1800.0),
}
ORDERS = [TopicPartition("orders", p) for p in range(2)]
PAYMENTS = [TopicPartition("payments", p) for p in range(3)]
AUDIT = TopicPartition("audit", 0)


def laggy_backlog(i: int) -> list[int]:
    """Records behind per payments partition at poll i: two incidents, one on each date."""
    if 100 <= i < 160:  # builds up to 6,000 on partition 1 (critical), then drains until poll 220
        peak = (i - 100) * 100
    elif 160 <= i < 220:
        peak = max(0, 6000 - (i - 160) * 110)
    elif 1300 <= i < 1330:
        peak = (i - 1300) * 50  # up to 1,450: warning only
    else:
        peak = 0
    return [i % 7, peak, peak // 3]


def steady_backlog(i: int, partition: int) -> int:
    """A few records behind, and a short burst every 3 hours: over steady's own warning (200), not the default."""
    return (150 if i % 180 < 3 else 5) + (i + partition) % 4


def write_lake(root: Path) -> None:
    pipeline = Pipeline(rules=RULES, max_gap_s=3 * POLL_S)
    # Recorded as a daemon started just before its first poll (a job given --until finds it in force).
    writer = LakeWriter(LakeConfig(enabled=True, path=str(root), retention_days=0), clock=lambda: T0 - 60)
    writer.record_config("c", RULES, {"group_wait_s": 0}, 3 * POLL_S, False, POLL_S, pipeline.book)
    produced = 0
    for i in range(POLLS):
        t = T0 + i * POLL_S
        produced += 50 + (i % 60)  # every partition gets the same traffic
        ends = {tp: produced for tp in [*ORDERS, *PAYMENTS, AUDIT]}
        backlog = laggy_backlog(i)
        idle_back = i >= 480  # idle from the start (Empty, no members) until a consumer returns 8 h later
        groups = [
            group("steady", {tp: produced - steady_backlog(i, p) for p, tp in enumerate(ORDERS)}),
            group("laggy", {tp: produced - backlog[p] for p, tp in enumerate(PAYMENTS)}, subscribed=("payments",)),
            group(
                "idle",
                {AUDIT: produced if idle_back else 1000},
                state="Stable" if idle_back else "Empty",
                members=1 if idle_back else 0,
                subscribed=("audit",),
            ),
        ]
        snap = snapshot(t, groups, ends, retention_minutes=600)
        writer.record(snap, pipeline.step(snap), pipeline.book)
        if i % 200 == 0:
            writer.flush()
    writer.flush()


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("report") / "lake"
    write_lake(root)
    return root


@pytest.fixture(scope="module")
def backtest_out(lake: Path, spark: Any) -> Path:
    """A backtest of the same lake: `recorded`, and a candidate with the lag warning at 5,000 records."""
    from lagwatch.pipeline.backtest import backtest

    candidate = lake.parent / "lag5k.yaml"
    candidate.write_text("rules:\n  lag: {warning: {offsets: 5000}}\n")
    out = lake.parent / "backtest"
    backtest(str(lake), ["recorded", str(candidate)], str(out), spark=spark)
    return out


@pytest.fixture(scope="module")
def report(lake: Path, spark: Any, backtest_out: Path) -> Any:
    from lagwatch.pipeline.report import run_report

    return run_report(str(lake), str(lake.parent / "out"), spark=spark, plotted_groups=3, backtest=str(backtest_out))


def expected(lake: Path) -> dict[str, Any]:
    """The report's figures, computed directly with pandas from the lake's Parquet files."""
    rows = ds.dataset(lake / "snapshots", format="parquet", partitioning="hive").to_table().to_pandas()
    rows["date"] = rows["date"].astype(str)
    parts = rows[rows.row_kind == "partition"]
    keys = ["cluster", "date", "taken_at", "group"]
    tp = parts.groupby([*keys, "topic"], as_index=False).agg(
        lag=("lag", lambda s: s.sum(min_count=1)), lag_seconds=("lag_seconds", "max")
    )
    limits = tp["group"].map(THRESHOLDS)

    def over(i: int, j: int) -> Any:
        by_offsets = tp["lag"] >= limits.map(lambda x: x[i])
        by_seconds = tp["lag_seconds"].fillna(-1) >= limits.map(lambda x: x[j])
        return (by_offsets | by_seconds).astype(int)

    tp["over_warning"], tp["over_critical"] = over(0, 1), over(2, 3)
    gp = tp.groupby(keys, as_index=False).agg(
        lag=("lag", lambda s: s.sum(min_count=1)),
        lag_seconds=("lag_seconds", "max"),
        over_warning=("over_warning", "max"),
        over_critical=("over_critical", "max"),
    )
    daily = gp.groupby(["cluster", "date", "group"]).agg(
        polls=("taken_at", "size"),
        lag_p50=("lag", lambda s: s.quantile(0.5)),
        lag_p95=("lag", lambda s: s.quantile(0.95)),
        lag_p99=("lag", lambda s: s.quantile(0.99)),
        lag_max=("lag", "max"),
        lag_seconds_p99=("lag_seconds", lambda s: s.quantile(0.99)),
        lag_seconds_max=("lag_seconds", "max"),
        share_over_warning=("over_warning", "mean"),
        share_over_critical=("over_critical", "mean"),
    )
    groups_rows = rows[(rows.row_kind == "group") & rows.expires_at.notna()]
    left = (groups_rows.expires_at - groups_rows.taken_at).groupby(
        [groups_rows.cluster, groups_rows.date, groups_rows.group]
    )
    worst = (
        parts.groupby(["cluster", "date", "group", "topic", "partition"], as_index=False)
        .agg(lag_max=("lag", "max"))
        .sort_values(["lag_max", "topic", "partition"], ascending=[False, True, True])
        .groupby(["cluster", "date", "group"])
        .head(5)
    )
    incidents = []
    for (cluster, g), polls in gp.sort_values("taken_at").groupby(["cluster", "group"]):
        run: list[Any] = []
        for r in [*polls.itertuples(), None]:
            if r is not None and r.over_warning:
                run.append(r)
                continue
            if run:
                peak = max(run, key=lambda x: (x.lag, -x.taken_at))
                end = None if r is None else r.taken_at
                incidents.append((cluster, g, run[0].taken_at, peak.lag, peak.taken_at, end, len(run)))
                run = []
    return {"daily": daily, "left": left.min(), "worst": worst, "incidents": incidents}


@pytest.mark.spark
def test_report_figures_equal_pandas_over_the_same_lake(lake: Path, report: Any) -> None:
    want = expected(lake)
    daily = report.group_daily.set_index(["cluster", "date", "group"]).sort_index()
    w = want["daily"].sort_index()
    assert list(daily.index) == list(w.index)
    day1, day2 = sorted(set(daily.index.get_level_values("date")))
    for column in w.columns:
        pd.testing.assert_series_equal(daily[column], w[column], check_dtype=False, check_names=False)
    # The scenario shows through: steady is over its own (overridden) warning often; laggy's incidents are there.
    assert daily.loc[("c", day1, "laggy"), "lag_max"] == max(sum(laggy_backlog(i)) for i in range(720))
    assert daily.loc[("c", day1, "laggy"), "share_over_critical"] > 0
    assert daily.loc[("c", day2, "laggy"), "share_over_critical"] == 0
    assert daily.loc[("c", day2, "steady"), "share_over_warning"] == pytest.approx(5 * 3 / 840, abs=0.01)
    assert daily.loc[("c", day2, "idle"), "share_over_warning"] == 0  # back since 20:00 on the first day

    left = report.group_daily.set_index(["cluster", "date", "group"])["min_time_to_expiry_s"].dropna()
    pd.testing.assert_series_equal(left.sort_index(), want["left"].sort_index(), check_names=False)
    misses = report.expiry_near_misses
    assert list(misses.group) == ["idle"] and misses.min_time_to_expiry_s.iloc[0] == pytest.approx(2 * 3600, abs=120)

    worst = report.worst_partitions
    got = {(r.date, r.group, r.topic, r.partition, r.lag_max) for r in worst.itertuples()}
    assert got == {(r.date, r.group, r.topic, r.partition, r.lag_max) for r in want["worst"].itertuples()}
    assert worst.groupby(["date", "group"]).size().max() <= 5

    got_incidents = sorted(
        (r.cluster, r.group, r.started_at, r.peak_lag, r.peak_at, None if r.ongoing else r.ended_at, r.polls_over)
        for r in report.incidents.itertuples()
    )
    assert got_incidents == sorted(want["incidents"], key=lambda x: (x[0], x[1], x[2]))
    laggy = report.incidents[report.incidents.group == "laggy"].sort_values("started_at")
    assert len(laggy) == 2 and list(laggy.critical) == [True, False]
    idle = report.incidents[report.incidents.group == "idle"]
    assert len(idle) == 1 and idle.iloc[0].ended_at == T0 + 480 * POLL_S
    first = laggy.iloc[0]
    assert first.catch_up_s == first.ended_at - first.peak_at > 0


def daemon_incidents(lake: Path) -> Any:
    """The daemon's alerts, straight from the lake's alert transitions with pandas: one per key and firing time,
    its highest severity, resolved or cut at the last poll; the team label of its rows."""
    import json

    rows = ds.dataset(lake / "alerts", format="parquet", partitioning="hive").to_table().to_pandas()
    polls = ds.dataset(lake / "snapshots", format="parquet", partitioning="hive").to_table(
        columns=["taken_at"], filter=ds.field("row_kind") == "poll"
    )
    last = max(polls.column("taken_at").to_pylist())
    rank = {"info": 0, "warning": 1, "critical": 2}
    rows["rank"] = rows.severity.map(rank)
    rows["team"] = rows.labels_json.map(lambda x: json.loads(x).get("team"))
    incidents = rows.groupby(["key", "fired_at"], as_index=False).agg(
        rule=("rule", "first"), group=("group", "first"), team=("team", "first"), rank=("rank", "max"),
        resolved_at=("resolved_at", "max"),
    )  # fmt: skip
    incidents["pages"] = incidents["rank"] == 2
    incidents["end"] = incidents.resolved_at.fillna(last).clip(upper=last)
    incidents["firing_s"] = incidents.end - incidents.fired_at
    incidents["day"] = pd.to_datetime(incidents.fired_at, unit="s", utc=True).dt.strftime("%Y-%m-%d")
    return incidents


@pytest.mark.spark
def test_the_report_counts_the_daemons_alerts_pages_and_time_firing(lake: Path, report: Any) -> None:
    """Per day, rule and team, and the noisiest groups: equal to a pandas count over the lake's alert rows."""
    want = daemon_incidents(lake)
    view = report.alerting
    assert view is not None and view.summary.alerts == len(want) > 10
    a = view.summary
    assert a.pages == int(want.pages.sum()) >= 3  # below_log_start, stopped, and two lag incidents reach critical
    assert a.firing_s == pytest.approx(want.firing_s.sum())
    days = {d.day: (d.alerts, d.pages) for d in a.days}
    per_day = want.groupby("day").agg(alerts=("key", "size"), pages=("pages", "sum"))
    assert days == {d: (int(r.alerts), int(r.pages)) for d, r in per_day.iterrows()}
    assert sum(d.firing_s for d in a.days) == pytest.approx(want.firing_s.sum())  # cut at midnight, summed again
    rules = {t.name: (t.alerts, t.pages, round(t.firing_s, 3)) for t in a.rules}
    per_rule = want.groupby("rule").agg(n=("key", "size"), p=("pages", "sum"), f=("firing_s", "sum"))
    assert rules == {r: (int(x.n), int(x.p), round(x.f, 3)) for r, x in per_rule.iterrows()}
    teams = {t.name: (t.alerts, t.pages, t.groups) for t in a.teams}
    payments = want[want.team == "payments"]
    assert teams["payments"] == (len(payments), int(payments.pages.sum()), 2)  # laggy and idle
    assert teams["(no team label)"][0] == len(want) - len(payments)
    noisiest = a.noisiest[0]
    assert noisiest.group == "steady" and noisiest.alerts == int((want.group == "steady").sum())
    from lagwatch.pipeline.report import summary

    assert f"the daemon's alerts: {len(want)}, pages {int(want.pages.sum())}, " in summary(report)
    # The idle group's near miss: the daemon's expiry warning is said beside it.
    (warning,) = want[want.rule == "expiry"].fired_at
    page = Path(report.html_path).read_text()
    expiry = page[page.index('id="expiry-near-misses"') :]
    assert datetime.fromtimestamp(warning, UTC).strftime("%Y-%m-%d %H:%M") in expiry.split("</table>")[0]


def _colours(html_text: str) -> set[str]:
    """The colours an HTML or SVG fragment paints with (style properties and SVG attributes), greys left out:
    neutral greys (axes, grid, text, white) mean nothing."""
    found = re.findall(
        r"(?:fill|stroke|background(?:-color)?|border(?:-top)?-color)\s*[:=]\s*\"?(#[0-9a-fA-F]{6})\b", html_text
    )
    return {c.lower() for c in found if len({c[1:3], c[3:5], c[5:7]}) > 1}


def _chromium() -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.fail("chromium is not installed (make test installs Debian's chromium)")
    return browser


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]


@pytest.mark.spark
def test_report_html_renders_in_headless_chromium(report: Any, tmp_path: Path) -> None:
    """Chromium parses the page (its DOM, dumped) and paints it (a screenshot): the alerting sections are there,
    every colour drawn is in a figure whose legend shows it, and the legend's swatches are on screen."""
    page = Path(report.html_path).read_text()
    for fetches in ("<script", "<link", "<img", "<iframe", 'src="http', 'href="http', "@import"):
        assert fetches not in page  # self-contained: nothing to fetch, nothing to run
    assert not re.search(r"url\((?!#)", page)  # CSS and SVG refer only to the page's own elements
    # Lag over time, the distribution, alerts per day, and the noisiest groups' alerts on a time line, inline.
    assert page.count("<svg") == 4
    browser = _chromium()
    dom = subprocess.run(
        [browser, *CHROMIUM_FLAGS, "--dump-dom", f"file://{report.html_path}"],
        check=True, capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    body = dom[dom.index("</style>") :]  # the page's CSS names its own chrome's colours: not data
    (bad,) = re.findall(r"tr\.bad td \{ color: (#[0-9a-f]{6}); \}", dom)  # red rows: a colour that means something
    for section in ("slo", "alerting", "alerts-per-day", "alerts-per-rule", "alerts-per-team", "noisiest-groups",
                    "time-firing", "expiry-near-misses", "backtest", "lag-over-time", "incidents"):  # fmt: skip
        assert f'<h2 id="{section}">' in body, section
    for name in ("laggy", "steady", "idle", "payments", "(no team label)", "lag5k", "recorded"):
        assert name in body

    # Every colour is inside a figure whose legend has a swatch of it; nothing coloured is outside one.
    figures = re.findall(r'<figure class="chart" id="([^"]+)">(.*?)</figure>', body, flags=re.S)
    ids = [name for name, _ in figures]
    anchors = re.findall(r'<(?:h2|figure class="chart") id="([^"]+)"', body)
    assert len(anchors) == len(set(anchors))  # the page's own ids (sections, figures) are unique
    assert {"slo-chart", "alerts-per-day-chart", "time-firing-chart", "lag-over-time-chart", "distribution-chart",
            "incidents-table"} <= set(ids), ids  # fmt: skip
    legend_colours: set[str] = set()
    for name, inner in figures:
        drawn, legend = inner.split('<figcaption class="legend">')
        keys = _colours(legend)
        legend_colours |= keys
        colours = _colours(drawn) | ({bad} if 'class="bad"' in drawn else set())
        assert colours, f"{name} draws nothing in colour"
        assert colours <= keys, f"{name}: colours without a legend: {colours - keys}"
    outside = re.sub(r'<figure class="chart".*?</figure>', "", body, flags=re.S)
    assert _colours(outside) == set() and 'class="bad"' not in outside
    # The heat table's scale, in steps up to its saturation at 20 %, each step in the legend; the time axes say so.
    slo = dict(figures)["slo-chart"]
    assert "saturates at 20%" in slo and "20 % and more" in slo and "not polled that day" in slo
    for name, axis in (("lag-over-time-chart", "time (UTC)"), ("time-firing-chart", "time (UTC)"),
                       ("alerts-per-day-chart", "day (UTC)")):  # fmt: skip
        assert axis in dict(figures)[name], f"{name}: no {axis} axis label"

    # Painted: each legend colour is on screen (a swatch is 18 x 12 px, a line key 22 x 3: at least 50 pixels).
    shot = tmp_path / "report.png"
    subprocess.run(
        [browser, *CHROMIUM_FLAGS, f"--screenshot={shot}", "--window-size=1280,9000", f"file://{report.html_path}"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    from matplotlib import image

    pixels = (image.imread(str(shot))[:, :, :3] * 255).round().astype(int)
    assert pixels.shape[:2] == (9000, 1280)
    ink = (pixels.mean(axis=2) < 230).mean()
    assert ink > 0.02, f"only {ink:.1%} of the screenshot is not white"
    for colour in sorted(legend_colours):
        rgb = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
        painted = int((abs(pixels - rgb).max(axis=2) <= 2).sum())
        assert painted >= 50, f"legend colour {colour}: {painted} pixels on screen"
    keep = Path("/tmp/lagwatch-report-screenshot.png")  # for a person to look at after the run
    shutil.copy(shot, keep)


@pytest.mark.spark
def test_report_bad_input_is_one_line(tmp_path: Path, lake: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "lagwatch", "pipeline", "report", *args],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    missing = run("--lake", str(tmp_path / "nope"), "--out", str(tmp_path / "o"))
    assert missing.returncode == 2 and "no lake there" in missing.stderr and "Traceback" not in missing.stderr
    backwards = run("--lake", str(lake), "--since", "2026-11-02", "--until", "2026-11-01")
    assert backwards.returncode == 2 and "--since must be before --until" in backwards.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  lag:\n    warning: {offsets: -3}\n")
    invalid = run("--lake", str(lake), "--config", str(bad), "--out", str(tmp_path / "o"))  # before Spark starts
    assert invalid.returncode == 2 and "rules.lag.warning.offsets" in invalid.stderr, invalid.stderr
    assert "Traceback" not in invalid.stderr


@pytest.mark.spark
def test_lake_files_of_schema_1_read_alongside_schema_2(lake: Path, tmp_path: Path, spark: Any) -> None:
    """Version-1 files (before `expires_at`) and version-2 files in one lake: Spark reads both, whichever it opens
    first, and the old rows' `expires_at` is null."""
    import pyarrow.parquet as pq

    from lagwatch.pipeline.lake_read import read_snapshots

    mixed = tmp_path / "mixed"
    # Two files of the lake in which the daemon wrote an expiry (the idle group's first 8 hours). File names carry
    # the writer's wall-clock second and a random id, so their order says nothing about what they hold.
    tables = [pq.read_table(f) for f in sorted((lake / "snapshots").rglob("part-*.parquet"))]
    old, new = [t for t in tables if t.column("expires_at").null_count < t.num_rows][:2]
    for name, table in (("part-0-old.parquet", old.drop(["expires_at"])), ("part-1-new.parquet", new)):
        target = mixed / "snapshots" / "cluster=7" / "date=2026-11-06"
        target.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, target / name)
    df = read_snapshots(spark, str(mixed)).toPandas()
    assert len(df) == old.num_rows + new.num_rows and set(df.cluster) == {"7"}  # a name, not the number 7
    groups = df[df.row_kind == "group"]
    old_groups = groups[groups.taken_at.isin(set(old.column("taken_at").to_pylist()))]
    new_groups = groups[groups.taken_at.isin(set(new.column("taken_at").to_pylist()))]
    assert old_groups.expires_at.isna().all()
    assert new_groups.expires_at.notna().any()  # the idle group's expiry, written by the daemon's evaluation


@pytest.mark.spark
def test_digest_goes_to_slack_once_and_a_failed_digest_is_one_line(
    lake: Path, tmp_path: Path, report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from lagwatch.cli import _parser
    from tests.fake_slack import FakeSlack

    slack = FakeSlack().start()
    try:
        config = tmp_path / "lagwatch.yaml"
        config.write_text(
            "clusters:\n  c: {bootstrap_servers: ['127.0.0.1:1']}\n"
            f"notifiers:\n  slack: {{token: {slack.token}, base_url: '{slack.base_url}', default_channel: '#lag'}}\n"
            f"rules: {RULES!r}\n".replace("'", '"')
        )

        def run(*extra: str) -> int:
            argv = ["pipeline", "report", "--lake", str(lake), "--config", str(config), "--notify", "slack", *extra]
            args = _parser().parse_args([*argv, "--out", str(tmp_path / "out"), "--plot-groups", "0"])
            return int(args.func(args))

        assert run() == 0
        (post,) = slack.delivered("chat.postMessage")
        text = post.args["text"]
        assert text.startswith(report.title) and "`laggy`" in text and "Longest incidents" in text
        assert "`idle` came within 2.0 h of losing its offsets" in text
        assert slack.token not in capsys.readouterr().err
        assert (tmp_path / "out" / "report.html").is_file()
        from lagwatch.pipeline.report import _digest_notifier, send_digest

        slack.fail_next = 10  # Slack answers 500 (after slack-sdk's own retries): exit 1, one line
        assert send_digest(_digest_notifier(str(config), "slack"), report) == 1
        assert "the report is written, but its digest was not sent" in capsys.readouterr().err
        assert len(slack.delivered("chat.postMessage")) == 1
    finally:
        slack.stop()


# -- hostile input ---------------------------------------------------------------------------------------------------

# Kafka allows `$` in group ids: matplotlib took `cost$_a_b$y` for math, failed on it, and the whole report failed.
ODD_NAMES = ["<script>alert(1)</script>", "q\"uo'te & <b>", "ünïcødé-日本語", "cost$_a_b$y"]


def write_small_lake(root: Path, cluster: str) -> None:
    """20 polls of a cluster named `cluster` (with the daemon's recorded configuration): groups whose names need
    escaping (one named in CJK), lagging for a while, and a group whose partition's offsets are never known."""
    import dataclasses

    pipeline = Pipeline(rules=RULES, max_gap_s=3 * POLL_S)
    writer = LakeWriter(LakeConfig(enabled=True, path=str(root), retention_days=0))
    writer.record_config(cluster, RULES, {"group_wait_s": 0}, 3 * POLL_S, False, POLL_S, pipeline.book)
    tp, unknown = TopicPartition("orders", 0), TopicPartition("gone", 0)
    for i in range(20):
        produced = 1000 * (i + 1)
        groups = [group(g, {tp: produced - (1500 * k if 5 <= i < 12 else 0)}) for k, g in enumerate(ODD_NAMES, 1)]
        groups.append(group("offsets-unknown", {unknown: 5}, subscribed=("gone",)))  # no offsets for `gone`: null lag
        snap = dataclasses.replace(snapshot(T0 + i * POLL_S, groups, {tp: produced}), cluster=cluster)
        writer.record(snap, pipeline.step(snap), pipeline.book)
    writer.flush()


@pytest.mark.spark
def test_report_of_cluster_123_with_odd_names_and_unknown_lag(
    tmp_path: Path, spark: Any, recwarn: pytest.WarningsRecorder
) -> None:
    """`cluster=123` is a name: the recorded configuration is found whatever the session infers (the backtest turns
    inference off for the whole session; Spark's default is on). Names are escaped; a group whose lag is never known
    gets a plot on its own time axis; a font without CJK glyphs warns nothing."""
    from lagwatch.pipeline.report import run_report

    write_small_lake(tmp_path / "lake", "123")
    key = "spark.sql.sources.partitionColumnTypeInference.enabled"
    before = spark.conf.get(key)
    spark.conf.set(key, "true")
    try:
        report = run_report(str(tmp_path / "lake"), str(tmp_path / "out"), spark=spark)
    finally:
        spark.conf.set(key, before)
    assert set(report.group_daily.cluster) == {"123"}
    assert set(report.group_daily.group) == {*ODD_NAMES, "offsets-unknown"}
    assert pd.isna(report.group_daily.set_index("group").loc["offsets-unknown", "lag_max"])
    page = Path(report.html_path).read_text()
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "q&quot;uo&#x27;te &amp; &lt;b&gt;" in page and "ünïcødé-日本語" in page
    noisiest = page[page.index('id="noisiest-groups"') : page.index('id="time-firing"')]  # the alerting sections too
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in noisiest and "q&quot;uo&#x27;te &amp; &lt;b&gt;" in noisiest
    assert "lag unknown at every poll" in page and "1970" not in page
    assert not [w for w in recwarn.list if "Glyph" in str(w.message)]
    assert [p.name for p in (tmp_path / "out").iterdir() if p.name.startswith(".")] == []  # no staging left


@pytest.mark.spark
def test_a_failed_report_leaves_the_previous_one_and_creates_nothing(tmp_path: Path, spark: Any) -> None:
    from lagwatch.errors import LagwatchError
    from lagwatch.pipeline.report import run_report

    lake, out = tmp_path / "lake", tmp_path / "out"
    write_small_lake(lake, "c")
    run_report(str(lake), str(out), spark=spark, plotted_groups=0)
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    # A file of the (Delta) table damaged: a file beside the table, in no commit, is rightly not read at all.
    victim = next((lake / "snapshots").rglob("part-*.parquet"))
    victim.write_bytes(b"PAR1xx")
    for target in (out, tmp_path / "new" / "deeper"):
        with pytest.raises(LagwatchError, match=r"^the Spark job failed: ") as e:
            run_report(str(lake), str(target), spark=spark, plotted_groups=0)
        assert "\n" not in str(e.value)
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before  # the previous report, untouched
    assert not (tmp_path / "new").exists()  # nor a directory of the failed run


def test_report_arguments_are_checked_before_spark_or_any_directory(tmp_path: Path) -> None:
    import argparse

    from lagwatch.errors import LagwatchError
    from lagwatch.pipeline.report import _window, run_report
    from lagwatch.pipeline.times import time_arg

    (tmp_path / "lake" / "snapshots").mkdir(parents=True)
    out = tmp_path / "o" / "r"
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules: [\n  nope")
    for kwargs in ({"config": str(bad)}, {"expiry_margin_s": math.inf}, {"expiry_margin_s": math.nan}):
        with pytest.raises(LagwatchError):  # no Spark session: these fail before one would start
            run_report(str(tmp_path / "lake"), str(out), **kwargs)
    with pytest.raises(LagwatchError, match=r"^--backtest .*: not a backtest's output \(no _comparison/ in it\)$"):
        run_report(str(tmp_path / "lake"), str(out), backtest=str(tmp_path))
    with pytest.raises(LagwatchError, match=r"^--team-label: give a label name"):
        run_report(str(tmp_path / "lake"), str(out), team_label=" ")
    assert not (tmp_path / "o").exists()
    with pytest.raises(LagwatchError, match="--last-days must be between 1 and"):
        _window(argparse.Namespace(last_days=10**8, since=None, until=None), 1.8e9)
    with pytest.raises(argparse.ArgumentTypeError, match="out of range"):
        time_arg("0001-01-01T00:00:00+14:00")
    (tmp_path / "file").write_text("")
    with pytest.raises(LagwatchError, match=r"--out .*file: not a directory"):
        run_report(str(tmp_path / "lake"), str(tmp_path / "file"))


@pytest.mark.spark
def test_the_report_judges_each_poll_by_the_thresholds_then_in_force(tmp_path: Path, spark: Any) -> None:
    """The daemon ran with a warning at 50 records, then was restarted with 5,000. The report took the last
    configuration recorded for the whole range: the first half's time over warning (and its incident) vanished.
    The backtest's `recorded` takes them in their time as well (both read the same timeline)."""
    from lagwatch.pipeline.lake_read import recorded_params
    from lagwatch.pipeline.report import run_report

    low = {"lag": {"warning": {"offsets": 50}, "critical": {"offsets": 10**8}}}
    high = {"lag": {"warning": {"offsets": 5000}, "critical": {"offsets": 10**8}}}
    now = [T0 - 1]
    pipeline = Pipeline(rules=low, max_gap_s=3 * POLL_S)
    writer = LakeWriter(LakeConfig(enabled=True, path=str(tmp_path / "lake"), retention_days=0), clock=lambda: now[0])
    writer.record_config("c", low, {"group_wait_s": 0}, 3 * POLL_S, False, POLL_S, pipeline.book)
    tp = TopicPartition("orders", 0)
    for i in range(20):
        now[0] = T0 + i * POLL_S
        if i == 10:  # restarted with the higher threshold
            writer.record_config("c", high, {"group_wait_s": 0}, 3 * POLL_S, False, POLL_S, pipeline.book)
            now[0] += 1  # its first poll a second after
        snap = snapshot(now[0], [group("g", {tp: 0})], {tp: 1000})  # 1,000 behind throughout
        writer.record(snap, pipeline.step(snap), pipeline.book)
    writer.flush()
    timeline = recorded_params(spark, str(tmp_path / "lake"), None)["c"]
    assert [p.rules for p in timeline] == [low, high]
    report = run_report(str(tmp_path / "lake"), str(tmp_path / "out"), spark=spark)
    (row,) = report.group_daily.itertuples()
    assert row.polls == 20 and row.share_over_warning == 0.5
    (incident,) = report.incidents.itertuples()
    assert incident.started_at == T0 and incident.ended_at == T0 + 10 * POLL_S + 1


@pytest.mark.spark
def test_a_backtest_comparison_of_a_newer_schema_is_one_line(backtest_out: Path, tmp_path: Path, spark: Any) -> None:
    """The report reads a backtest's `_comparison/` by its declared schema: version 1 (no merged or split) reads as
    0 of each; a version newer than this lagwatch knows is refused in one line, not misread."""
    import pyarrow.parquet as pq

    from lagwatch.pipeline.report import ReportError, _backtest_view

    copy = tmp_path / "bt"
    shutil.copytree(backtest_out, copy)
    view, _ = _backtest_view(spark, str(copy))
    assert {t.config for t in view.totals} == {"recorded", "lag5k"}
    for crc in (copy / "_comparison").glob(".*.crc"):  # Spark's checksums of the files rewritten below
        crc.unlink()
    (part,) = (copy / "_comparison").glob("*.parquet")
    table = pq.read_table(part)
    old = table.drop_columns(["schema_version", "merged", "split"])
    pq.write_table(old, part)
    view, _ = _backtest_view(spark, str(copy))
    assert all(r.merged == 0 and r.split == 0 for rows in view.rules.values() for r in rows)
    newer = table.set_column(0, "schema_version", pa.array([3] * table.num_rows, pa.int16()))
    pq.write_table(newer, part)
    with pytest.raises(ReportError, match=r"^--backtest .*: its comparison is schema version 3, newer than"):
        _backtest_view(spark, str(copy))


def test_the_daemons_file_without_rules_reports_by_the_recorded_configuration(
    lake: Path, tmp_path: Path, spark: Any, report: Any
) -> None:
    """The chart's report CronJob gives `--config` the daemon's own file; with the README's minimal values it has
    clusters and notifiers, no rules: (it exited 2, "needs a rules: or alerts: section", on every plain install).
    Such a file leaves the thresholds to what the daemon recorded: the same report as without --config."""
    from lagwatch.pipeline.report import run_report

    config = tmp_path / "lagwatch.yaml"
    values = yaml.safe_load((ROOT / "deploy/helm/lagwatch/ci/minimal-values.yaml").read_text())["config"]
    config.write_text(yaml.safe_dump({**values, "lake": {"enabled": True, "path": str(lake)}}))
    again = run_report(str(lake), str(tmp_path / "out"), config=str(config), spark=spark, plotted_groups=3)
    pd.testing.assert_frame_equal(again.group_daily, report.group_daily)
    pd.testing.assert_frame_equal(again.incidents, report.incidents)
