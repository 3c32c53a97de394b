"""With affinity routing a node is a server of onecat_nodes and of onecat_keyless: a drain waits
for its sessions in both, and its share of the requests counts both."""

from __future__ import annotations

from onecat.gateway.runtime import Runtime, parse_stat, sessions_everywhere
from onecat.gateway.share import share

STAT = (
    "# pxname,svname,qcur,qmax,scur,smax,slim,stot,status,last_chk,last_agt,\n"
    "onecat,FRONTEND,,,3,5,4096,40,OPEN,,,\n"
    "onecat_nodes,gpu-01,0,0,{a},4,64,30,DRAIN,L7OK,via agent : up,\n"
    "onecat_nodes,gpu-02,0,0,1,2,64,10,UP,L7OK,,\n"
    "onecat_nodes,BACKEND,0,0,2,5,,40,UP,,,\n"
    "onecat_keyless,gpu-01,0,0,{k},1,64,{kt},DRAIN,,,\n"
    "onecat_keyless,gpu-02,0,0,0,1,64,2,UP,,,\n"
    "onecat_keyless,BACKEND,0,0,1,1,,3,UP,,,\n"
)


def test_sessions_are_counted_in_every_back_end() -> None:
    rows = parse_stat(STAT.format(a=2, k=1, kt=1))
    assert sessions_everywhere(rows, "gpu-01") == 3
    assert sessions_everywhere(rows, "gpu-02") == 1


def test_a_drain_waits_for_the_keyless_sessions_too() -> None:
    answers = [STAT.format(a=0, k=1, kt=1), STAT.format(a=0, k=1, kt=1),
               STAT.format(a=0, k=0, kt=1)]
    sent: list[str] = []

    def execute(address: str, command: str, timeout: float) -> str:
        sent.append(command)
        return answers.pop(0) if len(answers) > 1 else answers[0]

    clock = iter(range(100))
    idle, left, _ = Runtime("x", execute_fn=execute).wait_idle(
        "onecat_nodes", "gpu-01", timeout=30, clock=lambda: float(next(clock)),
        sleep=lambda s: None)
    assert idle and left == 0
    assert sent.count("show stat") == 3  # onecat_nodes was idle after the first


def test_the_share_adds_both_back_ends() -> None:
    before = STAT.format(a=0, k=0, kt=1)
    after = STAT.format(a=0, k=0, kt=6).replace("0,0,1,2,64,10,UP", "0,0,1,2,64,14,UP")
    document = share(before, after)
    assert document["servers"]["gpu-01"]["requests"] == 5
    assert document["servers"]["gpu-02"]["requests"] == 4
    assert document["total"] == 9
