"""Served CPU a request for one path under wrk, uWSGI and nginx apart (a measurement of NOTE.md, not a tool).

    .venv/bin/python results/2026-11-25-stage6-cpu-by-type/wrk_kept_read.py full SECS=20
    .venv/bin/python results/2026-11-25-stage6-cpu-by-type/wrk_kept_read.py paced DELAY=170 SECS=20

Other arguments: TWEEPY_* settings of stage 6 to change, PATH=, USERS= (sessions to rotate), DB=, SEED=, SPY=1.
Needs wrk (apt-get install wrk); works in /tmp/mb.
"""
import re, subprocess, sys, time
from pathlib import Path
import requests
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools import stages
from tools.bench import procfs

def split(pids):
    u = st = 0
    for p in pids:
        f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
        u += int(f[11]); st += int(f[12])
    return u/100, st/100
label, sets = sys.argv[1], dict(a.split("=", 1) for a in sys.argv[2:])
path = sets.pop("PATH", "/tweets/")
secs = int(sets.pop("SECS", "15"))
sets_spy = sets.pop("SPY", "")
logins_per_s = float(sets.pop("LOGINS", "0"))
import threading
stop = threading.Event(); done = [0]
def login_loop(url, k):
    n = k
    while not stop.is_set():
        t = time.time()
        s2 = requests.Session(); s2.headers["User-Agent"] = UA
        p = s2.get(url).text
        tok = re.search(r'name="csrf_token" type="hidden" value="([^"]+)"', p).group(1)
        r2 = s2.post(url, data={"csrf_token": tok, "name": f"user{n}", "password": "tweepy123"}, allow_redirects=False)
        if r2.status_code == 303: done[0] += 1
        n += 4
        if n > 1000: n = k
        stop.wait(max(0, 4 / logins_per_s - (time.time() - t)))
stage = stages.get_stage(6)
stage.settings = {**stage.settings, **sets}
Path("/tmp/mb").mkdir(exist_ok=True)
var = Path("/tmp/mb/var-" + label)
db = Path(sets.pop("DB", "/tmp/mb/wrk.sqlite3"))
seed = sets.pop("SEED", stages.SEED).split()
nusers = int(sets.pop("USERS", "1"))
delay_ms = sets.pop("DELAY", "")
env = {"TWEEPY_DATABASE_URL": f"sqlite:///{db}", "TWEEPY_INSTANCE_PATH": "/tmp/mb/instance"}
port = stages.free_port()
UA = "Mozilla/5.0 (X11; Linux x86_64) wrkexp"
with stages.start(stage, port=port, var=var, env=env, seed=seed) as run:
    s = requests.Session(); s.headers["User-Agent"] = UA
    page = s.get(run.url).text
    token = re.search(r'name="csrf_token" type="hidden" value="([^"]+)"', page).group(1)
    r = s.post(run.url, data={"csrf_token": token, "name": "user1", "password": "tweepy123"}, allow_redirects=False)
    assert r.status_code == 303, r.status_code
    for _ in range(50): assert s.get(run.url.rstrip("/") + path).status_code == 200
    cookie = "; ".join(f"{k}={v}" for k, v in s.cookies.items())
    cookies = [cookie]
    def one(k):
        s3 = requests.Session(); s3.headers["User-Agent"] = UA
        p = s3.get(run.url).text
        tok = re.search(r'name="csrf_token" type="hidden" value="([^"]+)"', p).group(1)
        assert s3.post(run.url, data={"csrf_token": tok, "name": f"user{k}", "password": "tweepy123"}, allow_redirects=False).status_code == 303
        for _ in range(3): assert s3.get(run.url.rstrip("/") + path).status_code == 200
        return "; ".join(f"{a}={b}" for a, b in s3.cookies.items())
    if nusers > 1:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(8) as ex: cookies = list(ex.map(one, range(2, nusers + 2)))
    Path("/tmp/mb/cookies.lua").write_text("cookies = {" + ",".join('"' + c + '"' for c in cookies) + "}\n" + """
counter = 0
request = function()
  counter = counter + 1
  return wrk.format("GET", nil, {["Cookie"] = cookies[(counter % #cookies) + 1], ["User-Agent"] = "Mozilla/5.0 (X11; Linux x86_64) wrkexp"})
end
""" + (f"function delay() return {delay_ms} end\n" if delay_ms else ""))
    app = procfs.process_tree([run.process("uwsgi").pid]); front = procfs.process_tree([run.process("nginx").pid])
    if logins_per_s:
        ths = [threading.Thread(target=login_loop, args=(run.url, 2 + k), daemon=True) for k in range(4)]
        for th in ths: th.start()
        time.sleep(2)
    h0 = procfs.thread_cpu_seconds(app, "tweepy-hash")
    a0, f0 = procfs.cpu_seconds(app), procfs.cpu_seconds(front)
    u0 = split(app)
    spy = None
    if sets_spy:
        wpid = procfs.children_of(run.process("uwsgi").pid)[0]
        spy = subprocess.Popen([str(stages.BIN / "py-spy"), "record", "-d", str(secs - 3), "-r", "250", "-f", "raw", "-o", f"/tmp/mb/{label}.txt", "-p", str(wpid)], stdout=open("/tmp/mb/spy.log","w"), stderr=subprocess.STDOUT)
    out = subprocess.run(["wrk", "-t1", "-c50", f"-d{secs}s", "-s", "/tmp/mb/cookies.lua", "-H", f"User-Agent: {UA}",
                          run.url.rstrip("/") + path], capture_output=True, text=True).stdout
    if spy: spy.wait()
    a1, f1 = procfs.cpu_seconds(app), procfs.cpu_seconds(front)
    h1 = procfs.thread_cpu_seconds(app, "tweepy-hash")
    stop.set()
    u1 = split(app)
    print("uwsgi user/sys ms/req:", [round(1000*(b-a)/int(re.search(r"(\d+) requests in", out).group(1)),3) for a,b in zip(u0,u1)])
    n = int(re.search(r"(\d+) requests in", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    print(f"{label}: {n} requests, {n/secs:.0f}/s, uwsgi {1000*(a1-a0)/n:.3f} ms/req, nginx {1000*(f1-f0)/n:.3f} ms/req"
          + f", hashing {h1-h0:.2f} s, rest {1000*(a1-a0-(h1-h0))/n:.3f} ms/req, logins {done[0]}" + (f", NON-2xx {non2xx.group(1)}" if non2xx else ""))
