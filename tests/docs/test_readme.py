"""The README's set-up: two commands, the first putting `nvwatch` on PATH for the later
sections, the second the one CI runs, and prerequisites that match the project."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
SETUP = README.split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]


def _sh_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL)]


def _steps(command: str) -> list[list[str]]:
    return [shlex.split(step) for step in command.split("&&")]


def test_exactly_two_setup_commands_of_one_line_each() -> None:
    blocks = _sh_blocks(SETUP)
    assert len(blocks) == 2, blocks
    assert all("\n" not in b for b in blocks), blocks


def test_the_first_installs_activates_and_serves_a_simulated_dgx_h100() -> None:
    steps = _steps(_sh_blocks(SETUP)[0])
    assert steps[0] == ["python3", "-m", "venv", ".venv"]
    activate = steps.index([".", ".venv/bin/activate"])
    install = next(i for i, s in enumerate(steps) if s[:2] == ["pip", "install"])
    serve = next(i for i, s in enumerate(steps) if s[:2] == ["nvwatch", "serve"])
    # pip and nvwatch are the venv's: activation comes before both
    assert activate < install < serve
    assert steps[serve][steps[serve].index("--simulate") + 1] == "dgx-h100"


def test_later_sections_call_nvwatch_from_the_activated_venv() -> None:
    later = README.split("## Usage", 1)[1]
    bare = [line for line in later.splitlines() if line.startswith("nvwatch ")]
    assert bare, "the usage examples lost their nvwatch lines"
    assert ". .venv/bin/activate" in SETUP  # and the set-up text says how in a new shell


def test_the_second_is_what_ci_runs() -> None:
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    (execs,) = re.findall(r"^exec (.+)$", ci, flags=re.MULTILINE)
    assert _sh_blocks(SETUP)[1] == execs.strip()


def test_prerequisites_match_the_project() -> None:
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    (minimum,) = re.findall(r'^requires-python = ">=([\d.]+)"$', pyproject, flags=re.MULTILINE)
    assert f"Python {minimum} or newer with its `venv` module" in " ".join(SETUP.split())
    script = (REPO / "scripts" / "test").read_text(encoding="utf-8")
    # root or passwordless sudo, as scripts/test runs apt-get
    assert "sudo -n" in script and "id -u" in script and "apt-get install" in script
    assert "root or passwordless `sudo`" in " ".join(SETUP.split())
    assert "VENV=${NVWATCH_VENV:-.venv}" in script  # the same .venv as the first command


_LISTEN = re.compile(
    r"(?:--listen[= ]|listen: |--web\.listen-address[= ]|-httpListenAddr[= ])(\S+)"
)


def test_every_example_listens_on_loopback() -> None:
    """An example copied into a shell exposes nothing: its listen addresses are loopback
    (the agent's default, every interface, is stated in words, not in an example)."""
    found = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.DOTALL):
            for address in _LISTEN.findall(block):
                found.append(address)
                assert address.startswith(("127.0.0.1:", "[::1]:", "HOST:")), (path, address)
    assert any(a.startswith("127.0.0.1:") for a in found)
