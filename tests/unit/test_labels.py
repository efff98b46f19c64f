"""srun's --label, as the node agent gives it to the container's output."""

from pyscrun.node.labels import Labelling, label_of


def test_the_label_is_srun_s() -> None:
    assert label_of({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}) is None
    labelled = {"SLURM_LABELIO": "1"}
    assert label_of({**labelled, "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}) == b"0: "
    # Right-aligned to the width of the step's highest task number, as srun's "%*d: ".
    assert label_of({**labelled, "SLURM_PROCID": "3", "SLURM_STEP_NUM_TASKS": "11",
                     "SLURM_NTASKS": "1"}) == b" 3: "
    assert label_of({**labelled, "SLURM_PROCID": "10", "SLURM_NTASKS": "11"}) == b"10: "


def test_every_line_is_labelled_however_it_comes() -> None:
    labelling = Labelling(b"1: ")
    # Whole lines only: the anchor merges the tasks' streams, a part would meet another's.
    assert labelling.lines(b"one\ntw") == b"1: one\n"
    assert labelling.lines(b"o\n\nthr") == b"1: two\n1: \n"
    assert labelling.end() == b"1: thr\n"
    assert labelling.end() == b""


def test_a_long_line_goes_in_slurmstepd_s_parts() -> None:
    labelling = Labelling(b"0: ")
    said = labelling.lines(b"x" * 1500 + b"\n") + labelling.end()
    assert said == b"0: " + b"x" * 1024 + b"\n0: " + b"x" * 476 + b"\n"
