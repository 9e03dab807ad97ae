"""README.md and docs/*.md: every shell command their code blocks show (a line, or a part of an ``&&`` chain,
that starts with ``solver-cli``, ``python`` or ``pip``) is in :data:`COMMANDS`, and each is run here as written in
a scratch folder (placeholders filled in, as each entry says) or, where running it is infeasible in a test,
checked the way its entry says and why. A command added to the docs fails
:func:`test_every_doc_command_is_listed` until it is listed. The README's "From Python" block is run too;
its Service block and docs/service.md's Python blocks are run by tests/server/test_service_docs.py."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import threading
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import self_signed_certificate

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent  # solver-cli and python of the environment running the tests
SHELL = ("bash", "sh", "shell", "console", "")  # the code blocks whose lines are commands
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
EXAMPLE = "examples/seed-textbook-70b-8k.yaml"  # a small spec for the placeholders SPEC.yaml
EVALUATE_EXAMPLE = "examples/llama3-70b-64xh100-evaluate.yaml"  # a spec with a plan:


def _drop_comment(line: str) -> str:
    """The line without a trailing ``# comment`` (a ``#`` that starts a word outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def code_blocks(text: str, languages: tuple[str, ...]) -> list[str]:
    """The bodies of ``text``'s fenced code blocks in one of ``languages`` (fences read in order, so a closing fence
    never opens a block)."""
    blocks, lang, body = [], None, []
    for line in text.splitlines():
        if line.startswith("```"):
            if lang is None:
                lang, body = line[3:].strip(), []
            else:
                if lang in languages:
                    blocks.append("\n".join(body) + "\n")
                lang = None
        elif lang is not None:
            body.append(line)
    return blocks


def doc_commands(text: str) -> list[str]:
    """The commands of ``text``'s shell code blocks, continuation lines (after a backslash, or indented as a
    synopsis's options are) joined, comments dropped, ``&&`` split."""
    out = []
    for body in code_blocks(text, SHELL):
        for line in re.sub(r"\\\n|\n(?=[ \t])", " ", body).splitlines():
            for part in _drop_comment(line).split("&&"):
                part = " ".join(part.split())
                if part.startswith(("solver-cli", "python", "pip ")):
                    out.append(part)
    return out


@dataclass(frozen=True)
class Run:
    """Run ``argv`` (the doc's command with its placeholders filled) in a scratch folder; ``expect`` must appear
    in its output, ``files`` must exist after it."""
    argv: str
    timeout_s: float = 60
    expect: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    quick_start: bool = False  # the output is the one the README's "Quick start" describes: its figures checked


@dataclass(frozen=True)
class Starts:
    """A server: start ``argv``, wait for ``ready`` in its output, stop it (SIGTERM)."""
    argv: str
    ready: str
    needs: tuple[str, ...] = ()  # modules of an optional extra: skip without them
    tls: bool = False


@dataclass(frozen=True)
class Checked:
    """Not run here (``why``); instead: ``kind`` "extras" (the extras it names exist in pyproject and the base
    install holds no test-only package), "help" (``solver-cli SUB --help`` or ``python -m MODULE --help`` lists
    every option it shows),
    "ci" (.ci/run runs exactly this command) or "venv" (the venv module answers ``--help``)."""
    why: str
    kind: str
    options: tuple[str, ...] = field(default=())


SWEEP = "solver-cli sweep examples/sweeps/llama3-8b-capacity.yaml --out sweep-out"
OPTIMIZE_SYNOPSIS = ("solver-cli optimize SPEC.yaml [--top K] [--pareto memory|gpus] [--format table|json|yaml] "
                     "[--time-limit S] [--method cpsat|exhaustive] [--workers N] [--deterministic] [--seed N] "
                     "[--memory-budget-mib N] [--memory-margin GIB] [--rank-by point|upper]")
EXTRAS = "installs into the environment the tests run in"
REPLAN_PLAN = "solver-cli optimize examples/llama3-70b-64xh100.yaml --format json > plan.json"
RUNS_TABLE = ("printf 'runs:\\n  - {name: a, spec: examples/llama3-70b-64xh100-evaluate.yaml, step_time_s: 60.0}\\n'"
              " > runs.yaml")
