"""The dedup benchmark's wait after a run that deleted many files (bench/bench_dedup.py)."""

from bench import bench_dedup as bd


def test_no_note_means_no_wait(tmp_path):
    assert bd.settle_left(str(tmp_path)) == 0.0


def test_a_large_deletion_makes_the_next_run_wait_out_the_rest(tmp_path):
    assert bd.note_deletion(str(tmp_path), 120_000, now=1_000_000)
    assert (tmp_path / bd.SETTLE_NOTE).read_text().split() == ["1000000", "120000"]
    assert bd.settle_left(str(tmp_path), now=1_000_000) == bd.SETTLE_S
    assert bd.settle_left(str(tmp_path), now=1_000_000 + 100) == bd.SETTLE_S - 100
    assert bd.settle_left(str(tmp_path), now=1_000_000 + bd.SETTLE_S + 1) == 0.0


def test_a_small_deletion_leaves_no_note(tmp_path):
    assert not bd.note_deletion(str(tmp_path), bd.SETTLE_FILES - 1, now=1_000_000)
    assert not (tmp_path / bd.SETTLE_NOTE).exists()
    assert bd.settle_left(str(tmp_path), now=1_000_000) == 0.0


def test_a_damaged_note_or_one_from_the_future_never_waits_past_the_limit(tmp_path):
    note = tmp_path / bd.SETTLE_NOTE
    for text in ("", "yesterday\n", "\x00\x01"):
        note.write_text(text)
        assert bd.settle_left(str(tmp_path), now=1_000_000) == 0.0
    note.write_text("9999999999 50000\n")  # a clock set back since
    assert bd.settle_left(str(tmp_path), now=1_000_000) == bd.SETTLE_S


def test_a_full_run_counts_its_data_sets_and_every_tool_s_restore():
    sizes = bd.set_sizes(1.0)
    assert bd.files_made(sizes, ["small"], ["cairn", "restic", "borg"]) == 80_000
    assert bd.files_made(sizes, ["large", "small"], ["cairn"]) == 40_016
    assert bd.files_made(bd.set_sizes(0.05), ["small"], ["cairn"]) < bd.SETTLE_FILES
