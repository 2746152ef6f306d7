"""Builds torch_openreg._C, the one shared library behind the openreg device.

The library has no Python entry point of its own: loading it runs the static
registrations (allocator, device guard, hooks, kernels), and Python reaches
the runtime through torch.ops.openreg.*. It is built against the torch that is
installed, hence `pip install --no-build-isolation`.
"""

import glob
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

HERE = os.path.dirname(os.path.abspath(__file__))


def sources():
    # setuptools wants paths relative to this file.
    found = glob.glob("csrc/runtime/*.cpp", root_dir=HERE) + glob.glob(
        "csrc/aten/*.cpp", root_dir=HERE
    )
    return sorted(found)


setup(
    ext_modules=[
        CppExtension(
            "torch_openreg._C",
            sources(),
            include_dirs=[os.path.join(HERE, "csrc")],
            # -g0: debug info for torch's headers roughly doubles compile
            # time and the library's size.
            extra_compile_args=["-O2", "-g0", "-fvisibility=hidden"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
