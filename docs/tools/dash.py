"""Draws panels of lagwatch's overview dashboard (grafana/dashboards.py) from a real Prometheus's answers to the
dashboard's own queries (variables set to .*). Output: an HTML page with inline SVG, dark like Grafana."""
import json, sys, time, urllib.parse, urllib.request, html

PROM = "http://127.0.0.1:9390"
SEL = 'cluster=~".*", group=~".*"'
SEL_TOPIC = 'cluster=~".*", group=~".*", topic=~".*"'
CL = 'cluster=~".*"'

def q(expr, **kw):
    url = PROM + "/api/v1/" + ("query_range" if "start" in kw else "query") + "?" + urllib.parse.urlencode({"query": expr, **kw})
    return json.load(urllib.request.urlopen(url))["data"]["result"]

end = float(sys.argv[1]) if len(sys.argv) > 1 else time.time()
start = end - float(sys.argv[2]) if len(sys.argv) > 2 else end - 300
COLORS = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9"]

def series_svg(title, expr, legend, unit="", w=1160, h=250):
    res = q(expr, start=start, end=end, step=5)
    pad_l, pad_r, pad_t, pad_b = 60, 190, 34, 28
    pw, ph = w - pad_l - pad_r, h - pad_t - pad_b
    ymax = max([float(v) for r in res for _, v in r["values"]] + [1.0]) * 1.1
    def x(t): return pad_l + (t - start) / (end - start) * pw
    def y(v): return pad_t + ph - v / ymax * ph
    out = [f'<svg width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg"><rect width="{w}" height="{h}" rx="3" fill="#181b1f" stroke="#2c3235"/>',
           f'<text x="12" y="22" fill="#ccccdc" font-size="14" font-weight="600">{html.escape(title)}</text>']
    for i in range(5):
        v = ymax * i / 4
        out.append(f'<line x1="{pad_l}" x2="{pad_l+pw}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#2c3235"/>')
        out.append(f'<text x="{pad_l-6}" y="{y(v)+4:.1f}" fill="#8e8e9e" font-size="11" text-anchor="end">{v:.0f}{unit}</text>')
    for i in range(6):
        t = start + (end - start) * i / 5
        out.append(f'<text x="{x(t):.1f}" y="{h-8}" fill="#8e8e9e" font-size="11" text-anchor="middle">{time.strftime("%H:%M:%S", time.gmtime(t))}</text>')
    for n, r in enumerate(sorted(res, key=lambda r: legend(r["metric"]))):
        c = COLORS[n % len(COLORS)]
        pts = " ".join(f"{x(float(t)):.1f},{y(float(v)):.1f}" for t, v in r["values"])
        out.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="2"/>')
        out.append(f'<rect x="{pad_l+pw+16}" y="{pad_t+n*20}" width="12" height="3" fill="{c}"/>')
        out.append(f'<text x="{pad_l+pw+34}" y="{pad_t+n*20+5}" fill="#ccccdc" font-size="12">{html.escape(legend(r["metric"]))}</text>')
    out.append("</svg>")
    return "".join(out)

def table(title, expr, cols, fmt, w=560):
    res = q(expr, time=end)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(r['metric'].get(c, '')))}</td>" for c in cols)
                   + f"<td class=num>{fmt(float(r['value'][1]))}</td></tr>" for r in res)
    head = "".join(f"<th>{c}</th>" for c in cols) + "<th class=num>value</th>"
    return f'<div class="panel" style="width:{w}px"><div class="t">{html.escape(title)}</div><table><tr>{head}</tr>{rows}</table></div>'

def dur(s):
    return f"{s/60:.1f} min" if s >= 60 else f"{s:.0f} s"

panels = [
    series_svg("Max lag (seconds)", f"max by (cluster, group) (lagwatch_group_lag_seconds_max{{{SEL}}})",
               lambda m: f"{m.get('cluster')} / {m.get('group')}", "s"),
    '<div class="row">'
    + table("Groups ranked by lag (records)", f"topk(20, sum by (cluster, group) (lagwatch_group_topic_lag{{{SEL_TOPIC}}}))",
            ["cluster", "group"], lambda v: f"{v:,.0f}")
    + table("Nearest offset expiry", f"bottomk(20, lagwatch_group_offset_expiry_seconds{{{SEL}}})",
            ["cluster", "group"], dur)
    + "</div>",
    '<div class="row">'
    + table("Firing alerts by rule", f"sum by (cluster, rule, severity) (lagwatch_alerts_firing{{{CL}}})",
            ["cluster", "rule", "severity"], lambda v: f"{v:.0f}")
    + table("Kafka requests per poll", f"sum by (cluster, api) (lagwatch_cluster_poll_requests{{{CL}}})",
            ["cluster", "api"], lambda v: f"{v:.0f}")
    + "</div>",
]
stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(end))
print(f'''<!doctype html><html><head><meta charset="utf-8"><style>
body{{margin:0;padding:14px;background:#111217;font-family:Inter,Helvetica,Arial,sans-serif;color:#ccccdc;width:1160px}}
h1{{font-size:17px;font-weight:500;margin:0 0 10px}} h1 small{{color:#8e8e9e;font-size:12px;margin-left:10px}}
.row{{display:flex;gap:14px;margin-top:12px}} svg{{display:block}}
.panel{{background:#181b1f;border:1px solid #2c3235;border-radius:3px;padding:8px 12px;box-sizing:border-box;flex:1}}
.t{{font-size:14px;font-weight:600;margin-bottom:6px}}
table{{border-collapse:collapse;width:100%;font-size:12.5px}} th{{text-align:left;color:#6e9fff;font-weight:500;border-bottom:1px solid #2c3235;padding:3px 6px}}
td{{padding:3px 6px;border-bottom:1px solid #202226}} .num{{text-align:right}}
</style></head><body><h1>lagwatch: overview <small>panels drawn from Prometheus query results, {stamp}; not a Grafana screenshot</small></h1>
{"".join(panels)}</body></html>''')
