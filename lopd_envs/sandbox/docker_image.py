"""Build the Docker backend's image offline, from this host's own interpreter (``lopd sandbox build-image``).

Images cannot be pulled on many training machines, and a pulled ``python:*`` image would run a different
interpreter than the one the scorer's reference run (and bubblewrap) uses. So the image is a tarball,
imported with ``docker import``, holding exactly what :mod:`lopd_envs.sandbox.interpreter` resolves for
bubblewrap: the real interpreter binary, its standard library (its tests left out), the shared
libraries ``ldd`` names for the binary and its extension modules, the top-level ``/lib``-style links, a
``python`` link, and the empty mount points the container needs. Nothing else of the host goes in. The
interpreter binary is execute-only (mode 0711): the kernel makes every process started from an
unreadable binary non-dumpable, so a program cannot ptrace the run's supervisor or open its descriptors
(the supervisor sets this itself, through ``ctypes``, in images where the binary is readable).

Extra folders (``extra=``, e.g. numpy's package folder for LiveCodeBench) are copied at their host paths or
at a path given as ``FOLDER:DEST`` (where bubblewrap binds them), with the shared libraries their extension
modules link, so a harness that adds that path to ``sys.path`` works the same under both backends. The
image's labels record the interpreter's version and the extra paths (:attr:`DockerSandbox.image_extras`).
"""

from __future__ import annotations

import io
import os
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from lopd_envs.sandbox import interpreter

DEFAULT_TAG = "lopd-sandbox:py{major}.{minor}"
#: Left out of the standard library: its own test suite and GUI toolkits (a third of its size).
SKIP_DIRS = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "site-packages", "dist-packages"}
MOUNT_POINTS = ("sandbox", "proc", "dev", "sys", "etc")
PATH = "/usr/local/bin:/usr/bin:/bin"
#: Mounted over in every container: an extra folder under one of these would be hidden.
COVERED = ("/tmp", "/sandbox", "/dev", "/proc", "/sys")


def default_tag(python: interpreter.Interpreter | None = None) -> str:
    """``lopd-sandbox:py3.11`` for the interpreter the sandbox resolves here."""
    python = python or interpreter.resolve(True)
    return DEFAULT_TAG.format(major=python.version[0], minor=python.version[1])


def _real(path: str, links: Sequence[tuple[str, str]]) -> str:
    """``path`` with top-level links such as ``/lib -> usr/lib`` resolved (a tar member cannot sit inside a
    member that is a link)."""
    for target, link in links:
        if path == link or path.startswith(link + "/"):
            return "/" + os.path.normpath(os.path.join(os.path.dirname(link), target)).lstrip("/") + path[len(link):]
    return path


def _files_under(folder: str) -> Iterable[str]:
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(files):
            yield os.path.join(root, name)


def parse_extra(spec: str) -> tuple[str, str]:
    """``FOLDER`` (copied at its host path) or ``FOLDER:DEST`` (copied to ``DEST`` in the image)."""
    src, _, dest = spec.partition(":")
    src = os.path.realpath(src)
    dest = dest or src
    if not os.path.isdir(src):
        raise FileNotFoundError(f"not a folder: {src}")
    if not os.path.isabs(dest) or any(dest == m or dest.startswith(m + "/") for m in COVERED):
        raise ValueError(f"{dest} must be an absolute path outside {', '.join(COVERED)}, which the container "
                         "covers with its own mounts")
    return src, os.path.normpath(dest)


def image_files(python: interpreter.Interpreter, extra: Sequence[str] = ()) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """``{path in the image: host file}`` and the ``(link, target)`` symlinks to create (absolute paths)."""
    exe = os.path.realpath(python.executable)
    files: dict[str, str] = {exe: exe}
    for folder in [p for p in python.paths if os.path.isdir(p) and not _is_library_folder(p)]:
        files.update((f, f) for f in _files_under(folder))
    for src, dest in map(parse_extra, extra):
        files.update((dest + f[len(src):], f) for f in _files_under(src))
    modules = [f for f in files.values() if ".so" in os.path.basename(f)]
    links: dict[str, str] = {}
    for lib in interpreter.shared_libraries([python.executable, *modules]):
        named, real = os.path.normpath(_real(lib, python.symlinks)), os.path.realpath(lib)
        files.setdefault(real, real)
        if named != real and named not in files:
            links[named] = real
    links["/usr/bin/python"] = python.executable
    links["/usr/bin/python3"] = python.executable
    for target, link in python.symlinks:
        links[link] = target
    return {k: v for k, v in sorted(files.items()) if os.path.isfile(v)}, sorted(links.items())


