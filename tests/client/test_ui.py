"""The plan explorer (client/ui/): its JSON endpoints over HTTP on 127.0.0.1, and its page in headless Chromium.

The endpoint tests compare every answer with the library's own (``parplan.evaluate``, the 1F1B simulation of
tests/pipeline_sim.py, DualPipe's step order in costmodel/schedules/dualpipe_steps.py, the exports). The browser test drives
Debian's Chromium (/usr/bin/chromium) with Playwright: the README example solved on the page, a frontier point
clicked and its numbers checked against ``parplan.evaluate``; an infeasible spec's relaxations; a sweep folder's
curves. With PARPLAN_UI_SCREENSHOTS=docs it writes docs/img/explorer-*.png (docs/explorer.md shows them).
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("starlette", reason="the optional 'ui' extra (starlette, uvicorn) is not installed")
pytest.importorskip("uvicorn", reason="the optional 'ui' extra (starlette, uvicorn) is not installed")

import parplan  # noqa: E402
from parplan.client.ui import payloads  # noqa: E402
from parplan.client.ui.runner import start_in_thread  # noqa: E402
from parplan.client.ui.timeline import MAX_DRAWN_MICROBATCHES  # noqa: E402
from tests.pipeline_sim import simulate_1f1b  # noqa: E402
from tests.sweep_cases import TINY_BASE  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
README_SPEC = (ROOT / "examples" / "llama3-70b-64xh100.yaml").read_text()
INFEASIBLE_SPEC = (ROOT / "examples" / "infeasible" / "70b-8xh100-tp8-pp1-no-recompute.yaml").read_text()
STATIC = ROOT / "client" / "ui" / "static"
PLAN = {"tp": 8, "pp": 4, "dp": 2, "micro_batch_size": 1, "num_microbatches": 256}  # 256·1·2 = global batch 512


@pytest.fixture(scope="module")
def ui_url():
    server, url = start_in_thread("127.0.0.1", 0)
    yield url
    server.should_exit = True


def post(url: str, path: str, body) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url + path.lstrip("/"), data=data, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_the_page_and_its_assets_are_served_and_load_nothing_from_outside(ui_url):
    with urllib.request.urlopen(ui_url, timeout=10) as page:
        assert page.status == 200 and "plan explorer" in page.read().decode()
    for asset in sorted(STATIC.iterdir()):
        with urllib.request.urlopen(f"{ui_url}static/{asset.name}", timeout=10) as answer:
            text = answer.read().decode()
        assert answer.status == 200
        outside = [w for w in text.replace("http://www.w3.org/2000/svg", "").split() if "http://" in w or "https://" in w]
        assert not outside, (asset.name, outside)  # no CDN: the page works offline


@pytest.mark.parametrize("path", ["static/../app.py", "static/%2e%2e/app.py", "static/..%2fapp.py",
                                  "static/%2e%2e/%2e%2e/pyproject.toml"])
def test_no_file_outside_the_assets_is_served(ui_url, path):
    """The static mount follows links (a strict editable install links each asset) but no request path leaves it."""
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(ui_url + path, timeout=10)
    assert err.value.code == 404


def test_every_asset_of_the_page_is_package_data():
    """Each file under client/ui/static/ matches a [tool.setuptools.package-data] glob of parplan.client.ui, so the
    wheel ships it (tests/test_packaging.py checks package folders' own files, not their subfolders)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["parplan.client.ui"]
    shipped = {p for g in globs for p in (ROOT / "client" / "ui").glob(g)}
    assert set(STATIC.iterdir()) <= shipped, sorted(set(STATIC.iterdir()) - shipped)


def test_import_parplan_does_not_import_the_web_stack():
    import subprocess
    import sys

    probe = "import sys, parplan; print([m for m in ('starlette', 'uvicorn') if m in sys.modules])"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60).stdout.strip() == "[]"


def test_the_server_binds_loopback_by_default():
    from parplan.client.ui.runner import make_server

    assert make_server().config.host == "127.0.0.1"


