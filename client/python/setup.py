"""Build hook: bundle libdetd (and detctl) into detd/_lib/.

Where the library comes from, in order:

1. ``DETD_LIBRARY`` (and ``DETD_DETCTL``): prebuilt files, copied as is;
2. the repository around this directory (``../..``): CMake builds the
   ``detd`` and ``detctl`` targets into ``$DETD_BUILD_DIR`` (default: a
   folder under setuptools' build_temp) and both are bundled;
3. neither possible (``DETD_NO_BUILD=1``, no repository, CMake failing):
   nothing is bundled and the package uses a system ``libdetd`` at run
   time (``ctypes.util.find_library``), or ``DETD_LIBRARY`` then.

The bundled library links the system's gRPC, protobuf-c and jansson
dynamically; those runtime packages must be installed where it runs.
"""

import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py as _build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def _log(msg):
    print(f"detd build: {msg}", file=sys.stderr)


def _cmake_build(build_dir):
    if not (os.path.isfile(os.path.join(REPO, "CMakeLists.txt"))
            and os.path.isfile(os.path.join(REPO, "proto", "detd.proto"))):
        return None, None
    if shutil.which("cmake") is None:
        _log("cmake not found; not bundling libdetd")
        return None, None
    jobs = os.environ.get("DETD_BUILD_JOBS", "2")
    try:
        if not os.path.isfile(os.path.join(build_dir, "CMakeCache.txt")):
            subprocess.check_call(["cmake", "-S", REPO, "-B", build_dir, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                                   "-DDETD_BUILD_TESTS=OFF"])
        subprocess.check_call(["cmake", "--build", build_dir, "-j", jobs, "--target", "detd", "detctl"])
    except (OSError, subprocess.CalledProcessError) as e:
        _log(f"building libdetd failed ({e}); not bundling it")
        return None, None
    lib = os.path.join(build_dir, "client", "libdetd.so")
    ctl = os.path.join(build_dir, "client", "detctl")
    return (lib if os.path.exists(lib) else None), (ctl if os.path.exists(ctl) else None)


class build_py(_build_py):
    def run(self):
        super().run()
        if self.dry_run:
            return
        lib = os.environ.get("DETD_LIBRARY")
        ctl = os.environ.get("DETD_DETCTL")
        if not lib and os.environ.get("DETD_NO_BUILD") != "1":
            build_dir = os.environ.get("DETD_BUILD_DIR") or os.path.join(os.path.abspath(self.build_temp or "build"),
                                                                        "libdetd")
            lib, built_ctl = _cmake_build(build_dir)
            ctl = ctl or built_ctl
        target = os.path.join(self.build_lib, "detd", "_lib")
        shutil.rmtree(target, ignore_errors=True)  # never ship a stale library
        os.makedirs(target, exist_ok=True)
        if lib:
            shutil.copyfile(os.path.realpath(lib), os.path.join(target, "libdetd.so"))
            _log(f"bundled {os.path.realpath(lib)}")
        else:
            _log("no libdetd bundled: a system libdetd or DETD_LIBRARY is needed at run time")
        if ctl:
            dst = os.path.join(target, "detctl")
            shutil.copyfile(os.path.realpath(ctl), dst)
            os.chmod(dst, 0o755)


class BinaryDistribution(Distribution):
    """The wheel carries a shared library: tag it for the platform."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": build_py}, distclass=BinaryDistribution)
