"""The secure setup takes its files from one place: the directory a real `nvwatch web-config
init` wrote is what the systemd drop-in loads as credentials and what the Kubernetes
component's Secret, probe and ServiceMonitor name, and an agent served from a copy of it,
laid out as systemd's credentials directory or as the kubelet's Secret volume, answers
the password holder only. docs/deploy.md's excerpts are the shipped lines.

PID 1 on the test machine is not systemd, so no unit is started here: `systemd-analyze
verify` checks the unit with its drop-in (directives, specifiers, the commands), and the
credentials directory systemd would make is made by hand from the drop-in's lines.
"""

from __future__ import annotations

import base64
import http.client
import os
import shutil
import ssl
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bcrypt
import click
import jsonschema
import kubernetes_validate
import pytest
import yaml
from cryptography import x509

from nvwatch.agent.cli import cli
from nvwatch.sim.ports import free_port
from tests.conftest import require_tool
from tests.deploy.snippets import blocks, unit_entries
from tests.e2e.loopback import Endpoint, instant_query, log_tail, spawn_logged, wait_for
from tests.e2e.service_commands import prometheus_argv, write_yaml
from tests.processes import stop

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "deploy.md"
HEADING = "## TLS and basic auth (`nvwatch web-config init`)"
UNIT = REPO / "deploy" / "systemd" / "nvwatch.service"
DROP_IN = REPO / "deploy" / "systemd" / "nvwatch.service.d" / "web-config.conf"
KUSTOMIZE = REPO / "deploy" / "kubernetes"
COMPONENT = "web-config"  # deploy/kubernetes/web-config/kustomization.yaml
CRD = REPO / "tests" / "kubernetes" / "crd"
INSTALLED = "/opt/nvwatch/bin/nvwatch"  # the unit's binary, made by its install lines
NVWATCH = [sys.executable, "-m", "nvwatch.agent.cli"]


def _sh_lines() -> list[str]:
    [script] = blocks(DOCS, HEADING, "sh")
    return [line for line in script.splitlines() if line and not line.startswith("#")]


def _documented(prefix: str) -> list[str]:
    [line] = [line for line in _sh_lines() if line.startswith(prefix)]
    return line.split()


def _documented_out() -> Path:
    words = _documented("nvwatch web-config init")
    return Path(words[words.index("--out") + 1])


@dataclass(frozen=True)
class Init:
    """What a real `nvwatch web-config init` wrote, read back from its output and files."""

    directory: Path
    config: Path  # the file its first line says it wrote
    files: frozenset[str]
    scrape: dict[str, Any]  # the Prometheus job it printed

    @property
    def password_file(self) -> Path:
        return self.directory / self.scrape["basic_auth"]["password_file"]

    @property
    def web_config(self) -> dict[str, Any]:
        loaded: dict[str, Any] = yaml.safe_load(self.config.read_text(encoding="utf-8"))
        return loaded

    @property
    def cert_file(self) -> str:
        return str(self.web_config["tls_server_config"]["cert_file"])

    @property
    def key_file(self) -> str:
        return str(self.web_config["tls_server_config"]["key_file"])

    @property
    def user(self) -> str:
        [user] = self.web_config["basic_auth_users"]
        return str(user)

    def accepts(self, password: bytes) -> bool:
        """Whether `password`, byte for byte, matches the user's bcrypt hash."""
        hashed = self.web_config["basic_auth_users"][self.user].encode()
        return bool(bcrypt.checkpw(password, hashed))

    def dns_names(self) -> set[str]:
        cert = x509.load_pem_x509_certificate((self.directory / self.cert_file).read_bytes())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        return set(names.get_values_for_type(x509.DNSName))


