"""Alibaba PAI pod lists and Helios files: hand-written samples with the real column
layout, a property over random pod lists, and the real files when ../shared is there."""

from __future__ import annotations

import csv
import gzip
import tempfile
from datetime import date
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.sim.traces.clusters import PAI_GPUS, pai_gpu, read_pai_pods, venus_vc_gpus
from broker.sim.traces.jobs import read_jobs
from pricing.gpus import find_gpu
from tests.conftest import shared_dir

PAI_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)
# Out of creation order on purpose; pod-cpu is the earliest but asks for no GPU.
PAI_ROWS = """\
pod-t4,6000,12288,1,460,T4,BE,Succeeded,7200,16200,9000
pod-a,12000,16384,1,1000,,LS,Running,3600,14400,3600
pod-cpu,20000,65536,0,0,,LS,Running,0,7200,0
pod-pending,8000,32768,1,1000,,BE,Pending,5400,5500,
pod-v32,88000,327680,8,1000,V100M32,Burstable,Failed,10800,12600,10800
pod-g2,16000,32768,2,1000,G2,LS,Running,10800,21600,14400
pod-any,16000,32768,1,1000,P100|V100M16|V100M32,LS,Running,18000,18000,18000
pod-noend,4000,8192,1,1000,,BE,Running,19000,,19000
"""


def _gz(path: Path, text: str) -> Path:
    with gzip.open(path, "wt") as handle:
        handle.write(text)
    return path


def test_pai_pods_map_times_gpus_models_and_skips(tmp_path):
    path = _gz(tmp_path / "openb_pod_list_sample.csv.gz", PAI_HEADER + "\n" + PAI_ROWS)
    job_list = read_jobs(path, gpu="A10")
    got = [(j.name, j.submit_hours, j.hours, j.gpus, j.gpu, j.team) for j in job_list.jobs]
    assert got == [
        # submit from the first GPU pod's creation (3600 s); hours = deletion - scheduled
        ("pod-a", 0.0, 3.0, 1, "A10", "LS"),
        ("pod-t4", 1.0, 2.0, 1, "T4", "BE"),  # shared (460 milli): one whole GPU
        ("pod-v32", 2.0, 0.5, 8, "V100-32GB", "Burstable"),
        ("pod-g2", 2.0, 2.0, 2, "A10", "LS"),  # G2 is undisclosed: the default
        ("pod-any", 4.0, 1 / 3600, 1, "P100", "LS"),  # zero run time floored at 1 s
    ]
    notes = set(job_list.notes)
    assert {
        "1 CPU-only pods skipped",
        "1 never-scheduled (Pending) pods skipped",
        "1 pods without a deletion time skipped",
        "1 pods without gpu_spec mapped onto A10",
        "1 pods allowing only undisclosed/unknown GPU models (G1-G3) mapped onto A10",
        "1 GPU-sharing pods (gpu_milli < 1000) given one whole GPU",
        "1 pods end at the list's last deletion time (may be cut short)",
        "kept by phase: Failed 1, Running 3, Succeeded 1",
    } == notes


def test_pai_limit_and_deadlines(tmp_path):
    path = _gz(tmp_path / "pods.csv.gz", PAI_HEADER + "\n" + PAI_ROWS)
    jobs = read_pai_pods(path, limit=2, deadline_factor=1.5).jobs
    assert [j.name for j in jobs] == ["pod-a", "pod-t4"]
    assert [j.deadline_hours for j in jobs] == [4.5, 3.0]
    assert [j.gpu for j in jobs] == ["V100", "T4"]  # default gpu="V100"


def test_pai_model_choice_among_allowed():
    assert pai_gpu("", "V100") == "V100"
    assert pai_gpu("V100M16|V100M32", "V100-32GB") == "V100-32GB"  # the default is allowed
    assert pai_gpu("G2|P100|T4", "A100") == "P100"  # else the first disclosed one
    assert pai_gpu("G1|G3", "V100") is None
    assert pai_gpu("A10", "V100") == "A10"


def test_pai_names_are_catalog_gpus():
    assert {name: find_gpu(name).name for name in PAI_GPUS.values()} == {
        name: name for name in PAI_GPUS.values()
    }


def test_pod_list_without_times_is_refused(tmp_path):
    path = _gz(
        tmp_path / "openb_pod_list_multigpu20.csv.gz",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nopenb-pod-0000,12000,16384,1,1000\n",
    )
    with pytest.raises(ValueError, match="no creation_time, deletion_time, scheduled_time"):
        read_jobs(path)


