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
from .module_text import MODULE_TEXT, ModuleText

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

    # What is said about the module (its summary, time, difficulty, systems question, book
    # chapter) is in module_text.py, by number: this file keeps the structure.
    @property
    def text(self) -> ModuleText:
        return MODULE_TEXT.get(self.number, ModuleText(summary=self.title))

    @property
    def summary(self) -> str:
        return self.text.summary

    @property
    def hours(self) -> str:
        return self.text.hours

    @property
    def difficulty(self) -> int:
        return self.text.difficulty

    @property
    def needs_to_know(self) -> str:
        return self.text.needs_to_know

    @property
    def question(self) -> str:
        return self.text.question

    @property
    def book(self) -> tuple[str, ...]:
        return self.text.book

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
    Module(1, "tensor", "Tensor", "foundation", "core.tensor", (), ("",)),
    Module(2, "activations", "Activations", "foundation", "core.activations", (1,), ("nn",)),
    Module(3, "layers", "Layers", "foundation", "core.layers", (1, 2), ("nn",)),
    Module(4, "losses", "Losses", "foundation", "core.losses", (1, 2), ("nn",)),
    Module(5, "dataloader", "DataLoader", "foundation", "data.loader", (1,), ("data",)),
    Module(6, "autograd", "Autograd", "foundation", "core.autograd", (1, 2, 3, 4), ("",)),
    Module(7, "optimizers", "Optimizers", "foundation", "core.optimizers", (6,), ("optim",)),
    Module(8, "training", "Training", "foundation", "core.training", (5, 7), ("",),
           reexports=(("optim.lr_scheduler",
                       ("LRScheduler", "LambdaLR", "StepLR", "CosineWarmupLR", "ScheduleLR")),)),
    Module(9, "convolutions", "Convolutions", "architecture", "core.convolutions", (8,), ("nn",)),
    Module(10, "tokenization", "Tokenization", "architecture", "text.tokenization", (1,),
           ("text",)),
    Module(11, "embeddings", "Embeddings", "architecture", "core.embeddings", (6, 10), ("nn",)),
    Module(12, "attention", "Attention", "architecture", "core.attention", (11,), ("nn",)),
    Module(13, "transformers", "Transformers", "architecture", "models.transformer", (8, 12),
           ("nn",)),
    Module(14, "profiling", "Profiling", "optimization", "perf.profiling", (13,), ()),
    Module(15, "quantization", "Quantization", "optimization", "perf.quantization", (13,), ()),
    Module(16, "compression", "Compression", "optimization", "perf.compression", (13,), ()),
    Module(17, "acceleration", "Acceleration", "optimization", "perf.acceleration",
           (13, 14, 15), ()),
    Module(18, "kv_caching", "KV Caching and Serving", "optimization", "models.llm", (10, 13),
           ("models",)),
    Module(19, "benchmarking", "Benchmarking", "optimization", "perf.benchmarking", (13, 14), ()),
    Module(20, "capstone", "Capstone", "capstone", "capstone", tuple(range(14, 20)), ()),
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
