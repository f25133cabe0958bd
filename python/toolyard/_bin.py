"""Where the `toolyard` binary is: the one this wheel installed, else `TOOLYARD_BIN`, else PATH."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

_EXE = "toolyard.exe" if sys.platform == "win32" else "toolyard"


def find_toolyard_bin() -> str:
    """Return the path of the `toolyard` binary.

    Looked for, in order: `$TOOLYARD_BIN`; the scripts directory of the environment this package
    is installed in (where the wheel puts the binary, as ruff and uv do); the user scheme's
    scripts directory (`pip install --user`); `PATH`. Raises FileNotFoundError naming every place
    looked at when none has it.
    """
    looked: list[str] = []
    env = os.environ.get("TOOLYARD_BIN")
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return env
        looked.append(f"$TOOLYARD_BIN={env} (not an executable file)")
    dirs = [sysconfig.get_path("scripts")]
    user_scheme = f"{os.name}_user"
    if user_scheme in sysconfig.get_scheme_names():
        dirs.append(sysconfig.get_path("scripts", scheme=user_scheme))
    # The environment this module lives in, also when another interpreter imported it.
    pkg_root = Path(__file__).resolve().parent.parent
    for up in (pkg_root.parent.parent.parent, pkg_root.parent.parent):
        dirs.append(str(up / ("Scripts" if sys.platform == "win32" else "bin")))
    for d in dirs:
        if not d:
            continue
        candidate = os.path.join(d, _EXE)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
        looked.append(candidate)
    on_path = shutil.which(_EXE)
    if on_path:
        return on_path
    looked.append("PATH")
    raise FileNotFoundError(
        "no toolyard binary found; looked at " + ", ".join(looked)
        + ". Install the toolyard wheel (it carries the binary), or set TOOLYARD_BIN"
    )


def main() -> None:
    """`python -m toolyard`: run the binary with this process's arguments."""
    binary = find_toolyard_bin()
    if sys.platform == "win32":
        import subprocess

        raise SystemExit(subprocess.call([binary, *sys.argv[1:]]))
    os.execv(binary, [binary, *sys.argv[1:]])