COMMANDS: dict[str, Run | Starts | Checked] = {
    # README "Two commands"
    "python3 -m venv .venv": Checked("creates the virtual environment the tests themselves run in", "venv"),
    "python -m pip install -e .": Checked(EXTRAS, "extras"),
    "solver-cli optimize examples/llama3-70b-64xh100.yaml": Run(
        "solver-cli optimize examples/llama3-70b-64xh100.yaml", timeout_s=600,
        expect=("status: OPTIMAL",), quick_start=True),
    'python -m pip install -e ".[test]"': Checked(EXTRAS, "extras"),
    "python -m pytest -q": Checked("the suite itself (this test is part of it)", "ci"),
    # README "Using it": synopses, SPEC.yaml an example, the options checked against --help
    OPTIMIZE_SYNOPSIS: Run(f"solver-cli optimize {EXAMPLE} --top 3 --time-limit 20", expect=("status: ",)),
    "solver-cli evaluate SPEC.yaml [--format table|json] [--complete] [--memory-margin GIB]": Run(
        f"solver-cli evaluate {EVALUATE_EXAMPLE} --format json", expect=('"metrics"',)),
    "solver-cli validate SPEC.yaml": Run(f"solver-cli validate {EXAMPLE}", expect=("ok",)),
    "solver-cli export / import / schema / presets": Run(
        "solver-cli schema && solver-cli presets && solver-cli export --help && solver-cli import --help",
        expect=('"properties"', "llama3-70b", "--to", "--from")),
    "solver-cli knobs": Run("solver-cli knobs", expect=("host_seconds_per_kernel",)),
    "solver-cli gpus": Run("solver-cli gpus", expect=("H100-SXM-80GB",)),
    "solver-cli --version": Run("solver-cli --version", expect=("parplan",)),
    # into this test's scratch folder as the home directory, not the user's shell files
    "solver-cli --install-completion": Run("HOME=$PWD SHELL=/bin/bash solver-cli --install-completion",
                                           files=(".bash_completions/solver-cli.sh", ".bashrc")),
    # docs/exports.md: train.yaml as the text describes it, the published config it names
    "solver-cli optimize train.yaml --hf-config path/to/config.json --export megatron > megatron_args.sh": Run(
        "printf 'training: {seq_len: 8192, global_batch_size: 512}\\ncluster: {gpu: H100-SXM-80GB, num_gpus: 64}\\n'"
        " > train.yaml && solver-cli optimize train.yaml --hf-config tests/data/hf/llama-3-70b.json --export megatron"
        " --time-limit 20 > megatron_args.sh && cat megatron_args.sh", expect=("MEGATRON_ARGS=(",),
        files=("megatron_args.sh",)),
    # docs/sweeps.md
    SWEEP: Run(SWEEP, timeout_s=300, expect=("Pareto",), files=("sweep-out/points.jsonl", "sweep-out/summary.json")),
    SWEEP + " --engine ray --ray-address HEAD:6379 --resume": Checked(
        "needs a Ray cluster at HEAD:6379 (tests/library/sweep/test_engines.py runs the Ray engine on a local runtime)", "help",
        ("--engine", "--ray-address", "--resume")),
    # docs/calibration.md: a runs table of one run (the evaluate example at a measured step time) for the user's
    "python -m parplan.probe --out probe.yaml": Checked(
        "measures this node's GPU (a CPU run needs torch, --config tiny and --gpu: tests/test_probe.py runs it)",
        "help", ("--out",)),
    "solver-cli calibrate runs.yaml probe.yaml --out profile.yaml": Run(
        f"{RUNS_TABLE} && solver-cli calibrate runs.yaml --out profile.yaml", expect=("median |error|",),
        files=("profile.yaml",)),  # without probe.yaml: the probe's output needs the GPU (above)
    "solver-cli optimize spec.yaml --profile profile.yaml": Run(
        f"{RUNS_TABLE} && solver-cli calibrate runs.yaml --out profile.yaml > /dev/null && solver-cli optimize "
        "examples/llama3-70b-64xh100.yaml --profile profile.yaml --time-limit 10 --no-per-framework",
        expect=("status: ",)),
    # docs/replan.md: the saved plan under a small time limit (the replan reads it; its output is checked there)
    REPLAN_PLAN: Run(REPLAN_PLAN.replace(" --format", " --time-limit 10 --format"), files=("plan.json",)),
    "solver-cli replan examples/llama3-70b-64xh100.yaml --plan plan.json --lost-node 3 --horizon 11138": Run(
        REPLAN_PLAN.replace(" --format", " --time-limit 10 --format") + " && solver-cli replan "
        "examples/llama3-70b-64xh100.yaml --plan plan.json --lost-node 3 --horizon 11138",
        expect=("effective", "keep TP/PP")),
    # docs/explorer.md: without a browser (--no-open), on a free port
    'python -m pip install -e ".[ui]"': Checked(EXTRAS, "extras"),
    "solver-cli ui": Starts("solver-cli ui --no-open --port 0", "plan explorer on http://127.0.0.1:",
                            needs=("starlette", "uvicorn")),
    "solver-cli serve --ui 8765": Starts("solver-cli serve --port 0 --health-port 0 --ui 0", '"event": "serving"',
                                         needs=("grpc", "starlette", "uvicorn")),
    # docs/service.md: free ports (another run may hold the defaults); TLS with a certificate made here
    "pip install 'parplan[server]'": Checked(EXTRAS, "extras"),
    "solver-cli serve": Starts("solver-cli serve --port 0 --health-port 0", '"event": "serving"', needs=("grpc",)),
    "solver-cli serve --host 0.0.0.0 --tls-cert server.pem --tls-key server.key --auth-token-file token.txt": Starts(
        "solver-cli serve --host 0.0.0.0 --port 0 --health-port 0 --tls-cert server.pem --tls-key server.key "
        "--auth-token-file token.txt", '"tls": true, "auth": true', needs=("grpc", "cryptography"), tls=True),
}