@pytest.mark.parametrize("path, body, field", [
    ("/api/validate", b"{not json", "body"),
    ("/api/validate", [1, 2], "body"),
    ("/api/validate", {}, "spec_yaml"),
    ("/api/validate", {"spec_yaml": 7}, "spec_yaml"),
    ("/api/validate", {"spec_yaml": README_SPEC.replace("num_layers: 80", "num_layers: -3")}, "model.num_layers"),
    ("/api/validate", {"spec_yaml": "model: [unclosed"}, None),
    ("/api/optimize", {"spec_yaml": README_SPEC, "top_k": 0}, "top_k"),
    ("/api/optimize", {"spec_yaml": README_SPEC, "pareto": "cost"}, "pareto"),
    ("/api/optimize", {"spec_yaml": README_SPEC, "time_limit_s": 1e9}, "time_limit_s"),
    ("/api/plan", {"spec_yaml": README_SPEC, "plan": {"tp": 3}}, "plan"),
    ("/api/plan", {"spec_yaml": README_SPEC, "plan": {"schedule": "zigzag"}}, "plan.schedule"),
    ("/api/patch", {"spec_yaml": README_SPEC, "patch": {"cluster.num_gpus": "many"}}, "cluster.num_gpus"),
    ("/api/patch", {"spec_yaml": README_SPEC, "patch": {"model.name.x": 1}}, "patch"),
    ("/api/hf_import", {"spec_yaml": README_SPEC, "config_json": "{"}, "config_json"),
    ("/api/export", {"spec_yaml": README_SPEC, "plan": PLAN, "target": "jax"}, "target"),
    ("/api/sweep", {"folder": "/nonexistent/sweep"}, "folder"),
    ("/api/sweep_run", {"sweep_yaml": "base: {}\naxes: {cluster.num_gpus: [8]}", "folder": "/tmp/x"}, None),
    ("/api/sweep_run", {"sweep_yaml": 3, "folder": "/tmp/x"}, "sweep_yaml"),
    ("/api/plan", {"spec_yaml": README_SPEC, "plan": PLAN, "num_gpus": 0}, "num_gpus"),
])
def test_bad_input_is_a_400_naming_the_field(ui_url, path, body, field):
    status, answer = post(ui_url, path, body)
    assert status == 400, answer
    assert answer["error"]
    if field is not None:
        assert answer["field"] == field and answer["error"].startswith(field), answer


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(), st.text(max_size=12))
_VALUES = st.recursive(_SCALARS, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
                       max_leaves=6)
_PLANS = st.dictionaries(st.sampled_from(["tp", "cp", "pp", "dp", "ep", "vpp", "schedule", "micro_batch_size",
                                          "num_microbatches", "stage_layers", "recompute", "zero_stage"]),
                         _VALUES | st.integers(0, 128), max_size=5)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=_PLANS, patch=st.dictionaries(st.text(max_size=12), _VALUES, max_size=3), other=_VALUES)
def test_any_body_gets_an_answer_or_a_field_error(plan, patch, other):
    """Whatever the body, each endpoint's payload is strict JSON or a ParplanError (HTTP 400), never another
    exception (a 500)."""
    from parplan.costmodel.errors import ParplanError

    calls = [(payloads.validate, {"spec_yaml": other}), (payloads.plan_view, {"spec_yaml": README_SPEC, "plan": plan}),
             (payloads.plan_view, {"spec_yaml": README_SPEC, "plan": plan, "num_gpus": other}),
             (payloads.apply_patch, {"spec_yaml": README_SPEC, "patch": patch}),
             (payloads.hf_import, {"spec_yaml": README_SPEC, "config_json": patch, "name": other}),
             (payloads.export, {"spec_yaml": README_SPEC, "plan": plan, "target": other}),
             (payloads.sweep, {"folder": other})]
    for build, body in calls:
        try:
            json.dumps(build(body), allow_nan=False)
        except ParplanError as err:
            assert str(err)


def test_a_plan_view_is_the_library_evaluation(ui_url):
    status, view = post(ui_url, "/api/plan", {"spec_yaml": README_SPEC, "plan": PLAN})
    assert status == 200, view
    lib = parplan.evaluate(yaml.safe_load(README_SPEC), PLAN)
    assert view["metrics"]["step_time_s"] == lib.metrics.step_time_s
    assert view["metrics"]["breakdown_s"] == lib.metrics.breakdown_s
    assert [s["memory_gib"] for s in view["stages"]] == [s.memory_gib for s in lib.stages]
    assert [s["headroom_gib"] for s in view["stages"]] == [lib.metrics.usable_memory_gib - s.memory_gib
                                                           for s in lib.stages]
    assert view["num_gpus"] == 64


def _times(spec: dict, plan: dict):
    from parplan.costmodel.spec.assumptions import resolve_assumptions

    evaluation = parplan.evaluate(spec, plan)
    f = 1 / (1 + resolve_assumptions(None).backward_to_forward_ratio)
    return evaluation, [s.time_per_microbatch_s for s in evaluation.stages], f


