"""DMS ingress under load with real workers: signed events in, one worker SIGKILLed mid-run.

Starts, on this machine only: the ingress (uvicorn on 127.0.0.1), Celery beat and
workers on the local Redis (one index writer on ki.index/ki.access/ki.maintenance,
since the embedded index has one writer, and ingest workers on ki.ingest), against a fresh PostgreSQL database that is dropped
afterwards. Sends RATE signed events per second for DURATION seconds (a bounded
open loop: every event has a fixed send time), 80 % `document.upserted` with
inline German text and 20 % `acl.changed` on documents sent before; SIGKILLs
one worker (--kill) at KILL_AT of the run and starts it again RESTART_DELAY s later.
Then waits (at most DRAIN_TIMEOUT) until every event is finished and prints:

  accepted events/s, ingress latency p50/p95/max, HTTP statuses,
  event-to-searchable p50/p95/max (upsert sent -> its version indexed),
  ACL event sent -> in force in SQL p50/p95, events not completed (must be 0),
  versions per upserted object (must be 1: nothing duplicated).

    .venv/bin/python bench/ingress.py [--rate 50] [--duration 60] [--ingest-workers 1]
        [--ingest-pool threads] [--ingest-concurrency 4] [--kill ingest0|writer] [--kill-at 0.5]
        [--embedder hashing|use-multilingual|e5-small]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import redis
from sqlalchemy import create_engine, text

from backends import terminate_like_ctrl_c
from ki_workers.sources.dms_events import sign
from ki_workers.telemetry import task_latencies

# A line of progress this often while sending and draining, so a long run is never silent.
PROGRESS_SECONDS = 5.0
PG_SERVER = os.environ.get("KI_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("KI_BENCH_REDIS", "redis://127.0.0.1:6379/13")
SOURCE, SECRET = "bench", "bench-secret"
QUEUES = "ki.ingest,ki.index,ki.access,ki.maintenance"
WORDS = (
    "Mieterin Vermieter Kündigung Frist Minderung Heizung Nebenkosten Staffelmiete Kaution Schriftform "
    "Gewerberaum Übergabe Instandhaltung Schönheitsreparaturen Betriebskosten Vertragsstrafe Gerichtsstand "
    "Vollmacht Abmahnung Räumung Zahlungsverzug Mängelanzeige Verjährung Sicherheitsleistung Untermiete"
).split()
PRINCIPALS = ["alice", "bob", "carol", "dave", "group:immobilien", "group:prozess"]


@dataclass
class Sent:
    kind: str
    object_id: str
    event_id: str
    sent_at: float
    status: int = 0
    latency: float = 0.0


@dataclass
class Run:
    sent: list[Sent] = field(default_factory=list)
    searchable_at: dict[str, float] = field(default_factory=dict)
    send_seconds: float = 0.0
    kills: int = 0
    # 1-minute load average when sending began: the machine is shared
    load_at_start: float = 0.0
    ingress_cpu_seconds: float = 0.0


# ------------------------------------------------------------------ events


def document_text(rng: random.Random, n: int) -> str:
    sentences = []
    for _ in range(rng.randint(8, 20)):
        words = rng.sample(WORDS, 6)
        sentences.append(f"Die {words[0]} betreffend {words[1]} und {words[2]} nach § {rng.randint(500, 580)} BGB "
                         f"wird mit {words[3]}, {words[4]} sowie {words[5]} in Höhe von {rng.randint(100, 9999)} Euro geregelt.")
    return f"Schreiben Nr. {n} in der Mietsache Az. {rng.randint(1, 99)} O {rng.randint(100, 999)}/26.\n\n" + " ".join(sentences)


def make_event(rng: random.Random, n: int, upserted: list[str]) -> tuple[str, str, dict]:
    occurred = datetime.now(UTC).isoformat()
    if upserted and rng.random() < 0.2:
        object_id = rng.choice(upserted)
        acl = [{"principal": p} for p in rng.sample(PRINCIPALS, rng.randint(1, 3))]
        return "acl", object_id, {"schema_version": 1, "event_id": f"acl-{n}", "type": "acl.changed",
                                  "occurred_at": occurred, "object_id": object_id, "acl": acl}
    object_id = f"DMS-{n:06d}"
    data = document_text(rng, n).encode()
    return "upsert", object_id, {
        "schema_version": 1, "event_id": f"up-{n}", "type": "document.upserted", "occurred_at": occurred,
        "object_id": object_id, "project": f"mandant-{n % 20:02d}", "title": f"Schreiben {n}", "filename": f"{object_id}.txt",
        "status": "final", "content": {"base64": base64.b64encode(data).decode(), "sha256": hashlib.sha256(data).hexdigest()},
        "acl": [{"principal": p} for p in rng.sample(PRINCIPALS, 2)],
    }


# --------------------------------------------------------------- processes


def start(cmd: list[str], env: dict, workdir: Path, name: str) -> subprocess.Popen:
    log = open(workdir / f"{name}.log", "a")  # noqa: SIM115 - the child owns it
    process = subprocess.Popen(cmd, env=env, cwd=workdir, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return process


def worker_cmd(args, name: str) -> list[str]:
    """The index writer (one process: the embedded index has one writer) or an ingest worker."""
    if name == "writer":
        pool, concurrency, queues = "solo", 1, "ki.index,ki.access,ki.maintenance"
    else:
        pool, concurrency, queues = args.ingest_pool, args.ingest_concurrency, "ki.ingest"
    nice = ["nice", "-n", str(args.worker_nice)] if args.worker_nice else []
    return [*nice, sys.executable, "-m", "celery", "-A", "ki_workers.app", "worker", f"--pool={pool}",
            f"--concurrency={concurrency}", f"--queues={queues}", "--loglevel=WARNING", f"--hostname={name}@%h",
            "--without-gossip", "--without-mingle", "--without-heartbeat"]


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# ------------------------------------------------------------------- phases


async def send_all(args, base_url: str, run: Run) -> None:
    """Open loop: event i leaves at t0 + i/rate whatever the answers do; bounded in count and time."""
    rng = random.Random(7)
    total = int(args.rate * args.duration)
    upserted: list[str] = []
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=base_url, timeout=30, limits=limits) as client:
        t0 = time.monotonic()
        pending = []
        next_report = t0 + PROGRESS_SECONDS
        for n in range(total):
            if time.monotonic() >= next_report:
                done = [item for item in run.sent if item.status]
                print(f"  sending: {n}/{total} sent, {sum(1 for i in done if i.status in (200, 202))} accepted, "
                      f"{len(run.sent) - len(done)} waiting for an answer", flush=True)
                next_report += PROGRESS_SECONDS
            delay = t0 + n / args.rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if time.monotonic() - t0 > args.duration + 30:
                break
            kind, object_id, data = make_event(rng, n, upserted)
            if kind == "upsert":
                upserted.append(object_id)
            pending.append(asyncio.create_task(post_one(client, kind, object_id, data, run)))
        await asyncio.gather(*pending)
        run.send_seconds = time.monotonic() - t0


async def post_one(client: httpx.AsyncClient, kind: str, object_id: str, data: dict, run: Run) -> None:
    body = json.dumps(data).encode()
    item = Sent(kind, object_id, data["event_id"], time.time())
    run.sent.append(item)
    began = time.monotonic()
    try:
        response = await client.post(f"/webhooks/{SOURCE}", content=body,
                                     headers={"Content-Type": "application/json", **sign(SECRET, body)})
        item.status = response.status_code
    except httpx.HTTPError:
        item.status = -1
    item.latency = time.monotonic() - began


def poll_searchable(engine, run: Run) -> None:
    """Record when each upserted object's version first shows as indexed."""
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT o.external_id FROM source_objects o "
            "JOIN source_observations s ON s.source_object_id = o.id AND s.state = 'active' "
            "JOIN document_versions v ON v.id = s.version_id "
            "WHERE v.processing_state = 'indexed' AND v.indexed_access_version IS NOT NULL"
        ))
        now = time.time()
        for (object_id,) in rows:
            run.searchable_at.setdefault(object_id, now)


