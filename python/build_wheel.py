#!/usr/bin/env python3
"""Build the toolyard wheel: the Python package plus the `toolyard` binary, no build backend.

A wheel is a zip with the package, `NAME-VERSION.data/scripts/` (pip installs those files into
the environment's bin directory, executable, as ruff's and uv's binaries are) and a
`.dist-info` with METADATA, WHEEL and RECORD (every file's sha256 and size).

Usage: build_wheel.py --binary PATH --version X.Y.Z --out DIR   (prints the wheel's path)
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import platform
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAME = "toolyard"


def platform_tag() -> str:
    """manylinux_X_Y_ARCH for this machine's glibc (the binary needs at most it), else linux."""
    arch = platform.machine()
    lib, ver = platform.libc_ver()
    if lib == "glibc" and ver:
        major, minor = ver.split(".")[:2]
        return f"manylinux_{major}_{minor}_{arch}"
    return f"linux_{arch}"


def digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build(binary: Path, version: str, out: Path) -> Path:
    tag = f"py3-none-{platform_tag()}"
    dist_info = f"{NAME}-{version}.dist-info"
    data_scripts = f"{NAME}-{version}.data/scripts"
    readme = (HERE / "README.md").read_text()
    files: list[tuple[str, bytes, int]] = []
    for py in sorted((HERE / NAME).glob("*.py")):
        files.append((f"{NAME}/{py.name}", py.read_bytes(), 0o644))
    files.append((f"{NAME}/py.typed", b"", 0o644))
    files.append((f"{data_scripts}/toolyard", binary.read_bytes(), 0o755))
    metadata = "\n".join([
        "Metadata-Version: 2.1",
        f"Name: {NAME}",
        f"Version: {version}",
        "Summary: Safe, fast, faithful tools for LLM coding agents: the toolyard binary and "
        "seed 002's Python tool API on it",
        "Requires-Python: >=3.9",
        "License: MIT OR Apache-2.0",
        "Description-Content-Type: text/markdown",
        "",
        readme,
    ])
    files.append((f"{dist_info}/METADATA", metadata.encode(), 0o644))
    wheel = f"Wheel-Version: 1.0\nGenerator: toolyard build_wheel.py\nRoot-Is-Purelib: false\nTag: {tag}\n"
    files.append((f"{dist_info}/WHEEL", wheel.encode(), 0o644))
    record = "".join(f"{n},{digest(d)},{len(d)}\n" for n, d, _ in files) + f"{dist_info}/RECORD,,\n"
    files.append((f"{dist_info}/RECORD", record.encode(), 0o644))
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{NAME}-{version}-{tag}.whl"
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data, mode in files:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    os.replace(tmp, path)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", type=Path, required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    print(build(a.binary, a.version, a.out))


if __name__ == "__main__":
    main()
