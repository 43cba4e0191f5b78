#!/usr/bin/env python3
"""Regenerates the ONNX fixtures into a scratch folder and checks that the
committed ones are current: the .onnx files byte for byte, the reference
values within 1e-5 relative (last-digit differences between CPUs).

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
    return len(a) == len(b) and num <= 1e-5 * max(den, 1e-30)


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
            elif not os.path.exists(theirs) or not filecmp.cmp(mine, theirs, shallow=False):
                bad.append(name)
    if bad:
        print("not current (rerun the scripts in tests/onnx/):", ", ".join(bad))
        return 1
    print("fixtures current")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
