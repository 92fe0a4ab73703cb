"""Generates the gRPC stubs from the repository's proto/ into the build.

The generated modules (package ``baton.v1``) are never committed: every
build (``pip install clients/python``) regenerates them with the pinned
grpcio-tools from pyproject.toml.
"""

import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PROTO_ROOT = Path(__file__).resolve().parent.parent.parent / "proto"


def generate(out: Path) -> None:
    from grpc_tools import protoc  # a build requirement

    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / "baton" / "v1").glob("*.proto"))
    if not protos:
        raise SystemExit(f"no .proto files under {PROTO_ROOT}: build from a checkout of the repository")
    out.mkdir(parents=True, exist_ok=True)
    include = Path(protoc.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for package in (out / "baton", out / "baton" / "v1"):
        (package / "__init__.py").touch()
    (out / "baton" / "v1" / "py.typed").touch()


class BuildWithStubs(build_py):
    def run(self) -> None:
        generate(Path(self.build_lib))
        super().run()


# Build output goes to a temporary folder, not into the checkout
# (`pip install ./clients/python` leaves no build/ or *.egg-info behind).
WORK = Path(tempfile.mkdtemp(prefix="baton-client-build-"))

setup(
    cmdclass={"build_py": BuildWithStubs},
    options={"build": {"build_base": str(WORK / "build")}, "egg_info": {"egg_base": str(WORK)}},
)
