#!/usr/bin/env python3
"""Regenerates the ONNX fixtures into a scratch folder and checks that the
committed ones are current: the .onnx files' graphs exactly and their
initializers within 1e-5 relative (BatchNorm running statistics come from a
forward pass, whose last digits differ between CPUs: AVX2, AVX-512), the
reference values within 1e-5 relative plus 1e-6 absolute per value (a conv
bias gradient in front of a BatchNorm is rounding noise, up to 6e-8 seen).

    check_fixtures.py SOURCE_DIR SCRATCH_DIR

Exit 77 (CTest: skipped) with the reason when torch or onnx cannot be
imported.
"""
import filecmp
import os
import shutil
import subprocess
import sys


def values(path):
    out = {}
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            parts = line.split()
            out[parts[0]] = [float(v) for v in parts[2:]]
    return out


def close(a, b):
    num = sum((x - y) ** 2 for x, y in zip(a, b)) ** 0.5
    den = sum(y * y for y in b) ** 0.5
    return len(a) == len(b) and num <= 1e-5 * den + 1e-6 * len(b) ** 0.5


def same_model(mine, theirs):
    """The graphs equal but for the initializers' values, which are close."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    if filecmp.cmp(mine, theirs, shallow=False):
        return True
    a, b = onnx.load(mine), onnx.load(theirs)
    ia = {i.name: numpy_helper.to_array(i) for i in a.graph.initializer}
    ib = {i.name: numpy_helper.to_array(i) for i in b.graph.initializer}
    if ia.keys() != ib.keys():
        return False
    for k in ia:
        if ia[k].shape != ib[k].shape or ia[k].dtype != ib[k].dtype:
            return False
        x, y = ia[k].astype(np.float64), ib[k].astype(np.float64)
        if np.linalg.norm(x - y) > 1e-5 * np.linalg.norm(y) + 1e-8 * y.size ** 0.5:
            return False
    del a.graph.initializer[:]
    del b.graph.initializer[:]
    return a.SerializeToString() == b.SerializeToString()


def main(src, scratch):
    try:
        import onnx  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        print("skipped: cannot import torch and onnx (%s)" % e)
        return 77
    data = os.path.join(src, "tests", "data", "onnx")
    bad = []
    scripts = (("make_unet_fixture.py", "", "unet"),
               ("make_classifier_fixture.py", "", "classifier"),
               ("make_error_fixtures.py", "errors", "errors"))
    for script, sub, scratch_sub in scripts:
        out = os.path.join(scratch, scratch_sub)
        shutil.rmtree(out, ignore_errors=True)  # no file of an earlier run
        os.makedirs(out)
        subprocess.run([sys.executable, os.path.join(src, "tests", "onnx", script), out],
                       check=True)
        committed = os.path.join(data, sub)
        for name in sorted(os.listdir(out)):
            mine, theirs = os.path.join(out, name), os.path.join(committed, name)
            if name.endswith("_ref.txt"):
                a, b = values(mine), values(theirs)
                if a.keys() != b.keys() or not all(close(a[k], b[k]) for k in a):
                    bad.append(name)
            elif not os.path.exists(theirs):
                bad.append(name)
            elif name.endswith(".onnx") and not same_model(mine, theirs):
                bad.append(name)
            elif not name.endswith(".onnx") and not filecmp.cmp(mine, theirs, shallow=False):
                bad.append(name)
    if bad:
        print("not current (rerun the scripts in tests/onnx/):", ", ".join(bad))
        return 1
    print("fixtures current")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
