"""Record mode end to end: real Triton (CPU interpreter), a real detd, several
processes. Every process times every key as Triton would (the kernel's
do_bench ranks the candidates differently on each rank) and votes its
winner; `detctl table export --votes` turns the votes into a table.
"""

import json
import types

from conftest import run_workers
from detd import _canon, _triton

N_CANDIDATES = 4
SHAPES = ("256", "512")
KERNEL = "rowsum_kernels:row_sum_kernel"


def expected_winner(rank):
    # rowsum_kernels.fake_do_bench: ms = 1 + (idx + rank) % 4, lowest wins.
    idx = (-rank) % N_CANDIDATES
    return f"BLOCK={(16, 32, 64, 128)[idx]},num_warps=4,num_stages=1,num_ctas=1"


def render(entry):
    c = types.SimpleNamespace(kwargs=dict(entry["kwargs"]), num_warps=entry["num_warps"],
                              num_stages=entry["num_stages"], num_ctas=entry.get("num_ctas", 1),
                              maxnreg=entry.get("maxnreg"))
    return _triton.config_string(c)


def test_record_mode_every_rank_times_and_votes_then_export(daemon, tmp_path):
    n = 4
    res = run_workers(daemon, n, tmp_path, args=["--shapes", ",".join(SHAPES)],
                      env={"DETD_MODE": "record", "DETD_ARCH": "sm90"})
    for r in res:
        assert r["returncode"] == 0 and r["error"] is None, r["output"]
        assert "cannot send record-mode votes" not in r["output"], r["output"]
    for shape in SHAPES:
        rows = [r["shapes"][shape] for r in res]
        # One timing pass per process per key, each keeping its own winner.
        assert [x["bench_calls"] for x in rows] == [N_CANDIDATES] * n
        assert [x["config"] for x in rows] == [expected_winner(i) for i in range(n)]

    listing = json.loads(daemon.detctl("votes", "--json").stdout)
    assert listing["total"] == n * len(SHAPES) and len(listing["votes"]) == n * len(SHAPES)
    by_rank = {}
    for v in listing["votes"]:
        assert v["arch"] == "sm90" and v["kernel"].startswith(KERNEL + "@")
        assert len(v["timings"]) == N_CANDIDATES
        shape = v["key"].split(",")[0][len("[i:"):]
        assert v["table_key"] == f"N={shape}|torch.float32|torch.float32"
        by_rank.setdefault(v["client"]["rank"], set()).add(v["config"])
    assert by_rank == {i: {expected_winner(i)} for i in range(n)}

    out = tmp_path / "sm90.json"
    r = daemon.detctl("table", "export", "--arch", "sm90", "--votes", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "2 entries with disagreeing ranks" in r.stdout, r.stdout
    table = json.loads(out.read_text())
    entries = table["kernels"][KERNEL]
    candidates = {expected_winner(i) for i in range(N_CANDIDATES)}
    assert sorted(entries) == sorted(_canon.key_string((int(s), "torch.float32", "torch.float32"))
                                     for s in SHAPES)
    for key, entry in entries.items():
        assert render(entry) in candidates
        prov = table["provenance"][KERNEL][key]
        assert prov["votes"] == n and prov["agree"] == 1 and prov["hosts"] == 1


def test_record_mode_without_a_daemon_trains_and_warns(daemon, tmp_path):
    res = run_workers(daemon, 1, tmp_path, args=["--shapes", "256"],
                      env={"DETD_MODE": "record", "DETD_SOCKET": str(tmp_path / "nobody.sock")})
    r = res[0]
    assert r["returncode"] == 0 and r["error"] is None, r["output"]
    assert r["shapes"]["256"]["config"] == expected_winner(0)
    assert r["shapes"]["256"]["bench_calls"] == N_CANDIDATES
    assert r["output"].count("cannot send record-mode votes") == 1, r["output"]
    assert json.loads(daemon.detctl("votes", "--json").stdout)["total"] == 0