pods = st.lists(
    st.tuples(
        st.integers(0, 8),  # num_gpu
        st.sampled_from([0, 230, 460, 1000]),  # gpu_milli
        st.sampled_from(["", "T4", "G2", "V100M16|V100M32", "G1|A10"]),
        st.integers(0, 10**6),  # creation
        st.one_of(st.none(), st.integers(0, 10**5)),  # queue wait (None: never scheduled)
        st.integers(0, 10**5),  # run time
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(pods)
def test_pai_every_pod_is_a_job_or_counted(rows):
    lines = [PAI_HEADER]
    for i, (num_gpu, milli, spec, created, wait, run) in enumerate(rows):
        milli = milli if num_gpu else 0
        scheduled = "" if wait is None else created + wait
        deleted = created + (wait or 0) + run
        lines.append(f"p{i},1000,1024,{num_gpu},{milli},{spec},LS,Running,{created},"
                     f"{deleted},{scheduled}")  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "pods.csv"
        path.write_text("\n".join(lines) + "\n")
        job_list = read_pai_pods(path, gpu="V100")
    skipped = sum(int(n.split()[0]) for n in job_list.notes if n.endswith("skipped"))
    assert len(job_list.jobs) + skipped == len(rows)
    submits = [j.submit_hours for j in job_list.jobs]
    assert submits == sorted(submits) and (not submits or submits[0] == 0.0)
    assert all(j.hours >= 1 / 3600 and j.gpu in {"V100", "T4", "A10"} for j in job_list.jobs)
    by_name = {f"p{i}": row for i, row in enumerate(rows)}
    for job in job_list.jobs:
        num_gpu, _, _, _, _, run = by_name[job.name]
        assert job.gpus == max(1, num_gpu)
        assert job.hours == pytest.approx(max(run, 1) / 3600)


def test_sia_workload_is_refused_for_want_of_durations(tmp_path):
    path = tmp_path / "workload-1.csv"
    path.write_text(
        "name,time,application,num_replicas,batch_size\ncifar10-0,401.0,cifar10,12,4096\n"
    )
    with pytest.raises(ValueError, match="no duration"):
        read_jobs(path)


VENUS = """\
date,vcA,vcB,vcC,total
2020-04-01,72,0,16,88
2020-04-02,72,8,16,96
"""


def test_venus_quota_per_day(tmp_path):
    path = tmp_path / "venus_cluster_gpu_number.csv"
    path.write_text(VENUS)
    assert venus_vc_gpus(path, "2020-04-01") == {"vcA": 72, "vcC": 16}  # no 0-GPU pool
    assert venus_vc_gpus(path, date(2020, 4, 2)) == {"vcA": 72, "vcB": 8, "vcC": 16}
    with pytest.raises(ValueError, match=r"covers 2020-04-01\.\.2020-04-02"):
        venus_vc_gpus(path, "2020-05-01")
    with pytest.raises(ValueError, match="not a job list"):
        read_jobs(path)


def test_shared_cluster_traces_read():
    traces = shared_dir() / "traces"
    pai = traces / "alibaba-pai" / "gpu-v2023"
    helios = traces / "helios"
    if not (pai.is_dir() and helios.is_dir()):
        pytest.skip(f"Alibaba/Helios traces not found under {traces} (set BROKER_SHARED_DIR)")
    job_list = read_jobs(pai / "openb_pod_list_default.csv.gz")
    skipped = {n.split(" ", 1)[1]: int(n.split()[0]) for n in job_list.notes if "skipped" in n}
    # README: 8,152 tasks, 1,088 of them with num_gpu 0; the rest ask for 1, 2, 4 or 8 GPUs.
    assert len(job_list.jobs) + sum(skipped.values()) == 8152
    assert skipped["CPU-only pods skipped"] == 1088
    gpus = [j.gpus for j in job_list.jobs]
    assert set(gpus) <= {1, 2, 4, 8} and gpus.count(8) <= 44 and gpus.count(2) <= 16
    assert {j.team for j in job_list.jobs} <= {"LS", "BE", "Burstable", "Guaranteed"}
    constrained = read_jobs(pai / "openb_pod_list_gpuspec33.csv.gz").jobs
    assert {"T4", "P100", "V100"} <= {j.gpu for j in constrained}
    with pytest.raises(ValueError, match="no creation_time"):
        read_jobs(pai / "openb_pod_list_multigpu50.csv.gz")
    # README: 181 days, 968 GPUs on the first day and 1,080 on the last.
    venus = helios / "venus_cluster_gpu_number.csv"
    assert sum(venus_vc_gpus(venus, "2020-04-01").values()) == 968
    assert sum(venus_vc_gpus(venus, "2020-09-28").values()) == 1080
    with open(venus) as handle:
        assert len(list(csv.DictReader(handle))) == 181
    workloads = sorted((helios / "sia_workloads_saturn").glob("workload-*.csv"))
    assert len(workloads) == 10
    for workload in workloads:
        with pytest.raises(ValueError, match="no duration"):
            read_jobs(workload)