def all_doc_commands() -> dict[str, str]:
    """Each command found -> the page it is on."""
    return {cmd: page.name for page in PAGES for cmd in doc_commands(page.read_text())}


def test_every_doc_command_is_listed():
    found = all_doc_commands()
    assert set(found) - set(COMMANDS) == set(), "commands in the docs with no entry here (run or check them)"
    assert set(COMMANDS) - set(found) == set(), "entries here no doc shows any more"


def _scratch(tmp_path: Path) -> Path:
    for name in ("examples", "tests"):  # the docs' relative paths
        (tmp_path / name).symlink_to(REPO / name)
    return tmp_path


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "COLUMNS": "120",
            "PYTHONUNBUFFERED": "1"}  # a server's ready line arrives while it runs


def _params(kind):
    return [pytest.param(cmd, entry, id=cmd[:60]) for cmd, entry in COMMANDS.items() if isinstance(entry, kind)]


def check_quick_start(output: str) -> None:
    """The README's "Quick start" figures against the output: step time, MFU, each other framework's difference."""
    text = " ".join((REPO / "README.md").read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0].split())
    step_s, mfu = re.search(r"([\d.]+) s per step at ([\d.]+) % MFU", text).groups()
    step_out = float(re.search(r"step time \(s\)\s+([\d.]+)", output).group(1))
    mfu_out = float(re.search(r"MFU \(%\)\s+([\d.]+)", output).group(1))
    assert (f"{step_out:.2f}", f"{mfu_out:.1f}") == (step_s, mfu)
    stated = {"megatron-bridge": r"Megatron-Bridge ([−+][\d.]+) %", "torchtitan": r"torchtitan ([−+][\d.]+) %",
              "deepspeed": r"DeepSpeed ([−+][\d.]+) %", "any": r"ZB-H1, ([−+][\d.]+) %"}
    for name, pattern in stated.items():
        figure = re.search(pattern, text).group(1).replace("−", "-")
        assert f"  {name}: {figure} %" in output, (name, figure)


@pytest.mark.parametrize(("command", "entry"), _params(Run))
def test_doc_command_runs(command, entry, tmp_path):
    # the command a child of bash, as in a user's shell (not exec'd in its place: typer's completion names the shell
    # by the process's parents)
    run = subprocess.run(["bash", "-c", f"set -o pipefail; {entry.argv}\nexit $?"], cwd=_scratch(tmp_path), env=_env(),
                         capture_output=True, text=True, timeout=entry.timeout_s)
    assert run.returncode == 0, f"{entry.argv}\n{run.stderr[-2000:]}"
    for text in entry.expect:
        assert text in run.stdout, f"{text!r} not in the output of {entry.argv}"
    for name in entry.files:
        assert (tmp_path / name).is_file(), name
    if entry.quick_start:
        check_quick_start(run.stdout)
    if "--help" not in command and "[" in command:  # a synopsis: every option it shows is the command's own
        sub = command.split()[1]
        shown = set(re.findall(r"--[a-z][a-z-]*", command))
        listed = subprocess.run(["solver-cli", sub, "--help"], env=_env(), capture_output=True, text=True).stdout
        assert {o for o in shown if o not in listed} == set()