def open_events(engine) -> dict[str, int]:
    with engine.connect() as conn:
        return dict(conn.execute(text("SELECT status, count(*) FROM ingest_events GROUP BY status")).all())


# ------------------------------------------------------------------ report


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def report(args, run: Run, engine, drain_seconds: float) -> int:
    accepted = [s for s in run.sent if s.status in (200, 202)]
    statuses: dict[int, int] = {}
    for s in run.sent:
        statuses[s.status] = statuses.get(s.status, 0) + 1
    latencies = [s.latency * 1000 for s in run.sent if s.status > 0]
    upserts = [s for s in accepted if s.kind == "upsert"]
    to_search = [run.searchable_at[s.object_id] - s.sent_at for s in upserts if s.object_id in run.searchable_at]
    with engine.connect() as conn:
        acl_done = dict(conn.execute(text(
            "SELECT event_id, extract(epoch FROM finished_at) FROM ingest_events WHERE event_type = 'acl.changed' AND status = 'done'"
        )).all())
        versions = dict(conn.execute(text(
            "SELECT d.key, count(*) FROM document_versions v JOIN documents d ON d.id = v.document_id GROUP BY d.key"
        )).all())
        attempts = dict(conn.execute(text("SELECT attempts, count(*) FROM ingest_events GROUP BY attempts")).all())
    acl_lag = [float(acl_done[s.event_id]) - s.sent_at for s in accepted if s.kind == "acl" and s.event_id in acl_done]
    events = open_events(engine)
    not_completed = sum(c for status, c in events.items() if status != "done")
    duplicated = sum(1 for count in versions.values() if count != 1)
    print(f"\n== bench/ingress.py: {args.rate}/s for {args.duration} s; 1 index writer (solo) + {args.ingest_workers} ingest "
          f"worker(s) ({args.ingest_pool} x{args.ingest_concurrency}, nice {args.worker_nice}); embedder {args.embedder}; "
          f"{run.kills} SIGKILL(s) of {args.kill}; load average at start {run.load_at_start:.1f}")
    print(f"sent {len(run.sent)} events in {run.send_seconds:.1f} s; HTTP statuses {dict(sorted(statuses.items()))}")
    print(f"accepted events/s          {len(accepted) / run.send_seconds:.1f}")
    print(f"ingress latency ms         p50 {pct(latencies, .5):.1f}  p95 {pct(latencies, .95):.1f}  max {max(latencies):.1f}")
    print(f"ingress CPU per accepted event ms {run.ingress_cpu_seconds / max(len(accepted), 1) * 1000:.2f} "
          f"(user+system of the ingress process while sending)")
    start = min(s.sent_at for s in run.sent)
    windows: dict[int, list[float]] = {}
    for s in run.sent:
        windows.setdefault(int((s.sent_at - start) // 10), []).append(s.latency * 1000)
    print("latency per 10 s window ms " + "  ".join(
        f"[{w * 10}s p50 {pct(v, .5):.0f} p95 {pct(v, .95):.0f}]" for w, v in sorted(windows.items())))
    print(f"event-to-searchable s      p50 {pct(to_search, .5):.2f}  p95 {pct(to_search, .95):.2f}  max {max(to_search, default=float('nan')):.2f}"
          f"  ({len(to_search)}/{len(upserts)} upserts searchable)")
    print(f"ACL event to in-force s    p50 {pct(acl_lag, .5):.2f}  p95 {pct(acl_lag, .95):.2f}  ({len(acl_lag)} acl.changed)")
    print(f"drain after last send      {drain_seconds:.1f} s")
    print(f"events by status           {events}")
    print(f"events by attempts         {dict(sorted(attempts.items()))}")
    print(f"events NOT completed       {not_completed}")
    print(f"objects with != 1 version  {duplicated}")
    for item in task_latencies(redis.Redis.from_url(REDIS_URL)):
        runs = item.buckets[-1][1]
        print(f"task {item.task:<20} runs {runs:>5}  mean {item.total / max(runs, 1) * 1000:8.1f} ms")
    return 0 if not_completed == 0 and duplicated == 0 and len(to_search) == len(upserts) else 1


# ------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--ingest-workers", type=int, default=1, help="Workers on ki.ingest (besides the one index writer).")
    parser.add_argument("--ingest-pool", default="threads", choices=["solo", "threads", "prefork"])
    parser.add_argument("--ingest-concurrency", type=int, default=4)
    # Production runs the ingress and the workers on separate machines; on one 2-core box the
    # workers' CPU would otherwise starve the latency-sensitive ingress.
    parser.add_argument("--worker-nice", type=int, default=10, help="nice value of the worker processes (0: none).")
    parser.add_argument("--kill", default="ingest0", help="Which worker is SIGKILLed: writer or ingest<N>.")
    parser.add_argument("--embedder", default="hashing", choices=["hashing", "use-multilingual", "e5-small"])
    parser.add_argument("--kill-at", type=float, default=0.5, help="Fraction of the run when worker 0 is SIGKILLed (<0: never).")
    parser.add_argument("--restart-delay", type=float, default=1.0)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--drain-timeout", type=float, default=300.0,
                        help="Seconds to wait after the last send for the workers to finish (what is left is reported).")
    args = parser.parse_args()
    terminate_like_ctrl_c()

    workdir = Path(tempfile.mkdtemp(prefix="ki-bench-ingress-"))
    database = f"ki_bench_{uuid.uuid4().hex[:10]}"
    server = create_engine(PG_SERVER, isolation_level="AUTOCOMMIT")
    with server.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{database}"'))
    db_url = PG_SERVER.rsplit("/", 1)[0] + f"/{database}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KI_")}
    env.update({
        "KI_DATABASE__URL": db_url, "KI_DATABASE__POOL_SIZE": "10", "KI_BROKER__URL": REDIS_URL, "KI_BROKER__EAGER": "false",
        "KI_STATE_DIR": str(workdir / "state"), "KI_EMBEDDING__PROVIDER": args.embedder,
        "KI_DMS__SOURCES__BENCH__SECRET": SECRET,
        # The system's own recovery: beat sweeps every 5 s, re-dispatching events untouched for 20 s.
        "KI_SWEEP__INTERVAL_SECONDS": "5", "KI_SWEEP__EVENT_REDISPATCH_AFTER_SECONDS": "20",
        "KI_SWEEP__RECONCILE_INTERVAL_SECONDS": "86400", "KI_SWEEP__STUCK_VERSION_AFTER_SECONDS": "60",
    })
    if args.embedder == "hashing":
        env["KI_EMBEDDING__DIMENSIONS"] = "64"
    engine = create_engine(db_url)
    processes: dict[str, subprocess.Popen] = {}
    try:
        redis.Redis.from_url(REDIS_URL).flushdb()
        subprocess.run([sys.executable, "-m", "ki.cli", "init"], env=env, cwd=workdir, check=True, capture_output=True)
        processes["ingress"] = start([sys.executable, "-m", "uvicorn", "--factory", "ki.asgi:create_ingress", "--host", "127.0.0.1",
                                      "--port", str(args.port), "--log-level", "warning", "--no-access-log"], env, workdir, "ingress")
        processes["beat"] = start([sys.executable, "-m", "celery", "-A", "ki_workers.app", "beat", "--loglevel=WARNING",
                                   f"--schedule={workdir / 'beat-schedule'}"], env, workdir, "beat")
        for name in ["writer", *(f"ingest{i}" for i in range(args.ingest_workers))]:
            processes[name] = start(worker_cmd(args, name), env, workdir, name)
        base_url = f"http://127.0.0.1:{args.port}"
        wait_ready(base_url)
        time.sleep(3)  # workers connect
        run = Run(load_at_start=os.getloadavg()[0])
        stop_polling = threading.Event()
        monitor = threading.Thread(target=poll_until, args=(engine, run, stop_polling), daemon=True)
        monitor.start()
        killer = threading.Thread(target=kill_and_restart, args=(args, processes, env, workdir, run), daemon=True)
        if args.kill_at >= 0:
            killer.start()
        cpu_before = process_cpu_seconds(processes["ingress"].pid)
        asyncio.run(send_all(args, base_url, run))
        run.ingress_cpu_seconds = process_cpu_seconds(processes["ingress"].pid) - cpu_before
        if killer.is_alive():
            killer.join()
        drained_from = time.monotonic()
        next_report = drained_from + PROGRESS_SECONDS
        while time.monotonic() - drained_from < args.drain_timeout:
            events = open_events(engine)
            upserted = {s.object_id for s in run.sent if s.kind == "upsert" and s.status in (200, 202)}
            if set(events) <= {"done", "parked", "failed"} and upserted <= set(run.searchable_at):
                break
            if time.monotonic() >= next_report:
                print(f"  draining: events {dict(sorted(events.items()))}, "
                      f"{len(upserted & set(run.searchable_at))}/{len(upserted)} upserts searchable", flush=True)
                next_report += PROGRESS_SECONDS
            time.sleep(0.25)
        drain_seconds = time.monotonic() - drained_from
        stop_polling.set()
        monitor.join()
        return report(args, run, engine, drain_seconds)
    except KeyboardInterrupt:
        print("interrupted: stopping the workers and dropping the database", flush=True)
        return 130
    finally:
        for process in processes.values():
            stop(process)
        engine.dispose()
        with server.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        server.dispose()
        redis.Redis.from_url(REDIS_URL).flushdb()
        print(f"logs in {workdir}")


def poll_until(engine, run: Run, stop_event: threading.Event, interval: float = 0.25) -> None:
    """In its own thread, so SQL polling never delays a send; it stops quietly once the database is gone."""
    try:
        while not stop_event.is_set():
            poll_searchable(engine, run)
            stop_event.wait(interval)
        poll_searchable(engine, run)
    except Exception:  # noqa: BLE001 - interrupted: main() is dropping the database
        if not stop_event.is_set():
            return


def kill_and_restart(args, processes: dict, env: dict, workdir: Path, run: Run) -> None:
    time.sleep(args.kill_at * args.duration)
    processes[args.kill].send_signal(signal.SIGKILL)
    processes[args.kill].wait()
    run.kills += 1
    time.sleep(args.restart_delay)
    processes[args.kill] = start(worker_cmd(args, args.kill), env, workdir, args.kill)


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_ready(base_url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"ingress did not start on {base_url}")


if __name__ == "__main__":
    sys.exit(main())
