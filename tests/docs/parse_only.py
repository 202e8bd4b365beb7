"""Parse-only stand-ins for the programs of docs/ commands that cannot run
in the quick tier (a GPU, minutes of benchmark, root, a cluster): each
takes the command's arguments exactly as written and checks them the way
the real program would, then exits without doing the work.

    parse_only.py PROGRAM ARGS...

PROGRAM is the name the command used:
- python3 SCRIPT.py ARGS: the script runs until its argparse parser has
  parsed ARGS, then exits 0 (a flag it does not know: argparse's exit 2
  naming it); a script that never parses exits 3.
  python3 -m pip COMMAND ARGS: pip's own parser for COMMAND parses ARGS.
- detd: the built daemon with --check-config (it validates every flag and
  value and the paths it would use); an error that only says a path is not
  here or not writable by this user (/var/lib/detd without root, a
  certificate file of the deployment) is the environment's, not the
  command's.
- detctl: the built detctl against a socket where no daemon answers: it
  must get past its argument parsing (no usage error naming `--help`).
- ctest: lists the tests the command selects (-N); at least one.
- make: prints what it would run (-n).
- etcd: every --flag given is one `etcd SUBCOMMAND... --help` lists.

A `...` argument stands for the flags the page shows elsewhere and is
dropped. DETD_BUILD_DIR names the build (daemon/detd, client/detctl).
"""

import argparse
import os
import re
import runpy
import subprocess
import sys

BUILD = os.environ.get("DETD_DOCS_BUILD_DIR", "build")
# The real programs: PATH without the folder of the stand-ins.
STANDINS = os.environ.get("DETD_DOCS_STANDINS")
if STANDINS:
    os.environ["PATH"] = os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep)
                                         if os.path.abspath(d) != os.path.abspath(STANDINS))
NO_DAEMON = os.environ.get("DETD_DOCS_NO_DAEMON", "/nonexistent/detd.sock")


def fail(msg, code=1):
    print(f"parse_only: {msg}", file=sys.stderr)
    sys.exit(code)


def python3(args):
    if args[:2] == ["-m", "pip"]:
        from pip._internal.commands import create_command
        opts, rest = create_command(args[2]).parse_args(args[3:])
        print(f"parsed: pip {args[2]} {rest}")
        return 0
    if not args or not args[0].endswith(".py"):
        fail(f"python3 {' '.join(args)}: not a script with arguments")
    script = args[0]
    if not os.path.isfile(script):
        fail(f"{script}: no such script", 2)
    original = argparse.ArgumentParser.parse_args

    def parse_then_exit(self, a=None, namespace=None):
        ns = original(self, a, namespace)
        print(f"parsed: {script} {vars(ns)}", flush=True)
        os._exit(0)

    argparse.ArgumentParser.parse_args = parse_then_exit
    sys.argv = list(args)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
    fail(f"{script} returned without parsing its arguments", 3)


# detd --check-config errors about the environment, not the command: a
# path that is not there or not writable by this user.
ENV_ERROR = re.compile(r"^detd: [\w-]+: ('[^']*' cannot be created: '[^']*' is not writable"
                       r"|directory '[^']*' is not writable: .*"
                       r"|'[^']*': (No such file or directory|Permission denied))$")


def detd(args):
    p = subprocess.run([os.path.join(BUILD, "daemon", "detd"), "--check-config"] + args,
                       capture_output=True, text=True)
    errors = [ln for ln in p.stderr.splitlines() if ln.strip()]
    if p.returncode == 0 or (p.returncode == 2 and errors and all(ENV_ERROR.match(e) for e in errors)):
        print(f"parsed: detd {args}" + (f" (environment: {errors})" if errors else ""))
        return 0
    fail(f"detd --check-config {' '.join(args)} exited {p.returncode}:\n{p.stderr}", 2)


def detctl(args):
    env = dict(os.environ, DETD_SOCKET=NO_DAEMON)
    p = subprocess.run([os.path.join(BUILD, "client", "detctl")] + args, capture_output=True, text=True, env=env)
    if "--help')" in p.stderr or p.returncode not in (0, 1, 2, 3, 5):
        fail(f"detctl {' '.join(args)} exited {p.returncode}:\n{p.stderr}", 2)
    print(f"parsed: detctl {args} (exit {p.returncode}: {p.stderr.strip()[:200]})")
    return 0


def ctest(args):
    p = subprocess.run(["ctest", "-N"] + args, capture_output=True, text=True)
    m = re.search(r"^Total Tests: (\d+)", p.stdout, re.M)
    if p.returncode != 0 or not m or int(m.group(1)) == 0:
        fail(f"ctest -N {' '.join(args)} selects no test (exit {p.returncode}):\n{p.stdout}{p.stderr}", 2)
    print(f"parsed: ctest {args}: {m.group(1)} tests")
    return 0


def make(args):
    p = subprocess.run(["make", "-n"] + args, capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"make -n {' '.join(args)} exited {p.returncode}:\n{p.stderr}", 2)
    print(f"parsed: make {args}")
    return 0


def etcd(args):
    words = [a for a in args if not a.startswith("-")]
    p = subprocess.run(["etcd"] + words + ["--help"], capture_output=True, text=True)
    listed = set(re.findall(r"--[\w-]+", p.stdout + p.stderr))
    flags = [a.split("=", 1)[0] for a in args if a.startswith("--")]
    unknown = [f for f in flags if f not in listed]
    if not listed or unknown:
        fail(f"etcd {' '.join(words)} --help lists no {unknown or flags}", 2)
    print(f"parsed: etcd {args}")
    return 0


def main():
    prog, args = sys.argv[1], [a for a in sys.argv[2:] if a != "..."]
    return {"python3": python3, "detd": detd, "detctl": detctl, "ctest": ctest, "make": make,
            "etcd": etcd}[prog](args)


if __name__ == "__main__":
    sys.exit(main())
