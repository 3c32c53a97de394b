"""The simulated nodes are real systemd hosts."""


def test_systemd_is_pid_1_and_running(host):
    state = host.run("systemctl is-system-running")
    assert state.stdout.strip() in {"running", "degraded"}, state.stdout
    assert host.file("/proc/1/comm").content_string.strip() == "systemd"


def test_node_is_debian_12(host):
    assert host.system_info.distribution == "debian"
    assert host.system_info.release.split(".")[0] == "12"
