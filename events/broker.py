"""A local Apache Kafka (KRaft) cluster run from Maven Central jars on the JVM, so Gangway runs and tests without Docker."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import logging
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
POM = REPO_ROOT / "compose" / "kafka" / "pom.xml"
DEFAULT_PORT = 9092
HOST = "127.0.0.1"
STATE_FILE = "gangway-kafka.json"
# -Xmx512m keeps three nodes within a shared machine; C1-only JIT (TieredStopAtLevel=1) cuts a warm start from
# about 5.2 s to 3.0 s on 2 cores, with no producer-throughput loss we could measure for a dev/test broker. The
# parallel collector instead of G1: on 2 cores shared with the services, G1's concurrent work and write barriers
# cost the control plane's requests more than the parallel collector's short pauses of a small heap
# (docs/benchmarks.md: p50 40.6 -> 38.5 ms, p99 86.1 -> 70.4 ms at 200 submissions a second).
JVM_FLAGS = ("-Xmx512m", "-XX:TieredStopAtLevel=1", "-XX:+UseParallelGC", "-XX:+ExitOnOutOfMemoryError",
             "-Djava.awt.headless=true")


class KafkaSetupError(RuntimeError):
    """A local-Kafka problem the user can fix; its message is one line and is what the CLI prints."""


class JavaNotFound(KafkaSetupError):
    pass


class MavenNotFound(KafkaSetupError):
    pass


class JarDownloadFailed(KafkaSetupError):
    pass


class PortInUse(KafkaSetupError):
    pass


class BrokerStartFailed(KafkaSetupError):
    pass


class ClusterMismatch(KafkaSetupError):
    pass


def kafka_version(pom: Path = POM) -> str:
    """The Kafka version pinned in the pom: the single place it is written down."""
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom.read_text())
    if match is None:
        raise KafkaSetupError(f"no <kafka.version> property in {pom}")
    return match.group(1).strip()


def default_cache_root() -> Path:
    return Path(os.environ.get("GANGWAY_KAFKA_CACHE") or Path.home() / ".cache" / "gangway")


def default_data_dir() -> Path:
    return Path(os.environ.get("GANGWAY_KAFKA_DATA") or Path.home() / ".gangway" / "kafka")


def new_cluster_id() -> str:
    """Kafka's Uuid text form: URL-safe base64 of 16 random bytes, unpadded; never starting with '-'
    (Kafka's own generator avoids that too, since the CLI would read it as an option)."""
    while True:
        cid = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


def find_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise JavaNotFound("java not found on PATH (nor in $JAVA_HOME): install a JDK 17+, e.g. `apt-get install openjdk-17-jre-headless`")
    return java


def port_is_free(port: int, host: str = HOST) -> bool:
    """True if a server could listen on host:port now (SO_REUSEADDR like the JVM, so TIME_WAIT does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def find_free_base_port(count: int, low: int = 19000, high: int = 19999) -> int:
    """A base port with `count` consecutive free ports in [low, high]; a random start so parallel runs rarely collide."""
    span = high - low - count + 1
    start = random.randrange(span)
    for offset in range(span):
        base = low + (start + offset) % span
        if all(port_is_free(base + i) for i in range(count)):
            return base
    raise PortInUse(f"no {count} consecutive free ports between {low} and {high}")


def ensure_jars(cache_root: Path | None = None, pom: Path = POM, mvn: str | None = None) -> Path:
    """The directory of broker jars, fetched once with `mvn` into <cache_root>/kafka-<version>/libs."""
    libs = (cache_root or default_cache_root()) / f"kafka-{kafka_version(pom)}" / "libs"
    if libs.is_dir():
        return libs
    mvn = mvn or shutil.which("mvn")
    if mvn is None:
        raise MavenNotFound(f"mvn not found on PATH: it fetches the Kafka jars once into {libs}; install Maven (`apt-get install maven`)")
    libs.parent.mkdir(parents=True, exist_ok=True)
    # A lock so two processes starting Kafka at once download only once; a temp dir renamed into place
    # so an interrupted download never looks like a complete cache.
    with open(libs.parent / ".download.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if libs.is_dir():
            return libs
        tmp = libs.with_name(f"libs.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        cmd = [mvn, "-B", "-q", "-f", str(pom), "dependency:copy-dependencies",
               "-DincludeScope=runtime", f"-DoutputDirectory={tmp}"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            shutil.rmtree(tmp, ignore_errors=True)
            raise JarDownloadFailed(f"fetching the Kafka jars with mvn timed out after 900 s (command: {' '.join(cmd)})") from None
        if done.returncode != 0 or not any(tmp.glob("kafka_2.13-*.jar")):
            shutil.rmtree(tmp, ignore_errors=True)
            raise JarDownloadFailed(f"fetching the Kafka jars with mvn failed (exit {done.returncode}): {_first_error(done.stdout + done.stderr)}")
        tmp.rename(libs)
    return libs


def _first_error(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if "ERROR" in line]
    return _one_line((errors or lines or ["no output"])[0])


def _one_line(text: str, limit: int = 300) -> str:
    text = re.sub(r"\s+", " ", re.sub(r"\x1b\[[0-9;]*m", "", text)).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class NodeSpec:
    """One combined broker+controller: node i (0-based) listens on base+2i (clients) and base+2i+1 (controller)."""

    node_id: int
    port: int
    controller_port: int
    directory: Path

    @property
    def properties_file(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log4j_file(self) -> Path:
        return self.directory / "log4j2.properties"

    @property
    def log_file(self) -> Path:
        return self.directory / "kafka.log"

    @property
    def stdout_file(self) -> Path:
        return self.directory / "stdout.log"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"


@dataclass(frozen=True)
class NodeStatus:
    node_id: int
    port: int
    controller_port: int
    pid: int | None
    alive: bool


@dataclass(frozen=True)
class ClusterStatus:
    data_dir: Path
    cluster_id: str | None
    bootstrap_servers: str
    nodes: tuple[NodeStatus, ...]
    answering: tuple[int, ...]  # broker ids the cluster reports as serving

    @property
    def up(self) -> bool:
        """Every node running and serving."""
        return bool(self.nodes) and all(n.alive for n in self.nodes) and len(self.answering) >= len(self.nodes)

    @property
    def degraded(self) -> bool:
        """Serving traffic, but not with every node: some stopped or not (yet) back in the cluster."""
        return bool(self.answering) and not self.up

    @property
    def missing(self) -> tuple[int, ...]:
        """Node ids that are stopped or not serving."""
        return tuple(n.node_id for n in self.nodes if not n.alive or n.node_id not in self.answering)


def render_server_properties(node: NodeSpec, nodes: Sequence[NodeSpec], admin_password: str | None = None) -> str:
    """server.properties for one combined node; replication settings follow the cluster size. With an admin
    password: SASL/SCRAM-SHA-512 on the client listener (the broker's own connections as `admin`), SASL/PLAIN
    between controllers (KRaft keeps SCRAM credentials in the metadata log, so controllers cannot use SCRAM),
    and ACLs: nothing is allowed that no ACL allows, and `admin` is the one super user."""
    rf = 3 if len(nodes) >= 3 else 1
    min_isr = min(2, rf)
    voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in nodes)
    if admin_password is None:
        security = {
            "listeners": f"PLAINTEXT://{HOST}:{node.port},CONTROLLER://{HOST}:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        }
    else:
        scram = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="{admin_password}";'
        plain = (f'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
                 f'password="{admin_password}" user_admin="{admin_password}";')
        security = {
            "listeners": f"SASL_PLAINTEXT://{HOST}:{node.port},CONTROLLER://{HOST}:{node.controller_port}",
            "advertised.listeners": f"SASL_PLAINTEXT://{HOST}:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": scram,
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": plain,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
            "allow.everyone.if.no.acl.found": "false",
        }
    settings = {
        "process.roles": "broker,controller",
        "node.id": node.node_id,
        "controller.quorum.voters": voters,  # static quorum: format needs no --standalone/--initial-controllers
        **security,
        "log.dirs": node.data_dir,
        "default.replication.factor": rf,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": rf,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": min_isr,
        # Few internal partitions: creating the default 50 costs seconds on a 2-core machine.
        "offsets.topic.num.partitions": 3,
        "transaction.state.log.num.partitions": 3,
        "share.coordinator.state.topic.num.partitions": 3,
        "group.initial.rebalance.delay.ms": 0,
        "unclean.leader.election.enable": "false",
        # transaction.max.timeout.ms stays at Kafka's default (15 min) on purpose.
        **request_threads(os.cpu_count() or 1),
    }
    header = f"# Written by gangway (events/broker.py) for node {node.node_id} of {len(nodes)}; rewritten on every start.\n"
    return header + "".join(f"{key}={value}\n" for key, value in settings.items())


def request_threads(cores: int) -> dict[str, int]:
    """The threads a local broker serves requests with, sized to the machine: one I/O thread per core and a network
    thread per two. Kafka's defaults (8 and 3) are a server's; on two cores shared with the services, the hand-offs
    between that many threads cost each request time (docs/benchmarks.md: the plane's p50 at 200 submissions a
    second 43-46 ms with the defaults, 38-43 ms with 1 and 2)."""
    return {"num.network.threads": max(1, cores // 2), "num.io.threads": max(2, cores)}


def render_log4j2(node: NodeSpec) -> str:
    """log4j2 config: INFO to a size-capped file in the node dir (without one, log4j2 prints only ERRORs to stdout)."""
    return "\n".join([
        "status = warn",
        "appender.file.type = RollingFile",
        "appender.file.name = FILE",
        f"appender.file.fileName = {node.log_file}",
        f"appender.file.filePattern = {node.log_file}.%i",
        "appender.file.layout.type = PatternLayout",
        "appender.file.layout.pattern = [%d] %p %m (%c)%n",
        "appender.file.policies.type = Policies",
        "appender.file.policies.size.type = SizeBasedTriggeringPolicy",
        "appender.file.policies.size.size = 20MB",
        "appender.file.strategy.type = DefaultRolloverStrategy",
        "appender.file.strategy.max = 3",
        "rootLogger.level = INFO",
        "rootLogger.appenderRef.file.ref = FILE",
        "logger.statechange.name = state.change.logger",
        "logger.statechange.level = WARN",
        "",
    ])


def log_tail(node: NodeSpec) -> str:
    """The most telling recent line of a node's output: the last error or exception, else the last line."""
    last = "(no output)"
    # stdout.log holds this run only (JVM-level failures); kafka.log is appended across runs.
    for path in (node.stdout_file, node.log_file):
        try:
            lines = [line for line in path.read_text(errors="replace").splitlines()[-300:] if line.strip()]
        except OSError:
            continue
        telling = [line for line in lines if " ERROR " in line or "Exception" in line or "Error:" in line]
        if telling:
            return _one_line(telling[-1])
        last = lines[-1] if lines else last
    return _one_line(last)


def _process_alive(pid: int, marker: str) -> bool:
    """True if pid (started by another process) runs and its command line contains marker: guards against a recycled pid."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z" and marker in cmdline


class LocalKafka:
    """A KRaft cluster of 1 or 3 combined nodes on 127.0.0.1 whose data and state file live in one directory."""

    def __init__(self, data_dir: Path | str | None = None, nodes: int | None = None, port: int | None = None,
                 cache_root: Path | str | None = None, sasl: bool | None = None) -> None:
        self.data_dir = Path(data_dir) if data_dir else default_data_dir()
        self.cache_root = Path(cache_root) if cache_root else default_cache_root()
        state = self._read_state()
        # SASL/SCRAM and ACLs are on for a new cluster unless asked otherwise; a data dir keeps what it was
        # formatted with (one formatted before SASL existed here has no admin credential: plaintext).
        saved_sasl = state.get("sasl", False) if state else None
        if sasl is not None and saved_sasl is not None and sasl != saved_sasl:
            raise ClusterMismatch(f"{self.data_dir} holds a cluster {'with' if saved_sasl else 'without'} SASL: "
                                  f"{'drop --no-sasl' if saved_sasl else 'use --no-sasl'} or another --data-dir")
        self.sasl = saved_sasl if saved_sasl is not None else (True if sasl is None else sasl)
        # An existing data dir fixes the cluster's shape; ports may change between runs while it is stopped.
        saved_nodes = len(state["nodes"]) if state else None
        if nodes is not None and saved_nodes is not None and nodes != saved_nodes:
            raise ClusterMismatch(f"{self.data_dir} holds a {saved_nodes}-node cluster: use --nodes {saved_nodes} or another --data-dir")
        count = nodes or saved_nodes or 1
        if count not in (1, 3):
            raise ClusterMismatch(f"--nodes must be 1 or 3, not {count}")
        self.base_port = port or (state["base_port"] if state else DEFAULT_PORT)
        self.cluster_id: str | None = state["cluster_id"] if state else None
        self._pids: dict[int, int] = {n["node_id"]: n["pid"] for n in state["nodes"] if n.get("pid")} if state else {}
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self.nodes = tuple(
            NodeSpec(i + 1, self.base_port + 2 * i, self.base_port + 2 * i + 1, self.data_dir / f"node-{i + 1}")
            for i in range(count)
        )
        if state and state["base_port"] != self.base_port and self._running_nodes():
            raise ClusterMismatch(f"the cluster in {self.data_dir} is running on port {state['base_port']}: stop it before changing --port")

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{HOST}:{n.port}" for n in self.nodes)

    @property
    def replication_factor(self) -> int:
        return 3 if len(self.nodes) >= 3 else 1

    # -- state file -------------------------------------------------------------------------------

    def _read_state(self) -> dict | None:
        path = self.data_dir / STATE_FILE
        if not path.exists():
            return None
        return json.loads(path.read_text())

    def _write_state(self) -> None:
        state = {
            "kafka_version": kafka_version(),
            "cluster_id": self.cluster_id,
            "base_port": self.base_port,
            "sasl": self.sasl,
            "nodes": [{"node_id": n.node_id, "port": n.port, "controller_port": n.controller_port,
                       "pid": self._pids.get(n.node_id)} for n in self.nodes],
        }
        self.data_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.data_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.data_dir / STATE_FILE)

    def _alive(self, node: NodeSpec) -> bool:
        child = self._children.get(node.node_id)
        if child is not None:  # our own child: poll() is authoritative (its /proc cmdline is empty for a moment after exec)
            return child.poll() is None
        pid = self._pids.get(node.node_id)
        return pid is not None and _process_alive(pid, str(node.properties_file))

    def _running_nodes(self) -> list[NodeSpec]:
        return [n for n in self.nodes if self._alive(n)]

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self, timeout: float = 90.0, log: logging.Logger | None = None) -> str:
        """Start every node that is not running, wait until the whole cluster answers, return bootstrap servers."""
        log = log or logging.getLogger(__name__)
        missing = [n for n in self.nodes if not self._alive(n)]
        if not missing:
            self.wait_until_ready(timeout)
            return self.bootstrap_servers
        for node in missing:
            for port in (node.port, node.controller_port):
                if not port_is_free(port):
                    raise PortInUse(f"port {port} on {HOST} is already in use (another Kafka?): stop it or pick another base port with --port")
        java = find_java()
        libs = self.cache_root / f"kafka-{kafka_version()}" / "libs"
        if not libs.is_dir():
            log.info("fetching the Kafka %s jars with mvn into %s (once)", kafka_version(), libs)
        libs = ensure_jars(self.cache_root)
        self.cluster_id = self.cluster_id or new_cluster_id()
        admin_password = self._admin_password() if self.sasl else None
        for node in self.nodes:
            node.directory.mkdir(parents=True, exist_ok=True)
            node.properties_file.write_text(render_server_properties(node, self.nodes, admin_password))
            node.log4j_file.write_text(render_log4j2(node))
        self._format([n for n in missing if not (n.data_dir / "meta.properties").exists()], java, libs)
        for node in missing:
            self._spawn(node, java, libs)
        self._write_state()
        try:
            self.wait_until_ready(timeout)
            if self.sasl:
                self._grant_standard_principals()
        except KafkaSetupError:
            self.stop()  # leave nothing half-started behind
            raise
        return self.bootstrap_servers

    # -- principals ---------------------------------------------------------------------------------

    def _admin_password(self) -> str:
        """The admin's password from the principal store (made on first start), with the store's bootstrap."""
        from events.auth import ADMIN, load_store, new_secret, new_signing_key, save_store

        store = load_store(self.data_dir)
        principals = store.setdefault("principals", {})
        if ADMIN not in principals:  # a new store: the log's writers sign what they write (events/signing.py)
            store["signing"] = True
            principals[ADMIN] = {"password": new_secret(), "signing_key": new_signing_key()}
        store["bootstrap"] = self.bootstrap_servers
        save_store(store, self.data_dir)
        return principals[ADMIN]["password"]

    @property
    def admin_credentials(self):
        from events.auth import ADMIN, Credentials, load_store

        if not self.sasl:
            return None
        return Credentials(ADMIN, load_store(self.data_dir)["principals"][ADMIN]["password"])

    def _grant_standard_principals(self) -> None:
        """Services, the operator, readers and the simulated fleet: created (idempotently) on every start."""
        from events.auth import FLEET, OPERATOR, READER, SERVICES, AuthError, add_principals, service_principal

        try:
            add_principals(self.bootstrap_servers, [*map(service_principal, SERVICES), OPERATOR, READER, FLEET],
                           data_dir=self.data_dir, admin=self.admin_credentials)
        except AuthError as error:
            raise BrokerStartFailed(str(error)) from None

    def _format(self, nodes: Sequence[NodeSpec], java: str, libs: Path) -> None:
        """Format storage of new nodes (in parallel: each is a JVM start), all with the one cluster id."""
        procs = [
            (node, subprocess.Popen(
                [java, "-XX:TieredStopAtLevel=1", "-cp", f"{libs}/*", "kafka.tools.StorageTool", "format", "--ignore-formatted",
                 "-t", str(self.cluster_id), "-c", str(node.properties_file),
                 *(["--add-scram", f"SCRAM-SHA-512=[name=admin,password={self._admin_password()}]"] if self.sasl else [])],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            for node in nodes
        ]
        for node, proc in procs:
            output, _ = proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise BrokerStartFailed(f"formatting Kafka storage for node {node.node_id} failed: {_one_line(output)}")

    def _spawn(self, node: NodeSpec, java: str, libs: Path) -> None:
        cmd = [java, *JVM_FLAGS, f"-Dlog4j2.configurationFile={node.log4j_file}", "-cp", f"{libs}/*", "kafka.Kafka", str(node.properties_file)]
        with open(node.stdout_file, "wb") as out:
            # Own session: Ctrl-C in the terminal that ran `gangway kafka start` does not reach the broker.
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    cwd=node.directory, start_new_session=True)
        self._children[node.node_id] = proc
        self._pids[node.node_id] = proc.pid

    def wait_until_ready(self, timeout: float = 90.0) -> None:
        """Block until every node is registered with the cluster; fail fast if a node process dies."""
        deadline = time.monotonic() + timeout
        while True:
            for node in self.nodes:
                if not self._alive(node):
                    raise BrokerStartFailed(f"Kafka node {node.node_id} is not running: {log_tail(node)} (log: {node.log_file})")
            if self._answers(expected=len(self.nodes), timeout=2.0):
                return
            if time.monotonic() > deadline:
                slow = self.nodes[0]
                raise BrokerStartFailed(f"Kafka did not answer on {self.bootstrap_servers} within {timeout:.0f} s: {log_tail(slow)} (log: {slow.log_file})")
            time.sleep(0.3)

    def _answers(self, expected: int, timeout: float) -> bool:
        return len(self._serving(timeout)) >= expected

    def _serving(self, timeout: float) -> list[int]:
        """The broker ids the cluster reports; none when no port is open."""
        # A plain TCP probe first, so the admin client is not created (and does not log) while ports are closed.
        for node in self.nodes:
            with contextlib.suppress(OSError), socket.create_connection((HOST, node.port), timeout=0.5):
                break
        else:
            return []
        return cluster_node_ids(self.bootstrap_servers, timeout, self.admin_credentials)

    def kill_node(self, node_id: int) -> None:
        """kill -9 one node, as a crashed machine would go (fault tests); `start()` brings it back."""
        node = next(n for n in self.nodes if n.node_id == node_id)
        if self._alive(node):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pids[node_id], signal.SIGKILL)
        proc = self._children.pop(node_id, None)
        if proc is not None:
            proc.wait(timeout=10)
        while self._alive(node):
            time.sleep(0.05)

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM every node at once (a controlled shutdown), then SIGKILL whatever is left after the grace."""
        running = self._running_nodes()
        for node in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pids[node.node_id], signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(self._alive(n) for n in running):
            time.sleep(0.2)
        for node in running:
            if self._alive(node):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self._pids[node.node_id], signal.SIGKILL)
        for node in running:
            proc = self._children.pop(node.node_id, None)
            if proc is not None:
                proc.wait(timeout=10)
        while any(self._alive(n) for n in running):
            time.sleep(0.1)
        self._pids.clear()
        if (self.data_dir / STATE_FILE).exists():
            self._write_state()

    def status(self, timeout: float = 10.0) -> ClusterStatus:
        """Which nodes run and which the cluster reports serving; `timeout` bounds the question to a cluster
        whose ports are open (a SASL handshake per connection makes a loaded cluster slower to answer)."""
        nodes = tuple(NodeStatus(n.node_id, n.port, n.controller_port, self._pids.get(n.node_id), self._alive(n)) for n in self.nodes)
        answering = tuple(self._serving(timeout)) if any(n.alive for n in nodes) else ()
        return ClusterStatus(self.data_dir, self.cluster_id, self.bootstrap_servers, nodes, answering)

    def __enter__(self) -> LocalKafka:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def quiet_logger() -> logging.Logger:
    """A logger that swallows librdkafka's connection-refused chatter while we poll a starting broker."""
    logger = logging.getLogger("gangway.kafka.probe")
    logger.propagate = False
    logger.setLevel(logging.CRITICAL + 1)
    return logger


def unreachable(bootstrap_servers: str, hint: str = "", answers: Callable[[float], bool] | None = None) -> str:
    """'' when a broker answers at `bootstrap_servers` (within 5 s); else the one line that says none does and how
    to start one, with `hint` as one more way out. `answers(timeout)` asks over a client the caller holds already
    (`LogReader.answers`), instead of an admin client's connections of its own."""
    if answers(5) if answers is not None else cluster_node_ids(bootstrap_servers, timeout=5):
        return ""
    return (f"no Kafka broker answers at {bootstrap_servers} (start one with `gangway kafka start`, or set "
            f"KAFKA_BOOTSTRAP_SERVERS / --bootstrap-servers{hint})")


def cluster_node_ids(bootstrap_servers: str, timeout: float = 5.0, credentials=None) -> list[int]:
    """The broker ids the cluster reports (empty if it does not answer in time)."""
    from confluent_kafka.admin import AdminClient

    from events.auth import AuthError, client_config

    try:
        config = client_config(bootstrap_servers, credentials, logger=quiet_logger())
    except AuthError:
        return []
    admin = AdminClient(config)
    try:
        description = admin.describe_cluster(request_timeout=timeout).result(timeout=timeout + 1)
    except Exception:  # noqa: BLE001 - any failure (refused, timeout, no controller) means "not answering yet"
        return []
    return sorted(node.id for node in description.nodes)


@contextlib.contextmanager
def running_kafka(**kwargs: object) -> Iterator[LocalKafka]:
    """`with running_kafka(data_dir=..., port=...) as kafka:` starts a cluster and always stops it."""
    kafka = LocalKafka(**kwargs)  # type: ignore[arg-type]
    try:
        kafka.start()
        yield kafka
    finally:
        kafka.stop()
