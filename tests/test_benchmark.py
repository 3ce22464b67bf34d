"""The GPT-step benchmark runs and compares like with like. Speed is what it prints, not
what this test asserts: a timed unit test on a shared machine would prove nothing."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.slow


def test_quick_benchmark_prints_both_frameworks_on_the_same_model(repo):
    done = subprocess.run([sys.executable, str(repo / "benchmarks" / "gpt_step.py"), "--quick",
                           "--breakdown"], cwd=repo, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    first = re.search(r"first-step loss: tinytorch ([\d.]+), torch ([\d.]+)", done.stdout)
    assert first and first.group(1) == first.group(2), "the two models must start identical"
    last = re.search(r"loss after the last step: tinytorch ([\d.]+), pytorch ([\d.]+)", done.stdout)
    assert last and abs(float(last.group(1)) - float(last.group(2))) < 1e-3
    result = json.loads(done.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert result["tinytorch_ms"] > 0 and result["torch_ms"] > 0
    assert result["ratio"] == pytest.approx(result["tinytorch_ms"] / result["torch_ms"])
    assert all(v > 0 for v in result["memory_bytes"].values())
    # --breakdown: the same rows for both frameworks, each measured, and printed as a table
    FRAMEWORK, ROWS = breakdown_module(repo).FRAMEWORK, breakdown_module(repo).ROWS
    rows = result["breakdown"]
    assert set(rows) == {"tinytorch", "torch"}
    for framework, ms in rows.items():
        assert list(ms) == list(ROWS), framework
        assert all(ms[row] > 0 for row in ROWS[:4]), (framework, ms)  # products ... layer norm
        assert ms[FRAMEWORK] > 0, (framework, ms)  # the phases took more than their operations
        # and most of the step is in timed operations (about 90% here): were the derivative
        # rules or the backward's ATen operations not timed, the rest would be over half
        assert ms[FRAMEWORK] < 0.35 * sum(ms.values()), (framework, ms)
    table = done.stdout.split("where the milliseconds go", 1)[1]
    products = re.search(r"matrix products \(Linear, LM head\) +([\d.]+) +([\d.]+) +([-+][\d.]+)",
                         table)
    assert products, table
    assert float(products.group(1)) == pytest.approx(rows["tinytorch"][ROWS[0]], abs=0.06)


def breakdown_module(repo):
    spec = importlib.util.spec_from_file_location("_breakdown",
                                                  repo / "benchmarks" / "_breakdown.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name, row", [
    ("MatMulRowsCompiled", 0), ("MatMulBackward", 0), ("aten::addmm", 0), ("aten::mm", 0),
    ("aten::bmm", 0), ("AttentionCompiledBackward", 1),
    ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", 1),
    ("GELUCompiled", 2), ("aten::gelu_backward", 2), ("LayerNormCompiledBackward", 3),
    ("aten::native_layer_norm", 3), ("CrossEntropyCompiled", 4), ("aten::_log_softmax", 4),
    ("aten::nll_loss_forward", 4), ("EmbeddingFunctionBackward", 5),
    ("aten::embedding_dense_backward", 5), ("Add", 6), ("aten::add_", 6), ("aten::mul", 6),
    ("Permute", 6), ("aten::copy_", 6), ("aten::mean", 6)])
def test_breakdown_puts_each_operation_in_its_row(repo, name, row):
    """`aten::mul` and `aten::mean` hold "mm"-like letters but are not products."""
    module = breakdown_module(repo)
    assert module.category(name) == module.ROWS[row]


def test_quick_loss_comparison_pairs_the_frameworks(repo):
    """tinygpt_loss.py --quick: the milestone and PyTorch, from the same weights on the same
    batches, end with the same validation loss; PyTorch on its own draws ends elsewhere."""
    done = subprocess.run([sys.executable, str(repo / "benchmarks" / "tinygpt_loss.py"), "--quick",
                           "--jobs", "2"], cwd=repo, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.split("RESULT ", 1)[1].splitlines()[0])
    runs = result["runs"]
    assert set(runs) == {"tinytorch/0", "paired/0", "nanogpt/0"}
    assert 2.5 < runs["tinytorch/0"] < 4.2  # 20 steps: below log(65), far from trained
    assert abs(runs["tinytorch/0"] - runs["paired/0"]) < 1e-3
    gap = abs(runs["tinytorch/0"] - runs["paired/0"])
    assert result["largest_paired_gap"] == pytest.approx(gap)
    assert runs["nanogpt/0"] != runs["paired/0"]  # its own initial weights and batches


def test_quick_quantization_benchmark_reports_bytes_and_losses(repo):
    """quantization.py --quick: every format's bytes held and loss, and the target verdicts."""
    done = subprocess.run([sys.executable, str(repo / "benchmarks" / "quantization.py"), "--quick",
                           "--plot", str(repo / "runs" / "test_quantization.png")],
                          cwd=repo, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.split("RESULT ", 1)[1].splitlines()[0])
    rows = {r["format"]: r for r in result["rows"]}
    assert list(rows) == ["float32", "int8 per-channel", "int4 group 128", "int4 group 64",
                          "int4 group 32"]
    assert rows["int8 per-channel"]["linear_share"] == pytest.approx(0.2559, abs=1e-4)
    assert rows["int4 group 32"]["linear_share"] == pytest.approx(0.15625)
    sizes = [rows[f]["model_bytes"] for f in ("float32", "int8 per-channel", "int4 group 32")]
    assert sizes[0] > sizes[1] > sizes[2] > 0
    assert all(abs(r["val_loss"] - rows["float32"]["val_loss"]) < 0.1 for r in rows.values())
    assert set(result["targets_met"]) == {"int8 per-channel", "int4 group 32"}
    assert len(result["sensitivity"]) == 16


