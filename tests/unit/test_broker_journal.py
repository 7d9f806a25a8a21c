"""Register arithmetic of appends (broker/journal.py)."""

from __future__ import annotations

from pyspark_gazette.broker.journal import apply_registers
from pyspark_gazette.protocol import label_set, pb


def test_apply_registers():
    regs = label_set({"aa": ["1", "2"], "bb": "x"})
    out = apply_registers(regs, union=label_set({"aa": "3"}), subtract=label_set({"bb": "x", "cc": "y"}))
    assert out == label_set({"aa": "3"})
    assert apply_registers(regs, pb.LabelSet(), label_set({"aa": "1"})) == label_set({"aa": "2", "bb": "x"})
