"""Renders a Slack chat.postMessage / chat.update payload (Block Kit), as lagwatch sent it, into an HTML page that
imitates Slack's message view. Input: calls.json written by the capture server; picks one call by index."""
import html, json, re, sys
from datetime import datetime, timezone

def _dot(c): return f'<span style="display:inline-block;width:13px;height:13px;border-radius:50%;background:{c};vertical-align:-1px"></span>'
EMOJI = {":red_circle:": _dot("#dd2e44"), ":large_orange_circle:": _dot("#f4900c"), ":large_blue_circle:": _dot("#55acee"),
         ":white_check_mark:": '<span style="display:inline-block;width:14px;height:14px;border-radius:3px;background:#77b255;color:#fff;font-size:11px;text-align:center;line-height:14px">&#10003;</span>', ":zzz:": "zzz"}

def mrkdwn(text: str) -> str:
    # Slack escapes: &amp; &lt; &gt; arrive escaped already; keep them as entities.
    out, i = [], 0
    # split out code spans first
    parts = re.split(r"(`[^`]*`)", text)
    for p in parts:
        if p.startswith("`") and p.endswith("`") and len(p) >= 2:
            out.append(f"<code>{p[1:-1]}</code>")
            continue
        s = p
        s = re.sub(r"<!date\^\d+\^[^|>]*\|([^>]*)>", lambda m: f'<span class="date">{m.group(1)}</span>', s)
        s = re.sub(r"<(https?://[^|>]+)\|([^>]+)>", lambda m: f'<a href="#">{m.group(2)}</a>', s)
        s = re.sub(r"\*([^*\n]+)\*", r"<b>\1</b>", s)
        s = re.sub(r"(?<![\w])_([^_\n]+)_(?![\w])", r"<i>\1</i>", s)
        for k, v in EMOJI.items():
            s = s.replace(k, v)
        out.append(s)
    return "".join(out).replace("\n", "<br>")

def text_obj(t):
    if t["type"] == "plain_text":
        s = html.escape(t["text"])
        for k, v in EMOJI.items():
            s = s.replace(k, v)
        return s
    return mrkdwn(t["text"])

def block(b):
    k = b["type"]
    if k == "header":
        return f'<div class="header">{text_obj(b["text"])}</div>'
    if k == "section":
        h = ""
        if "text" in b:
            h += f'<div class="sec">{text_obj(b["text"])}</div>'
        if "fields" in b:
            h += '<div class="fields">' + "".join(f'<div class="field">{text_obj(f)}</div>' for f in b["fields"]) + "</div>"
        return h
    if k == "actions":
        return '<div class="actions">' + "".join(
            f'<span class="button">{text_obj(e["text"])}</span>' for e in b["elements"]) + "</div>"
    if k == "context":
        return '<div class="context">' + " ".join(text_obj(e) for e in b["elements"]) + "</div>"
    if k == "divider":
        return "<hr>"
    return ""

def page(messages, channel):
    body = []
    for m in messages:
        ctx = [b for b in m["args"].get("blocks", []) if b["type"] == "context"]
        found = re.search(r"(\d\d:\d\d) UTC", ctx[-1]["elements"][0]["text"]) if ctx else None
        t = found.group(1) if found else ""
        blocks = "".join(block(b) for b in m["args"].get("blocks", []))
        body.append(f'''<div class="msg"><div class="avatar">lw</div><div class="content">
<div class="who"><span class="name">lagwatch</span><span class="app">APP</span><span class="time">{t}</span>
{'<span class="edited">(edited)</span>' if m.get("edited") else ''}</div>{blocks}</div></div>''')
    return f'''<!doctype html><html><head><meta charset="utf-8"><style>
body{{margin:0;font-family:"Lato","Helvetica Neue",Helvetica,Arial,sans-serif;font-size:15px;color:#1d1c1d;background:#fff}}
.chan{{border-bottom:1px solid #ddd;padding:10px 20px;font-weight:900;font-size:18px}}
.chan small{{font-weight:400;color:#616061;font-size:13px;margin-left:8px}}
.msg{{display:flex;padding:12px 20px 8px 20px}}
.avatar{{width:36px;height:36px;border-radius:6px;background:#3b4cca;color:#fff;font-weight:900;display:flex;align-items:center;justify-content:center;margin-right:10px;flex:none}}
.content{{flex:1;max-width:640px}}
.name{{font-weight:900}} .app{{background:#e8e8e8;color:#616061;font-size:10px;font-weight:700;padding:1px 3px;border-radius:2px;margin:0 6px}}
.time,.edited{{color:#616061;font-size:12px}} .edited{{margin-left:4px}}
.header{{font-size:18px;font-weight:900;margin:6px 0 4px}}
.sec{{margin:6px 0;line-height:1.46}}
.fields{{display:grid;grid-template-columns:1fr 1fr;gap:8px 16px;margin:8px 0}}
.field{{line-height:1.46}}
code{{font-family:Monaco,Menlo,Consolas,monospace;font-size:12px;color:#e01e5a;background:#f6f6f6;border:1px solid #e1e1e1;border-radius:3px;padding:1px 3px}}
a{{color:#1264a3;text-decoration:none}} .date{{color:#1d1c1d}}
.actions{{margin:10px 0}} .button{{display:inline-block;border:1px solid #bbb;border-radius:4px;padding:4px 12px;font-weight:700;font-size:14px}}
.context{{color:#616061;font-size:12px;margin:6px 0}}
</style></head><body><div class="chan"># {html.escape(channel.lstrip("#"))}<small>lagwatch alerts</small></div>{"".join(body)}</body></html>'''

if __name__ == "__main__":
    calls = json.load(open(sys.argv[1]))
    idx = [int(x) for x in sys.argv[2].split(",")]
    msgs = []
    for i in idx:
        c = calls[i]
        c["edited"] = c["method"] == "chat.update"
        msgs.append(c)
    open(sys.argv[3], "w").write(page(msgs, msgs[0]["args"].get("channel") or "#kafka-alerts"))
