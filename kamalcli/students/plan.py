"""kamal amalgamate's request and everything checked before any work: method, options, teachers, data, name;
and which confidences the method will read (which decides what to probe and fit)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from kamalcli.errors import KamalError
from kamalcli.data.text import is_generated
from kamalcli.probe.scores import RMD_SCORES
from kamalcli.recipe.recipe import Recipe
from kamalcli.settings import TRAIN, WORKSPACE


@dataclass
class AmalgamateRequest:
    method: str
    options: list[str] = field(default_factory=list)
    student: str = TRAIN.student
    student_layers: int | None = None
    name: str | None = None
    teachers: list[str] = field(default_factory=list)
    data: str | None = None
    select_by: str = TRAIN.select_by
    rmd_fit: str | None = None         # labelled data for the teachers' RMD fits (score=rmd)
    parent: str | None = None          # extend: the student that grows
    train: dict = field(default_factory=dict)
    probe: dict = field(default_factory=dict)
    probe_given: list[str] = field(default_factory=list)  # named on the command line: mc_samples, mc_exact
    device: str = WORKSPACE.device
    reprobe: bool = False              # probe again with these settings even if other cached probes exist
    recipe: dict | None = None         # every auto decided before any work (kamalcli/recipe/recipe.py Recipe.as_json)
    init: str | None = None            # merge[:METHOD]: the student's encoder starts as the teachers' merged ones
    label_aliases: dict | None = None  # kamal labels merge: the merges the run started with (a resume needs the same)
    gold: str | None = None            # a labelled dataset of transfer rows: a gold-label loss beside the method's

    def as_json(self) -> dict:
        return asdict(self)


def with_recipe(request: AmalgamateRequest, recipe: dict | None) -> AmalgamateRequest:
    """The request with the recipe decided for it (Recipe.as_json, or None), and RMD fitted on what it chose."""
    return replace(request, recipe=recipe, rmd_fit=Recipe.from_json(recipe).value("fit") or request.rmd_fit)


@dataclass(frozen=True)
class Job:
    """A request checked, and what it resolves to: every later step of amalgamate and extend reads this."""

    request: AmalgamateRequest  # as the run records it: its name, --init canonical; later its label merges, recipe
    method: object
    options: object             # as asked (the student's record keeps them); training_options: as decided
    teachers: tuple
    dataset: object             # the transfer set
    train: object               # kamalcli/train/loop.py TrainConfig, checked

    @property
    def task(self) -> str:
        return teachers_task(self.teachers)

    @property
    def kind(self) -> str:
        return "extend" if self.request.parent else "amalgamate"

    @property
    def recipe(self) -> Recipe:
        """Every auto decided (kamalcli/recipe/recipe.py), as the request records it; empty until then."""
        return Recipe.from_json(self.request.recipe)

    @property
    def training_options(self):
        """The options the student trains with: every auto replaced by what the recipe decided."""
        return self.recipe.options_for(self.options)


def pin_label_aliases(store, request: AmalgamateRequest, teachers) -> AmalgamateRequest:
    """The merges among these teachers' labels, recorded when the run starts; a resumed run is refused in one
    line when they changed since (its checkpoint has one output per class it started with)."""
    space = store.label_space(teachers)
    now = space.aliases.within(space.names).as_json()
    if request.label_aliases is None:
        return replace(request, label_aliases=now)
    if request.label_aliases != now:
        def listed(aliases: dict) -> str:
            return ", ".join(f"{a} = {b}" for a, b in aliases.items()) or "none"

        raise KamalError(f"the label merges changed since {request.name} started (then: "
                         f"{listed(request.label_aliases)}; now: {listed(now)}): merge or split them back with "
                         "`kamal labels` to resume it, or train a new student")
    return request


def teachers_task(teachers) -> str:
    """sequence or token: every teacher's task; teachers of both in one amalgamation are refused."""
    tasks = {t.task for t in teachers}
    if len(tasks) > 1:
        tokens = ", ".join(t.name for t in teachers if t.task == "token")
        raise KamalError(f"these teachers mix tasks ({tokens} tag tokens, the others classify texts); "
                         "amalgamate one task at a time with --teacher NAME")
    return tasks.pop()


def check_task(dataset, task: str, role: str) -> None:
    if dataset.task != task:
        holds = "tokens with tags" if dataset.task == "token" else "texts"
        need = "token data (tokens and BIO tags)" if task == "token" else "text data"
        raise KamalError(f"{role} data {dataset.name} holds {holds}; {task} teachers need {need}")


def transfer_data(store, name: str | None, task: str):
    """The transfer set: the one named (--data NAME), never a test set, else kamal's choice."""
    dataset = store.dataset(name) if name else _default_transfer(store, task)
    dataset.refuse_test(f"--data {dataset.name}")
    check_task(dataset, task, "transfer")
    return dataset


