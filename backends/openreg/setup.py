"""Builds torch_openreg._C, the one shared library behind the openreg device.

The library has no Python entry point of its own: loading it runs the static
registrations (allocator, device guard, hooks, kernels), and Python reaches
the runtime through torch.ops.openreg.*. It is built against the torch that is
installed, hence `pip install --no-build-isolation`.

Build time is dominated by parsing torch's headers, once per translation
unit. So by default every folder of csrc/ is compiled as one "unity"
translation unit (generated under build/, two in total, one per core);
OPENREG_UNITY=0 compiles file by file instead, which suits incremental
development with ccache.

The wheel's metadata records the torch it was compiled against, in
torch_openreg-*.dist-info/torch_build.json: the C++ ABI is that torch's, so
a tool that finds the wheel failing with an undefined symbol can tell a torch
mismatch from a bug of the backend.

pip asks for the metadata (egg_info, dist_info) in a process of its own, before
the build: that process does not import torch, which would be most of its time.
It reads torch's version from torch/version.py instead.
"""

import glob
import importlib.util
import json
import os
import runpy
import sys

from setuptools import Extension, setup
from setuptools.command.egg_info import egg_info

HERE = os.path.dirname(os.path.abspath(__file__))
PARTS = ("runtime", "aten")


def part_sources(part):
    # setuptools wants paths relative to this file.
    return sorted(glob.glob(f"csrc/{part}/*.cpp", root_dir=HERE))


def unity_sources():
    out_dir = os.path.join("build", "unity")
    os.makedirs(os.path.join(HERE, out_dir), exist_ok=True)
    sources = []
    for part in PARTS:
        # build/unity/<part>.cpp of relative includes, and nothing else: the same sources in
        # another directory (a copy in a cache, another checkout, a vendor's repository built
        # from these sources) make the same unit, under the same name, which ccache then finds.
        path = os.path.join(out_dir, f"{part}.cpp")
        text = "".join(
            f'#include "{os.path.relpath(os.path.join(HERE, src), os.path.join(HERE, out_dir))}"\n'
            for src in part_sources(part)
        )
        full = os.path.join(HERE, path)
        # Rewrite only on change, so ninja does not rebuild needlessly.
        if not os.path.exists(full) or open(full).read() != text:
            with open(full, "w") as f:
                f.write(text)
        sources.append(path)
    return sources


TORCH_BUILD_FILE = "torch_build.json"


class egg_info_with_torch_build(egg_info):
    """egg_info that also writes torch_build.json; bdist_wheel copies it into .dist-info."""

    def run(self):
        super().run()
        build = installed_torch()
        self.write_file("torch build", os.path.join(self.egg_info, TORCH_BUILD_FILE),
                        json.dumps(build, sort_keys=True) + "\n")


def installed_torch():
    """The version and git_version of the torch the build sees, without importing it where it is
    not imported already: torch/version.py is plain assignments."""
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        return {"version": str(torch.__version__), "git_version": getattr(torch.version, "git_version", None)}
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("setup.py: torch is not installed; install it first, then build with --no-build-isolation")
    version = runpy.run_path(os.path.join(spec.submodule_search_locations[0], "version.py"))
    return {"version": version["__version__"], "git_version": version.get("git_version")}


def sources():
    if os.environ.get("OPENREG_UNITY", "1") == "0":
        return [src for part in PARTS for src in part_sources(part)]
    return unity_sources()


# Commands that only write metadata: they need the extension's sources (for the manifest), not
# torch's compiler settings.
METADATA_ONLY = ("egg_info", "dist_info")
NAME = "torch_openreg._C"
INCLUDE_DIRS = [os.path.join(HERE, "csrc")]
# -g0: debug info for torch's headers roughly doubles compile time and the library's size.
COMPILE_ARGS = ["-O2", "-g0", "-fvisibility=hidden"]

# The command is the first argument that is not an option (setuptools' build backend may put
# global options such as --verbose first).
COMMAND = next((arg for arg in sys.argv[1:] if not arg.startswith("-")), None)

if COMMAND in METADATA_ONLY:
    extension = Extension(NAME, sources(), include_dirs=INCLUDE_DIRS, extra_compile_args=COMPILE_ARGS)
    commands = {"egg_info": egg_info_with_torch_build}
else:
    from torch.utils.cpp_extension import BuildExtension, CppExtension

    extension = CppExtension(NAME, sources(), include_dirs=INCLUDE_DIRS, extra_compile_args=COMPILE_ARGS)
    commands = {"build_ext": BuildExtension.with_options(use_ninja=True), "egg_info": egg_info_with_torch_build}

setup(ext_modules=[extension], cmdclass=commands)
