"""Build hook: compile the stream reader (``charfmt/_stream/``) and the strict reader (``charfmt/_strict/``) with mypyc.

Each compiled twin (``charfmt._twin.TWINS``: ``charfmt._stream_c``, ``charfmt._strict_c``) is a
copy of its package whose ``__init__.py`` ends with a SHA-256 of the package's modules (every
``charfmt/**/*.py``: mypyc inlines ``Final`` constants of the modules a reader imports) as
``SOURCE_DIGEST``, all its modules compiled with mypyc as one group (over twice as fast for
the stream reader; see ``benchmarks/bench_stream.py`` and ``benchmarks/bench_parse.py``): one
extension per module, ``charfmt/<twin>/<module>``, and the group's shared library,
``charfmt/<twin>__mypyc``. Both groups come from one mypy run. ``charfmt.stream`` and
``charfmt.parser`` use a twin only while its digest matches the package installed around it,
so an editable install whose source was edited (any module) runs the source, never stale
code. The digest and the reading of ``CHARFMT_PURE_PYTHON`` are ``charfmt/_twin.py``, loaded
here by its path: one rule for the build and the import.

Compiling needs a C compiler and mypy (with setuptools), which the hook asks for as build
dependencies; without a compiler the build says why and installs the pure-Python package,
which produces the same events and replies. With ``CHARFMT_PURE_PYTHON=1`` (or ``true``,
``yes``, ``on``) the hook asks for no dependency and compiles nothing: what an offline install
without mypy in its wheelhouse needs. An editable build first removes the compiled files an
earlier editable build left in the source tree. A wheel that holds the compiled twins is
tagged for this interpreter and platform; a pure one stays ``py3-none-any``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PACKAGE = "charfmt"
EARLIER_TWINS = ("_scanner_c",)
"""Names of the twin in earlier versions (a single module then): an editable build removes their files too."""
BUILD_DEPENDENCIES = ["mypy>=1.10", "setuptools>=69"]
"""What compiling needs (mypyc comes with mypy); asked for only when it will be used."""


@cache
def _rules(root: Path) -> ModuleType:
    """``charfmt/_twin.py`` (the digest, the ``CHARFMT_PURE_PYTHON`` rule), loaded by path, not as ``charfmt``."""
    spec = importlib.util.spec_from_file_location("_charfmt_build_twin", root / PACKAGE / "_twin.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pure_python_requested(root: Path) -> bool:
    return bool(_rules(root).pure_python_requested())


def _stale_products(root: Path) -> list[Path]:
    """Compiled files of the twins in the source tree (left by an editable build): so, pyd.

    Their modules (``charfmt/<twin>/``) and shared libraries (``charfmt/<twin>__mypyc``),
    and the files of the twins of earlier versions (``charfmt/_scanner_c*``).
    """
    package, twins = root / PACKAGE, _twin_names(root)
    found = [p for name in (*twins, *EARLIER_TWINS) for p in package.glob(f"{name}*")]
    for twin in twins:
        found += (package / twin).rglob("*")
    return sorted(p for p in found if p.suffix in (".so", ".pyd") and p.is_file())


def _twin_names(root: Path) -> list[str]:
    """The compiled twins' package names (``_stream_c``, ``_strict_c``), from ``charfmt._twin.TWINS``."""
    return [str(twin) for twin in _rules(root).TWINS.values()]


