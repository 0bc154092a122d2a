#!/usr/bin/env python3
"""Load test of the proxy: concurrent sessions through two replicas sharing one Redis, against the
scripted upstream, on loopback only. Standard library only.

Usage: scripts/load-test.py [--sessions 64] [--seconds 600] [--tools 50] [--turns 10]
                            [--binary target/release/toolshelf]

Starts a redis-server, the scripted upstream (tests/fixtures/scripted_upstream.py) and two
`toolshelf proxy` replicas with `[store] url` pointing at that Redis and a short session TTL, so
sessions expire during the run. Each of --sessions threads runs conversations of --turns requests
(a new session after that), sending each request to the replica other than the last one's.
A sample of the same requests goes straight to the upstream, for the added latency. Every
10 s the replicas' resident memory is read. Bounded by --seconds; prints one JSON report.
"""
import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def post(url, body, session=None):
    headers = {"content-type": "application/json", "x-api-key": "load", "anthropic-version": "2023-06-01"}
    if session:
        headers["x-toolshelf-session"] = session
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as r:
        r.read()
        status = r.status
    return status, time.perf_counter() - t


def pct(v, p):
    v = sorted(v)
    return v[round((len(v) - 1) * p)] if v else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--tools", type=int, default=50)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--ttl", type=int, default=30)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/toolshelf"))
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="toolshelf-load-")
    procs = []
    try:
        rport = free_port()
        procs.append(subprocess.Popen(["redis-server", "--port", str(rport), "--bind", "127.0.0.1",
                                       "--save", "", "--appendonly", "no", "--dir", tmp],
                                      stdout=subprocess.DEVNULL))
        script = os.path.join(tmp, "script.json")
        with open(script, "w") as f:
            json.dump({"steps": []}, f)
        up = subprocess.Popen([sys.executable, os.path.join(ROOT, "crates/toolshelf/tests/fixtures/scripted_upstream.py"),
                               script, os.path.join(tmp, "upstream.jsonl")], stdout=subprocess.PIPE)
        procs.append(up)
        upstream = f"http://127.0.0.1:{up.stdout.readline().decode().strip()}"
        config = os.path.join(tmp, "proxy.toml")
        with open(config, "w") as f:
            f.write(f'[store]\nurl = "redis://127.0.0.1:{rport}"\n[proxy]\nsession_ttl_secs = {a.ttl}\n')
        replicas = []
        for i in range(2):
            err = open(os.path.join(tmp, f"proxy{i}.err"), "w")
            p = subprocess.Popen([a.binary, "proxy", "--listen", "127.0.0.1:0", "--config", config,
                                  "--anthropic-upstream", upstream], stderr=err, stdout=subprocess.DEVNULL,
                                 env=dict(os.environ, TOOLSHELF_LOG="warn"))
            procs.append(p)
            for _ in range(300):
                text = open(err.name).read()
                if "listening on http://" in text:
                    replicas.append((p, text.split("listening on ")[1].split()[0]))
                    break
                time.sleep(0.05)
            else:
                raise SystemExit(f"replica {i} did not start: {open(err.name).read()}")
        tools = [{"name": f"mcp__s{i % 8}__tool_{i:03d}", "description": f"Does task {i} on service {i % 8}.",
                  "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}
                 for i in range(a.tools)]
        lat, direct, errors = [], [], []
        lock = threading.Lock()
        stop = time.time() + a.seconds
        memory = []

        def sampler():
            while time.time() < stop:
                memory.append({"t": round(a.seconds - (stop - time.time())),
                               "rss_kib": [rss_kib(p.pid) for p, _ in replicas]})
                time.sleep(10)

        def worker(n):
            gen = 0
            r = random.Random(n)
            while time.time() < stop:
                session = f"load-{n}-{gen}"
                gen += 1
                msgs = []
                for turn in range(a.turns):
                    if time.time() >= stop:
                        return
                    msgs.append({"role": "user", "content": f"request {turn} of {session}"})
                    body = {"model": "m", "max_tokens": 64, "system": "load test", "tools": tools, "messages": msgs}
                    base = replicas[(n + turn) % 2][1]
                    try:
                        status, dt = post(base + "/v1/messages", body, session)
                        with lock:
                            lat.append(dt)
                            if status != 200:
                                errors.append(status)
                        if r.random() < 0.1:
                            _, d = post(upstream + "/v1/messages", body)
                            with lock:
                                direct.append(d)
                    except Exception as e:  # an error is a finding, not a crash
                        with lock:
                            errors.append(repr(e)[:200])
                    msgs.append({"role": "assistant", "content": [{"type": "text", "text": "(script exhausted)"}]})

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(a.sessions)]
        threading.Thread(target=sampler, daemon=True).start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        memory.append({"t": round(a.seconds), "rss_kib": [rss_kib(p.pid) for p, _ in replicas]})
        status = json.load(urllib.request.urlopen(replicas[0][1] + "/toolshelf/status"))
        ms = lambda x: None if x is None else round(x * 1000, 2)
        report = {
            "sessions": a.sessions, "seconds": a.seconds, "tools": a.tools, "turns": a.turns,
            "requests": len(lat), "errors": len(errors), "error_samples": errors[:5],
            "proxy_ms": {"p50": ms(pct(lat, 0.5)), "p99": ms(pct(lat, 0.99))},
            "direct_ms": {"p50": ms(pct(direct, 0.5)), "p99": ms(pct(direct, 0.99)), "samples": len(direct)},
            "added_ms": {"p50": ms(pct(lat, 0.5) - pct(direct, 0.5)) if direct else None,
                         "p99": ms(pct(lat, 0.99) - pct(direct, 0.99)) if direct else None},
            "memory": memory,
            "replica0_totals": status.get("totals"),
        }
        print(json.dumps(report, indent=1))
    finally:
        for p in procs:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