def test_the_1f1b_timeline_is_the_pipeline_simulation():
    spec = yaml.safe_load(README_SPEC)
    evaluation, t, f = _times(spec, PLAN)
    view = payloads.plan_view({"spec_yaml": README_SPEC, "plan": PLAN})["timeline"]
    m = MAX_DRAWN_MICROBATCHES  # of the plan's 256
    assert view["microbatches_drawn"] == m and len(view["ranks"]) == 4
    assert all(len(row) == 2 * m for row in view["ranks"])  # each micro-batch's F and B on every rank
    assert view["span_s"] == pytest.approx(simulate_1f1b([x * f for x in t], [x * (1 - f) for x in t], m), rel=1e-12)
    for row in view["ranks"]:  # a rank runs one chunk at a time
        assert all(a["end_s"] <= b["start_s"] + 1e-12 for a, b in zip(row, row[1:]))


@pytest.mark.parametrize("p, v, m", [(4, 2, 8), (4, 3, 16), (8, 2, 16), (2, 4, 4)])
def test_the_interleaved_timeline_has_the_schedules_bubble(p, v, m):
    """Equal stages: Megatron-LM's interleaved order drawn chunk by chunk ends after m·(F+B) plus the cost model's
    interleaved bubble, (p-1)(F+B)/v (costmodel/schedules/schedule.py)."""
    from parplan.client.ui.timeline import _list_schedule
    from parplan.costmodel.schedules.schedule import Schedule

    F, B = 0.7, 1.5
    rows = _list_schedule([F] * p, [B] * p, [0.0] * p, m, v)
    assert all(len(row) == 2 * m * v for row in rows)
    span = max(c["end_s"] for row in rows for c in row)
    assert span == pytest.approx(m * (F + B) + Schedule.INTERLEAVED.bubble_time(p, F, B, vpp=v), rel=1e-12)


def test_the_dualpipe_timeline_follows_the_step_order():
    from parplan.costmodel.schedules.dualpipe_steps import StageWork, step_order_s
    from parplan.costmodel.schedules.schedule import Schedule

    plan = {**PLAN, "schedule": "dualpipe", "num_microbatches": 16}
    evaluation, t, f = _times(yaml.safe_load(README_SPEC), plan)
    view = payloads.plan_view({"spec_yaml": README_SPEC, "plan": plan})["timeline"]
    w = parplan.costmodel.spec.assumptions.resolve_assumptions(None).zb_weight_grad_fraction
    assert view["span_s"] == pytest.approx(step_order_s(Schedule.DUALPIPE, StageWork(t, [0.0] * 4, f, w), 16), rel=1e-12)
    kinds = {c["kind"] for row in view["ranks"] for c in row}
    assert kinds == {"F", "B", "FB", "W"}


def test_a_relaxation_and_a_preset_apply_as_patches(ui_url):
    status, out = post(ui_url, "/api/patch", {"spec_yaml": INFEASIBLE_SPEC, "patch": {"cluster.num_gpus": 16}})
    assert status == 200 and yaml.safe_load(out["spec_yaml"])["cluster"]["num_gpus"] == 16
    status, out = post(ui_url, "/api/patch", {"spec_yaml": README_SPEC, "patch": {"model": {"preset": "llama3-8b"}}})
    assert status == 200 and yaml.safe_load(out["spec_yaml"])["model"] == {"preset": "llama3-8b"}
    status, presets = post(ui_url, "/api/validate", {"spec_yaml": out["spec_yaml"]})
    assert status == 200 and presets["ok"]
    status, out = post(ui_url, "/api/patch", {"spec_yaml": "", "patch": {"model": {"preset": "llama3-8b"}}})
    assert status == 200 and yaml.safe_load(out["spec_yaml"]) == {"model": {"preset": "llama3-8b"}}  # a start


def test_a_hugging_face_config_replaces_the_model(ui_url):
    config = (ROOT / "tests" / "data" / "hf" / "llama-3-8b.json").read_text()
    status, out = post(ui_url, "/api/hf_import", {"spec_yaml": README_SPEC, "config_json": config, "name": "l8"})
    assert status == 200, out
    from parplan.library.huggingface import model_from_hf_config

    assert yaml.safe_load(out["spec_yaml"])["model"] == model_from_hf_config(json.loads(config), name="l8").fields


def test_an_export_is_the_clis(ui_url):
    from parplan.client.export_cli import build_export
    from parplan.library.spec_io import load_spec

    spec = load_spec(README_SPEC)
    for target, launcher in (("torchtitan", None), (None, "slurm")):
        status, out = post(ui_url, "/api/export", {"spec_yaml": README_SPEC, "plan": PLAN, "target": target,
                                                   "launcher": launcher})
        assert status == 200, out
        assert out["text"] == build_export(spec, parplan.evaluate(spec, PLAN).plan, target, launcher).text