@pytest.fixture(scope="module")
def init(tmp_path_factory: pytest.TempPathFactory) -> Init:
    out = tmp_path_factory.mktemp("init") / "web"
    argv = [*NVWATCH, "web-config", "init", "--out", str(out), "--bcrypt-cost", "4"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("wrote "), first
    config = Path(first.split()[1])
    assert config.parent == out
    [scrape] = yaml.safe_load("\n".join(done.stdout.splitlines()[2:]))
    return Init(out, config, frozenset(p.name for p in out.iterdir()), scrape)


def _option(command: str, name: str) -> click.Parameter | None:
    found = cli.get_command(click.Context(cli), command)
    assert found is not None, command
    return next((p for p in found.params if p.name == name), None)


# --- systemd -------------------------------------------------------------------------


def _drop_in() -> list[tuple[str, str]]:
    return unit_entries(DROP_IN.read_text(encoding="utf-8"), "[Service]")


def _credentials() -> list[tuple[str, Path]]:
    """(credential id, source file) of every LoadCredential= line."""
    pairs = [value.split(":", 1) for key, value in _drop_in() if key == "LoadCredential"]
    return [(name, Path(source)) for name, source in pairs]


def _environment() -> dict[str, str]:
    return dict(v.split("=", 1) for k, v in _drop_in() if k == "Environment")


def test_the_drop_in_loads_the_web_config_and_the_files_it_names(init: Init) -> None:
    credentials = _credentials()
    for name, source in credentials:
        # under its own name, so the config's relative paths find it beside the config
        assert source.name == name
        assert source.parent == _documented_out(), source
    names = {name for name, _ in credentials}
    assert names == {init.config.name, init.cert_file, init.key_file}
    assert names < init.files  # the password stays behind: the agent has its hash
    variable = _environment()
    serve_option = _option("serve", "web_config")
    assert serve_option is not None and serve_option.envvar in variable
    assert variable[str(serve_option.envvar)] == f"%d/{init.config.name}"
    # ExecStartPre's doctor has no such option, so the variable cannot change it
    assert _option("doctor", "web_config") is None


def test_the_documented_drop_in_is_the_shipped_one() -> None:
    [snippet] = blocks(DOCS, HEADING, "ini")
    assert unit_entries(snippet, None) == _drop_in()
    source, target = _documented("cp ")[1:]
    assert (REPO / source).resolve() == DROP_IN
    assert Path(target) == Path("/etc/systemd/system") / f"{UNIT.name}.d"
    assert _documented("mkdir")[-1] == str(Path(target))


def test_systemd_analyze_verifies_the_unit_with_the_drop_in(tmp_path: Path) -> None:
    """verify reads drop-ins from NAME.d beside the unit it is given: directives,
    specifiers (%d) and commands are checked together. A bad line in the drop-in is
    reported, so an empty report means the drop-in was read and is clean."""
    analyze = require_tool("systemd-analyze")
    nvwatch = Path(sys.executable).parent / "nvwatch"  # this environment's, PATH or not
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text(encoding="utf-8").replace(INSTALLED, str(nvwatch)))
    drop_in = tmp_path / f"{UNIT.name}.d" / DROP_IN.name
    drop_in.parent.mkdir()
    shutil.copy(DROP_IN, drop_in)

    def verify() -> subprocess.CompletedProcess[str]:
        argv = [analyze, "verify", str(unit)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)

    done = verify()
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.strip() == "", done.stderr
    with drop_in.open("a", encoding="utf-8") as file:
        file.write("NoSuchDirective=1\n")
    assert f"{drop_in}:" in verify().stderr


# --- serving from a copy, and the probe's client -------------------------------------


def _verifying(cert: Path, server_name: str) -> ssl.SSLContext:
    """What Prometheus does with tls_config {ca_file, server_name}: the certificate as its
    CA, `server_name` verified whatever address it connects to."""
    context = ssl.create_default_context(cafile=str(cert))
    original = context.wrap_socket

    def wrap(sock: Any, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        kwargs["server_hostname"] = server_name
        return original(sock, *args, **kwargs)

    context.wrap_socket = wrap  # type: ignore[method-assign]
    return context


def _scrape(port: int, context: ssl.SSLContext, credentials: bytes | None) -> tuple[int, bytes]:
    headers = {}
    if credentials is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(credentials).decode()
    client = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    try:
        client.request("GET", "/metrics", headers=headers)
        response = client.getresponse()
        return response.status, response.read()
    finally:
        client.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[int, list[subprocess.Popen[str]]]]:
    """A port, and the list the test puts its `nvwatch serve` into; stopped by pid."""
    processes: list[subprocess.Popen[str]] = []
    yield free_port(), processes
    for process in processes:
        stop(process)