def test_quick_compression_benchmark_reports_every_measure(repo):
    """compression.py --quick: pruned, fine-tuned, timed and distilled models, all measured."""
    done = subprocess.run([sys.executable, str(repo / "benchmarks" / "compression.py"), "--quick"],
                          cwd=repo, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.split("RESULT ", 1)[1].splitlines()[0])
    for scope in ("layer", "global"):
        row = result[f"unstructured_{scope}"]
        assert row["sparsity"] == pytest.approx(0.5, abs=1e-3)  # still 50% after fine-tuning
        assert row["csr_share"] == pytest.approx(1.0, abs=0.01)  # 8 bytes a kept value
    for label, params in (("MLP neurons -25%", 673_024), ("heads -25%", 738_560)):
        assert result[label]["parameters"] == params  # the matrices really shrank
        assert result[label]["cpu_ms"] > 0 and result[label]["speedup_cpu"] > 0
    assert set(result["distillation"]) == {"alone", "distilled"}
    assert result["distillation"]["alone"] != result["distillation"]["distilled"]


def test_quick_decode_benchmark_prints_every_figure(repo, tmp_path):
    """decode.py --quick: both frameworks decode the same tiny checkpoint to the same greedy
    tokens, and every figure of the full run is printed (their values are not asserted)."""
    pytest.importorskip("transformers")
    done = subprocess.run([sys.executable, str(repo / "benchmarks" / "decode.py"), "--quick",
                           "--folder", str(tmp_path / "ckpt")],
                          cwd=repo, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert result["greedy_identical"], "the same checkpoint must give the same greedy tokens"
    assert result["ratio"] == pytest.approx(result["tinytorch_tokens_per_s"]
                                            / result["transformers_tokens_per_s"])
    assert len(result["ratio_per_round"]) == 1
    low, high = result["ratio_ci"]  # module 19's interval over every decoded token's step
    assert 0 < low <= high
    assert result["verdict"] in ("faster", "slower", "no difference (within noise)")
    assert result["weight_bytes"] > 0 and all(v > 0 for v in result["peak_rss_bytes"].values())
    assert set(result["cache_tokens_per_s"]) == {"dense", "paged", "None"}
    kv = result["kv_bytes"]
    assert kv["needed"] <= kv["paged"] < kv["dense"], "pages hold the tokens, less than dense"
    for side in ("int8", "int4"):  # module 15's weights through ModelFeatures
        q = result["quantized"][side]
        assert q["weight_bytes"] < result["weight_bytes"] and q["decode_tokens_per_s"] > 0
        assert 0 < q["max_logit_error"] < q["logit_scale"] and 0 <= q["next_token_agree"] <= 64
    targets = result["targets"]  # the targets, each judged by its interval's low end
    for name, target in (("float32", 1.2), ("int8", 2.5), ("int4", 3.0)):
        got = targets[name]
        assert got["target"] == target and got["met"] == (got["ci"][0] >= target), (name, got)
    if result["torch_int8_note"] is None:  # PyTorch's own dynamic int8 was measured beside ours
        torch_int8 = result["quantized"]["torch-int8"]
        assert torch_int8["weight_bytes"] < result["weight_bytes"]
        assert 0 <= torch_int8["next_token_agree"] <= 64
        assert targets["int8_vs_torch_int8"]["met"] == (
            result["quantized"]["int8"]["vs_torch_int8"]["verdict"] != "slower")
        assert "int8 against PyTorch's int8" in done.stdout
    rows = result["batching"]["rows"]
    assert [r["requests"] for r in rows] == [1, 2, 3] and all(r["identical"] for r in rows)
    assert all(r["pool_bytes"] > 0 and r["batched_tokens_per_s"] > 0 for r in rows)
    for line in ("decode: tinytorch", "memory: float32 weights", "int8 (per channel)",
                 "int4 (groups of 128)", "batching, 3 request(s)", "KV cache, 16 tokens",
                 "KV memory, batch"):
        assert line in done.stdout


def test_quick_conv_benchmark_trains_the_same_cnn_in_both_frameworks(repo):
    """conv_step.py --quick: the milestone's CNN, same weights and batches: same losses."""
    done = subprocess.run([sys.executable, str(repo / "benchmarks" / "conv_step.py"), "--quick",
                           "--threads", "1"], cwd=repo, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "13,706 parameters" in done.stdout
    result = json.loads(done.stdout.split("RESULT ", 1)[1].splitlines()[0])
    first_tt, first_pt = result["first_loss"]
    assert 2.0 < first_tt < 2.6 and abs(first_tt - first_pt) < 1e-5  # ~log(10) at the start
    last_tt, last_pt = result["last_loss"]
    assert last_tt < first_tt and abs(last_tt - last_pt) < 1e-4  # 7 Adam steps, in step
    assert result["tinytorch_ms"] > 0 and result["torch_ms"] > 0
    assert result["ratio"] == pytest.approx(result["tinytorch_ms"] / result["torch_ms"])
    low, high = result["ci"]  # module 19's interval and verdict over the step samples
    assert low <= high and result["verdict"] in ("faster", "slower",
                                                 "no difference (within noise)")
    assert "environment: " in done.stdout


def _suite(repo, *flags):
    done = subprocess.run([sys.executable, str(repo / "benchmarks" / "suite.py"), "--quick",
                           *flags], cwd=repo, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, json.loads(done.stdout.split("RESULT ", 1)[1].splitlines()[0])


SUITE = ("MLP digits forward", "MLP digits train step", "TinyGPT forward", "TinyGPT train step",
         "TinyGPT decode")


def test_quick_suite_compares_every_model_with_pytorch(repo, tmp_path):
    """suite.py --quick: the five benchmarks, each checked for agreement first, each a paired
    comparison with its ratio, interval and verdict; the environment; the plot."""
    out, result = _suite(repo, "--plot", str(tmp_path / "suite.png"))
    assert result["torch"] and result["threads"] == 1
    assert result["environment"]["numpy"] and result["environment"]["torch"]
    names = list(result["benchmarks"])
    assert [n.split(" (")[0] for n in names] == list(SUITE)
    for row in result["benchmarks"].values():
        assert row["names"] == ["pytorch", "tinytorch"] and row["paired"]
        assert row["baseline"]["n"] == row["candidate"]["n"] == 3
        assert row["ratio"] == pytest.approx(row["candidate"]["median"] / row["baseline"]["median"])
        assert row["ci"][0] <= row["ci"][1]
        assert row["verdict"] in ("faster", "slower", "no difference (within noise)")
    assert out.count("check ") == 5 and "greedy tokens identical" in out and "DIFFER" not in out
    assert "tinytorch / pytorch" in out and (tmp_path / "suite.png").stat().st_size > 5000


def test_quick_suite_without_pytorch_prints_tinytorch_alone_with_a_note(repo):
    out, result = _suite(repo, "--no-torch")
    assert not result["torch"]
    assert "the PyTorch column is skipped" in out
    assert all(row["tinytorch"]["n"] == 3 for row in result["benchmarks"].values())


def test_quick_int8_streams_benchmark_times_three_kernels_that_agree(repo):
    """int8_streams.py --quick: the three ways to read int8 rows (checked against each other
    before timing) and float32 BLAS, on both workloads, one process per thread count."""
    done = subprocess.run([sys.executable, str(repo / "benchmarks" / "int8_streams.py"), "--quick",
                           "--threads", "1", "2"], cwd=repo, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = json.loads(done.stdout.split("RESULT ", 1)[1].splitlines()[0])["runs"]
    assert [r["threads"] for r in runs] == [1, 2]
    for run in runs:
        assert set(run["workloads"]) == {"LM head", "one token"}
        for row in run["workloads"].values():
            for name in ("one row", "4 adjacent", "4 blocks", "float32 BLAS"):
                assert row[name] > 0
        # 2 layers of width 128 (7 weights each) and an 8,192 x 128 head, one byte a weight
        assert run["workloads"]["one token"]["int8 bytes"] == (
            2 * (2 * 128 * 128 + 2 * 32 * 128 + 3 * 512 * 128) + 8192 * 128)
    assert "x one row" in done.stdout and "x float32" in done.stdout
