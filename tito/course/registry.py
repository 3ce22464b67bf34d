"""The course registry: the one list of modules and milestones.

Everything that needs to know which modules exist reads this file: the CLI, the exporter,
the student workspace, the milestones, the tests and the website. Do not keep a second
list anywhere else; add a field here instead.

A module is *written* when its lesson file ``modules/NN_slug/slug.py`` exists (the course
repository) or its released notebook is packaged with tito (a student build, made by
``tito dist student``, which holds no lessons and so no reference solutions). Modules
that are planned but not written are listed all the same, so that ``tito module list``
shows the whole course and ``tito`` can say plainly that a module is not written yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import UnknownModule

# The course repository: modules/ sits beside tito/ (editable install, or a source tree).
COURSE_ROOT = Path(__file__).resolve().parents[2]
MODULES_DIR = COURSE_ROOT / "modules"
# A student build (`tito dist student`) installs no repository: the released notebooks and
# the milestones travel inside the tito package as data.
PACKAGED_DIR = Path(__file__).resolve().parents[1] / "_course"
PACKAGED_RELEASE_DIR = PACKAGED_DIR / "release"
MILESTONES_DIR = (
    COURSE_ROOT / "milestones" if (COURSE_ROOT / "milestones").is_dir()
    else PACKAGED_DIR / "milestones"
)
# The data the milestones ship with. Lessons that read it (module 10's Tiny Shakespeare) do
# not import tito to find it: tito names the folder in this environment variable wherever it
# runs a notebook (`tito module test/complete`, and the workspace's Jupyter kernel).
DATA_DIR = MILESTONES_DIR / "data"
DATA_ENV = "TINYTORCH_DATA"


@dataclass(frozen=True)
class Module:
    number: int
    slug: str
    title: str
    tier: str
    summary: str
    # Dotted path under ``tinytorch`` that the module's ``#| export`` cells become.
    target: str
    # Direct prerequisites; the full set is ``prerequisites(number)``.
    requires: tuple[int, ...] = ()
    # Public namespaces that re-export this module's names, PyTorch style:
    # "" is ``tinytorch`` itself, "nn" is ``tinytorch.nn``, and so on.
    namespaces: tuple[str, ...] = ()
    # Chosen names re-exported in a namespace of their own, a file of the package:
    # (("optim.lr_scheduler", ("StepLR", ...)),) makes ``tinytorch/optim/lr_scheduler.py``.
    reexports: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # What the module page says about the work (tito site build). Empty: not stated yet,
    # and the page says nothing rather than guess.
    hours: str = ""  # e.g. "8-10"
    difficulty: int = 0  # 1 (easiest) to 4; 0: not rated
    needs_to_know: str = ""  # one sentence: what a student should already be able to do
    # The systems question the module answers (markdown; LaTeX math in $...$ is fine).
    question: str = ""
    # The matching chapter of the Machine Learning Systems book (mlsysbook.ai): (title, URL).
    book: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """Two-digit form used in paths and on the command line: ``01``."""
        return f"{self.number:02d}"

    @property
    def dirname(self) -> str:
        return f"{self.key}_{self.slug}"

    @property
    def source(self) -> Path:
        """The lesson file (jupytext percent format) with the reference solution."""
        return MODULES_DIR / self.dirname / f"{self.slug}.py"

    @property
    def packaged_release(self) -> Path:
        """The released notebook inside a student build (exists only there)."""
        return PACKAGED_RELEASE_DIR / f"{self.dirname}.ipynb"

    @property
    def written(self) -> bool:
        return self.source.is_file() or self.packaged_release.is_file()

    @property
    def target_path(self) -> Path:
        """Where the export lands, relative to the folder that holds ``tinytorch/``."""
        return Path("tinytorch", *self.target.split(".")).with_suffix(".py")

    @property
    def notebook_relpath(self) -> Path:
        """Where a student's notebook for this module lives inside a workspace."""
        return Path("modules") / self.dirname / f"{self.slug}.ipynb"


@dataclass(frozen=True)
class Milestone:
    name: str
    year: int
    title: str
    summary: str
    requires: tuple[int, ...]
    script: str  # file under milestones/


