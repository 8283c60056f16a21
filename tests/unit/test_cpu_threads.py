"""CPU threads per local rank, and the leaderboard's mark on timings taken on an overloaded machine (issue 39)."""
from gptlab import compare as cmp
from gptlab.compare import tables
from gptlab.train.environment import cpu_threads
from helpers.run_folders import cells_by_run, finished_results, make_run, metrics_rows, variant


def test_threads_share_the_cores_between_local_ranks_and_honour_omp_num_threads():
    assert cpu_threads("cpu", {}, cores=2, local_world_size=1)[0] == 2
    assert cpu_threads("cpu", {}, cores=2, local_world_size=2)[0] == 1
    assert cpu_threads("cpu", {}, cores=16, local_world_size=3)[0] == 5  # 16 // 3
    assert cpu_threads("cpu", {}, cores=2, local_world_size=4)[0] == 1  # never 0
    assert cpu_threads("cpu", {"LOCAL_WORLD_SIZE": "4"}, cores=8) == (2, "cores // local ranks (8 // 4)")
    assert cpu_threads("cpu", {"OMP_NUM_THREADS": "3"}, cores=2, local_world_size=2) == (3, "OMP_NUM_THREADS")
    for junk in ("0", "two", "", " "):  # not a thread count: the cores rule
        assert cpu_threads("cpu", {"OMP_NUM_THREADS": junk}, cores=4, local_world_size=1)[0] == 4
    assert cpu_threads("cuda", {}, cores=2, local_world_size=1)[0] is None  # a GPU run keeps torch's own


def test_timings_on_an_overloaded_machine_are_marked_and_the_cost_columns_say_what_they_compare(tmp_path):
    root = str(tmp_path / "experiments")
    runs = {"Calm": ([0.5, 0.4, 0.3], [1.9, 1.2, 0.6]), "Busy": ([2.6, 2.0, 1.5], [1.8, 1.9, 1.7]),
            "BusyAtEnd": ([0.1, 0.1, 0.1], [4.2, 3.0, 2.0]), "Unrecorded": (None, None)}
    for i, (name, (start, end)) in enumerate(runs.items()):
        config = variant(model_name=name, device="cpu", gpu_name=None, gpu_count=0, cpu_threads=2, cpu_cores=2,
                         load_avg_start=start, num_layers=i + 2)
        make_run(root, f"2026010{i + 1}_000000_{name}", config, metrics_rows(10, 1.3, 0.3),
                 finished_results(config, 1.3, 0.3, load_avg_end=end))
    board = cmp.compare([], experiments_dir=root, no_plot=True, write=False)["board"]
    cells = cells_by_run(board)
    marked = {name for name, row in cells.items() if row["Wall time"].endswith("†")}
    # load above 2 cores at the start (2.6) or the end (4.2); 1.9 and 1.2 are not above 2
    assert {name.split("_")[-1] for name in marked} == {"Busy", "BusyAtEnd"}
    for name in marked:
        assert "†" in cells[name]["GPU-h"]
    note = next(n for n in board.notes if n.startswith("† timed on an overloaded machine"))
    assert "load 2.6 on 2 cores, 2 threads" in note and "load 4.2 on 2 cores" in note and "Calm" not in note
    assert any("compare wall-clock time on each run's own machine, threads and load" in n for n in board.notes)
