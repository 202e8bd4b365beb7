"""Static checks of deploy/kubernetes and the Dockerfile.

Each check returns a list of error strings naming the file, the object and
the field at fault; an empty list means the deployment is consistent.
Used by tests/deploy/test_manifests.py, and runnable on its own:

    python3 tests/deploy/manifest_check.py [REPO]

Exits 0 when everything is consistent, 1 listing the errors.
"""

from __future__ import annotations

import fnmatch
import json
import os
import posixpath
import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]

WORKLOADS = {"DaemonSet", "StatefulSet", "Deployment", "Job", "Pod"}

# Keys of detd.conf: the daemon's long flag names (the format of
# `detd --config FILE`). `detd --check-config` is the authority; this list
# catches a misspelt key without a built daemon.
CONF_KEYS = {
    "socket", "state-dir", "tables", "namespace", "lease-ms", "max-clients",
    "max-waiters", "log-level", "log-format", "etcd", "etcd-ca", "etcd-cert",
    "etcd-key", "etcd-user", "etcd-password-file", "node-id", "listen",
    "listen-cert", "listen-key", "listen-client-ca", "metrics", "socket-mode",
    "socket-group", "allow-uid", "allow-gid", "admin-uid", "admin-gid",
}
CONF_LISTS = {"tables", "allow-uid", "allow-gid", "admin-uid", "admin-gid"}


# ---- loading ---------------------------------------------------------------

class Manifest:
    """One YAML document: its file, its index in the file, its content."""

    def __init__(self, path: Path, index: int, doc: dict):
        self.path = path
        self.index = index
        self.doc = doc

    @property
    def kind(self) -> str:
        return self.doc.get("kind", "")

    @property
    def name(self) -> str:
        return (self.doc.get("metadata") or {}).get("name", "")

    def where(self) -> str:
        return f"{self.path.name}: {self.kind or '?'} '{self.name or '?'}'"