def _is_library_folder(path: str) -> bool:
    """Folders of shared libraries (``/usr/lib/x86_64-linux-gnu``): only the libraries ``ldd`` names go in."""
    return any(part.endswith("-linux-gnu") for part in Path(path).parts) or path.rstrip("/") in (
        "/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib")


def write_tarball(out: Path, python: interpreter.Interpreter, extra: Sequence[str] = ()) -> int:
    """Write the image's root file system to ``out``; returns the number of files."""
    files, links = image_files(python, extra)
    with tarfile.open(out, "w") as tar:
        seen_dirs: set[str] = set()

        def parents(path: str) -> None:
            parts = Path(path).parts[1:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in seen_dirs:
                    seen_dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)

        for name in MOUNT_POINTS:
            parents(f"/{name}/x")
        info = tarfile.TarInfo("tmp")  # Docker gives a tmpfs the mode of the folder it covers
        info.type, info.mode = tarfile.DIRTYPE, 0o1777
        tar.addfile(info)
        seen_dirs.add("tmp")
        for target, path in files.items():
            parents(target)
            info = tar.gettarinfo(path, arcname=target.lstrip("/"))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode |= 0o444 | (0o111 if info.mode & 0o100 else 0)
            if target == os.path.realpath(python.executable):
                info.mode = 0o711  # unreadable: every process it starts is non-dumpable (no ptrace, no /proc fds)
            with open(path, "rb") as f:
                tar.addfile(info, f)
        for link, target in links:
            parents(link)
            info = tarfile.TarInfo(link.lstrip("/"))
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            tar.addfile(info)
        info = tarfile.TarInfo("etc/passwd")
        data = b"root:x:0:0::/:/bin/false\nnobody:x:65534:65534::/tmp:/bin/false\n"
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    return len(files)


def build_image(tag: str | None = None, extra: Sequence[str] = (), client=None) -> str:
    """Import the image into the local engine (``docker import``, no registry needed); returns its tag."""
    import docker

    python = interpreter.resolve(True)
    tag = tag or default_tag(python)
    extras = ",".join(parse_extra(e)[1] for e in extra)
    repository, _, version = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
    client = client or docker.from_env(timeout=600)
    with tempfile.TemporaryDirectory(prefix="lopd-image-") as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        write_tarball(tarball, python, extra)
        client.api.import_image_from_file(
            str(tarball), repository=repository, tag=version,
            changes=[f"ENV PATH={PATH}", "ENV LANG=C.UTF-8", "WORKDIR /sandbox",
                     f"LABEL lopd.python={'.'.join(map(str, python.version))} lopd.executable={python.executable}"
                     f" lopd.extra={extras or '-'}",
                     f'CMD ["{python.executable}", "-I", "-S", "-c", "print(1)"]'])
    client.images.get(tag)  # raises if the import did not produce it
    return tag


# ------------------------------------------------------------------------------ `lopd sandbox build-image`

def add_commands(sub) -> None:
    """Add ``lopd sandbox build-image`` to the ``lopd`` parser's sub-commands."""
    group = sub.add_parser("sandbox", help="sandbox backends").add_subparsers(dest="verb", required=True)
    build = group.add_parser("build-image", help="build the Docker backend's image offline from this host's Python")
    build.add_argument("--tag", default=None, help="image tag (default: lopd-sandbox:py<major>.<minor>)")
    build.add_argument("--extra", action="append", default=[], metavar="FOLDER",
                       help="also copy this folder (e.g. numpy's package folder), at its host path or, as "
                            "FOLDER:DEST, at DEST; repeatable")


def command(args) -> int:
    """Run ``lopd sandbox build-image``; a missing engine or SDK is one clear line, not a traceback."""
    try:
        tag = build_image(args.tag, args.extra)
    except ImportError:
        print("the docker SDK is not installed (pip install 'lopd[docker]')", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - engine unreachable, bad folder, import refused
        print(f"could not build the sandbox image: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(f"built {tag}; the docker backend uses it by default (or set LOPD_SANDBOX_IMAGE={tag})")
    return 0