MODULES: tuple[Module, ...] = (
    Module(1, "tensor", "Tensor", "foundation",
           "N-dimensional arrays on NumPy: creation, arithmetic with broadcasting, matmul, "
           "reductions, reshaping, indexing, and the op records autograd will need.",
           "core.tensor", (), ("",),
           hours="4-6", difficulty=2,
           needs_to_know="Python classes and NumPy arrays: shapes, indexing, dtypes.",
           question=(
               "What does each operation cost in memory: when does NumPy copy and when does it "
               "share a view, and why does one stray float64 double the memory of everything "
               "built on it?"
           ),
           book=("Frameworks",
                 "https://mlsysbook.ai/vol1/frameworks/frameworks.html")),
    Module(2, "activations", "Activations", "foundation",
           "ReLU, Sigmoid, Tanh, GELU, SiLU, Softmax and LogSoftmax, numerically stable.",
           "core.activations", (1,), ("nn",),
           hours="3-4", difficulty=2,
           needs_to_know=(
               "Module 01's Tensor, and what $e^x$ and $\\log x$ do for large and small inputs."
           ),
           question=(
               "Why does a formula that is one line on paper return `nan` in float32, and why is "
               "an activation limited by memory traffic rather than arithmetic?"
           ),
           book=("Neural Computation",
                 "https://mlsysbook.ai/vol1/nn_computation/nn_computation.html")),
    Module(3, "layers", "Layers", "foundation",
           "Module with a parameter registry, Linear, Dropout, Sequential, state dicts.",
           "core.layers", (1, 2), ("nn",),
           hours="4-6", difficulty=3,
           needs_to_know="Python classes (`__setattr__`, properties) and matrix shapes.",
           question=(
               "Where do a network's parameters live, how much memory do they take, and how does "
               "a framework find each one exactly once, even when two layers share it?"
           ),
           book=("Neural Computation",
                 "https://mlsysbook.ai/vol1/nn_computation/nn_computation.html")),
    Module(4, "losses", "Losses", "foundation",
           "Mean squared error, cross-entropy from logits, binary cross-entropy with logits.",
           "core.losses", (1, 2), ("nn",),
           hours="3-4", difficulty=2,
           needs_to_know="Logarithms and the softmax of module 02.",
           question=(
               "Why does a textbook cross-entropy return `inf` on confident predictions, and why "
               "is the probability matrix the largest array of a language model's training step?"
           ),
           book=("Neural Computation",
                 "https://mlsysbook.ai/vol1/nn_computation/nn_computation.html")),
    Module(5, "dataloader", "DataLoader", "foundation",
           "Dataset, TensorDataset and a batching, shuffling DataLoader.",
           "data.loader", (1,), ("data",),
           hours="2-3", difficulty=2,
           needs_to_know="Python iterators and generators, and seeded random number generators.",
           question=(
               "Which examples go into which batch, in what order, and how does a run stopped at "
               "epoch 5 see exactly the batches it would have seen?"
           ),
           book=("Training",
                 "https://mlsysbook.ai/vol1/training/training.html")),
    Module(6, "autograd", "Autograd", "foundation",
           "Reverse-mode differentiation: derivative rules, an iterative topological "
           "backward, no_grad, detach and gradcheck.",
           "core.autograd", (1, 2, 3, 4), ("",),
           hours="8-10", difficulty=4,
           needs_to_know="The chain rule, and graphs (a topological order) from a first course.",
           question=(
               "How does one backward pass give every gradient for about the cost of two forward "
               "passes, and what memory does the graph hold until it runs?"
           ),
           book=("Frameworks",
                 "https://mlsysbook.ai/vol1/frameworks/frameworks.html")),
    Module(7, "optimizers", "Optimizers", "foundation",
           "SGD with momentum, Adam, AdamW, gradient clipping.",
           "core.optimizers", (6,), ("optim",),
           hours="3-4", difficulty=2,
           needs_to_know="Gradients as module 06 leaves them in `.grad`; running averages.",
           question=(
               "What does an optimizer remember between steps, and why does Adam's state cost "
               "twice the memory of the model it trains?"
           ),
           book=("Training",
                 "https://mlsysbook.ai/vol1/training/training.html")),
    Module(8, "training", "Training", "foundation",
           "Training loops, learning-rate schedules, safe checkpoints, resumable runs.",
           "core.training", (5, 7), ("",),
           reexports=(("optim.lr_scheduler",
                       ("LRScheduler", "LambdaLR", "StepLR", "CosineWarmupLR", "ScheduleLR")),),
           hours="5-6", difficulty=3,
           needs_to_know="Modules 03-07 end to end, and files: writing, renaming, reading back.",
           question=(
               "What is a training run made of, so that a stopped run resumes bit for bit and a "
               "crash in the middle of saving loses nothing?"
           ),
           book=("Training",
                 "https://mlsysbook.ai/vol1/training/training.html")),
    Module(9, "convolutions", "Convolutions", "architecture",
           "Conv2d with im2col, pooling, a CNN on digits.",
           "core.convolutions", (8,), ("nn",),
           hours="5-6", difficulty=3,
           needs_to_know="Module 06's derivative rules and module 03's Linear; array strides help.",
           question=(
               "Why is a convolution written as one big matrix product, and what does copying "
               "every $k \\times k$ window into a column cost in memory?"
           ),
           book=("Architectures",
                 "https://mlsysbook.ai/vol1/nn_architectures/nn_architectures.html")),
    Module(10, "tokenization", "Tokenization", "architecture",
           "Character and byte-level BPE tokenizers.",
           "text.tokenization", (1,), ("text",),
           hours="5-6", difficulty=3,
           needs_to_know="Python strings, bytes and UTF-8, and dictionaries.",
           question=(
               "How does the vocabulary size trade the size of the embedding and output layers "
               "against the length of every sequence, which attention pays for quadratically?"
           )),
    Module(11, "embeddings", "Embeddings", "architecture",
           "Token embeddings, learned and sinusoidal positions, rotary embeddings.",
           "core.embeddings", (6, 10), ("nn",),
           hours="4-5", difficulty=3,
           needs_to_know="Indexing and gradients (modules 01, 06); sines, cosines and rotations.",
           question=(
               "How does a model learn what a token id means and where it stands, and what does "
               "each way of encoding positions cost in parameters and in length it can handle?"
           ),
           book=("Architectures",
                 "https://mlsysbook.ai/vol1/nn_architectures/nn_architectures.html")),
    Module(12, "attention", "Attention", "architecture",
           "Scaled dot-product, causal and padding masks, multi-head and grouped-query attention.",
           "core.attention", (11,), ("nn",),
           hours="6-8", difficulty=4,
           needs_to_know="Matrix products with batch axes, softmax (02) and autograd (06).",
           question=(
               "Attention's $(T, T)$ table of scores grows with the square of the sequence "
               "length: at what length does it, and not the weights, fill the memory?"
           ),
           book=("Architectures",
                 "https://mlsysbook.ai/vol1/nn_architectures/nn_architectures.html")),
    Module(13, "transformers", "Transformers", "architecture",
           "LayerNorm, RMSNorm, MLPs, the pre-norm block, and GPT with generation.",
           "models.transformer", (8, 12), ("nn",),
           hours="8-10", difficulty=4,
           needs_to_know=(
               "Everything from modules 01-12: you assemble them, so their shapes and "
               "gradients must be second nature."
           ),
           question=(
               "Attention's memory grows as $O(N^2)$ in the sequence length $N$, the MLP's "
               "compute as $O(N \\cdot d^2)$ in the width $d$: which one hits a wall first as a "
               "GPT grows?"
           ),
           book=("Architectures",
                 "https://mlsysbook.ai/vol1/nn_architectures/nn_architectures.html")),
    Module(14, "profiling", "Profiling", "optimization",
           "Measure time, memory and FLOPs of your own models.",
           "perf.profiling", (13,), (),
           hours="4-5", difficulty=3,
           needs_to_know="Your GPT from module 13, and what a FLOP and a byte of memory are.",
           question=(
               "Where does the time of a training step go, how many FLOPs did the ops that ran "
               "really cost, and what memory does backward keep alive?"
           )),
    Module(15, "quantization", "Quantization", "optimization",
           "Real int8 weights and activations, calibration, accuracy against size.",
           "perf.quantization", (13,), (),
           hours="4-6", difficulty=3,
           needs_to_know="Your GPT from module 13; integers, rounding and NumPy dtypes.",
           question=(
               "How few bits can a weight keep before the model notices, and how many bytes "
               "does that really save once the scales are counted?"
           )),
    Module(16, "compression", "Compression", "optimization",
           "Pruning and distillation.",
           "perf.compression", (13,), (),
           hours="5-6", difficulty=3,
           needs_to_know="Your GPT from module 13 and an optimizer step from module 07.",
           question=(
               "Which weights can a model lose, when does removing them make it faster rather "
               "than only sparser, and what can a small model learn from a big one?"
           )),
    Module(17, "acceleration", "Acceleration", "optimization",
           "Vectorization, memory layout, BLAS threads, allocation reuse and fused kernels, "
           "plugged into your framework through its kernel table and measured.",
           "perf.acceleration", (13, 14, 15), (),
           hours="6-8", difficulty=4,
           needs_to_know=(
               "Your autograd's derivative table (06), attention (12), the GPT (13) and "
               "the profiler (14) that tells you where the time goes."
           ),
           question=(
               "A training step does about 4 GFLOP that BLAS can run in about 21 ms: where do "
               "the other milliseconds go, and which of them can a fused kernel win back?"
           )),
    Module(18, "kv_caching", "KV Caching and Serving", "optimization",
           "Llama, Qwen and MoE checkpoints on your own engine: the decoder block, model "
           "assembly, dense and paged KV caches, batched generation, measured.",
           "models.llm", (10, 13), ("models",),
           hours="8-10", difficulty=4,
           needs_to_know=(
               "Modules 11-13 (RoPE, grouped-query attention, RMSNorm and SwiGLU) and module "
               "08's safetensors reader."
           ),
           question=(
               "Why does generating token $N$ without a cache cost $O(N^2)$, and how much memory "
               "does the cache take per token when a server holds many sequences at once?"
           )),
    Module(19, "benchmarking", "Benchmarking", "optimization",
           "Fair, repeatable measurements against a reference framework: warm-up, repeats, "
           "medians, paired runs, confidence intervals and a verdict that respects the noise.",
           "perf.benchmarking", (13, 14), (),
           hours="4-6", difficulty=3,
           needs_to_know="The profiler from module 14, and medians, quartiles and resampling.",
           question=(
               "Two timings differ by 4%: is one framework faster, or did the machine "
               "breathe? How many repeats, in what order, tell the two apart?"
           )),
    Module(20, "capstone", "Capstone", "capstone",
           "Make your TinyGPT fast and small, and prove it with measurements.",
           "capstone", tuple(range(14, 20)), (),
           hours="8-12", difficulty=4,
           needs_to_know=(
               "Modules 14-19: you combine quantization, pruning, fused kernels and the KV "
               "cache, and prove each gain with the benchmark harness."
           ),
           question=(
               "How much faster and smaller can your TinyGPT get while its validation loss "
               "stays within 0.05 of where it started, and can you prove every figure?"
           )),
)