class CompileScanner(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def dependencies(self) -> list[str]:
        """mypy and setuptools, unless ``CHARFMT_PURE_PYTHON`` asks for pure Python (offline installs)."""
        return [] if _pure_python_requested(Path(self.root)) else list(BUILD_DEPENDENCIES)

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        root = Path(self.root)
        if version == "editable":
            # An editable install imports the source tree, so the twin an earlier editable build
            # put there would still be found: remove it first, whatever is built next.
            for stale in _stale_products(root):
                stale.unlink()
                self.app.display_info(f"charfmt: removed {stale.relative_to(root).as_posix()} (an earlier build's)")
            for name in _twin_names(root):
                twin = root / PACKAGE / name
                if twin.is_dir() and not any(twin.iterdir()):
                    twin.rmdir()  # (only ever made by a build, to hold those files)
        if _pure_python_requested(root):
            self.app.display_info("charfmt: CHARFMT_PURE_PYTHON is set: the stream and strict readers stay pure Python")
            return
        work = Path(tempfile.mkdtemp(prefix="charfmt-mypyc-"))
        try:
            built = _compile(root, work)
        except Exception as e:  # no compiler, no mypy: the pure-Python package works the same
            self.app.display_warning(
                f"charfmt: could not compile the stream and strict readers with mypyc ({type(e).__name__}: {e}); "
                "installing them as pure Python (same events and replies, slower)"
            )
            shutil.rmtree(work, ignore_errors=True)
            return
        self._work = work
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        for path in built:
            relative = path.relative_to(work / "lib").as_posix()
            if version == "editable":
                # An editable install imports the source tree: the twin goes next to the source
                # (ignored by git; the digest keeps it from running once the source changes).
                (root / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, root / relative)
            else:
                build_data["force_include"][str(path)] = relative
        self.app.display_info(f"charfmt: compiled the stream and strict readers with mypyc ({len(built)} files)")

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        work = getattr(self, "_work", None)
        if work is not None:  # the wheel holds the compiled files now
            shutil.rmtree(work, ignore_errors=True)


def _compile(root: Path, work: Path) -> list[Path]:
    """Compile a digest-stamped copy of each twin's package (``charfmt._twin.TWINS``), one mypy run; the built files."""
    # Build dependencies (CompileScanner.dependencies), imported here: without them the build stays pure Python.
    from mypyc.build import mypycify  # noqa: PLC0415
    from setuptools import Distribution  # type: ignore[import-untyped]  # noqa: PLC0415

    rules = _rules(root)
    twins = {str(source): str(name) for source, name in rules.TWINS.items()}
    tree = work / "src"
    package = tree / PACKAGE
    # The whole package, so that mypy (which mypyc runs first) sees the types the readers use.
    skip = shutil.ignore_patterns("*.so", "*.pyd", "__pycache__", *twins.values())
    shutil.copytree(root / PACKAGE, package, ignore=skip)
    # The digest of the very modules compiled (as charfmt._twin.load computes it at import).
    digest = str(rules.package_digest(package))
    groups: list[tuple[list[str], str | None]] = []  # (the type mypycify's separate= takes)
    for source, name in twins.items():
        twin = package / name
        shutil.copytree(package / source, twin)  # (its imports within itself are relative: the twin imports its own)
        init = twin / "__init__.py"
        init.write_bytes(init.read_bytes() + f"\n\nSOURCE_DIGEST = {digest!r}\n".encode())
        # One group per twin: charfmt/<twin>__mypyc is its shared library.
        groups.append(([f"{PACKAGE}/{name}/{p.name}" for p in sorted(twin.glob("*.py"))], f"{PACKAGE}.{name}"))
    cwd = os.getcwd()
    os.chdir(tree)
    try:
        extensions = mypycify(
            ["--ignore-missing-imports", "--follow-imports=silent", *(f for files, _ in groups for f in files)],
            opt_level="3",
            target_dir=str(work / "c"),
            separate=groups,
        )
        dist = Distribution({"name": "charfmt-readers", "ext_modules": extensions, "script_name": "setup.py"})
        command = dist.get_command_obj("build_ext")
        command.build_lib = str(work / "lib")
        command.build_temp = str(work / "tmp")
        command.ensure_finalized()
        command.run()
    finally:
        os.chdir(cwd)
    built = sorted(p for p in (work / "lib").rglob("*") if p.is_file())
    for files, group in groups:
        name = str(group).split(".")[-1]
        modules = {Path(f).stem for f in files}
        compiled = {p.name.split(".")[0] for p in built if p.parent.name == name}
        if compiled != modules:
            raise RuntimeError(f"mypyc built no {name} module for {sorted(modules - compiled)}")
    print(f"charfmt: {', '.join(p.name for p in built)} ({sys.implementation.cache_tag})", file=sys.stderr)
    return built