def _start(
    argv: list[str], port: int, processes: list[subprocess.Popen[str]], **kwargs: Any
) -> subprocess.Popen[str]:
    listen = ["--sources", "host", "--listen", f"127.0.0.1:{port}"]
    process = subprocess.Popen(
        [*NVWATCH, "serve", *listen, *argv], stderr=subprocess.PIPE, text=True, **kwargs
    )
    processes.append(process)
    return process


def _wait_served(process: subprocess.Popen[str], port: int, context: ssl.SSLContext) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            _scrape(port, context, None)
            return
        except ConnectionError:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the agent never served"
            time.sleep(0.1)


def test_an_agent_served_from_the_credentials_directory_admits_the_password_holder_only(
    tmp_path: Path, init: Init, served: tuple[int, list[subprocess.Popen[str]]]
) -> None:
    port, processes = served
    # what systemd makes of the drop-in: each credential copied under its id, 0400
    credentials = tmp_path / "run" / "credentials" / UNIT.name
    credentials.mkdir(parents=True)
    for name, source in _credentials():
        shutil.copy(init.directory / source.name, credentials / name)
        (credentials / name).chmod(0o400)
    environment = {k: v.replace("%d", str(credentials)) for k, v in _environment().items()}
    env = {**os.environ, **environment}
    # ExecStartPre: doctor runs with the same environment and is not disturbed by it
    doctor = subprocess.run(
        [*NVWATCH, "doctor", "--sources", "host"], env=env, capture_output=True, timeout=60
    )
    assert doctor.returncode == 0, doctor.stderr
    process = _start([], port, processes, env=env)
    context = _verifying(init.directory / init.cert_file, "nvwatch")
    _wait_served(process, port, context)
    # the password file's bytes as they are, as prometheus-operator sends a Secret's value
    password = init.password_file.read_bytes()
    user = init.user.encode()
    status, body = _scrape(port, context, user + b":" + password)
    assert status == 200 and b"# HELP nvwatch_" in body
    assert _scrape(port, context, user + b":" + password + b"x")[0] == 401
    assert _scrape(port, context, None)[0] == 401
    with pytest.raises(ssl.SSLCertVerificationError):
        _scrape(port, ssl.create_default_context(), user + b":" + password)  # system CAs


