"""Build hook: compile the stream reader (``charfmt/_scanner.py``) with mypyc where possible.

The compiled twin is ``charfmt._scanner_c``: a copy of ``_scanner.py`` with the SHA-256 of the
source appended as ``SOURCE_DIGEST``, compiled with mypyc (about twice as fast; see
``benchmarks/bench_stream.py``). ``charfmt.stream`` uses it only while the digest matches
the ``_scanner.py`` installed next to it, so an editable install whose source was edited
runs the source, never stale code.

Compiling needs a C compiler; without one (or with ``CHARFMT_PURE_PYTHON=1`` set), the build
says why and installs the pure-Python package, which produces the same events. A wheel
that holds the compiled twin is tagged for this interpreter and platform; a pure one stays
``py3-none-any``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = "charfmt/_scanner.py"
TWIN = "_scanner_c"


class CompileScanner(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        if os.environ.get("CHARFMT_PURE_PYTHON"):
            self.app.display_info("charfmt: CHARFMT_PURE_PYTHON is set: the stream reader stays pure Python")
            return
        root = Path(self.root)
        work = Path(tempfile.mkdtemp(prefix="charfmt-mypyc-"))
        try:
            built = _compile(root, work)
        except Exception as e:  # no compiler, no mypy: the pure-Python package works the same
            self.app.display_warning(
                f"charfmt: could not compile the stream reader with mypyc ({type(e).__name__}: {e}); "
                "installing it as pure Python (same events, about half the speed)"
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
                shutil.copy2(path, root / relative)
            else:
                build_data["force_include"][str(path)] = relative
        self.app.display_info(f"charfmt: compiled the stream reader with mypyc ({len(built)} files)")

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        work = getattr(self, "_work", None)
        if work is not None:  # the wheel holds the compiled files now
            shutil.rmtree(work, ignore_errors=True)


def _compile(root: Path, work: Path) -> list[Path]:
    """Compile a digest-stamped copy of ``_scanner.py`` as ``charfmt._scanner_c``; the built files."""
    # Build dependencies (pyproject.toml), imported here: without them the build stays pure Python.
    from mypyc.build import mypycify  # noqa: PLC0415
    from setuptools import Distribution  # type: ignore[import-untyped]  # noqa: PLC0415

    source = (root / SOURCE).read_bytes()
    tree = work / "src"
    # The whole package, so that mypy (which mypyc runs first) sees the types the reader uses.
    shutil.copytree(root / "charfmt", tree / "charfmt", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    digest = hashlib.sha256(source).hexdigest()
    twin = tree / "charfmt" / f"{TWIN}.py"
    twin.write_bytes(source + f"\n\nSOURCE_DIGEST: Final = {digest!r}\n".encode())
    cwd = os.getcwd()
    os.chdir(tree)
    try:
        extensions = mypycify(
            ["--ignore-missing-imports", "--follow-imports=silent", f"charfmt/{TWIN}.py"],
            opt_level="3",
            target_dir=str(work / "c"),
        )
        dist = Distribution({"name": "charfmt-scanner", "ext_modules": extensions, "script_name": "setup.py"})
        command = dist.get_command_obj("build_ext")
        command.build_lib = str(work / "lib")
        command.build_temp = str(work / "tmp")
        command.ensure_finalized()
        command.run()
    finally:
        os.chdir(cwd)
    built = sorted(p for p in (work / "lib").rglob("*") if p.is_file())
    if not any(p.name.startswith(TWIN + ".") for p in built):
        raise RuntimeError(f"mypyc built no {TWIN} module")
    print(f"charfmt: {', '.join(p.name for p in built)} ({sys.implementation.cache_tag})", file=sys.stderr)
    return built
