"""Validation of the Kubernetes manifests (deploy/kubernetes) and the
container image recipe (Dockerfile).

Pure checks (every document parses, required fields, ports, paths, images and
the etcd members agree across files), Debian 12 checks (the runtime packages
exist; they provide every shared library the built binaries load) and the
daemon's own validation of the ConfigMap's detd.conf (`detd --check-config`).
Each kind of mistake is also made on purpose in a copy, and the checker must
report it.

The build directory comes from DETD_BUILD_DIR (default <repo>/build); the
daemon from DETD_BIN (default <build>/daemon/detd).
"""

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import manifest_check as mc  # noqa: E402

REPO = mc.REPO
KDIR = REPO / "deploy" / "kubernetes"
BUILD = Path(os.environ.get("DETD_BUILD_DIR", REPO / "build"))
DETD = Path(os.environ.get("DETD_BIN", BUILD / "daemon" / "detd"))


def image_facts():
    errs, ids = mc.check_dockerfile(REPO / "Dockerfile", REPO, mc.project_version(REPO))
    assert errs == []
    return ids


def configmap_conf_text():
    for m in mc.load_manifests(KDIR)[0]:
        if m.kind == "ConfigMap":
            return m.doc["data"]["detd.conf"]
    raise AssertionError("no ConfigMap with detd.conf")


# ---- the repository's files are consistent --------------------------------

def test_repository_manifests_and_dockerfile_are_consistent():
    assert mc.check_all(REPO) == []


def test_every_document_parses_with_the_expected_objects():
    manifests, errs = mc.load_manifests(KDIR)
    assert errs == []
    kinds = sorted((m.kind, m.name) for m in manifests)
    assert kinds == sorted([
        ("Namespace", "detd"), ("ConfigMap", "detd-config"), ("ServiceAccount", "detd"),
        ("DaemonSet", "detd"), ("Pod", "train-with-detd"), ("Service", "detd-etcd"),
        ("Service", "detd-etcd-client"), ("PodDisruptionBudget", "detd-etcd"),
        ("StatefulSet", "detd-etcd"),
    ])
    for m in manifests:
        assert m.doc["apiVersion"] and m.doc["kind"] and m.name


def test_configmap_detd_conf_has_the_deployment_settings():
    conf, errs = mc.parse_conf(configmap_conf_text())
    assert errs == []
    assert conf["socket"] == ["/run/detd/detd.sock"]
    assert conf["state-dir"] == ["/var/lib/detd"]
    assert conf["listen"] == ["0.0.0.0:7070"]
    assert conf["metrics"] == ["0.0.0.0:9464"]
    assert conf["log-format"] == ["json"]
    assert conf["socket-mode"] == ["0660"]
    assert [e.split("//")[1].split(".")[0] for e in conf["etcd"][0].split(",")] == [
        "detd-etcd-0", "detd-etcd-1", "detd-etcd-2"]


def test_image_tag_matches_project_version_everywhere():
    ids = image_facts()
    assert ids["version"] == mc.project_version(REPO) == "0.1.0"
    images = {c["image"] for m in mc.load_manifests(KDIR)[0] if m.kind in mc.WORKLOADS
              for c, _ in mc.all_containers(mc.pod_spec(m)) if mc.is_detd_image(c["image"])}
    assert images == {"detd:0.1.0"}
    assert ids["uid"] == ids["gid"] == 10001
    assert ids["expose"] == {7070, 9464}


def test_runtime_packages_exist_in_debian_12():
    assert Path("/etc/debian_version").read_text().startswith("12"), "the package check needs Debian 12"
    pkgs = image_facts()["runtime_packages"]
    assert "libgrpc29" in pkgs and "libmicrohttpd12" in pkgs
    assert mc.missing_debian_packages(pkgs) == []
    # The check itself tells a real name from a wrong one.
    assert mc.missing_debian_packages(["libgrpc29", "libgrpc31", "libuv2"]) == ["libgrpc31", "libuv2"]