# --- Kubernetes ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The manifests with the component added as its kustomization says, by kind."""
    kubectl = require_tool("kubectl")
    copy = tmp_path_factory.mktemp("kustomize") / "kubernetes"
    shutil.copytree(KUSTOMIZE, copy)
    kustomization = copy / "kustomization.yaml"
    assert "components" not in yaml.safe_load(kustomization.read_text(encoding="utf-8"))
    with kustomization.open("a", encoding="utf-8") as file:
        file.write(f"components:\n  - {COMPONENT}\n")
    done = subprocess.run(
        [kubectl, "kustomize", str(copy)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    wanted = ("DaemonSet", "ServiceMonitor", "Service")
    return {d["kind"]: d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] in wanted}


def _container(rendered: dict[str, dict[str, Any]]) -> dict[str, Any]:
    [container] = rendered["DaemonSet"]["spec"]["template"]["spec"]["containers"]
    return container  # type: ignore[no-any-return]


def _secret_mount(rendered: dict[str, dict[str, Any]]) -> tuple[str, Path]:
    """The Secret's name and where the agent's container has it."""
    spec = rendered["DaemonSet"]["spec"]["template"]["spec"]
    [volume] = [v for v in spec["volumes"] if "secret" in v]
    [mount] = [m for m in _container(rendered)["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True
    return volume["secret"]["secretName"], Path(mount["mountPath"])


def _flag(argv: list[str], name: str) -> str:
    [value] = [a.split("=", 1)[1] for a in argv if a.startswith(f"{name}=")]
    return value


def _liveness(rendered: dict[str, dict[str, Any]]) -> list[str]:
    probe = _container(rendered)["livenessProbe"]
    assert "httpGet" not in probe
    command: list[str] = probe["exec"]["command"]
    assert command[:3] == ["nvwatch", "web-config", "get"]
    return command


def test_the_component_names_the_files_init_wrote(
    init: Init, rendered: dict[str, dict[str, Any]]
) -> None:
    secret, mount = _secret_mount(rendered)
    args = _container(rendered)["args"]
    assert Path(_flag(args, "--web-config")) == mount / init.config.name
    # the probe: the agent's own port, its CA and the scraper's user and password files
    command = _liveness(rendered)
    url = urllib.parse.urlsplit(command[3])
    assert (url.scheme, url.hostname, url.path) == ("https", "127.0.0.1", "/livez")
    assert url.port == int(_flag(args, "--listen").rsplit(":", 1)[1])
    files = {flag: Path(_flag(command, flag)) for flag in
             ("--ca-file", "--basic-auth-user-file", "--basic-auth-password-file")}  # fmt: skip
    assert all(path.parent == mount and path.name in init.files for path in files.values())
    assert files["--ca-file"].name == init.cert_file
    user_file, password_file = files["--basic-auth-user-file"], files["--basic-auth-password-file"]
    # Prometheus: the same Secret, the same certificate, user and password
    [endpoint] = rendered["ServiceMonitor"]["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    tls, auth = endpoint["tlsConfig"], endpoint["basicAuth"]
    assert tls["ca"]["secret"] == {"name": secret, "key": init.cert_file}
    # what init prints for a Prometheus of its own, and a name the certificate holds
    printed = init.scrape["tls_config"]
    assert (init.cert_file, tls["serverName"]) == (printed["ca_file"], printed["server_name"])
    assert tls["serverName"] in init.dns_names()
    assert auth["username"] == {"name": secret, "key": user_file.name}
    assert auth["password"] == {"name": secret, "key": password_file.name}
    # the operator puts each value into the scrape config as it is: no newline to strip
    assert (init.directory / user_file.name).read_bytes() == init.user.encode()
    assert init.accepts((init.directory / password_file.name).read_bytes())
    annotations = rendered["Service"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scheme"] == "https"
    # the documented Secret: the one mounted, made of the directory init wrote
    words = _documented("kubectl -n monitoring create secret generic")
    assert words[6] == secret
    assert Path(_flag(words, "--from-file")) == _documented_out()
    assert rendered["DaemonSet"]["metadata"]["namespace"] == words[2]


def test_the_readiness_probe_still_runs_doctor_with_the_agents_source_flags(
    rendered: dict[str, dict[str, Any]],
) -> None:
    container = _container(rendered)
    probe = container["readinessProbe"]["exec"]["command"]
    doctor = cli.get_command(click.Context(cli), "doctor")
    assert doctor is not None
    options = {opt for p in doctor.params for opt in p.opts if opt.startswith("--")}
    assert probe[:2] == ["nvwatch", "doctor"]
    assert sorted(probe[2:]) == sorted(a for a in container["args"] if a.split("=")[0] in options)


def test_the_rendered_objects_validate(rendered: dict[str, dict[str, Any]]) -> None:
    for version in ("1.31.0", kubernetes_validate.latest_version()):
        kubernetes_validate.validate(rendered["DaemonSet"], version, strict=True)
        kubernetes_validate.validate(rendered["Service"], version, strict=True)
    schema = yaml.safe_load((CRD / "servicemonitors.schema.yaml").read_text(encoding="utf-8"))
    jsonschema.Draft4Validator(schema).validate(rendered["ServiceMonitor"])


def test_the_documented_probe_is_the_rendered_one(rendered: dict[str, dict[str, Any]]) -> None:
    [snippet] = blocks(DOCS, HEADING, "yaml")
    documented = yaml.safe_load(snippet)
    assert documented == {"livenessProbe": _container(rendered)["livenessProbe"]}


def _secret_volume(init: Init, at: Path) -> None:
    """The kubelet's layout of a Secret volume: the files in a timestamped directory,
    `..data` linking to it, and each name a link through `..data`."""
    version = at / "..2025_01_01_00_00_00.000000000"
    version.mkdir(parents=True)
    for name in init.files:
        shutil.copy(init.directory / name, version / name)
    (at / "..data").symlink_to(version.name)
    for name in init.files:
        (at / name).symlink_to(Path("..data") / name)


def _one_line_failure(done: subprocess.CompletedProcess[str], words: str) -> None:
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("nvwatch: ") and words in line, line


@dataclass(frozen=True)
class PodAgent:
    """An agent started as the rendered DaemonSet starts it, the Secret's volume here."""

    port: int
    process: subprocess.Popen[str]
    mount: Path  # where the container has the Secret
    volume: Path  # where this test has it

    def here(self, value: str) -> str:
        """A path of the container, in this test's volume."""
        return value.replace(str(self.mount), str(self.volume))


@pytest.fixture
def pod_agent(
    tmp_path: Path,
    init: Init,
    rendered: dict[str, dict[str, Any]],
    served: tuple[int, list[subprocess.Popen[str]]],
) -> PodAgent:
    port, processes = served
    _, mount = _secret_mount(rendered)
    volume = tmp_path / "secret"
    _secret_volume(init, volume)
    web_config = _flag(_container(rendered)["args"], "--web-config")
    process = _start(["--web-config", web_config.replace(str(mount), str(volume))], port, processes)
    _wait_served(process, port, _verifying(init.directory / init.cert_file, "127.0.0.1"))
    return PodAgent(port, process, mount, volume)


def test_the_liveness_command_passes_with_the_secret_and_fails_otherwise(
    tmp_path: Path, rendered: dict[str, dict[str, Any]], pod_agent: PodAgent
) -> None:
    command = [pod_agent.here(part) for part in _liveness(rendered)]
    url = urllib.parse.urlsplit(command[3])
    command[3] = url._replace(netloc=f"{url.hostname}:{pod_agent.port}").geturl()

    # a proxy the node's environment names is not asked for the agent's own address
    dead = f"http://127.0.0.1:{free_port()}"
    env = {**os.environ, "https_proxy": dead, "HTTPS_PROXY": dead, "no_proxy": ""}

    def probe(argv: list[str]) -> subprocess.CompletedProcess[str]:
        argv = [*NVWATCH, *argv[1:]]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)

    done = probe(command)
    assert done.returncode == 0, done.stderr
    assert " 200 " in done.stdout
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password")
    flag = "--basic-auth-password-file"
    _one_line_failure(
        probe([f"{flag}={wrong}" if a.startswith(f"{flag}=") else a for a in command]), "401"
    )
    stop(pod_agent.process)
    _one_line_failure(probe(command), "cannot reach")


def _operator_job(endpoint: dict[str, Any], secret: Path, port: int) -> dict[str, Any]:
    """The scrape job prometheus-operator makes of the ServiceMonitor's endpoint (its
    discovery and relabelling left out): the CA written to a file, the user and password
    put in as the Secret holds them."""

    def value(ref: dict[str, str]) -> str:
        return (secret / ref["key"]).read_text(encoding="utf-8")

    tls, auth = endpoint["tlsConfig"], endpoint["basicAuth"]
    return {
        "job_name": "serviceMonitor/monitoring/nvwatch/0",
        "scheme": endpoint["scheme"],
        "scrape_interval": "1s",
        "tls_config": {
            "ca_file": str(secret / tls["ca"]["secret"]["key"]),
            "server_name": tls["serverName"],
        },
        "basic_auth": {"username": value(auth["username"]), "password": value(auth["password"])},
        "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
    }


def test_prometheus_scrapes_the_agent_with_the_service_monitors_settings(
    tmp_path: Path, rendered: dict[str, dict[str, Any]], pod_agent: PodAgent
) -> None:
    prometheus = require_tool("prometheus")
    [endpoint] = rendered["ServiceMonitor"]["spec"]["endpoints"]
    job = _operator_job(endpoint, pod_agent.volume, pod_agent.port)
    config = write_yaml(tmp_path / "prometheus.yml", {"scrape_configs": [job]})
    server = Endpoint.free()
    log = tmp_path / "prometheus.log"
    process = spawn_logged(prometheus_argv(prometheus, config, tmp_path / "data", server), log)
    try:

        def scraped() -> list[dict[str, Any]]:
            assert process.poll() is None, log_tail(log)
            return instant_query(server.url, 'up{job="serviceMonitor/monitoring/nvwatch/0"} == 1')

        wait_for("the agent scraped over TLS with basic auth", scraped, 60)
        assert instant_query(server.url, "nvwatch_agent_build_info")
    finally:
        stop(process)
