"""The extra designs, one entry each: their order is the order stored records' design indices assume."""

from __future__ import annotations

import dataclasses

from autosched.spaces.designs import EXTRA_DESIGNS
from autosched.spaces.settings import SpaceSettings, settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.tasks import make_target
from tests.spaces.test_serial import _nhwc_mean


def test_the_extra_designs_are_appended_in_their_stored_order_each_behind_a_settings_flag():
    assert [e.name for e in EXTRA_DESIGNS] == ["streaming", "concat", "row", "attention", "serial", "dlight",
                                                 "injective"]
    flags = {f.name for f in dataclasses.fields(SpaceSettings) if f.type in (bool, "bool")}
    assert all(e.flag in flags for e in EXTRA_DESIGNS)
    assert len({e.flag for e in EXTRA_DESIGNS}) == len(EXTRA_DESIGNS)


def test_design_index_names_each_extra_design_the_function_has():
    """A small reduction at 2 threads: the streaming design, and a serial copy of it (appended last)."""
    target = make_target("llvm", 2)
    space = TraceSearchSpace(_nhwc_mean(), target, settings_for(target))
    n = len(space.designs)
    assert space.design_index("streaming") == space.design_index("streaming") == n - 2
    assert space.design_index("serial") == space.design_index("serial") == n - 1
    assert space.source_of(space.design_index("serial")) == space.design_index("streaming")
    assert space.design_index("concat") is None
    assert space.default_schedule()[0]["design"] == n - 2
    without = TraceSearchSpace(_nhwc_mean(), target, dataclasses.replace(settings_for(target), serial_small=False))
    assert len(without.designs) == n - 1 and without.design_index("serial") is None
