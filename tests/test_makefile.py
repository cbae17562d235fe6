"""`make test` installs system packages only when they are missing (Prometheus, Redis, Chromium,
PostgreSQL) and never ends a process it did not start (Debian's prometheus, redis-server and
postgresql packages would start daemons: a policy-rc.d keeps them from it)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "install-system-deps.sh"


def _sandbox(tmp_path: Path, *, with_prometheus: bool, with_redis: bool = True,
             with_chromium: bool = True, with_postgresql: bool = True) -> dict[str, str]:
    """A PATH with the shell tools the script needs, a fake apt-get that notes its arguments and
    the policy in force while it runs, and (optionally) fake promtool/prometheus, redis-server,
    chromium and PostgreSQL's initdb (where Debian puts it, in a folder of the sandbox's own)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "id", "printf", "tee", "chmod", "rm", "env", "cat"):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    log = tmp_path / "apt.log"
    policy = tmp_path / "policy-rc.d"
    (bin_dir / "apt-get").write_text(
        f"#!/bin/sh\necho \"$@\" >> {log}\nif [ -e {policy} ]; then cat {policy} >> {log}; fi\n")
    (bin_dir / "apt-get").chmod(0o755)
    tools = ((("promtool", "prometheus") if with_prometheus else ()) + (("redis-server",) if with_redis else ())
             + (("chromium",) if with_chromium else ()))
    for tool in tools:
        (bin_dir / tool).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / tool).chmod(0o755)
    postgresql = tmp_path / "postgresql"
    if with_postgresql:
        (postgresql / "15" / "bin").mkdir(parents=True)
        (postgresql / "15" / "bin" / "initdb").write_text("#!/bin/sh\nexit 0\n")
        (postgresql / "15" / "bin" / "initdb").chmod(0o755)
    return {"PATH": str(bin_dir), "POLICY_RC_D": str(policy), "HOME": str(tmp_path), "POSTGRESQL_LIB": str(postgresql)}


def test_prometheus_is_installed_when_missing_without_starting_its_daemon(tmp_path: Path) -> None:
    if os.geteuid() != 0:  # the script would ask for sudo; this check runs where make test runs as root
        env = _sandbox(tmp_path, with_prometheus=True)
    else:
        env = _sandbox(tmp_path, with_prometheus=False)
    done = subprocess.run(["sh", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    log = tmp_path / "apt.log"
    if os.geteuid() == 0:
        text = log.read_text()
        assert "install -y -qq --no-install-recommends prometheus" in text
        assert "exit 101" in text  # the policy was in force during the install
        assert not (tmp_path / "policy-rc.d").exists()  # and removed after it


@pytest.mark.parametrize("missing", ["redis-server", "chromium", "postgresql"])
def test_only_the_missing_package_is_installed(tmp_path: Path, missing: str) -> None:
    if os.geteuid() != 0:  # as above: only where make test runs as root
        return
    env = _sandbox(tmp_path, with_prometheus=True, with_redis=missing != "redis-server",
                   with_chromium=missing != "chromium", with_postgresql=missing != "postgresql")
    done = subprocess.run(["sh", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    installs = [line for line in (tmp_path / "apt.log").read_text().splitlines() if line.startswith("install ")]
    assert installs and installs[0].split()[-1] == missing
    assert not {"prometheus", "redis-server", "chromium", "postgresql"} - {missing} & set(installs[0].split())


def test_nothing_is_installed_when_prometheus_redis_chromium_and_postgresql_are_there(tmp_path: Path) -> None:
    env = _sandbox(tmp_path, with_prometheus=True)
    done = subprocess.run(["sh", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "apt.log").exists()


def test_no_process_is_ended_by_the_build() -> None:
    for path in (ROOT / "Makefile", SCRIPT, ROOT / ".ci" / "run"):
        text = path.read_text()
        for word in ("pkill", "killall", "systemctl stop", "kill "):
            assert word not in text, f"{path.name} must not end processes it did not start ({word!r})"