def test_runtime_packages_provide_every_library_of_the_built_binaries():
    binaries = [DETD, BUILD / "client" / "detctl", BUILD / "client" / "libdetd.so"]
    for b in binaries:
        assert b.exists(), f"{b} is not built (DETD_BUILD_DIR={BUILD})"
    pkgs = image_facts()["runtime_packages"]
    # A sanitizer build (the second CI pass) links the sanitizer runtimes,
    # which the image's Release build does not: they are not asked of it.
    cache = (BUILD / "CMakeCache.txt").read_text() if (BUILD / "CMakeCache.txt").exists() else ""
    sanitized = "DETD_SANITIZE:BOOL=ON" in cache
    runtime = ("libasan.so", "libubsan.so", "liblsan.so", "libatomic.so")
    assert [m for m in mc.libraries_without_package(binaries, pkgs)
            if not (sanitized and m[1].startswith(runtime))] == []
    # Without libjansson4 the daemon and detctl could not start: reported.
    short = [p for p in pkgs if p != "libjansson4"]
    missing = {(Path(b).name, lib) for b, lib, _ in mc.libraries_without_package(binaries, short)}
    assert ("detd", "libjansson.so.4") in missing and ("detctl", "libjansson.so.4") in missing


def test_installed_tree_matches_the_image_layout(tmp_path):
    # What the build stage does after compiling: cmake --install into a
    # staging root, then the Python package with libdetd as detd/_lib.
    staging = tmp_path / "staging"
    r = subprocess.run(["cmake", "--install", str(BUILD), "--prefix", "/usr"],
                       env=dict(os.environ, DESTDIR=str(staging)), capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    ids = image_facts()
    entry = staging / ids["entrypoint"][0].lstrip("/")
    assert entry.is_file() and os.access(entry, os.X_OK), f"ENTRYPOINT {ids['entrypoint'][0]} is not installed"
    assert (staging / "usr" / "bin" / "detctl").is_file()
    assert list(staging.glob("usr/lib/**/libdetd.so.0")), "libdetd.so.0 is not installed"
    # The copied package finds the library where the Dockerfile puts it and
    # has the module the sidecar pod runs.
    pkg = REPO / "client" / "python" / "detd"
    assert (pkg / "run.py").is_file()
    assert 'os.path.join(here, "_lib", "libdetd.so")' in (pkg / "_native.py").read_text()
    text = (REPO / "Dockerfile").read_text()
    assert f"{ids['python_dir']}/detd/_lib/libdetd.so" in text
    assert "/usr/share/detd/tables" in text and "tables = /usr/share/detd/tables" in configmap_conf_text()


# ---- mistakes made on purpose are reported --------------------------------

def docs_of(kdir, name):
    return [d for d in yaml.safe_load_all((kdir / name).read_text()) if d is not None]


def rewrite(kdir, name, docs):
    (kdir / name).write_text(yaml.safe_dump_all(docs, sort_keys=False))


def find(docs, kind):
    return next(d for d in docs if d["kind"] == kind)


def container(spec, name):
    return next(c for c in (spec.get("initContainers") or []) + spec["containers"] if c["name"] == name)


def ds_detd(docs):
    return container(find(docs, "DaemonSet")["spec"]["template"]["spec"], "detd")


def set_port(docs):
    ds_detd(docs)["ports"][0]["containerPort"] = 7071


def drop_limits(docs):
    del ds_detd(docs)["resources"]["limits"]


def drop_readiness(docs):
    del ds_detd(docs)["readinessProbe"]


def probe_other_port(docs):
    ds_detd(docs)["livenessProbe"]["grpc"]["port"] = 7071


def wrong_image(docs):
    ds_detd(docs)["image"] = "detd:0.2.0"


def selector_mismatch(docs):
    find(docs, "DaemonSet")["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] = "detd-x"


def hostpath_elsewhere(docs):
    vols = find(docs, "DaemonSet")["spec"]["template"]["spec"]["volumes"]
    next(v for v in vols if v["name"] == "socket-dir")["hostPath"]["path"] = "/run/detd2"


def node_id_from_pod_name(docs):
    env = ds_detd(docs)["env"]
    next(e for e in env if e["name"] == "NODE_NAME")["valueFrom"]["fieldRef"]["fieldPath"] = "metadata.name"


def root_filesystem_writable(docs):
    ds_detd(docs)["securityContext"]["readOnlyRootFilesystem"] = False


def runs_as_other_user(docs):
    ds_detd(docs)["securityContext"]["runAsUser"] = 1000


def no_rolling_update(docs):
    find(docs, "DaemonSet")["spec"]["updateStrategy"] = {"type": "OnDelete"}


def requests_gpu(docs):
    ds_detd(docs)["resources"]["limits"]["nvidia.com/gpu"] = 1


def conf_listen_port(docs):
    cm = find(docs, "ConfigMap")
    cm["data"]["detd.conf"] = cm["data"]["detd.conf"].replace("listen = 0.0.0.0:7070", "listen = 0.0.0.0:7071")


def conf_unknown_key(docs):
    cm = find(docs, "ConfigMap")
    cm["data"]["detd.conf"] += "lease_ms = 5000\n"


def conf_socket_elsewhere(docs):
    cm = find(docs, "ConfigMap")
    cm["data"]["detd.conf"] = cm["data"]["detd.conf"].replace("/run/detd/detd.sock", "/run/detd-x/detd.sock")


def conf_etcd_member_missing(docs):
    cm = find(docs, "ConfigMap")
    cm["data"]["detd.conf"] = cm["data"]["detd.conf"].replace(
        ",http://detd-etcd-2.detd-etcd.detd.svc.cluster.local:2379", "")


def sidecar_not_native(docs):
    del container(find(docs, "Pod")["spec"], "detd")["restartPolicy"]


def sidecar_no_startup_probe(docs):
    del container(find(docs, "Pod")["spec"], "detd")["startupProbe"]


def sidecar_wrong_socket(docs):
    env = container(find(docs, "Pod")["spec"], "train")["env"]
    next(e for e in env if e["name"] == "DETD_SOCKET")["value"] = "/run/detd/other.sock"


def sidecar_no_detd_run(docs):
    container(find(docs, "Pod")["spec"], "train")["command"] = ["python", "train.py"]


def etcd_five_replicas(docs):
    find(docs, "StatefulSet")["spec"]["replicas"] = 5


def etcd_member_name_typo(docs):
    args = find(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]["args"]
    i = next(i for i, a in enumerate(args) if a.startswith("--initial-cluster="))
    args[i] = args[i].replace("detd-etcd-2=", "etcd-2=")


def mount_without_volume(docs):
    vols = find(docs, "DaemonSet")["spec"]["template"]["spec"]["volumes"]
    vols[:] = [v for v in vols if v["name"] != "tmp"]


def etcd_service_not_headless(docs):
    next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "detd-etcd")["spec"]["clusterIP"] = ""


MUTATIONS = [
    ("daemonset.yaml", set_port, "containerPort 'grpc' is 7071, detd.conf listen port is 7070"),
    ("daemonset.yaml", set_port, "readinessProbe port 7070 is not a declared containerPort"),
    ("daemonset.yaml", drop_limits, "container 'detd': resources.limits.cpu is missing"),
    ("daemonset.yaml", drop_readiness, "container 'detd': readinessProbe is missing"),
    ("daemonset.yaml", probe_other_port, "livenessProbe port 7071 is not a declared containerPort"),
    ("daemonset.yaml", wrong_image, "image detd:0.2.0 is not detd:0.1.0"),
    ("daemonset.yaml", selector_mismatch, "selector app.kubernetes.io/name=detd-x does not match"),
    ("daemonset.yaml", hostpath_elsewhere, "hostPath of the socket directory is /run/detd2"),
    ("daemonset.yaml", node_id_from_pod_name, "--node-id does not come from spec.nodeName"),
    ("daemonset.yaml", root_filesystem_writable, "readOnlyRootFilesystem is not true"),
    ("daemonset.yaml", runs_as_other_user, "runAsUser is 1000, the image's detd user is 10001"),
    ("daemonset.yaml", no_rolling_update, "updateStrategy is not RollingUpdate"),
    ("daemonset.yaml", requests_gpu, "requests a GPU resource"),
    ("daemonset.yaml", mount_without_volume, "volumeMount 'tmp' names no volume of the pod"),
    ("configmap.yaml", conf_listen_port, "containerPort 'grpc' is 7070, detd.conf listen port is 7071"),
    ("configmap.yaml", conf_listen_port, "EXPOSE does not list port 7071"),
    ("configmap.yaml", conf_unknown_key, "lease_ms: unknown key"),
    ("configmap.yaml", conf_socket_elsewhere, "DETD_SOCKET is /run/detd/detd.sock, detd.conf's socket is "
                                              "/run/detd-x/detd.sock"),
    ("configmap.yaml", conf_socket_elsewhere, "no volume mounted at the socket directory /run/detd-x"),
    ("configmap.yaml", conf_etcd_member_missing, "do not list every member"),
    ("sidecar-pod.yaml", sidecar_not_native, "no restartPolicy: Always (not a native sidecar)"),
    ("sidecar-pod.yaml", sidecar_no_startup_probe, "the detd sidecar has no startupProbe"),
    ("sidecar-pod.yaml", sidecar_wrong_socket, "DETD_SOCKET is /run/detd/other.sock"),
    ("sidecar-pod.yaml", sidecar_no_detd_run, "does not run its script through `python -m detd.run`"),
    ("etcd-statefulset.yaml", etcd_five_replicas, "replicas is 5"),
    ("etcd-statefulset.yaml", etcd_five_replicas, "--initial-cluster names"),
    ("etcd-statefulset.yaml", etcd_member_name_typo, "--initial-cluster names ['detd-etcd-0', 'detd-etcd-1', "
                                                     "'etcd-2'] are not the pods"),
    ("etcd-statefulset.yaml", etcd_service_not_headless, "not headless"),
]


@pytest.mark.parametrize("name,mutate,expected", MUTATIONS,
                         ids=[f"{f}-{m.__name__}-{i}" for i, (f, m, _) in enumerate(MUTATIONS)])
def test_mutated_manifest_is_reported(tmp_path, name, mutate, expected):
    kdir = tmp_path / "kubernetes"
    shutil.copytree(KDIR, kdir)
    docs = docs_of(kdir, name)
    before = copy.deepcopy(docs)
    mutate(docs)
    assert docs != before
    rewrite(kdir, name, docs)
    errs = mc.check_all(REPO, kdir=kdir)
    assert any(expected in e for e in errs), errs


def test_unchanged_copy_is_clean(tmp_path):
    # The mutation tests' baseline: a rewritten but unchanged copy passes.
    kdir = tmp_path / "kubernetes"
    shutil.copytree(KDIR, kdir)
    for f in ("daemonset.yaml", "configmap.yaml", "sidecar-pod.yaml", "etcd-statefulset.yaml"):
        rewrite(kdir, f, docs_of(kdir, f))
    assert mc.check_all(REPO, kdir=kdir) == []


def test_yaml_syntax_error_names_the_file(tmp_path):
    kdir = tmp_path / "kubernetes"
    shutil.copytree(KDIR, kdir)
    (kdir / "daemonset.yaml").write_text((kdir / "daemonset.yaml").read_text().replace(
        "  selector:\n", "  selector:\n   - [\n", 1))
    errs = mc.check_all(REPO, kdir=kdir)
    assert any(e.startswith("daemonset.yaml: YAML does not parse") for e in errs), errs


def test_manifest_missing_from_kustomization_is_reported(tmp_path):
    kdir = tmp_path / "kubernetes"
    shutil.copytree(KDIR, kdir)
    k = yaml.safe_load((kdir / "kustomization.yaml").read_text())
    k["resources"].remove("etcd-statefulset.yaml")
    (kdir / "kustomization.yaml").write_text(yaml.safe_dump(k))
    assert "kustomization.yaml: etcd-statefulset.yaml is not listed in resources" in mc.check_all(REPO, kdir=kdir)


DOCKERFILE_MUTATIONS = [
    ("COPY scripts/setup-deps.sh /src/scripts/setup-deps.sh",
     "COPY scripts/setup-deps.sh scripts/missing.sh /src/scripts/",
     "COPY source scripts/missing.sh does not exist"),
    ("COPY --from=build /staging/ /", "COPY --from=build /stage/ /", "stage 'build' never writes it"),
    ("COPY --from=build /staging/ /", "COPY --from=builder /staging/ /", "names no earlier stage"),
    ("USER 10001:10001", "USER 1000:1000", "securityContext.runAsUser is 10001, the image's detd user is 1000"),
    ("USER 10001:10001", "USER detd", "USER detd is not numeric"),
    ('org.opencontainers.image.version="0.1.0"', 'org.opencontainers.image.version="0.2.0"',
     "image version label 0.2.0 is not the project version 0.1.0"),
    ("EXPOSE 7070 9464", "EXPOSE 7070", "EXPOSE does not list port 9464"),
    ('ENTRYPOINT ["/usr/bin/detd"]', 'ENTRYPOINT ["/usr/local/bin/detd"]', "ENTRYPOINT is"),
    ('CMD ["--config", "/etc/detd/detd.conf"]', 'CMD ["--config", "/etc/detd.conf"]',
     "--config /etc/detd/detd.conf is not the image's /etc/detd.conf"),
    ("        libjansson4 \\\n", "        libjansson-dev \\\n", "installs the development package libjansson-dev"),
    ("FROM debian:12-slim AS build", "FROM debian:11-slim AS build", "base image debian:11-slim"),
    ("-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_BUILD_TYPE=Debug", "does not build in Release"),
]


@pytest.mark.parametrize("old,new,expected", DOCKERFILE_MUTATIONS)
def test_mutated_dockerfile_is_reported(tmp_path, old, new, expected):
    text = (REPO / "Dockerfile").read_text()
    assert old in text
    df = tmp_path / "Dockerfile"
    df.write_text(text.replace(old, new))
    errs = mc.check_all(REPO, dockerfile=df)
    assert any(expected in e for e in errs), errs


def test_dockerignore_excluding_a_copy_source_is_reported(tmp_path):
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    for part in ("Dockerfile", "CMakeLists.txt", ".dockerignore"):
        shutil.copy(REPO / part, ctx / part)
    (ctx / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "setup-deps.sh", ctx / "scripts")
    errs, _ = mc.check_dockerfile(ctx / "Dockerfile", ctx, "0.1.0")
    assert errs == []
    (ctx / ".dockerignore").write_text((ctx / ".dockerignore").read_text() + "scripts/\n")
    errs, _ = mc.check_dockerfile(ctx / "Dockerfile", ctx, "0.1.0")
    assert any("COPY source scripts/setup-deps.sh is excluded by .dockerignore" in e for e in errs), errs


def test_runtime_package_name_unknown_to_debian_is_reported(tmp_path):
    df = tmp_path / "Dockerfile"
    df.write_text((REPO / "Dockerfile").read_text().replace("libgrpc29", "libgrpc30"))
    errs, ids = mc.check_dockerfile(df, REPO, "0.1.0")
    assert errs == []
    assert mc.missing_debian_packages(ids["runtime_packages"]) == ["libgrpc30"]


# ---- the daemon validates the ConfigMap's detd.conf -----------------------

def check_config(conf_path, tmp_path):
    """detd --check-config on a file; host paths the file names for the
    node (state, socket, tables) are replaced by temporary ones."""
    return subprocess.run(
        [str(DETD), "--check-config", "--config", str(conf_path),
         "--state-dir", str(tmp_path / "state"), "--socket", str(tmp_path / "detd.sock"),
         "--tables", str(REPO / "tables")],
        capture_output=True, text=True, timeout=30)


def test_check_config_accepts_the_configmap(tmp_path):
    conf = tmp_path / "detd.conf"
    conf.write_text(configmap_conf_text())
    r = check_config(conf, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0.0.0.0:7070" in r.stdout and "0.0.0.0:9464" in r.stdout, r.stdout
    assert not (tmp_path / "detd.sock").exists()


def test_check_config_rejects_a_bad_line_of_the_configmap(tmp_path):
    lines = configmap_conf_text().splitlines()
    lines.insert(3, "lease-ms = 5x")
    conf = tmp_path / "detd.conf"
    conf.write_text("\n".join(lines) + "\n")
    r = check_config(conf, tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{conf}:4: lease-ms" in r.stderr, r.stderr
