"""nvidia-smi and kernel-log parsing for the node agent's GPU health (no GPU needed)."""

from services.agent.gpu_health import DOUBLE_BIT_ECC_XID, GpuHealth, parse_bus_ids, parse_ecc, parse_xids


def test_ecc_counts_per_gpu():
    assert parse_ecc("0, 0\n1, 3\n2, [N/A]\n") == {0: 0, 1: 3, 2: 0}


def test_xid_lines_name_the_gpu_by_its_bus_id():
    buses = parse_bus_ids("0, 00000000:3B:00.0\n1, 00000000:5E:00.0\n")
    log = ("[12.3] NVRM: Xid (PCI:0000:5e:00): 79, pid=1234, GPU has fallen off the bus.\n"
           "[13.0] something else\n[14.1] NVRM: Xid (PCI:0000:af:00): 13, pid=9, other node's GPU\n")
    assert parse_xids(log, buses) == [
        (1, 79, "[12.3] NVRM: Xid (PCI:0000:5e:00): 79, pid=1234, GPU has fallen off the bus.")]


def test_no_nvidia_smi_no_reports(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    health = GpuHealth()
    assert not health.available and health.poll() == []
    assert DOUBLE_BIT_ECC_XID == 48