def load_manifests(kdir: Path):
    """All documents of kdir/*.yaml but the kustomization; (manifests, errors)."""
    out, errs = [], []
    for path in sorted(Path(kdir).glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        try:
            docs = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError as e:
            errs.append(f"{path.name}: YAML does not parse: {e}")
            continue
        for i, doc in enumerate(docs):
            if doc is None:
                continue
            if not isinstance(doc, dict):
                errs.append(f"{path.name}: document {i + 1} is not a mapping")
                continue
            m = Manifest(path, i, doc)
            for field in ("apiVersion", "kind"):
                if not doc.get(field):
                    errs.append(f"{path.name}: document {i + 1}: missing {field}")
            if not m.name:
                errs.append(f"{path.name}: document {i + 1}: missing metadata.name")
            out.append(m)
    return out, errs


def parse_conf(text: str, origin: str = "detd.conf"):
    """Parse detd.conf text; returns ({key: [values]}, errors)."""
    conf, errs = {}, []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            errs.append(f"{origin}:{n}: missing '=' in '{line}'")
            continue
        key, value = (s.strip() for s in line.split("=", 1))
        if key not in CONF_KEYS:
            errs.append(f"{origin}:{n}: {key}: unknown key")
            continue
        if value.startswith('"'):
            mo = re.match(r'"((?:[^"\\]|\\["\\])*)"\s*(?:#.*)?$', value)
            if not mo:
                errs.append(f"{origin}:{n}: {key}: unterminated or invalid quoted value")
                continue
            value = re.sub(r'\\(["\\])', r"\1", mo.group(1))
        else:
            value = re.sub(r"\s+#.*$", "", value)
        if key in conf and key not in CONF_LISTS:
            errs.append(f"{origin}:{n}: {key}: given twice")
        conf.setdefault(key, []).append(value)
    return conf, errs


def conf_value(conf: dict, key: str):
    v = conf.get(key)
    return v[-1] if v else None


def hostport_port(s: str):
    """The port of HOST:PORT or [V6]:PORT, or None."""
    m = re.fullmatch(r"(?:\[[^\]]*\]|[^:\[\]]*):(\d+)", s or "")
    return int(m.group(1)) if m else None


# ---- pod accessors ---------------------------------------------------------

def pod_spec(m: Manifest):
    if m.kind == "Pod":
        return m.doc.get("spec") or {}
    if m.kind == "Job":
        return ((m.doc.get("spec") or {}).get("template") or {}).get("spec") or {}
    return (((m.doc.get("spec") or {}).get("template") or {}).get("spec")) or {}


def all_containers(spec: dict):
    """(container, is_init) for every container of a pod spec."""
    for c in spec.get("initContainers") or []:
        yield c, True
    for c in spec.get("containers") or []:
        yield c, False


def image_repo(image: str) -> str:
    name = image.split("@", 1)[0]
    if ":" in name.rsplit("/", 1)[-1]:
        name = name.rsplit(":", 1)[0]
    return name.rsplit("/", 1)[-1]


def is_detd_image(image: str) -> bool:
    return image_repo(image or "") == "detd"


def runs_daemon(c: dict) -> bool:
    """A container of the detd image that runs the image's ENTRYPOINT."""
    return is_detd_image(c.get("image", "")) and not c.get("command")


def arg_value(args, flag: str):
    """The value of --flag VALUE or --flag=VALUE in a list of arguments."""
    args = [str(a) for a in args or []]
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a[len(flag) + 1:]
    return None


def container_ports(c: dict):
    """{name: port} and the set of numbers of a container's ports."""
    named, numbers = {}, set()
    for p in c.get("ports") or []:
        numbers.add(p.get("containerPort"))
        if p.get("name"):
            named[p["name"]] = p.get("containerPort")
    return named, numbers


def probe_port(probe: dict):
    for kind in ("grpc", "httpGet", "tcpSocket"):
        if kind in probe:
            return kind, (probe[kind] or {}).get("port")
    return None, None


def env_map(c: dict):
    return {e.get("name"): e for e in c.get("env") or []}


def mount_of(c: dict, volume: str):
    for vm in c.get("volumeMounts") or []:
        if vm.get("name") == volume:
            return vm.get("mountPath")
    return None


def volume_at(spec: dict, c: dict, path: str):
    """The pod volume mounted at path in container c, or None."""
    for vm in c.get("volumeMounts") or []:
        if vm.get("mountPath") == path:
            for v in spec.get("volumes") or []:
                if v.get("name") == vm.get("name"):
                    return v
    return None


def sec(spec: dict, c: dict, field: str):
    """A securityContext field: the container's, else the pod's."""
    v = (c.get("securityContext") or {}).get(field)
    if v is None:
        v = (spec.get("securityContext") or {}).get(field)
    return v


# ---- checks of the manifests -----------------------------------------------

def check_workload(m: Manifest, errs: list):
    """Selector, images, resources, probes and their ports."""
    w = m.where()
    spec = pod_spec(m)
    if m.kind not in ("Pod", "Job"):
        sel = ((m.doc.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        labels = ((((m.doc.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels")) or {}
        if not sel:
            errs.append(f"{w}: spec.selector.matchLabels is missing")
        for k, v in sel.items():
            if labels.get(k) != v:
                errs.append(f"{w}: selector {k}={v} does not match the template's labels")
    if not spec.get("containers"):
        errs.append(f"{w}: no containers")
    for c, is_init in all_containers(spec):
        cw = f"{w}: container '{c.get('name', '?')}'"
        if not c.get("image"):
            errs.append(f"{cw}: no image")
        res = c.get("resources") or {}
        for part in ("requests", "limits"):
            got = res.get(part) or {}
            for r in ("cpu", "memory"):
                if r not in got:
                    errs.append(f"{cw}: resources.{part}.{r} is missing")
        volumes = {v.get("name") for v in spec.get("volumes") or []}
        volumes |= {(t.get("metadata") or {}).get("name")
                    for t in (m.doc.get("spec") or {}).get("volumeClaimTemplates") or []}
        for vm in c.get("volumeMounts") or []:
            if vm.get("name") not in volumes:
                errs.append(f"{cw}: volumeMount '{vm.get('name')}' names no volume of the pod")
        named, numbers = container_ports(c)
        serving = runs_daemon(c) or (not is_init and m.kind != "Pod") or c.get("restartPolicy") == "Always"
        if serving:
            for probe in ("readinessProbe", "livenessProbe"):
                if probe not in c:
                    errs.append(f"{cw}: {probe} is missing")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            if probe not in c:
                continue
            kind, port = probe_port(c[probe])
            if kind is None:
                errs.append(f"{cw}: {probe} has no grpc, httpGet or tcpSocket action")
            elif isinstance(port, str) and port not in named:
                errs.append(f"{cw}: {probe} port '{port}' is not a named containerPort")
            elif not isinstance(port, str) and port not in numbers:
                errs.append(f"{cw}: {probe} port {port} is not a declared containerPort")


def check_detd_container(m: Manifest, spec: dict, c: dict, conf: dict, ids, errs: list):
    """Ports, socket, config mount and security of a container running detd."""
    cw = f"{m.where()}: container '{c.get('name', '?')}'"
    named, _ = container_ports(c)
    listen = hostport_port(conf_value(conf, "listen"))
    metrics = hostport_port(conf_value(conf, "metrics"))
    if named.get("grpc") != listen:
        errs.append(f"{cw}: containerPort 'grpc' is {named.get('grpc')}, detd.conf listen port is {listen}")
    if named.get("metrics") != metrics:
        errs.append(f"{cw}: containerPort 'metrics' is {named.get('metrics')}, detd.conf metrics port is {metrics}")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        if probe in c:
            kind, port = probe_port(c[probe])
            port = named.get(port, port) if isinstance(port, str) else port
            if kind == "grpc" and port != listen:
                errs.append(f"{cw}: {probe} grpc port {port} is not the listen port {listen}")
    args = c.get("args") or []
    over = arg_value(args, "--listen")
    if over is not None and hostport_port(over) != listen:
        errs.append(f"{cw}: --listen {over} has another port than detd.conf's listen {listen}")
    # The config file: mounted from the ConfigMap where --config points.
    cfg = arg_value(args, "--config") or ids.get("cmd_config")
    if cfg != ids.get("cmd_config"):
        errs.append(f"{cw}: --config {cfg} is not the image's {ids.get('cmd_config')}")
    vol = volume_at(spec, c, posixpath.dirname(cfg or ""))
    if vol is None or "configMap" not in vol:
        errs.append(f"{cw}: no ConfigMap volume mounted at {posixpath.dirname(cfg or '')}")
    elif vol["configMap"].get("name") != ids.get("configmap"):
        errs.append(f"{cw}: config volume uses ConfigMap '{vol['configMap'].get('name')}', "
                    f"not '{ids.get('configmap')}'")
    else:
        items = vol["configMap"].get("items")
        base = posixpath.basename(cfg)
        if items is not None and not any(i.get("key") == "detd.conf" and i.get("path") == base for i in items):
            errs.append(f"{cw}: ConfigMap volume does not project detd.conf as {base}")
    # Socket and state directories are volumes.
    sock = conf_value(conf, "socket") or ""
    if volume_at(spec, c, posixpath.dirname(sock)) is None:
        errs.append(f"{cw}: no volume mounted at the socket directory {posixpath.dirname(sock)}")
    state = conf_value(conf, "state-dir") or ""
    if volume_at(spec, c, state) is None:
        errs.append(f"{cw}: no volume mounted at the state directory {state}")
    # Security.
    if sec(spec, c, "runAsNonRoot") is not True:
        errs.append(f"{cw}: securityContext.runAsNonRoot is not true")
    for field, want in (("runAsUser", ids.get("uid")), ("runAsGroup", ids.get("gid"))):
        if sec(spec, c, field) != want:
            errs.append(f"{cw}: securityContext.{field} is {sec(spec, c, field)}, the image's detd user is {want}")
    csc = c.get("securityContext") or {}
    if csc.get("readOnlyRootFilesystem") is not True:
        errs.append(f"{cw}: securityContext.readOnlyRootFilesystem is not true")
    if csc.get("allowPrivilegeEscalation") is not False:
        errs.append(f"{cw}: securityContext.allowPrivilegeEscalation is not false")
    if "ALL" not in ((csc.get("capabilities") or {}).get("drop") or []):
        errs.append(f"{cw}: securityContext.capabilities.drop does not contain ALL")
    if (sec(spec, c, "seccompProfile") or {}).get("type") != "RuntimeDefault":
        errs.append(f"{cw}: seccompProfile is not RuntimeDefault")
    for part in ("requests", "limits"):
        if any(k.endswith("/gpu") for k in ((c.get("resources") or {}).get(part) or {})):
            errs.append(f"{cw}: requests a GPU resource: detd never runs kernels")


def check_daemonset(m: Manifest, conf: dict, ids, accounts: set, errs: list):
    w = m.where()
    dspec = m.doc.get("spec") or {}
    spec = pod_spec(m)
    us = dspec.get("updateStrategy") or {}
    if us.get("type") != "RollingUpdate" or "maxUnavailable" not in (us.get("rollingUpdate") or {}):
        errs.append(f"{w}: updateStrategy is not RollingUpdate with rollingUpdate.maxUnavailable")
    if (spec.get("terminationGracePeriodSeconds") or 0) < 30:
        errs.append(f"{w}: terminationGracePeriodSeconds is under 30 s: no time to drain")
    sa = spec.get("serviceAccountName")
    if not sa or sa not in accounts:
        errs.append(f"{w}: serviceAccountName '{sa}' is not a ServiceAccount of the manifests")
    if not any(t.get("key") == "nvidia.com/gpu" for t in spec.get("tolerations") or []):
        errs.append(f"{w}: no toleration for nvidia.com/gpu taints")
    daemons = [c for c in spec.get("containers") or [] if runs_daemon(c)]
    if len(daemons) != 1:
        errs.append(f"{w}: expected one container running detd, found {len(daemons)}")
        return
    c = daemons[0]
    check_detd_container(m, spec, c, conf, ids, errs)
    env = env_map(c)
    node = arg_value(c.get("args"), "--node-id") or ""
    var = re.fullmatch(r"\$\((\w+)\)", node)
    ref = (((env.get(var.group(1)) if var else None) or {}).get("valueFrom") or {}).get("fieldRef") or {}
    if ref.get("fieldPath") != "spec.nodeName":
        errs.append(f"{w}: --node-id does not come from spec.nodeName")
    if (env.get("NVIDIA_VISIBLE_DEVICES") or {}).get("value") != "all":
        errs.append(f"{w}: NVIDIA_VISIBLE_DEVICES=all is not set for the GPU probe")
    ann = (((m.doc.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("annotations") or {}
    named, _ = container_ports(c)
    if ann.get("prometheus.io/scrape") != "true":
        errs.append(f"{w}: prometheus.io/scrape annotation is not \"true\"")
    if str(ann.get("prometheus.io/port")) != str(named.get("metrics")):
        errs.append(f"{w}: prometheus.io/port {ann.get('prometheus.io/port')} is not the metrics "
                    f"containerPort {named.get('metrics')}")
    for what, path in (("socket", posixpath.dirname(conf_value(conf, "socket") or "")),
                       ("state", conf_value(conf, "state-dir"))):
        vol = volume_at(spec, c, path)
        hp = (vol or {}).get("hostPath")
        if hp is None:
            errs.append(f"{w}: the {what} directory {path} is not a hostPath volume")
        elif hp.get("path") != path or hp.get("type") != "DirectoryOrCreate":
            errs.append(f"{w}: hostPath of the {what} directory is {hp.get('path')} ({hp.get('type')}), "
                        f"expected {path} (DirectoryOrCreate)")


def check_sidecar_pod(m: Manifest, conf: dict, ids, errs: list):
    w = m.where()
    spec = pod_spec(m)
    sidecars = [c for c in spec.get("initContainers") or [] if runs_daemon(c)]
    if any(runs_daemon(c) for c in spec.get("containers") or []):
        errs.append(f"{w}: detd runs as a regular container, not as a native sidecar")
    if len(sidecars) != 1:
        errs.append(f"{w}: expected one initContainer running detd, found {len(sidecars)}")
        return
    sc = sidecars[0]
    if sc.get("restartPolicy") != "Always":
        errs.append(f"{w}: the detd initContainer has no restartPolicy: Always (not a native sidecar)")
    if "startupProbe" not in sc:
        errs.append(f"{w}: the detd sidecar has no startupProbe")
    check_detd_container(m, spec, sc, conf, ids, errs)
    sock = conf_value(conf, "socket") or ""
    sockdir = posixpath.dirname(sock)
    vol = volume_at(spec, sc, sockdir)
    if vol is not None and "emptyDir" not in vol:
        errs.append(f"{w}: the socket directory is not a shared emptyDir")
    for c in spec.get("containers") or []:
        cw = f"{w}: container '{c.get('name', '?')}'"
        env = env_map(c)
        got = (env.get("DETD_SOCKET") or {}).get("value")
        if got != sock:
            errs.append(f"{cw}: DETD_SOCKET is {got}, detd.conf's socket is {sock}")
        cvol = volume_at(spec, c, posixpath.dirname(got or ""))
        if vol is None or cvol is None or cvol.get("name") != vol.get("name"):
            errs.append(f"{cw}: does not share the sidecar's socket volume at {posixpath.dirname(got or '')}")
        cmd = [str(x) for x in (c.get("command") or []) + (c.get("args") or [])]
        if not any(cmd[i:i + 2] == ["-m", "detd.run"] for i in range(len(cmd))):
            errs.append(f"{cw}: does not run its script through `python -m detd.run`")
        pp = (env.get("PYTHONPATH") or {}).get("value")
        if pp is not None:
            pvol = volume_at(spec, c, pp)
            copier = [i for i in spec.get("initContainers") or []
                      if pvol is not None and mount_of(i, pvol.get("name")) == pp and not runs_daemon(i)]
            if pvol is None or not copier:
                errs.append(f"{cw}: PYTHONPATH {pp} is not a volume filled by an init container")
            elif ids.get("python_dir") and not any(ids["python_dir"] in " ".join(map(str, i.get("command") or []))
                                                   for i in copier):
                errs.append(f"{cw}: no init container copies {ids['python_dir']} (the image's package) to {pp}")


def check_etcd(manifests, conf: dict, namespace: str, errs: list):
    """The StatefulSet's members, its headless Service and detd's endpoints."""
    sts = [m for m in manifests if m.kind == "StatefulSet"]
    if len(sts) != 1:
        errs.append(f"expected one etcd StatefulSet, found {len(sts)}")
        return
    m = sts[0]
    w = m.where()
    sspec = m.doc.get("spec") or {}
    replicas = sspec.get("replicas")
    if replicas != 3:
        errs.append(f"{w}: replicas is {replicas}, the example cluster has 3 members")
        replicas = replicas if isinstance(replicas, int) else 0
    if sspec.get("podManagementPolicy") != "Parallel":
        errs.append(f"{w}: podManagementPolicy is not Parallel: members 1 and 2 would wait for 0 to be ready")
    svc_name = sspec.get("serviceName")
    svc = [s for s in manifests if s.kind == "Service" and s.name == svc_name]
    labels = ((sspec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not svc:
        errs.append(f"{w}: serviceName '{svc_name}' is not a Service of the manifests")
    else:
        s = svc[0].doc.get("spec") or {}
        if s.get("clusterIP") != "None":
            errs.append(f"{svc[0].where()}: not headless (clusterIP: None)")
        if any(labels.get(k) != v for k, v in (s.get("selector") or {}).items()) or not s.get("selector"):
            errs.append(f"{svc[0].where()}: selector does not match the StatefulSet's pods")
    if not sspec.get("volumeClaimTemplates"):
        errs.append(f"{w}: no volumeClaimTemplates: members would lose their data")
    pods = [f"{m.name}-{i}" for i in range(replicas)]
    spec = pod_spec(m)
    containers = spec.get("containers") or []
    if not containers:
        return
    c = containers[0]
    args = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
    env = env_map(c)
    claims = {v.get("metadata", {}).get("name") for v in sspec.get("volumeClaimTemplates") or []}
    if not any(vm.get("name") in claims for vm in c.get("volumeMounts") or []):
        errs.append(f"{w}: the etcd container mounts no volumeClaimTemplate")

    def expand(s):
        def sub(mo):
            e = env.get(mo.group(1)) or {}
            path = ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            return {"metadata.namespace": namespace}.get(path, e.get("value", mo.group(0)))
        return re.sub(r"\$\((\w+)\)", sub, s)

    name = arg_value(args, "--name") or ""
    var = re.fullmatch(r"\$\((\w+)\)", name)
    ref = (((env.get(var.group(1)) if var else None) or {}).get("valueFrom") or {}).get("fieldRef") or {}
    if ref.get("fieldPath") != "metadata.name":
        errs.append(f"{w}: --name is not the pod's name (metadata.name)")
    ic = arg_value(args, "--initial-cluster")
    if ic is None:
        errs.append(f"{w}: no --initial-cluster")
    else:
        members = {}
        for part in ic.split(","):
            n, _, url = part.partition("=")
            members[n] = expand(url)
        if sorted(members) != sorted(pods):
            errs.append(f"{w}: --initial-cluster names {sorted(members)} are not the pods {pods}")
        for n, url in members.items():
            want = f"http://{n}.{svc_name}.{namespace}.svc"
            if not url.startswith(want):
                errs.append(f"{w}: --initial-cluster member {n} at {url}, expected {want}...")
        peer = arg_value(args, "--initial-advertise-peer-urls") or ""
        if var is None or not peer.startswith(f"http://$({var.group(1)}).{svc_name}."):
            errs.append(f"{w}: --initial-advertise-peer-urls {peer} is not the pod's name in {svc_name}")
    named, numbers = container_ports(c)
    client_port = named.get("client")
    # detd's endpoints: exactly the members, on the client port.
    eps = (conf_value(conf, "etcd") or "").split(",")
    hosts = []
    for ep in eps:
        mo = re.fullmatch(r"https?://([^:/]+):(\d+)/?", ep.strip())
        if not mo:
            errs.append(f"configmap.yaml: detd.conf: etcd endpoint '{ep}' is not http(s)://HOST:PORT")
            continue
        hosts.append(mo.group(1))
        if int(mo.group(2)) != client_port:
            errs.append(f"configmap.yaml: detd.conf: etcd endpoint {ep} is not on the members' client port {client_port}")
        pod = mo.group(1).split(".", 1)[0]
        want = f"{pod}.{svc_name}.{namespace}.svc"
        if pod not in pods or not mo.group(1).startswith(want):
            errs.append(f"configmap.yaml: detd.conf: etcd endpoint {ep} is not a member of {m.name} "
                        f"(expected <pod>.{svc_name}.{namespace}.svc...)")
    if sorted(h.split(".", 1)[0] for h in hosts) != sorted(pods):
        errs.append(f"configmap.yaml: detd.conf: etcd endpoints {hosts} do not list every member {pods}")


def check_kustomization(kdir: Path, manifests, version: str, errs: list):
    """Resources listed and present; namespace; the detd image tag."""
    path = Path(kdir) / "kustomization.yaml"
    try:
        k = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        errs.append(f"kustomization.yaml: {e}")
        return ""
    res = k.get("resources") or []
    for r in res:
        if not (Path(kdir) / r).is_file():
            errs.append(f"kustomization.yaml: resource {r} does not exist")
    for f in sorted(p.name for p in Path(kdir).glob("*.yaml")):
        if f not in res and f not in ("kustomization.yaml", "sidecar-pod.yaml"):
            errs.append(f"kustomization.yaml: {f} is not listed in resources")
    if "sidecar-pod.yaml" in res:
        errs.append("kustomization.yaml: sidecar-pod.yaml is an example of the other variant, not a resource")
    ns = k.get("namespace", "")
    nss = [m.name for m in manifests if m.kind == "Namespace"]
    if nss and ns not in nss:
        errs.append(f"kustomization.yaml: namespace '{ns}' is not the Namespace {nss}")
    for img in k.get("images") or []:
        if img.get("name") == "detd" and str(img.get("newTag")) != version:
            errs.append(f"kustomization.yaml: image detd newTag {img.get('newTag')} is not the version {version}")
    return ns


def check_manifests(kdir: Path, ids: dict):
    """Every check of deploy/kubernetes; ids holds the facts of the image."""
    manifests, errs = load_manifests(kdir)
    conf_maps = [m for m in manifests if m.kind == "ConfigMap" and "detd.conf" in (m.doc.get("data") or {})]
    if len(conf_maps) != 1:
        errs.append(f"expected one ConfigMap with detd.conf, found {len(conf_maps)}")
        return errs
    ids = dict(ids, configmap=conf_maps[0].name)
    conf, cerrs = parse_conf(conf_maps[0].doc["data"]["detd.conf"], "configmap.yaml: detd.conf")
    errs += cerrs
    for key in ("socket", "state-dir", "listen", "metrics", "etcd"):
        if conf_value(conf, key) is None:
            errs.append(f"configmap.yaml: detd.conf: no {key}")
    if conf_value(conf, "log-format") != "json":
        errs.append("configmap.yaml: detd.conf: log-format is not json")
    if conf_value(conf, "socket-mode") != "0660":
        errs.append("configmap.yaml: detd.conf: socket-mode is not 0660")
    namespace = check_kustomization(kdir, manifests, ids.get("version"), errs)
    accounts = {m.name for m in manifests if m.kind == "ServiceAccount"}
    for m in manifests:
        if m.kind in WORKLOADS:
            check_workload(m, errs)
            for c, _ in all_containers(pod_spec(m)):
                img = c.get("image", "")
                if is_detd_image(img) and img != f"detd:{ids.get('version')}":
                    errs.append(f"{m.where()}: container '{c.get('name')}' image {img} "
                                f"is not detd:{ids.get('version')} (the Dockerfile's version)")
    ds = [m for m in manifests if m.kind == "DaemonSet"]
    if len(ds) != 1:
        errs.append(f"expected one DaemonSet, found {len(ds)}")
    for m in ds:
        check_daemonset(m, conf, ids, accounts, errs)
    pods = [m for m in manifests if m.kind == "Pod"]
    if len(pods) != 1:
        errs.append(f"expected one sidecar Pod example, found {len(pods)}")
    for m in pods:
        check_sidecar_pod(m, conf, ids, errs)
    check_etcd(manifests, conf, namespace, errs)
    return errs


# ---- the Dockerfile --------------------------------------------------------

def parse_dockerfile(text: str):
    """[(instruction, argument string, line number)], continuations joined."""
    out, buf, start = [], "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue
        if not buf:
            start = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        instr, _, rest = buf.strip().partition(" ")
        out.append((instr.upper(), rest.strip(), start))
        buf = ""
    if buf:
        out.append(("?", buf, start))
    return out


def exec_form(arg: str):
    try:
        v = json.loads(arg)
        return v if isinstance(v, list) else None
    except ValueError:
        return None


def dockerignored(rel: str, patterns) -> bool:
    """Whether rel (a path in the context) is excluded by .dockerignore."""
    excluded = False
    parts = rel.split("/")
    for pat in patterns:
        neg = pat.startswith("!")
        pat = pat.lstrip("!").rstrip("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if fnmatch.fnmatch(prefix, pat) or (pat.startswith("**/") and fnmatch.fnmatch(prefix, pat[3:])) \
                    or (pat.startswith("**/") and fnmatch.fnmatch(parts[i - 1], pat[3:])):
                excluded = not neg
                break
    return excluded


def apt_packages(run_arg: str):
    """Packages of `apt-get install` in a RUN argument."""
    pkgs = []
    for cmd in re.split(r"&&|;", run_arg):
        words = shlex.split(cmd)
        if "apt-get" in words and "install" in words:
            pkgs += [w for w in words[words.index("install") + 1:] if not w.startswith("-")]
    return pkgs


def check_dockerfile(dockerfile: Path, context: Path, version: str):
    """(errors, ids): the image's facts the manifests must agree with."""
    errs, ids = [], {"version": None}
    name = Path(dockerfile).name
    try:
        instrs = parse_dockerfile(Path(dockerfile).read_text())
    except OSError as e:
        return [f"{name}: {e}"], ids
    stages, cur = [], None
    for ins, arg, n in instrs:
        if ins == "FROM":
            words = arg.split()
            cur = {"base": words[0], "name": words[2] if len(words) > 2 and words[1].upper() == "AS" else None,
                   "instrs": [], "line": n}
            stages.append(cur)
        elif cur is None:
            if ins != "ARG":
                errs.append(f"{name}:{n}: {ins} before the first FROM")
        else:
            cur["instrs"].append((ins, arg, n))
    if len(stages) < 2:
        errs.append(f"{name}: not a multi-stage build ({len(stages)} FROM)")
        return errs, ids
    for s in stages:
        if s["base"] != "debian:12-slim":
            errs.append(f"{name}:{s['line']}: base image {s['base']} is not debian:12-slim")
    build, final = stages[0], stages[-1]
    build_runs = " ".join(a for i, a, _ in build["instrs"] if i == "RUN")
    if "setup-deps.sh" not in build_runs:
        errs.append(f"{name}: the build stage does not install the build dependencies with scripts/setup-deps.sh")
    if "-DCMAKE_BUILD_TYPE=Release" not in build_runs:
        errs.append(f"{name}: the build stage does not build in Release")
    if "cmake --install" not in build_runs:
        errs.append(f"{name}: the build stage does not `cmake --install` into a staging prefix")
    patterns = []
    ign = Path(context) / ".dockerignore"
    if ign.is_file():
        patterns = [p.strip() for p in ign.read_text().splitlines() if p.strip() and not p.startswith("#")]
    names = [s["name"] for s in stages]
    for si, s in enumerate(stages):
        for ins, arg, n in s["instrs"]:
            if ins not in ("COPY", "ADD"):
                continue
            words = exec_form(arg) or shlex.split(arg)
            flags = [w for w in words if w.startswith("--")]
            paths = [w for w in words if not w.startswith("--")]
            srcs = paths[:-1]
            frm = [f.split("=", 1)[1] for f in flags if f.startswith("--from=")]
            if frm:
                if frm[0] not in names[:si]:
                    errs.append(f"{name}:{n}: COPY --from={frm[0]} names no earlier stage")
                    continue
                earlier = stages[names.index(frm[0])]
                text = " ".join(a for i, a, _ in earlier["instrs"] if i in ("RUN", "COPY", "WORKDIR"))
                for src in srcs:
                    if src.rstrip("/") not in text:
                        errs.append(f"{name}:{n}: COPY --from={frm[0]} {src}: stage '{frm[0]}' never writes it")
                continue
            for src in srcs:
                rel = os.path.normpath(src).lstrip("/")
                if rel == ".":
                    continue
                if not (Path(context) / rel).exists():
                    errs.append(f"{name}:{n}: COPY source {src} does not exist in the repository")
                elif dockerignored(rel, patterns):
                    errs.append(f"{name}:{n}: COPY source {src} is excluded by .dockerignore")
    # Runtime stage.
    pkgs = []
    for ins, arg, n in final["instrs"]:
        if ins == "RUN":
            pkgs += apt_packages(arg)
    ids["runtime_packages"] = pkgs
    for p in pkgs:
        if p.endswith("-dev"):
            errs.append(f"{name}: runtime stage installs the development package {p}")
    for lib in ("libgrpc", "libprotobuf-c", "libuv1", "libsqlite3", "libjansson"):
        if not any(p.startswith(lib) for p in pkgs):
            errs.append(f"{name}: runtime stage installs no {lib} package")
    for ins, arg, n in final["instrs"]:
        if ins == "USER":
            mo = re.fullmatch(r"(\d+):(\d+)", arg)
            if not mo:
                errs.append(f"{name}:{n}: USER {arg} is not numeric uid:gid (runAsNonRoot needs numbers)")
            else:
                ids["uid"], ids["gid"] = int(mo.group(1)), int(mo.group(2))
        elif ins == "ENTRYPOINT":
            ids["entrypoint"] = exec_form(arg)
        elif ins == "CMD":
            ids["cmd"] = exec_form(arg)
        elif ins == "EXPOSE":
            ids.setdefault("expose", set()).update(int(p.split("/")[0]) for p in arg.split())
        elif ins == "LABEL":
            mo = re.search(r'org\.opencontainers\.image\.version="?([^"\s]+)', arg)
            if mo:
                ids["version"] = mo.group(1)
    final_runs = " ".join(a for i, a, _ in final["instrs"] if i == "RUN")
    if "uid" in ids and (f"--uid {ids['uid']}" not in final_runs or f"--gid {ids['gid']}" not in final_runs):
        errs.append(f"{name}: the detd user is not created with uid/gid {ids.get('uid')}/{ids.get('gid')}")
    if "uid" not in ids:
        errs.append(f"{name}: the runtime stage has no USER uid:gid")
    if ids.get("entrypoint") != ["/usr/bin/detd"]:
        errs.append(f"{name}: ENTRYPOINT is {ids.get('entrypoint')}, not [\"/usr/bin/detd\"]")
    cmd = ids.get("cmd") or []
    if cmd[:1] != ["--config"] or len(cmd) != 2:
        errs.append(f"{name}: CMD is {cmd}, not [\"--config\", FILE]")
    else:
        ids["cmd_config"] = cmd[1]
    if ids.get("version") != version:
        errs.append(f"{name}: image version label {ids.get('version')} is not the project version {version}")
    if "/usr/lib/detd/python" in build_runs:
        ids["python_dir"] = "/usr/lib/detd/python"
    return errs, ids


def check_exposed_ports(ids: dict, kdir: Path):
    """EXPOSE lists the listen and metrics ports of the ConfigMap's detd.conf."""
    manifests, _ = load_manifests(kdir)
    for m in manifests:
        if m.kind == "ConfigMap" and "detd.conf" in (m.doc.get("data") or {}):
            conf, _ = parse_conf(m.doc["data"]["detd.conf"])
            want = {hostport_port(conf_value(conf, k)) for k in ("listen", "metrics")}
            missing = want - (ids.get("expose") or set())
            return [f"Dockerfile: EXPOSE does not list port {p} of detd.conf" for p in sorted(missing, key=str)]
    return []


def project_version(repo: Path) -> str:
    mo = re.search(r"project\(detd\s+VERSION\s+([0-9.]+)", (Path(repo) / "CMakeLists.txt").read_text())
    return mo.group(1) if mo else ""


def check_all(repo: Path = REPO, kdir: Path = None, dockerfile: Path = None):
    """Every static check; kdir and dockerfile default to the repository's."""
    repo = Path(repo)
    kdir = Path(kdir or repo / "deploy" / "kubernetes")
    dockerfile = Path(dockerfile or repo / "Dockerfile")
    errs, ids = check_dockerfile(dockerfile, repo, project_version(repo))
    errs += check_manifests(kdir, ids)
    errs += check_exposed_ports(ids, kdir)
    return errs


# ---- Debian packages (needs apt-cache / dpkg) -------------------------------

def missing_debian_packages(pkgs):
    """The names among pkgs that `apt-cache show` does not know. One call
    for all of them: each apt-cache call reads the whole package index
    (seconds where, as in Debian's container images, apt keeps no binary
    cache of it). The call fails when any name is unknown, and prints a
    stanza for each one it knows."""
    if not pkgs:
        return []
    out = subprocess.run(["apt-cache", "show", "--no-all-versions", *pkgs],
                         capture_output=True, text=True).stdout
    known = {line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Package:")}
    return [p for p in pkgs if p not in known]


def package_closure(pkgs):
    """pkgs and everything they depend on (Depends and Pre-Depends)."""
    out = subprocess.run(
        ["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
         "--no-breaks", "--no-replaces", "--no-enhances", *pkgs],
        capture_output=True, text=True, check=True).stdout
    return {line.strip() for line in out.splitlines() if line and not line.startswith(" ")} | set(pkgs)


def libraries_without_package(binaries, packages):
    """Shared libraries the binaries load that packages (and their
    dependencies) do not provide: [(binary, library, owning packages)]."""
    closure = package_closure(packages)
    needed, paths = [], set()
    for b in binaries:
        ldd = subprocess.run(["ldd", str(b)], capture_output=True, text=True, check=True).stdout
        for line in ldd.splitlines():
            mo = re.match(r"\s*(\S+) => (/\S+)", line)
            if mo:
                needed.append((str(b), mo.group(1)))
                # usrmerge: a package lists the library under /lib or under
                # /usr/lib, whichever path the loader reported: ask both.
                where = str(Path(mo.group(2)).parent)
                bare = where[len("/usr"):] if where.startswith("/usr/") else where
                paths |= {f"{bare}/{mo.group(1)}", f"/usr{bare}/{mo.group(1)}"}
    # One dpkg query for all, by exact paths (a glob pattern makes dpkg
    # match every file it knows against it: seconds per library). A path
    # no package lists makes dpkg exit 1; the others are still answered.
    q = subprocess.run(["dpkg", "-S", *sorted(paths)], capture_output=True, text=True)
    owners = {}
    for line in q.stdout.splitlines():
        pkgs, _, path = line.partition(": ")
        for pkg in pkgs.split(","):
            owners.setdefault(Path(path.strip()).name, set()).add(pkg.strip().split(":")[0])
    return [(b, lib, ",".join(sorted(owners.get(lib, ()))) or "?")
            for b, lib in needed if not owners.get(lib, set()) & closure]


if __name__ == "__main__":
    errors = check_all(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO)
    for e in errors:
        print(e)
    sys.exit(1 if errors else 0)
