"""The README's code runs as written (issue 52 item 7), so the README cannot drift from the code again.

Every fenced ``python`` and ``bash`` block of README.md is executed here as it stands, from a scratch folder
(``examples/`` linked in), with lopd's own commands on ``PATH``. A ``pip install SPEC && ...`` prefix is not
re-run (the test venv has the extras; the network may not be there): the extras it names must exist in
pyproject.toml, and the rest of the line runs. A comment on the line before a block says how else to treat it:

* ``<!-- readme-test: slow -->``: it trains or generates for minutes (run with ``--runslow``);
* ``<!-- readme-test: not run: REASON -->``: it cannot run offline here (a served model, the suite itself),
  and the reason says what tests it instead.

A block with neither runs in the fast suite: a new block that cannot run must say why.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# a block inside a list item is indented, its mark with it
FENCE = re.compile(r"(?:<!--\s*readme-test:\s*(?P<mark>.*?)\s*-->[ \t]*\n)?[ \t]*```(?P<lang>python|bash)\n"
                   r"(?P<body>.*?)```", re.DOTALL)


@dataclass
class Block:
    lang: str
    body: str
    line: int
    mark: str  # "", "slow" or "not run: ..."

    @property
    def name(self) -> str:
        return f"README.md:{self.line}-{self.lang}"


def blocks(text: str | None = None) -> list[Block]:
    text = (REPO / "README.md").read_text() if text is None else text
    return [Block(m["lang"], m["body"], text[:m.start("body")].count("\n") + 1, m["mark"] or "")
            for m in FENCE.finditer(text)]


def _param(b: Block):
    if b.mark.startswith("not run"):
        return pytest.param(b, id=b.name, marks=pytest.mark.skip(reason=f"{b.name}: {b.mark}"))
    return pytest.param(b, id=b.name, marks=[pytest.mark.slow] if b.mark == "slow" else [])


def environment() -> dict[str, str]:
    """What the blocks see: this venv's commands, the shared data, no downloads; nothing else of the
    caller's environment but HOME (lopd's caches of the BFCL-v3 and SmolLM2 wheels live under it)."""
    shared = REPO.parent / "shared" / "data"
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}/usr/bin{os.pathsep}/bin",
           "HOME": os.environ.get("HOME", str(REPO)), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "MPLBACKEND": "Agg"}
    if shared.is_dir():
        env["LOPD_DATA_DIR"] = str(shared)
    return env


def without_installs(script: str) -> str:
    """The script with each ``pip install SPEC && `` prefix checked and dropped."""
    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])

    def check(m: re.Match) -> str:
        for word in shlex.split(m["args"]):
            named = re.fullmatch(r"(?:\.|lopd)\[([\w,-]+)\]", word)
            if named:
                unknown = set(named[1].split(",")) - extras
                assert not unknown, f"README installs unknown extras {unknown} (pyproject has {sorted(extras)})"
        return ""

    return re.sub(r"(?m)^\s*pip install (?P<args>[^&\n]*)&&\s*", check, script)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """One folder for every block, in README order: the evaluation block reads the training block's run."""
    path = tmp_path_factory.mktemp("readme")
    (path / "examples").symlink_to(REPO / "examples")
    return path


@pytest.mark.parametrize("block", [_param(b) for b in blocks()])
def test_readme_block_runs_as_written(block: Block, workdir: Path, bfcl_data):
    if block.lang == "python":
        cmd = [sys.executable, "-c", block.body]
    else:
        cmd = ["bash", "-euo", "pipefail", "-c", without_installs(block.body)]
    run = subprocess.run(cmd, cwd=workdir, env=environment(), capture_output=True, text=True,
                         timeout=6 * 3600 if block.mark == "slow" else 600)
    assert run.returncode == 0, f"{block.name} failed:\n{block.body}\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}"
    expected = re.search(r"#\s*(\S+) \.\.\.:", block.body)  # a block that says what it prints ("# 1.0 ...:")
    if expected:
        assert run.stdout.split()[0] == expected[1], f"{block.name} printed {run.stdout[:200]!r}"


def test_every_block_is_run_or_says_why():
    found = blocks()
    assert sum(b.lang == "python" for b in found) >= 2 and sum(b.lang == "bash" for b in found) >= 3
    for b in found:
        if b.lang == "bash":
            without_installs(b.body)  # the extras a block installs exist, run or not
        assert b.mark in ("", "slow") or re.fullmatch(r"not run: .{20,}", b.mark), \
            f"{b.name}: a block not run must give its reason ({b.mark!r})"


def test_the_parser_reads_marks_and_installs():
    text = ("a\n<!-- readme-test: slow -->\n```bash\nlopd-train x\n```\n\n```python\nprint(1)\n```\n"
            "<!-- readme-test: not run: needs a served model on port 8000 -->\n```bash\nlopd-eval\n```\n"
            "```toml\nx\n```\n")
    got = [(b.lang, b.mark, b.line) for b in blocks(text)]
    assert got == [("bash", "slow", 4), ("python", "", 8), ("bash", "not run: needs a served model on port 8000", 12)]
    item = "- a list item:\n\n  <!-- readme-test: not run: a venv of its own -->\n  ```bash\n  uv pip install x\n  ```\n"
    assert [(b.lang, b.mark) for b in blocks(item)] == [("bash", "not run: a venv of its own")]  # indented, marked
    assert without_installs('pip install torch==2.13.0 -e ".[train]" && lopd-train --help\n') == "lopd-train --help\n"
    with pytest.raises(AssertionError, match="unknown extras"):
        without_installs('pip install -e ".[trian]" && lopd-train\n')
