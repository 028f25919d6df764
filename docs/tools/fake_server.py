import json, sys, time, dataclasses
sys.path.insert(0, "/work/main")
from tests.fake_slack import FakeSlack
fake = FakeSlack(port=9399).start()
print("fake slack at", fake.base_url, flush=True)
while True:
    time.sleep(2)
    with fake._lock:
        calls = [dataclasses.asdict(c) for c in fake.calls]
    with open("calls.json.tmp", "w") as f:
        json.dump(calls, f, indent=1, default=str)
    import os; os.replace("calls.json.tmp", "calls.json")
