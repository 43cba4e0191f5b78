"""1,000 steps from Python leak no device memory, no pinned host memory and
no Python objects, with swaps in the plan."""
import gc
import tracemalloc

import numpy as np

import lms
from conftest import small_vdsr


def test_a_thousand_steps_leak_nothing(rng):
    train, shape = small_vdsr(batch=2, side=16, depth=6, channels=8)
    probe = train.copy()
    report = lms.rewrite(probe, lms.LmsConfig(enabled=False), lms.cpu_device(capacity="1GiB"))
    budget = (report.peak_bytes_after + report.working_set_limit_bytes) // 2
    device = lms.cpu_device(capacity=budget)
    planned = lms.rewrite(train, lms.LmsConfig(auto_actions="swap"), device)
    assert planned.swapped, planned.summary()
    session = lms.Session(train, device)
    x = rng.random(shape, dtype=np.float32)
    feeds = {"lr": x, "hr": x}

    def counts():
        gc.collect()
        return (device.memory_stats()["bytes_in_use"], device.host_stats()["bytes_in_use"],
                len(gc.get_objects()), tracemalloc.get_traced_memory()[0])

    for _ in range(10):
        session.run(feeds)
    tracemalloc.start()
    start = counts()
    for _ in range(1000):
        step = session.run(feeds)
        assert step.peak_device_bytes == planned.peak_bytes_after
        assert step.bytes_d2h > 0
    end = counts()
    tracemalloc.stop()
    print(f"device {start[0]} -> {end[0]} B, pinned {start[1]} -> {end[1]} B, "
          f"objects {start[2]} -> {end[2]}, traced {start[3]} -> {end[3]} B")
    assert end[0] == start[0]
    assert end[1] == start[1]
    assert end[2] - start[2] < 50
    assert end[3] - start[3] < 64 << 10
