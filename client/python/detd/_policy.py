"""Settings: parsed from ``detd.install()`` arguments and ``DETD_*``
environment variables, validated once.  An invalid setting raises
``ValueError`` naming it (the argument name and its variable).

=====================  ======================  ==============================
argument               variable                meaning
=====================  ======================  ==============================
``mode``               ``DETD_MODE``           ``auto`` | ``pinned`` |
                                               ``coordinated`` (default) |
                                               ``record``
``scope``              ``DETD_SCOPE``          module prefixes governed,
                                               comma separated; empty/unset:
                                               every autotuner
``exempt``             ``DETD_EXEMPT``         kernels left to Triton's own
                                               timing (output independent of
                                               the config): ``module:qualname``
                                               patterns (fnmatch), comma sep.
``on_miss``            ``DETD_ON_MISS``        ``error`` | ``cheapest`` |
                                               ``first``
``overrides``          ``DETD_OVERRIDES``      ``{kernel: config}``; the
                                               variable holds JSON or
                                               ``@/path/to/file.json``
``socket``             ``DETD_SOCKET``         the daemon's unix socket
``namespace``          ``DETD_NAMESPACE``      decision namespace (default:
                                               the daemon's)
``arch``               ``DETD_ARCH``           device class override
``chaos``              ``DETD_CHAOS``          1: each rank picks a different
                                               config on purpose
``strict``             ``DETD_STRICT``         1: ``verify()`` raises on
                                               divergence
``timeout_ms``         ``DETD_TIMEOUT_MS``     longest wait for a decision
``job``                ``DETD_JOB``            free-form job label (default:
                                               the launcher's run id,
                                               :data:`JOB_VARS`)
``cache_tuners``       ``DETD_CACHE_TUNERS``   ``Autotuner`` subclasses
                                               (``module.qualname``, comma
                                               sep.) whose own ``run`` asks
                                               its ``cache`` before choosing,
                                               governed through that cache;
                                               default: flag-gems' LibTuner
``megatron``           ``DETD_MEGATRON``       with ``megatron.core.tuning``
                                               installed: who governs Triton's
                                               autotuner, ``detd`` (default)
                                               or ``megatron`` (detd stands
                                               down); see :mod:`detd._megatron`
``helion``             ``DETD_HELION``         ``on`` (default): Helion's
                                               autotuner governed, one search
                                               per kernel and key; ``off``:
                                               left alone (docs/helion.md)
=====================  ======================  ==============================

Megatron-LM's variables (``megatron.core.tuning``) and their legacy
``DET_AUTOTUNE_*`` names drive detd too, where they map (a ``DETD_*``
variable wins over them):

=================================================  =========================
Megatron variable                                  detd setting
=================================================  =========================
``MCORE_AUTOTUNE_MODE`` (auto, pinned, record)     ``mode``, the same value
``MCORE_AUTOTUNE_RECORD``, ``MCORE_DET_TUNE_RECORD``  ``mode=record`` (votes go
                                                   to the daemon; export with
                                                   ``detctl table export``)
``MCORE_AUTOTUNE_MODULES``,                        ``scope``
``DET_AUTOTUNE_PIN_MODULES``
``MCORE_AUTOTUNE_ON_MISS`` (min_cost, error),      ``on_miss`` (``cheapest``,
``DET_AUTOTUNE_ON_MISS``                           ``error``)
``MCORE_AUTOTUNE_VERIFY_STRICT``,                  ``strict``
``DET_AUTOTUNE_VERIFY_STRICT``
``MCORE_AUTOTUNE_CHAOS``, ``DET_AUTOTUNE_CHAOS``   ``chaos``
=================================================  =========================

Not mapped: ``MCORE_AUTOTUNE_TABLE_PATH`` (tables are the daemon's:
``detd --tables DIR`` or ``detctl table import``, which read Megatron's
files), ``MCORE_AUTOTUNE_VERIFY`` (``detd.verify(step=, every=)``),
``MCORE_AUTOTUNE_ENUMERATE`` (``detd.autotuners()`` always lists).
Megatron's ``--deterministic-mode`` needs nothing: detd's default,
``coordinated``, is deterministic.

Explicit arguments win over variables.  Override keys are ``module:qualname``
(any code version) or ``module:qualname@guard``; values are canonical config
strings or dicts of config fields (``{"BLOCK": 64, "num_warps": 4}``).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
from typing import Mapping, Optional, Tuple

MODES = ("auto", "pinned", "coordinated", "record")
ON_MISS = ("error", "cheapest", "first")

# Autotuner subclasses governed through their cache by default (see
# detd._hook._cache_governed).
CACHE_TUNERS = ("flag_gems.utils.libentry.LibTuner",)

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


@dataclasses.dataclass(frozen=True)
class Settings:
    mode: str = "coordinated"
    scope: Optional[Tuple[str, ...]] = None
    exempt: Tuple[str, ...] = ()
    on_miss: str = "error"
    overrides: Tuple[Tuple[str, str], ...] = ()
    socket: Optional[str] = None
    namespace: Optional[str] = None
    arch: Optional[str] = None
    chaos: bool = False
    strict: bool = False
    timeout_ms: int = 600_000
    job: Optional[str] = None
    megatron: str = "detd"
    helion: str = "on"
    cache_tuners: Tuple[str, ...] = CACHE_TUNERS

    @property
    def governs_anything(self) -> bool:
        return self.mode in ("pinned", "coordinated")

    def is_governed(self, name: str) -> bool:
        """Whether the kernel ``module:qualname`` is governed."""
        if not self.governs_anything:
            return False
        module = name.split(":", 1)[0]
        if self.scope is not None:
            if not any(module == p or module.startswith(p + ".") or p == "*" for p in self.scope):
                return False
        return not any(fnmatch.fnmatchcase(name, pat) for pat in self.exempt)

    def is_recorded(self, name: str) -> bool:
        """Whether ``record`` mode votes for the kernel ``module:qualname``
        (the same scope and exemptions as governance in the other modes)."""
        if self.mode != "record":
            return False
        return dataclasses.replace(self, mode="coordinated").is_governed(name)

    def override_for(self, name: str, identity: str) -> Optional[str]:
        """The override config string for a kernel, or None."""
        for k, v in self.overrides:
            if k == identity:
                return v
        for k, v in self.overrides:
            if k == name:
                return v
        return None


def env_seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """A number of seconds >= 0 from env[name] (default when unset or
    empty); ValueError naming the variable otherwise."""
    v = str(env.get(name, "")).strip()
    if v == "":
        return default
    try:
        x = float(v)
    except ValueError:
        x = float("nan")
    if not 0 <= x < float("inf"):
        raise ValueError(f"detd: invalid {name}={v!r}: expected a number of seconds >= 0 (0: off)")
    return x


def env_int(env: Mapping[str, str], name: str, default: Optional[int], lo: int, hi: int,
            expected: str) -> Optional[int]:
    """An integer from lo to hi from env[name] (default when unset or
    empty); ValueError naming the variable and ``expected`` otherwise."""
    v = str(env.get(name, "")).strip()
    if v == "":
        return default
    try:
        x = int(v)
    except ValueError:
        x = lo - 1
    if not lo <= x <= hi:
        raise ValueError(f"detd: invalid {name}={v!r}: expected {expected}")
    return x


# The words of a switch (env_switch()), compared lower-cased.
SWITCH_ON = ("1", "on", "true", "yes")
SWITCH_OFF = ("0", "off", "false", "no")


def env_switch(env: Mapping[str, str], name: str, default: bool, expected: str = "on or off") -> bool:
    """A switch from env[name]: on (:data:`SWITCH_ON`) or off
    (:data:`SWITCH_OFF`), default when unset or empty; ValueError naming
    the variable and ``expected`` otherwise."""
    v = str(env.get(name, "")).strip().lower()
    if v == "":
        return default
    if v not in SWITCH_ON + SWITCH_OFF:
        raise ValueError(f"detd: invalid {name}={v!r}: expected {expected}")
    return v in SWITCH_ON


def _bad(arg: str, env: str, value, why: str) -> ValueError:
    return ValueError(f"detd: invalid setting {arg} ({env}={value!r}): {why}")


def _choice(arg, env, value, choices):
    v = str(value).strip().lower()
    if v not in choices:
        return None, _bad(arg, env, value, "expected one of " + ", ".join(choices))
    return v, None


def _bool(arg, env, value):
    if isinstance(value, bool):
        return value
    v = str(value).strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise _bad(arg, env, value, "expected 1/0, true/false, yes/no or on/off")


def _list(arg, env, value) -> Tuple[str, ...]:
    if isinstance(value, str):
        items = [x.strip() for x in value.split(",")]
    else:
        try:
            items = [str(x).strip() for x in value]
        except TypeError:
            raise _bad(arg, env, value, "expected a list of names or a comma-separated string") from None
    items = [x for x in items if x]
    for x in items:
        if any(c.isspace() for c in x):
            raise _bad(arg, env, value, f"{x!r} contains whitespace")
    return tuple(items)


def _override_value(arg, env, kernel, v) -> str:
    if isinstance(v, str):
        s = v.strip()
        if not s or any(c.isspace() for c in s):
            raise _bad(arg, env, v, f"override for {kernel!r} must be a canonical config string")
        for part in s.split(","):
            if "=" not in part or not part.split("=", 1)[0]:
                raise _bad(arg, env, v, f"override for {kernel!r}: {part!r} is not NAME=value")
        return s
    if isinstance(v, Mapping):
        from ._canon import config_string

        fields = dict(v)
        meta = {k: fields.pop(k) for k in ("num_warps", "num_stages", "num_ctas", "maxnreg") if k in fields}
        return config_string(fields, dict(num_warps=meta.get("num_warps", 4), num_stages=meta.get("num_stages", 3),
                                          num_ctas=meta.get("num_ctas", 1), maxnreg=meta.get("maxnreg")))
    from . import _triton

    if _triton.is_config(v):
        return _triton.config_string(v)
    raise _bad(arg, env, v, f"override for {kernel!r} must be a config string, a dict or a triton.Config")


def _overrides(arg, env, value) -> Tuple[Tuple[str, str], ...]:
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return ()
        if text.startswith("@"):
            try:
                with open(text[1:], encoding="utf-8") as f:
                    text = f.read()
            except OSError as e:
                raise _bad(arg, env, value, f"cannot read {text[1:]!r}: {e.strerror}") from None
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise _bad(arg, env, value, f"not JSON: {e}") from None
    if not isinstance(value, Mapping):
        raise _bad(arg, env, value, "expected a mapping of kernel to config")
    out = []
    for k, v in value.items():
        if not isinstance(k, str) or ":" not in k:
            raise _bad(arg, env, k, "override keys are 'module:qualname' or 'module:qualname@guard'")
        out.append((k, _override_value(arg, env, k, v)))
    return tuple(sorted(out))


def _mcore_on_miss(v: str) -> str:
    return {"min_cost": "cheapest"}.get(v.strip(), v.strip())


# Megatron-LM's tuning variables and their legacy names, per detd setting,
# in the order read, each with how its value reads as detd's.
MEGATRON_VARS = {
    "mode": (("MCORE_AUTOTUNE_MODE", str.strip), ("MCORE_AUTOTUNE_RECORD", lambda v: "record"),
             ("MCORE_DET_TUNE_RECORD", lambda v: "record")),
    "scope": (("MCORE_AUTOTUNE_MODULES", str), ("DET_AUTOTUNE_PIN_MODULES", str)),
    "on_miss": (("MCORE_AUTOTUNE_ON_MISS", _mcore_on_miss), ("DET_AUTOTUNE_ON_MISS", _mcore_on_miss)),
    "strict": (("MCORE_AUTOTUNE_VERIFY_STRICT", str), ("DET_AUTOTUNE_VERIFY_STRICT", str)),
    "chaos": (("MCORE_AUTOTUNE_CHAOS", str), ("DET_AUTOTUNE_CHAOS", str)),
}


# The launcher variables that name a run, read for the job label when
# DETD_JOB is not set: torchrun, Slurm, Open MPI / PMIx.
JOB_VARS = ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "PMIX_NAMESPACE", "OMPI_MCA_orte_ess_jobid")


def parse(environ: Optional[Mapping[str, str]] = None, **kwargs) -> Settings:
    """Build Settings from keyword arguments (None: not given) over the
    environment. Raises ValueError naming the first invalid setting."""
    env = os.environ if environ is None else environ
    unknown = set(kwargs) - {f.name for f in dataclasses.fields(Settings)}
    if unknown:
        raise TypeError("detd.install() got unknown settings: " + ", ".join(sorted(unknown)))

    def get(name):
        v = kwargs.get(name)
        var = "DETD_" + name.upper()
        if v is None and var in env:
            return env[var], var
        if v is None:
            # Megatron-LM's names for the same setting (MEGATRON_VARS).
            for alias, conv in MEGATRON_VARS.get(name, ()):
                if env.get(alias, "") != "":
                    return conv(env[alias]), alias
        return v, var

    out = {}
    v, var = get("mode")
    if v is not None:
        out["mode"], err = _choice("mode", var, v, MODES)
        if err:
            raise err
    mode = out.get("mode", "coordinated")

    v, var = get("scope")
    if v is not None:
        items = _list("scope", var, v)
        out["scope"] = items if items else None

    v, var = get("exempt")
    if v is not None:
        out["exempt"] = _list("exempt", var, v)

    v, var = get("on_miss")
    if v is not None:
        out["on_miss"], err = _choice("on_miss", var, v, ON_MISS)
        if err:
            raise err

    v, var = get("overrides")
    if v is not None:
        out["overrides"] = _overrides("overrides", var, v)

    for name in ("socket", "namespace", "arch", "job"):
        v, var = get(name)
        if v is not None:
            s = str(v)
            if name == "socket" and s and not s.startswith("/") and not s.startswith("unix:"):
                s = os.path.abspath(s)
            if name in ("namespace", "arch") and any(c.isspace() for c in s):
                raise _bad(name, var, v, "must not contain whitespace")
            if name == "arch" and not s:
                raise _bad(name, var, v, "must not be empty")
            out[name] = s if s else None
    if out.get("job") is None:
        # The launcher's id of the run, when DETD_JOB names none.
        for var in JOB_VARS:
            if env.get(var, "").strip() != "":
                out["job"] = env[var].strip()
                break

    for name in ("chaos", "strict"):
        v, var = get(name)
        if v is not None:
            out[name] = _bool(name, var, v)

    v, var = get("timeout_ms")
    if v is not None:
        try:
            t = int(str(v).strip()) if not isinstance(v, int) or isinstance(v, bool) else v
        except ValueError:
            raise _bad("timeout_ms", var, v, "expected an integer number of milliseconds") from None
        if isinstance(v, bool) or t <= 0:
            raise _bad("timeout_ms", var, v, "expected a positive integer number of milliseconds")
        out["timeout_ms"] = t

    v, var = get("cache_tuners")
    if v is not None:
        names = _list("cache_tuners", var, v)
        for n in names:
            if "." not in n or any(not part.isidentifier() for part in n.split(".")):
                raise _bad("cache_tuners", var, v, f"{n!r} is not a module.qualname")
        out["cache_tuners"] = names

    v, var = get("megatron")
    if v is not None:
        out["megatron"], err = _choice("megatron", var, v, ("detd", "megatron"))
        if err:
            raise err

    v, var = get("helion")
    if v is not None:
        out["helion"], err = _choice("helion", var, v, ("on", "off"))
        if err:
            raise err

    if out.get("chaos") and mode != "coordinated":
        raise _bad("chaos", "DETD_CHAOS", "1", f"chaos needs mode coordinated, not {mode}")
    return Settings(**out)
