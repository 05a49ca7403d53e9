"""``lopd``: inspect the environments and fetch their data ahead of time.

    lopd envs list                 ids, categories, task counts, and what data each env loaded
    lopd assets fetch bfcl_v3      download (or find) a benchmark's files into the cache
    lopd assets where acebench     print where each file of a benchmark resolves to
    lopd sandbox build-image       build the Docker backend's image offline from this host's Python
"""

from __future__ import annotations

import argparse
import collections
import sys
from collections.abc import Sequence
from typing import Any

from tqdm import tqdm

from lopd_envs import assets
from lopd_envs.registration import ENV_ENTRY_POINTS


def _load_class(entry_point: str):
    module, _, name = entry_point.partition(":")
    mod = __import__(module, fromlist=[name])
    return getattr(mod, name)


# Envs with several datasets under one id list each (ACEBench's languages).
_VARIANTS: dict[str, list[dict]] = {"lopd/ACEBench-v0": [{"language": "en"}, {"language": "zh"}]}


def envs_list(data_dir: str | None) -> int:
    for env_id, entry_point in ENV_ENTRY_POINTS.items():
        for variant in _VARIANTS.get(env_id, [{}]):
            _describe(env_id, entry_point, variant, data_dir)
    return 0


def _describe(env_id: str, entry_point: str, variant: dict, data_dir: str | None) -> None:
    label = env_id + "".join(f" {k}={v}" for k, v in variant.items())
    try:
        env = _load_class(entry_point)(category="all", data_dir=data_dir, **variant)
    except assets.AssetMissing as exc:
        first = str(exc).splitlines()[0]
        print(f"{label}\n  data: MISSING ({first})")
        return
    except Exception as exc:  # noqa: BLE001 - one broken suite must not hide the others
        print(f"{label}\n  error: {type(exc).__name__}: {exc}")
        return
    counts = collections.Counter(t.category for t in env.tasks)
    origin = getattr(env, "data_origin", None) or "data found"  # an env may say what it actually loaded
    print(f"{label}  ({len(env.tasks)} tasks, {origin})")
    for category, n in counts.items():
        print(f"  {category:<40} {n:>6}")


def assets_fetch(names: Sequence[str]) -> int:
    names = list(assets.benchmarks()) if list(names) == ["all"] else names
    status = 0
    for name in names:
        if name not in assets.benchmarks():
            print(f"unknown benchmark {name!r}; choose from: {', '.join(assets.benchmarks())}, all", file=sys.stderr)
            return 2
        bench = assets.benchmarks()[name]
        try:
            paths = [assets.locate(bench, rel) for rel in tqdm(list(bench.files), desc=f"fetch {name}", unit="file")]
            folders = sorted({str(p.parent) for p in paths})
            print(f"{name}: ready ({len(paths)} files) in {', '.join(folders)}")
        except assets.AssetMissing as exc:
            print(str(exc), file=sys.stderr)
            status = 1
    return status


def assets_where(name: str, data_dir: str | None) -> int:
    bench = assets.benchmarks().get(name)
    if bench is None:
        print(f"unknown benchmark {name!r}; choose from: {', '.join(assets.benchmarks())}", file=sys.stderr)
        return 2
    missing = 0
    for rel, source in bench.files.items():
        found, stand_in = assets.find_local(bench, rel, data_dir)  # the env's own resolution, no download
        if found is None:
            missing += 1
            print(f"{rel}: missing (source: {assets.describe(source)})")
        else:
            print(f"{rel}: {found}" + (" (a stand-in: the env loads it in place of this file)" if stand_in else ""))
    if missing and bench.fallback:
        print(f"without the missing files the env loads: {bench.fallback}")
    return 0


class OneLineParser(argparse.ArgumentParser):
    """argparse's errors (unknown option, bad choice, missing value) as one line and exit 2, not usage + error;
    its sub-commands' parsers are of the same class."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="lopd", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="group", required=True)
    envs = sub.add_parser("envs", help="list the environments").add_subparsers(dest="verb", required=True)
    listing = envs.add_parser("list", help="ids, categories, task counts, what data each env loaded")
    listing.add_argument("--data-dir", default=None, help=f"data root (default: ${assets.DATA_ENV}, then the cache)")
    group = sub.add_parser("assets", help="benchmark data files").add_subparsers(dest="verb", required=True)
    fetch = group.add_parser("fetch", help="download or locate a benchmark's files into the cache "
                                           f"(cache: ${assets.CACHE_ENV} or ~/.cache/lopd)")
    fetch.add_argument("names", nargs="+", help=f"benchmarks: {', '.join(assets.benchmarks())}, or all")
    where = group.add_parser("where", help="where each file of a benchmark resolves to")
    where.add_argument("name")
    where.add_argument("--data-dir", default=None)
    from lopd_envs.sandbox import docker_image
    docker_image.add_commands(sub)
    for name, entry in plugin_commands().items():  # each takes the rest of the command line itself
        sub.add_parser(name, add_help=False, help=f"{PLUGIN_HELP.get(name, 'a command')} ({entry.value}; "
                                                  f"lopd {name} --help)")
    return parser


#: entry-point group through which other packages add ``lopd`` commands (``lopd bank build`` comes from the
#: trainer), so this package, installable alone, never imports them
PLUGIN_GROUP = "lopd.commands"
PLUGIN_HELP = {"bank": "experience banks for lopd-train: lopd bank build"}


def plugin_commands() -> dict[str, Any]:
    """The ``lopd.commands`` entry points installed here, by command name."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=PLUGIN_GROUP)}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    plugins = plugin_commands()
    if argv[:1] and argv[0] in plugins:  # another package's command parses the rest of the line itself
        try:
            command = plugins[argv[0]].load()
        except ImportError as e:
            raise SystemExit(f"lopd {argv[0]} needs {plugins[argv[0]].value.split(':')[0].split('.')[0]}: "
                             f"pip install 'lopd[train]' ({e})") from e
        return command(argv[1:])
    args = build_parser().parse_args(argv)
    if args.group == "envs":
        return envs_list(args.data_dir)
    if args.group == "sandbox":
        from lopd_envs.sandbox import docker_image
        return docker_image.command(args)
    if args.verb == "fetch":
        return assets_fetch(args.names)
    return assets_where(args.name, args.data_dir)


if __name__ == "__main__":
    sys.exit(main())
