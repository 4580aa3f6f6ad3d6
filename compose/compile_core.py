"""Compiles the pure core (events/compiled.py lists the modules) to C with mypyc into build/native, once per change
of its sources. The core runs from source where this cannot be done (no mypyc, no C compiler): slower, the same.

    python compose/compile_core.py          # build if the sources changed since the last build
    python compose/compile_core.py --force  # build again
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from events.compiled import BUILD, MODULES, ROOT, built, digest, source_of  # noqa: E402

#: mypy's options for the build: the compiled modules type-check; what they import is read, not checked.
MYPY_OPTIONS = ["--ignore-missing-imports", "--follow-imports=silent"]


def build() -> None:
    """Compiles the modules into a fresh directory and puts it in place of the old build."""
    from mypyc.build import mypycify
    from setuptools import setup

    want = digest()
    BUILD.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=BUILD.parent, prefix=".native-") as tmp:
        out, here, log = Path(tmp) / "lib", Path.cwd(), Path(tmp) / "build.log"
        with open(log, "w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            try:
                os.chdir(ROOT)  # mypyc names the modules by their paths from here
                sources = [str(source_of(m).relative_to(ROOT)) for m in MODULES]
                extensions = mypycify([*MYPY_OPTIONS, *sources], opt_level="3", target_dir=str(Path(tmp) / "c"))
                os.chdir(tmp)  # away from the project's pyproject.toml, which setuptools would read
                setup(name="gangway-core", ext_modules=extensions, script_args=[
                    "--quiet", "build_ext", "--build-lib", str(out), "--build-temp", str(Path(tmp) / "o")])
            except (Exception, SystemExit) as error:
                raise RuntimeError(f"{error}; its output:\n{log.read_text()[-4000:]}") from error
            finally:
                os.chdir(here)
        files = {}
        for so in out.rglob("*.so"):
            relative = so.relative_to(out)
            files[".".join(relative.parent.parts + (so.name.split(".")[0],))] = str(relative)
        missing = set(MODULES) - files.keys()
        if missing:
            raise RuntimeError(f"mypyc built no module for {', '.join(sorted(missing))}")
        (out / "manifest.json").write_text(json.dumps({"digest": want, "files": files}, indent=1, sort_keys=True))
        old = BUILD.with_name(".native-old")
        shutil.rmtree(old, ignore_errors=True)
        if BUILD.exists():
            BUILD.rename(old)
        out.rename(BUILD)
        shutil.rmtree(old, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--force", action="store_true", help="build even if the build matches the sources")
    args = parser.parse_args(argv)
    if not args.force and built() == "compiled":
        return 0
    try:
        build()
    except (Exception, SystemExit) as error:  # any failure leaves the core running from source
        print(f"gangway: could not compile the core ({type(error).__name__}: {error}); it runs from source",
              file=sys.stderr)
        return 1
    print(f"gangway: compiled the core ({len(MODULES)} modules) into {BUILD.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
