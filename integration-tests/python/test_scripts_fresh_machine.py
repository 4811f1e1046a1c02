"""The documented scripts on a fresh machine (issue 30), and the one install step they share
(scripts/system-packages.sh):

1. scripts/soak.sh, bench.sh, scale.sh, share-bench.sh, rebalance-bench.sh, fuzz.sh, demo.sh,
   cluster.sh, test.sh and system-packages.sh answer `--help` and `-h` with exit status 0 and a usage text naming the
   script, with HOME a fresh empty directory (cargo and rustup still reachable through the real
   CARGO_HOME and RUSTUP_HOME, as on a fresh machine with Rust installed), and without running
   cargo at all: the PATH they get records every cargo call.
2. With cmake missing from PATH (a directory of links to every other command) and
   SLUICE_SKIP_APT=1, `scripts/soak.sh --schedules 1` stops at once, before any cargo command,
   with a sentence on stderr naming cmake and the command to run (bash
   scripts/system-packages.sh build); bench.sh (before --against-kafka's Maven fetch) and demo.sh
   stop the same way, fuzz.sh without g++ and cluster.sh's start without a C compiler.
3. `bash scripts/system-packages.sh build` exits 0 on a machine that has everything (this one,
   after scripts/test.sh's own package step) and says so, and an unknown profile is refused.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from sluice_node import WORKSPACE

# A bound on a run that must not build anything, not a measure of speed: a build takes minutes.
BOUND_S = 20

DOCUMENTED = ["soak", "bench", "scale", "share-bench", "rebalance-bench", "fuzz", "demo", "cluster", "test", "system-packages"]


def tool_dir(tmp_path: Path, leave_out: set[str]) -> tuple[Path, Path]:
    """A directory of links to the first executable of each name on PATH, but for `leave_out`,
    and the file a `cargo` wrapper in it appends each of its calls to (the wrapper then runs the
    real cargo, so cargo stays reachable)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "cargo-calls"
    seen: set[str] = set(leave_out)
    for directory in os.environ["PATH"].split(os.pathsep):
        if not directory or not os.path.isdir(directory):
            continue
        for entry in sorted(os.listdir(directory)):
            path = os.path.join(directory, entry)
            if entry in seen or not os.path.isfile(path) or not os.access(path, os.X_OK):
                continue
            seen.add(entry)
            if entry == "cargo":
                wrapper = bin_dir / "cargo"
                wrapper.write_text(f'#!/bin/sh\necho "cargo $*" >>"{calls}"\nexec "{path}" "$@"\n')
                wrapper.chmod(0o755)
            else:
                # Linked by their PATH name, not the resolved target: rustup's proxies and other
                # multi-call binaries dispatch on the name they are called by.
                (bin_dir / entry).symlink_to(path)
    return bin_dir, calls


def fresh_env(tmp_path: Path, leave_out: set[str] = frozenset()) -> tuple[dict[str, str], Path]:
    """The environment of a fresh machine: an empty HOME, the real Rust toolchains, PATH through
    tool_dir, and SLUICE_SKIP_APT=1 so no run of these tests can install a package."""
    home = tmp_path / "home"
    home.mkdir()
    bin_dir, calls = tool_dir(tmp_path, set(leave_out))
    real_home = Path.home()
    env = {k: v for k, v in os.environ.items()
           if k not in ("SLUICE_BIN", "PYTHON", "CARGO_TARGET_DIR", "SLUICE_SKIP_APT")}
    env.update({
        "HOME": str(home),
        "CARGO_HOME": os.environ.get("CARGO_HOME", str(real_home / ".cargo")),
        "RUSTUP_HOME": os.environ.get("RUSTUP_HOME", str(real_home / ".rustup")),
        "PATH": str(bin_dir),
        "SLUICE_SKIP_APT": "1",
    })
    return env, calls