MILESTONES: tuple[Milestone, ...] = (
    Milestone("perceptron", 1957, "Rosenblatt's perceptron",
              "A single neuron learns a linearly separable problem.",
              (1, 2, 3, 4, 6, 7), "perceptron.py"),
    Milestone("xor", 1969, "The XOR problem",
              "One layer fails on XOR; two layers solve it.",
              (1, 2, 3, 4, 6, 7), "xor.py"),
    Milestone("mlp_digits", 1986, "Backpropagation on handwritten digits",
              "An MLP classifies 8x8 digits.",
              (1, 2, 3, 4, 5, 6, 7, 8), "mlp_digits.py"),
    Milestone("cnn_digits", 1998, "Convolutional networks",
              "A small CNN classifies 8x8 digits.",
              (1, 2, 3, 4, 5, 6, 7, 8, 9), "cnn_digits.py"),
    Milestone("tinygpt", 2018, "TinyGPT on Tiny Shakespeare",
              "Your own framework trains a character-level GPT on a CPU.",
              (1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13), "tinygpt.py"),
    Milestone("llm", 2023, "An open-weights LLM on your own engine",
              "Your engine serves a Hugging Face checkpoint (Llama, Qwen, MoE, or your own "
              "TinyGPT) with a KV cache, token for token as transformers does.",
              (1, 2, 3, 6, 8, 10, 11, 12, 13, 18), "llm.py"),
    Milestone("olympics", 2018, "MLPerf-style optimization",
              "Your baseline and optimized TinyGPT race under rules: the optimized one must "
              "keep its validation loss within 0.05 of the baseline, or it is disqualified.",
              (1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20),
              "olympics.py"),
)

