"""The per-benchmark verifiers environment packages (``environments/lopd_<name>/``), in the layout of verifiers'
Environments Hub (what ``vf-init`` writes and ``vf-install <name> -p environments`` installs): one package per
registered lopd id, each a ``pyproject.toml`` (hatchling, its module included) and a module with
``load_environment`` serving that id. Read statically, so it runs without verifiers; installing and running
them is ``tests/test_verifiers_cli.py``'s."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from lopd_envs.registration import ENV_ENTRY_POINTS

ENVIRONMENTS = Path(__file__).resolve().parent.parent / "environments"


def _packages() -> dict[str, Path]:
    return {p.name: p for p in sorted(ENVIRONMENTS.iterdir()) if (p / "pyproject.toml").exists()}


def test_one_package_per_lopd_id_in_the_hub_layout():
    served = {}
    for folder, path in _packages().items():
        project = tomllib.loads((path / "pyproject.toml").read_text())
        name = project["project"]["name"]
        assert name.replace("-", "_") == folder  # vf-install <name> looks in environments/<name with _>
        assert project["build-system"]["build-backend"] == "hatchling.build"
        assert f"{folder}.py" in project["tool"]["hatch"]["build"]["include"]
        assert not any(d.split("[")[0].strip() == "lopd" for d in project["project"]["dependencies"])
        module = ast.parse((path / f"{folder}.py").read_text())
        functions = {n.name: n for n in module.body if isinstance(n, ast.FunctionDef)}
        assert "load_environment" in functions
        [lopd_env] = [n.value.value for n in module.body if isinstance(n, ast.Assign)
                      and [getattr(t, "id", None) for t in n.targets] == ["LOPD_ENV"]]
        served[lopd_env] = name
        assert (path / "README.md").read_text().count(f"vf-install {name} -p environments") == 1
    assert sorted(served) == sorted(ENV_ENTRY_POINTS)
