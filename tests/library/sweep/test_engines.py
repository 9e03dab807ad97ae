"""The Ray engine of capacity sweeps against a real Ray runtime on this machine (loopback only): a 24-point
sweep gives the local engine's records byte for byte, in-process (``ray.init`` with 2 CPUs) and joined by
address (``ray start --head`` on 127.0.0.1); a worker killed mid-sweep loses no point (the task is retried).

Every Ray process here listens on 127.0.0.1 only (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` keeps Ray from
replacing the loopback address by the host's) on free ports, and sends no usage statistics; token
authentication is off (``RAY_AUTH_MODE=disabled``: Ray 2.60 keeps its token in ~/.ray, shared by every Ray
session of the user on the machine). Each runtime is stopped in teardown: the
in-process one by ``ray.shutdown()``, the ``ray start`` one by its own process group.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest
import yaml

ray = pytest.importorskip("ray")

from parplan.library.sweep.points import load_sweep  # noqa: E402
from parplan.library.sweep.run import run_sweep  # noqa: E402
from tests.sweep_cases import sweep_24  # noqa: E402

LOOPBACK_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled"}


@pytest.fixture(scope="module")
def ray_env():
    saved = {k: os.environ.get(k) for k in LOOPBACK_ENV}
    os.environ.update(LOOPBACK_ENV)
    yield dict(os.environ)
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="module")
def local_records(tmp_path_factory):
    out = tmp_path_factory.mktemp("local")
    run_sweep(load_sweep(sweep_24()), str(out), jobs=2)
    return (out / "points.jsonl").read_bytes()


@pytest.fixture(scope="module")
def ray_runtime(ray_env):
    ray.init(address="local", num_cpus=2, _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    yield
    ray.shutdown()


def _solving_workers():
    import psutil

    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.cmdline()[:1] == ["ray::solve_point"] or proc.name() == "ray::solve_point":
                found.append(proc)
        except psutil.Error:
            pass
    return found


def test_ray_init_gives_the_local_records(ray_runtime, local_records, tmp_path):
    records, _, counts = run_sweep(load_sweep(sweep_24()), str(tmp_path), engine="ray")
    assert counts["solved"] == 24 and counts["failed"] == 0
    assert (tmp_path / "points.jsonl").read_bytes() == local_records


def test_a_worker_killed_mid_sweep_loses_no_point(ray_runtime, local_records, tmp_path):
    killed = []
    done = threading.Event()

    def killer():
        while not done.is_set() and not killed:
            for proc in _solving_workers():
                proc.kill()
                killed.append(proc.pid)
                break
            time.sleep(0.005)

    thread = threading.Thread(target=killer)
    thread.start()
    try:
        _, _, counts = run_sweep(load_sweep(sweep_24()), str(tmp_path), engine="ray")
    finally:
        done.set()
        thread.join()
    assert killed, "no solving worker was seen to kill"
    assert counts["solved"] == 24 and counts["failed"] == 0
    assert (tmp_path / "points.jsonl").read_bytes() == local_records


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_ray_start_head_joined_by_address(ray_env, local_records, tmp_path):
    if ray.is_initialized():
        ray.shutdown()
    port = _free_port()
    temp_dir = tempfile.mkdtemp(prefix="pray", dir="/tmp")  # short: Ray's socket paths must stay < 108 chars
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    head = subprocess.Popen([ray_bin, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
                             "--num-cpus=2", "--include-dashboard=false", f"--dashboard-port={_free_port()}",
                             f"--ray-client-server-port={_free_port()}", "--disable-usage-stats",
                             f"--temp-dir={temp_dir}"], env=ray_env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = head.communicate(timeout=120)
        assert head.returncode == 0, out
        path = tmp_path / "sweep.yaml"
        path.write_text(yaml.safe_dump(sweep_24(), sort_keys=False))
        proc = subprocess.run([sys.executable, "-c", "from parplan.client.cli import main; main()", "sweep",
                               str(path), "--out", str(tmp_path / "out"), "--engine", "ray", "--ray-address",
                               f"127.0.0.1:{port}"], env=ray_env, capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert (tmp_path / "out" / "points.jsonl").read_bytes() == local_records
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):  # the head's daemons: the process group `ray start` led
            try:
                os.killpg(head.pid, sig)
            except ProcessLookupError:
                break
            gone_by = time.monotonic() + 2.0
            while time.monotonic() < gone_by and _group_alive(head.pid):
                time.sleep(0.05)
        shutil.rmtree(temp_dir, ignore_errors=True)