def run_script(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """Runs `bash <args>` from the repository root in its own process group, killed whole (with
    any build it started) if it outlives BOUND_S."""
    proc = subprocess.Popen(["/bin/bash", *args], cwd=WORKSPACE, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"bash {' '.join(args)} still ran after {BOUND_S} s (building?):\n{out[-2000:]}\n{err[-2000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def cargo_calls(calls: Path) -> str:
    return calls.read_text() if calls.exists() else ""


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("script", DOCUMENTED)
def test_every_documented_script_prints_its_usage_on_a_fresh_home_without_running_cargo(
        tmp_path: Path, script: str, flag: str):
    env, calls = fresh_env(tmp_path)
    p = run_script([f"scripts/{script}.sh", flag], env)
    assert p.returncode == 0, f"scripts/{script}.sh {flag} exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    assert f"scripts/{script}.sh" in p.stdout, p.stdout
    # The header comment printed as text: no `#!` line, no comment markers.
    assert not any(line.startswith("#") for line in p.stdout.splitlines()), p.stdout
    assert len(p.stdout.splitlines()) >= 3, p.stdout
    assert cargo_calls(calls) == "", f"scripts/{script}.sh {flag} ran cargo:\n{cargo_calls(calls)}"
    assert "all system packages present" not in p.stdout, "the package step ran before the usage"


@pytest.mark.parametrize("args, missing_tool, package, profile", [
    (["scripts/soak.sh", "--schedules", "1"], "cmake", "cmake", "build"),
    (["scripts/bench.sh", "--against-kafka", "--quick"], "cmake", "cmake", "build"),
    (["scripts/demo.sh", "--duration-s", "1"], "cmake", "cmake", "build"),
    (["scripts/fuzz.sh", "--runs", "1"], "g++", "g++", "fuzz"),
    (["scripts/cluster.sh", "start"], "cc", "gcc", "broker"),
], ids=["soak-without-cmake", "bench-without-cmake", "demo-without-cmake", "fuzz-without-g++",
        "cluster-start-without-cc"])
def test_a_script_missing_a_system_package_stops_before_cargo_with_the_command_to_run(
        tmp_path: Path, args: list[str], missing_tool: str, package: str, profile: str):
    env, calls = fresh_env(tmp_path, leave_out={missing_tool})
    # cluster.sh start would write the cluster's secret here if it got that far.
    env["SLUICE_CLUSTER_DIR"] = str(tmp_path / "cluster-data")
    p = run_script(args, env)
    assert p.returncode != 0, f"{args} went on without {missing_tool}:\n{p.stdout}\n{p.stderr}"
    assert cargo_calls(calls) == "", f"{args} ran cargo before stopping:\n{cargo_calls(calls)}"
    assert f"{args[0]} needs the system packages {package}" in p.stderr, p.stderr
    assert f"apt-get install -y {package}" in p.stderr, p.stderr
    assert f"bash scripts/system-packages.sh {profile}" in p.stderr, p.stderr
    assert "SLUICE_SKIP_APT=1" in p.stderr, p.stderr
    # One sentence, not a build's output.
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "cluster-data").exists()


def test_system_packages_build_profile_finds_everything_on_a_machine_that_has_it():
    env = {**os.environ, "SLUICE_SKIP_APT": "1"}  # never install from a test
    p = subprocess.run(["/bin/bash", "scripts/system-packages.sh", "build"], cwd=WORKSPACE, env=env,
                       capture_output=True, text=True, timeout=BOUND_S)
    assert p.returncode == 0, f"system-packages.sh build exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    assert "all system packages present (build)" in p.stdout, p.stdout


def test_system_packages_refuses_an_unknown_profile_naming_the_known_ones():
    p = subprocess.run(["/bin/bash", "scripts/system-packages.sh", "nosuch"], cwd=WORKSPACE,
                       env={**os.environ, "SLUICE_SKIP_APT": "1"}, capture_output=True, text=True,
                       timeout=BOUND_S)
    assert p.returncode == 2, p
    assert "no profile 'nosuch'" in p.stderr and "build" in p.stderr, p.stderr
