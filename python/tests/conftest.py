"""Fixtures of the lms pytest suite (run by run_tests.sh against the installed wheel)."""
import os

import numpy as np
import pytest

import lms

SEED = 7


@pytest.fixture
def rng():
    print(f"seed {SEED}")
    return np.random.default_rng(SEED)


@pytest.fixture
def source_dir():
    return os.environ.get("LMS_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def small_vdsr(batch=2, side=16, depth=3, channels=8):
    """A VDSR training graph (Adam) with its feeds' shape."""
    train = lms.training_graph(
        lms.models.vdsr(batch=batch, height=side, width=side, depth=depth, channels=channels),
        lms.Adam(lr=1e-3))
    return train, (batch, 1, side, side)