def test_optimize_answers_top_k_and_a_gpu_frontier_with_num_gpus(ui_url):
    body = {"spec_yaml": yaml.safe_dump(TINY_BASE), "top_k": 3, "pareto": "gpus", "time_limit_s": 30}
    status, out = post(ui_url, "/api/optimize", body)
    assert status == 200 and out["status"] in ("OPTIMAL", "FEASIBLE"), out
    assert 1 <= len(out["plans"]) <= 3 and out["pareto"]
    for entry in out["plans"] + out["pareto"]:
        p = entry["plan"]
        assert entry["num_gpus"] == p["tp"] * p["cp"] * p["pp"] * p["dp"]
    # a GPU-frontier point opens at its own GPU count with the frontier's numbers
    fewer = [e for e in out["pareto"] if e["num_gpus"] != TINY_BASE["cluster"]["num_gpus"]]
    assert fewer, out["pareto"]
    status, view = post(ui_url, "/api/plan", {**body, "plan": fewer[0]["plan"], "num_gpus": fewer[0]["num_gpus"]})
    assert status == 200, view
    assert view["metrics"]["step_time_s"] == fewer[0]["metrics"]["step_time_s"] and view["num_gpus"] == fewer[0]["num_gpus"]


TINY_SWEEP = {"base": TINY_BASE, "axes": {"cluster.num_gpus": [8, 16, 32]}, "budget": {"tokens": 1e10},
              "prices": {"H100-SXM-80GB": 2.5}, "solver": {"time_limit_s": 20, "deterministic": True}}


@pytest.fixture(scope="module")
def sweep_folder(ui_url, tmp_path_factory):
    """A small sweep run from the page's endpoint (library/sweep, the local engine) into a folder, followed
    through /api/sweep until every point is solved."""
    import time

    out = tmp_path_factory.mktemp("sweep")
    body = {"sweep_yaml": yaml.safe_dump(TINY_SWEEP), "folder": str(out)}
    status, started = post(ui_url, "/api/sweep_run", body)
    assert status == 200 and started["total"] == 3, started
    status, again = post(ui_url, "/api/sweep_run", body)  # one sweep at a time: the first is still starting
    assert status == 400 and again["field"] == "folder" and "already running" in again["error"]
    deadline = time.monotonic() + 120
    while True:
        status, seen = post(ui_url, "/api/sweep", {"folder": str(out)})
        assert status == 200 and not seen["error"], seen
        if not seen["running"] and seen["solved"] == seen["total"]:
            break
        assert time.monotonic() < deadline, seen
        time.sleep(0.3)
    assert (out / "points.jsonl").is_file()
    return out


def test_a_sweep_folder_gives_its_curves_and_pareto_set(ui_url, sweep_folder):
    status, out = post(ui_url, "/api/sweep", {"folder": str(sweep_folder)})
    assert status == 200, out
    summary = json.loads((sweep_folder / "summary.json").read_text())
    assert out["curves"] == summary["curves"] and out["pareto"] == summary["pareto"]
    assert len(out["points"]) == 3 and out["solved"] == out["total"] == 3


def test_a_running_sweep_shows_the_points_solved_so_far(ui_url, sweep_folder, tmp_path):
    running = tmp_path / "running"
    shutil.copytree(sweep_folder, running)
    (running / "points.jsonl").unlink()  # written at the end: a running sweep has only its manifest and store
    first = sorted((running / "store").iterdir())[0]
    first.unlink()
    status, out = post(ui_url, "/api/sweep", {"folder": str(running)})
    assert status == 200, out
    assert (out["solved"], out["total"]) == (2, 3)
    assert sum(p["status"] == "PENDING" for p in out["points"]) == 1


def test_ui_without_its_extra_names_the_extra(monkeypatch):
    import importlib.util

    from typer.testing import CliRunner

    from parplan.client.cli import app

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "uvicorn" else real(name, *a))
    result = CliRunner().invoke(app, ["ui", "--no-open"])
    assert result.exit_code == 2 and "pip install 'parplan[ui]'" in result.output