@pytest.mark.parametrize(("command", "entry"), _params(Starts))
def test_doc_server_starts(command, entry, tmp_path):
    for module in entry.needs:
        pytest.importorskip(module, reason=f"{module} is in an optional extra of {command!r}")
    if entry.tls:
        cert, key = self_signed_certificate(tmp_path)
        cert.rename(tmp_path / "server.pem"), key.rename(tmp_path / "server.key")
        (tmp_path / "token.txt").write_text("s3cret-token")
    proc = subprocess.Popen(shlex.split(entry.argv), cwd=_scratch(tmp_path), env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    seen = []
    guard = threading.Timer(120, proc.kill)  # a server that never says it is ready ends the loop below
    guard.start()
    try:
        for line in proc.stdout:  # ends when the process does
            seen.append(line)
            if entry.ready in line:
                break
        assert any(entry.ready in line for line in seen), "".join(seen)[-2000:]
    finally:
        guard.cancel()
        proc.terminate()
        proc.wait(timeout=30)


def _extras(command: str) -> set[str]:
    named = re.search(r"\[([a-z,]+)\]", command)
    return set(named.group(1).split(",")) if named else set()


@pytest.mark.parametrize(("command", "entry"), _params(Checked))
def test_doc_command_checked(command, entry):
    if entry.kind == "extras":
        assert _extras(command) <= set(PYPROJECT["project"]["optional-dependencies"])
        def packages(requirements: list[str]) -> set[str]:
            return {re.split(r"[=<>\[ ]", requirement)[0] for requirement in requirements}

        test_only = packages(PYPROJECT["project"]["optional-dependencies"]["test"]) - {"parplan"}
        base = packages(PYPROJECT["project"]["dependencies"])
        assert base & test_only == set(), "the base install holds a test-only package"
    elif entry.kind == "ci":
        steps = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line and line[0] != "#"]
        assert steps[-1] == command
    elif entry.kind == "venv":
        assert subprocess.run([sys.executable, "-m", "venv", "--help"], capture_output=True).returncode == 0
    else:  # "help": solver-cli SUB --help, or python -m MODULE --help
        words = command.split()
        argv = ["solver-cli", words[1]] if words[0] == "solver-cli" else [sys.executable, "-m", words[2]]
        listed = subprocess.run(argv + ["--help"], env=_env(), capture_output=True, text=True).stdout
        assert {o for o in entry.options if o not in listed} == set()


def test_the_readme_python_block_runs():
    """The README's "From Python" block (the Service one needs a server: tests/server/test_service_docs.py)."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("From Python", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    run = subprocess.run([sys.executable, "-c", block], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    tp, step_s, peak_gib = run.stdout.split()
    assert int(tp) >= 1 and float(step_s) > 0 and float(peak_gib) > 0


INLINE = re.compile(r"`((?:python|solver-cli) [^`]+)`")


def test_inline_commands_name_what_exists():
    """Commands quoted in the prose (benchmarks, mostly minutes long, their outputs in benchmarks/results/):
    each script named exists and each solver-cli subcommand is one the CLI has."""
    subs = subprocess.run(["solver-cli", "--help"], env=_env(), capture_output=True, text=True).stdout
    missing = []
    for page in PAGES:
        for cmd in INLINE.findall(page.read_text()):
            words = cmd.split()
            if words[0] == "solver-cli" and words[1].isalpha() and f"  {words[1]} " not in subs:
                missing.append((page.name, cmd))
            script = next((w for w in words[1:] if w.endswith(".py")), None)
            if words[0] == "python" and script and not (REPO / script).is_file():
                missing.append((page.name, cmd))
    assert missing == []


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_relative_links_resolve():
    """Every relative link of README.md and docs/*.md (the docs map among them) names a file of the repository."""
    broken = [(page.name, target) for page in PAGES for target in LINK.findall(page.read_text())
              if "://" not in target and not (page.parent / target).exists()]
    assert broken == []