def _default_transfer(store, task: str = "sequence"):
    """kamal's choice without --data: the one transfer set of real text; generated text only when there is none
    (it serves the scores' fits and data-free runs)."""
    transfer = [d for d in store.datasets(role="transfer") if d.task == task]
    if not transfer:
        raise KamalError("no transfer data: add unlabelled text with `kamal add-data FILE` (role transfer)")
    real = [d for d in transfer if not is_generated(d)]
    candidates = real or transfer
    if len(candidates) > 1:
        kind = " of real text" if real and len(real) < len(transfer) else ""
        raise KamalError(f"several transfer sets{kind} ({', '.join(d.name for d in candidates)}): "
                         "choose one with --data NAME")
    return candidates[0]


def transfer_note(store, job: Job) -> str | None:
    """The line that says which transfer set kamal chose, and why; None when the user named it (--data)."""
    dataset = job.dataset
    if job.request.data:
        return None
    if is_generated(dataset):
        return (f"Transfer data: {dataset.name}, generated text (there is no real transfer text: "
                "`kamal add-data FILE` adds some)")
    generated = [d.name for d in store.datasets(role="transfer") if d.task == dataset.task and is_generated(d)]
    if not generated:
        return f"Transfer data: {dataset.name}, the one transfer set"
    return (f"Transfer data: {dataset.name}, the real text (generated text in {', '.join(generated)} serves the "
            "scores; --data NAME to choose another)")


def _default_name(store, method: str) -> str:
    taken = {s.name for s in store.students()} | {r.name for r in store.runs(kind="amalgamate") if r.name}
    i = 1
    while f"{method}-{i}" in taken:
        i += 1
    return f"{method}-{i}"


def plan(store, request: AmalgamateRequest) -> Job:
    """Everything checked before any work: method, options, teachers, data, name, training settings."""
    from kamalcli.methods import REGISTRY, get_method
    from kamalcli.names import check_name
    from kamalcli.heads import several_heads
    from kamalcli.train.loop import TrainConfig

    method = get_method(request.method)
    if not method.trains:
        raise KamalError(f"{method.name} is a baseline with nothing to train: `kamal eval --baseline {method.name} --data NAME`")
    options = method.parse(request.options)
    teachers = [store.teacher(n) for n in request.teachers] if request.teachers else store.teachers()
    if not teachers:
        raise KamalError("no teachers: register some with `kamal add-teacher FOLDER`")
    if len(teachers) < 2 and reads_confidences(method, options) and not several_heads(teachers):
        raise KamalError(
            f"{method.name} chooses among teachers and needs at least two; there is only {teachers[0].name} "
            "(distil one teacher with vanilla-kd, or add another teacher)"
        )
    if len({t.name for t in teachers}) != len(teachers):
        raise KamalError("a teacher is named twice")
    task = teachers_task(teachers)
    if task == "token" and method.token_build is None:
        *others, last = [m.name for m in REGISTRY.values() if m.token_build is not None]
        raise KamalError(f"{method.name} works on sequence classifiers only; token teachers amalgamate with "
                         f"{', '.join(others)} or {last}")
    if task == "token" and request.reprobe:
        raise KamalError("--reprobe chooses among cached sentence-level probes; token teachers' per-word outputs are "
                         "cached by data, --max-length and --mc-samples: change one of them to compute new ones")
    dataset = transfer_data(store, request.data, task)
    if request.select_by != "transfer-loss":
        if not request.select_by.startswith("eval:"):
            raise KamalError(f"--select-by {request.select_by!r}: use transfer-loss or eval:NAME")
        eval_set = store.dataset(request.select_by.split(":", 1)[1])
        eval_set.refuse_test(f"--select-by {request.select_by}")
        if not eval_set.has_labels:
            raise KamalError(f"--select-by {request.select_by}: that dataset has no labels")
    name = check_name(request.name, "student") if request.name is not None else _default_name(store, method.name)
    if store.find_student(name) is not None:
        raise KamalError(f"a student named {name!r} exists already; choose another --name")
    if request.rmd_fit:
        store.dataset(request.rmd_fit)
    if not request.parent:
        check_base(request.student, request.student_layers)
    if request.init:
        check_init(request, teachers)
    if request.gold:
        check_gold(store, request.gold, teachers, task)
    train = TrainConfig(**request.train)
    train.validate()
    check_fit_for(train.fit, method, task)
    if task == "sequence" and several_heads(teachers):
        check_several_heads(request, method, train)
    request = replace(request, name=name, init=canonical_init(request.init))
    return Job(request, method, options, tuple(teachers), dataset, train)


