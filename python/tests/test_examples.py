"""The Python examples give the C++ programs' losses, bit for bit, on the same
model, data and seed, under a capacity that needs LMS."""
import os
import subprocess
import sys

import pytest

import lms

DIGITS = [os.path.join(os.environ.get("LMS_SOURCE_DIR", ""), "data/digits/digits.csv.gz"),
          "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"]


def program(name):
    path = os.path.join(os.environ.get("LMS_EXAMPLES_BIN", ""), name, name)
    if not os.path.exists(path):
        pytest.skip(f"the C++ program {name} is not built (LMS_EXAMPLES_BIN={path})")
    return path


def read_losses(path):
    with open(path) as f:
        return [float(line) for line in f]


def capacity_needing_lms(model, inputs, loss, optimizer):
    """Device bytes halfway between the training step's working-set limit and
    its peak without LMS, from this machine's kernels (their workspaces
    differ between CPUs): the examples need LMS there, and it fits."""
    m = lms.import_onnx(model, inputs=inputs)
    lms.attach_loss(m.graph, m.outputs[0], loss)
    train = lms.training_graph(m.graph, optimizer)
    report = lms.rewrite(train, lms.LmsConfig(enabled=False),
                         lms.cpu_device(capacity="1GiB", threads=1))
    print(f"peak without LMS {report.peak_bytes_after} B, working-set limit "
          f"{report.working_set_limit_bytes} B")
    return str((report.peak_bytes_after + report.working_set_limit_bytes) // 2)


def assert_same_losses(source_dir, tmp_path, name, args, steps, cpp_args=()):
    """Runs the C++ program `name` and examples/python/<name>.py with `args`
    under a capacity that needs LMS, and compares their losses bit for bit."""
    out = subprocess.run([program(name), *args, *cpp_args, "--losses", str(tmp_path / "cpp.txt")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "LMS needed" in out.stdout, out.stdout
    py = subprocess.run([sys.executable, os.path.join(source_dir, f"examples/python/{name}.py"),
                         *args, "--losses", str(tmp_path / "py.txt")],
                        capture_output=True, text=True)
    assert py.returncode == 0, py.stderr
    print(py.stdout)
    cpp_losses = read_losses(tmp_path / "cpp.txt")
    assert len(cpp_losses) == steps
    assert read_losses(tmp_path / "py.txt") == cpp_losses


def test_digits_py_trains_as_the_cpp_program(source_dir, tmp_path):
    pytest.importorskip("torch")
    data = next((d for d in DIGITS if os.path.exists(d)), None)
    if data is None:
        pytest.skip("digits.csv.gz not found: install python3-sklearn")
    program("digits")
    model = str(tmp_path / "tiny.onnx")
    subprocess.run([sys.executable, os.path.join(source_dir, "tests/examples/digits/"
                                                 "make_tiny_classifier.py"), model, "5"],
                   check=True, capture_output=True)
    capacity = capacity_needing_lms(model, {"input": (32, 1, 16, 16)}, lms.CrossEntropy(),
                                    lms.Sgd(lr=0.05, momentum=0.9, weight_decay=5e-4))
    args = ["--model", model, "--data", data, "--side", "16", "--batch", "32", "--max-steps",
            "6", "--threads", "1", "--capacity", capacity, "--seed", "3"]
    assert_same_losses(source_dir, tmp_path, "digits", args, 6)


def test_textlm_py_trains_as_the_cpp_program(source_dir, tmp_path):
    pytest.importorskip("torch")
    program("textlm")
    model = str(tmp_path / "gpt.onnx")
    gpt = subprocess.run([sys.executable, os.path.join(source_dir, "scripts/gpt_model.py"), model,
                          "--layers", "1", "--width", "32", "--heads", "2", "--vocab", "256",
                          "--context", "16", "--seed", "4"], capture_output=True, text=True)
    if gpt.returncode != 0:
        pytest.skip(f"scripts/gpt_model.py needs torch and onnx: {gpt.stderr[-300:]}")
    text = tmp_path / "text.txt"
    with open(os.path.join(source_dir, "README.md"), "rb") as f:
        text.write_bytes(f.read())
    capacity = capacity_needing_lms(model, {"ids": (4, 16)},
                                    lms.CrossEntropy(labels="next", classes_last=True),
                                    lms.Adam(lr=3e-3))
    args = ["--model", model, "--data", str(text), "--batch", "4", "--context", "16", "--steps",
            "5", "--threads", "1", "--capacity", capacity, "--seed", "3"]
    assert_same_losses(source_dir, tmp_path, "textlm", args, 5, cpp_args=["--no-compare"])


def test_quickstart_finds_a_larger_batch_with_lms_and_trains(source_dir, tmp_path):
    pytest.importorskip("torchvision")
    out = subprocess.run([sys.executable, os.path.join(source_dir, "examples/python/quickstart.py"),
                          "--capacity", "256MiB", "--side", "64", "--steps", "2", "--out",
                          str(tmp_path / "resnet18.onnx")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    print(out.stdout)
    line = next(l for l in out.stdout.splitlines() if l.startswith("largest batch"))
    plain, with_lms = (int(w) for w in line.replace(",", "").split() if w.isdigit())
    assert 0 < plain < with_lms
    assert out.stdout.count("step ") == 2