def test_serve_ui_serves_the_page_beside_the_grpc_service():
    import re
    import signal
    import subprocess
    import sys

    pytest.importorskip("grpc", reason="the optional 'server' extra is not installed")
    proc = subprocess.Popen([sys.executable, "-m", "parplan.client.cli", "serve", "--port", "0", "--health-port", "0",
                             "--ui", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        found = None
        for line in proc.stderr:  # the explorer's line comes before the service's JSON log lines
            found = re.search(r"plan explorer on (http://127\.0\.0\.1:\d+/)", line)
            if found:
                break
        assert found, "no 'plan explorer on' line"
        status, answer = post(found.group(1), "/api/validate", {"spec_yaml": README_SPEC})
        assert status == 200 and answer["ok"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


# ------------------------------------------------------------------------------------------- the browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def page(ui_url):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (the test extra) is not installed")
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install -y chromium; .ci/run installs it)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(120_000)
        page.goto(ui_url)
        yield page
        browser.close()


def screenshot(page, name: str, tmp_path: Path, selector: str = "main") -> None:
    folder = ROOT / "docs" / "img" if os.environ.get("PARPLAN_UI_SCREENSHOTS") == "docs" else tmp_path
    page.locator(selector).screenshot(path=str(folder / f"explorer-{name}.png"))


def test_browser_readme_example_frontier_click_shows_the_librarys_numbers(page, tmp_path):
    page.fill("#spec", README_SPEC)
    page.wait_for_selector("#spec-status.ok")
    page.fill("#top-k", "3")
    page.select_option("#pareto", "memory")
    page.click("#solve")
    page.wait_for_selector("#frontier-pt-0")
    assert page.locator("#plans tbody tr").count() == 3
    # a point inside the frontier (not the best plan, which the page opened first) that no neighbour covers
    i = page.evaluate("""() => { const pts = [...document.querySelectorAll('#frontier circle.pt')];
        const free = pts.filter(c => { const b = c.getBoundingClientRect();
            return document.elementFromPoint(b.x + b.width / 2, b.y + b.height / 2) === c; });
        return +free[Math.floor(free.length / 2)].dataset.index; }""")
    assert i > 0
    page.locator(f"#frontier-pt-{i}").click()  # a real mouse click at the point
    page.wait_for_function(f"document.getElementById('plan-label').textContent.startsWith('frontier {i + 1}:')")
    plan = page.evaluate(f"state.result.pareto[{i}].plan")
    lib = parplan.evaluate(yaml.safe_load(README_SPEC), plan)
    shown = page.locator("#plan-step-time")
    assert float(shown.get_attribute("data-value")) == lib.metrics.step_time_s
    assert shown.text_content() == f"{lib.metrics.step_time_s:.3f} s"
    assert page.locator("#plan-peak").text_content() == f"{lib.metrics.peak_memory_gib:.2f} GiB"
    totals = [float(v) for v in page.locator("#memory .bar-total").evaluate_all("ns => ns.map(n => n.dataset.value)")]
    assert totals == pytest.approx([s.memory_gib for s in lib.stages], rel=1e-9)  # the ledger's parts add up
    assert float(page.locator("#usable-line").get_attribute("data-value")) == lib.metrics.usable_memory_gib
    assert page.locator("#timeline rect.chunk").count() >= 2 * lib.plan.pp
    screenshot(page, "plan", tmp_path)


def test_browser_infeasible_spec_shows_its_relaxations(page, tmp_path):
    page.fill("#spec", INFEASIBLE_SPEC)
    page.select_option("#pareto", "")  # no frontier: the explanation alone
    page.click("#solve")
    page.wait_for_selector("#relaxation-0")
    relaxations = page.evaluate("state.result.explanation.relaxations")
    assert relaxations and page.locator(".relaxation button").count() == len(relaxations)
    for i, rx in enumerate(relaxations):
        assert page.locator(f"#relaxation-{i}").text_content().startswith(f"{rx['requirement']}: {rx['change']}")
    screenshot(page, "infeasible", tmp_path, "#results")
    gpus = next(i for i, rx in enumerate(relaxations) if rx["requirement"] == "cluster.num_gpus")
    page.locator(f"#relaxation-{gpus} button").click()  # one click: the spec patched, then solved again
    page.wait_for_selector("#plans tbody tr")
    assert yaml.safe_load(page.input_value("#spec"))["cluster"]["num_gpus"] == relaxations[gpus]["patch"]["cluster.num_gpus"]
    assert page.evaluate("state.result.status") in ("OPTIMAL", "FEASIBLE")


def test_browser_sweep_folder_shows_its_curves(page, sweep_folder, tmp_path):
    page.fill("#sweep-folder", str(sweep_folder))
    page.click("#sweep-load")
    page.wait_for_selector("#scaling polyline.curve")
    summary = json.loads((sweep_folder / "summary.json").read_text())
    assert page.locator("#scaling polyline.curve").count() == len(summary["curves"])
    assert page.locator("#cost-time circle[data-pareto='1']").count() == len(summary["pareto"])
    screenshot(page, "sweep", tmp_path, "#sweep")