def check_several_heads(request, method, train) -> None:
    """What a student of several tasks does not do yet, refused before any work in one line each."""
    refused = [
        (method.level == "feature", f"{method.name} learns from teacher features, which no task owns"),
        (bool(request.init), "--init merge starts a one-task student"),
        (bool(request.gold), "--gold labels one task's classes"),
        (request.select_by != "transfer-loss", "--select-by eval:NAME scores one task"),
        (train.fit != "all", f"--fit {train.fit} trains one head"),
    ]
    for refuse, why in refused:
        if refuse:
            raise KamalError(f"these teachers answer several tasks, and {why}: amalgamate them with an output-level "
                             "method, or one task at a time with --teacher NAME")


def check_fit_for(fit: str, method, task: str) -> None:
    """--fit head trains an output-level objective on a sequence classifier's head (kamalcli/train/head.py)."""
    if fit == "all":
        return
    if task == "token":
        raise KamalError(f"--fit {fit} trains a sentence classifier's head; token students train with --fit all")
    if method.level == "feature":
        raise KamalError(f"--fit {fit}: {method.name} trains on the student's hidden states, which a head on cached "
                         "states never computes; use --fit all")


def check_gold(store, gold_name: str, teachers, task: str) -> None:
    """--gold: a labelled text dataset whose labels are all in the teachers' union (any of their names)."""
    if task == "token":
        raise KamalError("--gold adds a gold-label loss for text classifiers; token teachers do not take it")
    gold = store.dataset(gold_name)
    gold.refuse_test(f"--gold {gold_name}")
    if gold.task != "sequence" or not gold.has_labels:
        raise KamalError(f"--gold {gold_name}: that dataset has no labels (add it with --label-column)")
    space = store.label_space(teachers)
    unknown = sorted(label for label in (gold.label_counts or {}) if not space.knows(label))
    if unknown:
        raise KamalError(f"--gold {gold_name} has labels none of the teachers knows: {', '.join(unknown[:5])}")


def canonical_init(init: str | None) -> str | None:
    """merge -> merge:task-arithmetic (what the run and the student record)."""
    from kamalcli.merge.merged import merge_method

    return None if init is None else f"merge:{merge_method(init)}"


def check_init(request: AmalgamateRequest, teachers) -> None:
    """--init merge[:METHOD]: a new student of the teachers' own base (whose weights the merge starts from)."""
    from kamalcli.merge.merged import merge_method

    merge_method(request.init)
    if request.parent:
        raise KamalError("--init merge starts a new student; an extended student starts from its parent")
    if teachers_task(teachers) == "token":
        raise KamalError("--init merge is for text classifiers; token teachers are not merged")
    _check_merge_shapes(request.student, request.student_layers, teachers)


def _check_merge_shapes(base: str, layers: int | None, teachers) -> None:
    """Before any work, from config.json alone: the student (the base, or its first `layers` layers) and every
    teacher have one shape. Teachers fine-tuned from a base's first N layers (`train-teacher --base-layers N`)
    merge into a student of the same N layers."""
    from kamalcli.models.bases import resolve_model_source
    from kamalcli.models.folder import depth_and_width, read_config

    def shape(folder: Path, layers: int | None = None) -> str:
        config, (depth, width) = read_config(folder), depth_and_width(folder)  # as add-teacher reads them
        return f"{config.get('model_type')}, {layers or depth} layers of {width}, vocabulary {config.get('vocab_size')}"

    wanted = shape(resolve_model_source(base), layers)
    for teacher in teachers:
        found = shape(Path(teacher.path))
        if found != wanted:
            raise KamalError(f"--init merge: teacher {teacher.name} ({found}) was not fine-tuned from the student "
                             f"{base} ({wanted}); --student must be the base the teachers share, and "
                             "--student-layers their depth when they kept only its first layers")


def check_base(source: str, layers: int | None) -> None:
    """Before any work: the student base exists and has enough layers (config.json only)."""
    from kamalcli.models.bases import resolve_model_source
    from kamalcli.models.folder import read_config

    config = read_config(resolve_model_source(source))
    if config.get("auto_map"):
        raise KamalError(f"{source} needs custom code from its author; kamal never runs remote code")
    total = config.get("num_hidden_layers")
    if layers is not None and (total is None or not 1 <= layers <= total):
        raise KamalError(f"--student-layers {layers}: the base has {total} layers")


def reads_confidences(method, options) -> bool:
    """Whether the method reads the teachers' probe confidences (MC dropout, RMD) with these options."""
    return method.confidences or getattr(options, "confidence_score", None) is not None


def options_need_rmd(options, teachers=(), rmd_fit: str | None = None) -> bool:
    """score=rmd and rmd+prototype read RMD (score=auto is decided first: Recipe.options_for)."""
    return getattr(options, "confidence_score", None) in RMD_SCORES