TIERS = {
    "foundation": "Foundation",
    "architecture": "Architecture",
    "optimization": "Optimization",
    "capstone": "Capstone",
}


def valid_keys() -> str:
    return ", ".join(m.key for m in MODULES)


def get_module(ref: int | str) -> Module:
    """Find a module by number (1, "1", "01") or slug ("tensor", "01_tensor")."""
    text = str(ref).strip().lower()
    for m in MODULES:
        if text in (m.key, str(m.number), m.slug, m.dirname):
            return m
    raise UnknownModule(
        f"There is no module {ref!r}. Valid modules are {valid_keys()} "
        f"(or their names: {', '.join(m.slug for m in MODULES)}). See `tito module list`."
    )


def get_milestone(name: str) -> Milestone:
    for ms in MILESTONES:
        if name.lower() in (ms.name, ms.name.replace("_", "-")):
            return ms
    names = ", ".join(ms.name for ms in MILESTONES)
    raise UnknownModule(f"There is no milestone {name!r}. Valid milestones are {names}.")


def prerequisites(number: int) -> tuple[int, ...]:
    """Every module that must be completed before ``number``, sorted (transitive closure)."""
    seen: set[int] = set()
    stack = list(get_module(number).requires)
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(get_module(n).requires)
    return tuple(sorted(seen))


def unlocked_by(number: int) -> tuple[Milestone, ...]:
    """Milestones whose last missing module is ``number`` (they need it and nothing later)."""
    return tuple(ms for ms in MILESTONES if number in ms.requires and max(ms.requires) == number)


def written_modules() -> list[Module]:
    return [m for m in MODULES if m.written]
