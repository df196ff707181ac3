"""kamal from Python: a workspace whose methods are the commands, with the commands' settings and jobs.

    import kamalcli
    ws = kamalcli.init("proj")                    # or kamalcli.open("proj")
    ws.add_teacher("./news-a")
    ws.add_data("unlabelled.jsonl", name="pool")
    ws.probe()
    student = ws.amalgamate("muki-hard", name="v1")
    ws.evaluate("v1", data="test")["accuracy"]

Every method resolves its settings as the command does (a given value, else kamal.toml, else kamal's default),
calls the job the command calls, and returns what `--json` prints: a record (Teacher, Dataset, Student: `.as_json()`
is the command's JSON) or the JSON-shaped dict itself. Bad input raises kamalcli.KamalError with the line the command
prints. The command line is a layer over these methods (kamalcli/cli)."""

from __future__ import annotations

from pathlib import Path

from kamalcli.api.session import Session
from kamalcli.errors import KamalError


def _quiet(_line: str) -> None:
    pass


class Workspace:
    """A kamal workspace opened from Python. say: where kamal's progress lines go (default: nowhere); detail: where
    the evidence behind each decision goes (`--verbose`; default: nowhere)."""

    def __init__(self, path: str | Path | None = None, *, session: Session | None = None, say=None, detail=None):
        self.session = session or Session(workspace_option=None if path is None else str(path))
        self.say = say or _quiet
        self.detail = detail
        self.session.workspace  # noqa: B018  (a folder that is no workspace: KamalError now, not at the first call)

    @property
    def root(self) -> Path:
        return self.session.workspace.root

    def __repr__(self) -> str:
        return f"kamalcli.Workspace({str(self.root)!r})"

    # -- what it holds ------------------------------------------------------------------------------------------

    def teachers(self) -> list:
        with self.session.reader() as store:
            return store.teachers()

    def datasets(self) -> list:
        with self.session.reader() as store:
            return store.datasets()

    def students(self) -> list:
        with self.session.reader() as store:
            return store.students()

    def student(self, name: str):
        with self.session.reader() as store:
            return store.student(name)

    # -- adding ------------------------------------------------------------------------------------------------

    def add_teacher(self, folder: str | Path, *, name: str | None = None, labels: list[str] | None = None,
                    copy: bool = False, task: str | None = None):
        """`kamal add-teacher`: a fine-tuned classifier folder, registered; the Teacher. task: the task it answers
        (a head of its own in the student); None: the one shared task."""
        from kamalcli.teachers.register import register_teacher

        with self.session.writer() as store:
            teacher, notes = register_teacher(self.session.workspace, store, str(folder), name=name, labels=labels,
                                              copy=copy, task=task)
        for line in notes:
            self.say(line)
        return teacher

    def add_data(self, path: str | Path, *, name: str | None = None, role: str = "transfer",
                 text_column: str | None = None, label_column: str | None = None, data_format: str | None = None,
                 tokens_column: str | None = None, tags_column: str | None = None, max_chars: int | None = None,
                 skip_unlabelled: bool = False):
        """`kamal add-data`: text (or tokens with tags) registered under a role; the Dataset."""
        from kamalcli.data.text import register_dataset

        if max_chars is not None and max_chars < 1:
            raise KamalError(f"--max-chars must be at least 1 (got {max_chars})")
        if role not in ("transfer", "eval", "test"):
            raise KamalError(f"role must be transfer, eval or test (got {role!r})")
        with self.session.writer() as store:
            dataset, notes = register_dataset(
                self.session.workspace, store, str(path), name=name, text_column=text_column,
                label_column=label_column, role=role, data_format=data_format, tokens_column=tokens_column,
                tags_column=tags_column, max_chars=max_chars, skip_unlabelled=skip_unlabelled)
        for line in notes:
            self.say(line)
        return dataset

    def synthesize(self, name: str, *, per_class: int = 100, prompts: tuple[str, ...] = (), lm: str | None = None,
                   teachers: tuple[str, ...] = (), seed: int | None = None, device: str | None = None, **steering):
        """`kamal synthesize`: texts a causal LM writes, steered by each teacher towards each of its classes
        (steering: SynthesisRequest's other fields); the generated Dataset and its quality figures."""
        from kamalcli.models.bases import DEFAULT_LM
        from kamalcli.synth.synthesize import DEFAULT_PROMPT, SynthesisRequest, synthesize

        unknown = set(steering) - set(SynthesisRequest.__dataclass_fields__)
        if unknown:
            raise KamalError(f"synthesize has no setting {', '.join(sorted(unknown))}")
        request = SynthesisRequest(name=name, per_class=per_class, lm=DEFAULT_LM if lm is None else lm, teachers=tuple(teachers),
                                   prompts=tuple(prompts) or (DEFAULT_PROMPT,),
                                   seed=self.session.setting("workspace", "seed", seed),
                                   device=self.session.device(device), **steering)
        request.check()
        with self.session.writer() as store:
            return synthesize(self.session.workspace, store, request, say=self.say)

    def train_teacher(self, data: str, labels: list[str], name: str, *, base: str | None = None,
                      base_layers: int | None = None, device: str | None = None, backend: str | None = None, **train):
        """`kamal train-teacher`: a classifier fine-tuned on a labelled dataset's rows of these labels, registered;
        (the Teacher, its training figures). train: as amalgamate's; one epoch unless epochs or steps."""
        from kamalcli.teachers.train import TeacherRequest, train_teacher

        request = TeacherRequest(data=data, labels=list(labels), name=name,
                                 base=base or self.session.workspace.setting("train", "student"),
                                 base_layers=base_layers, train=self._train(train, default_epochs=1),
                                 device=self.session.device(device))
        with self.session.job(self.session.device(device), backend) as store:
            return train_teacher(self.session.workspace, store, request, say=self.say)

    def resume_teacher(self, name: str, *, device: str | None = None, backend: str | None = None):
        """`kamal train-teacher --resume NAME`: (the Teacher, its training figures)."""
        from kamalcli.teachers.train import resume_teacher

        with self.session.job(self.session.device(device), backend) as store:
            return resume_teacher(self.session.workspace, store, name, say=self.say)

    # -- probing and training ----------------------------------------------------------------------------------

    def probe(self, *, teachers: tuple[str, ...] = (), data: tuple[str, ...] = (), mc_samples: int | None = None,
              dropout: float | None = None, rmd: bool | None = None, rmd_fit: str | None = None,
              rmd_layers: str | None = None, batch_size: int | None = None, max_length: int | None = None,
              device: str | None = None, mc_mode: str = "auto", mc_exact: bool | None = None, seed: int | None = None,
              backend: str | None = None) -> dict:
        """`kamal probe`: every teacher on every dataset once (cached); the summary `kamal probe` prints."""
        from kamalcli.probe.service import ProbeRequest, probe_workspace
        from kamalcli.recipe.recipe import probe_score

        s = self.session
        request = ProbeRequest(mc_samples=s.setting("probe", "mc_samples", mc_samples),
                               dropout=s.setting("probe", "dropout", dropout),
                               max_length=s.setting("probe", "max_length", max_length), layers=rmd_layers or "default",
                               seed=s.setting("workspace", "seed", seed),
                               mc_exact=bool(s.setting("probe", "mc_exact", mc_exact)))
        batch = s.setting("probe", "batch_size", batch_size)
        if batch < 1:
            raise KamalError(f"batch_size must be at least 1 (got {batch})")
        with s.job(s.device(device), backend) as store:
            for name in teachers:
                store.teacher(name)
            for name in data:
                store.dataset(name)
            return probe_workspace(s.workspace, store, request, teacher_names=tuple(teachers),
                                   dataset_names=tuple(data), rmd=s.setting("probe", "rmd", rmd), rmd_fit=rmd_fit,
                                   device=s.device(device), batch_size=batch, mode=mc_mode, say=self.say,
                                   decide_score=probe_score)

    def report(self) -> dict:
        """`kamal report --json`: calibration and selection per teacher and dataset, and the recipe the next
        `amalgamate` with no options would follow."""
        from kamalcli.report.gather import text_report

        self.say_stale_probes()
        with self.session.reader() as store:
            return text_report(store, self.session.workspace, default_student_options())

    def say_stale_probes(self) -> None:
        """One line (to say) per teacher whose weights changed since its cached probes were made."""
        from kamalcli.probe.teacher_weights import stale_probe_lines

        with self.session.reader() as store:
            lines = stale_probe_lines(store.teachers())
        for line in lines:
            self.say(line)

    def amalgamate(self, method: str = "muki-hard", *, name: str | None = None, student: str | None = None,
                   student_layers: int | None = None, init: str | None = None, options=(),
                   teachers: tuple[str, ...] = (), data: str | None = None, select_by: str | None = None,
                   mc_samples: int | None = None, rmd_fit: str | None = None, gold: str | None = None,
                   reprobe: bool = False, mc_exact: bool | None = None, device: str | None = None,
                   backend: str | None = None, **train):
        """`kamal amalgamate`: one student over the union of the teachers' labels; the Student. options: a dict
        or KEY=VALUE strings (`--option`); train: epochs, steps, batch_size, lr, max_length, seed, checkpoint_every,
        embeddings, fit (`kamal amalgamate --help`)."""
        from kamalcli.students import amalgamate as service

        request = self._student_request(method, name, student, student_layers, init, options, teachers, data,
                                        select_by, mc_samples, rmd_fit, gold, reprobe, mc_exact, device, train)
        with self.session.job(self.session.device(device), backend) as store:
            return service.amalgamate(self.session.workspace, store, request, say=self.say, detail=self.detail)

    def dry_run(self, method: str = "muki-hard", *, name: str | None = None, student: str | None = None,
                student_layers: int | None = None, init: str | None = None, options=(),
                teachers: tuple[str, ...] = (), data: str | None = None, select_by: str | None = None,
                mc_samples: int | None = None, rmd_fit: str | None = None, gold: str | None = None,
                reprobe: bool = False, mc_exact: bool | None = None, device: str | None = None, **train) -> dict:
        """`kamal amalgamate --dry-run`: what amalgamate(...) with the same arguments would train on, training
        nothing: the recipe, the target as built, and a fingerprint equal for requests that train the same student."""
        from kamalcli.students import amalgamate as service

        request = self._student_request(method, name, student, student_layers, init, options, teachers, data,
                                        select_by, mc_samples, rmd_fit, gold, reprobe, mc_exact, device, train)
        with self.session.writer() as store:  # a missing probe is made and cached, as amalgamate would
            return service.dry_run(self.session.workspace, store, request, say=self.say, detail=self.detail)

    def resume(self, name: str, *, device: str | None = None, backend: str | None = None):
        """`kamal amalgamate --resume NAME`: an interrupted run of that student, continued with its own settings."""
        from kamalcli.students import amalgamate as service

        with self.session.job(self.session.device(device), backend) as store:
            return service.resume(self.session.workspace, store, name, say=self.say, detail=self.detail)

    def extend(self, student: str, teachers: tuple[str, ...], *, name: str | None = None, method: str | None = None,
               options=(), data: str | None = None, select_by: str | None = None, mc_samples: int | None = None,
               refine: bool = False, reprobe: bool = False, mc_exact: bool | None = None, device: str | None = None,
               backend: str | None = None, **train):
        """`kamal extend`: the student grown with new teachers (old label ids kept); the new Student."""
        from kamalcli.students.extend import extend

        request = self._request(method or "", options, name, data, select_by, mc_samples, mc_exact, device, reprobe,
                                train)
        with self.session.job(self.session.device(device), backend) as store:
            return extend(self.session.workspace, store, request, student_name=student, teacher_names=list(teachers),
                          refine=refine, say=self.say, detail=self.detail)

    def _student_request(self, method, name, student, student_layers, init, options, teachers, data, select_by,
                         mc_samples, rmd_fit, gold, reprobe, mc_exact, device, train):
        """amalgamate's request (and its dry run's): a new student from these teachers."""
        return self._request(method, options, name, data, select_by, mc_samples, mc_exact, device, reprobe, train,
                             student=student or self.session.workspace.setting("train", "student"),
                             student_layers=student_layers, init=init, teachers=list(teachers), rmd_fit=rmd_fit,
                             gold=gold)

    def _request(self, method, options, name, data, select_by, mc_samples, mc_exact, device, reprobe, train, **more):
        from kamalcli.students.amalgamate import AmalgamateRequest

        s = self.session
        return AmalgamateRequest(
            method=method, options=_options(options), name=name, data=data,
            select_by=select_by or s.workspace.setting("train", "select_by"), train=self._train(train),
            probe=s.probe_settings(mc_samples, mc_exact),
            probe_given=[key for key, value in (("mc_samples", mc_samples), ("mc_exact", mc_exact)) if value is not None],
            device=s.device(device), reprobe=reprobe, **more)

    def _train(self, train: dict, default_epochs: int | None = None) -> dict:
        """The training settings (kamal.toml and defaults under the given ones); an unknown name refused."""
        unknown = set(train) - TRAIN_KEYWORDS
        if unknown:
            raise KamalError(f"no training setting {', '.join(sorted(unknown))} (known: {', '.join(sorted(TRAIN_KEYWORDS))})")
        return self.session.train_settings(**{key: train.get(key) for key in TRAIN_KEYWORDS},
                                           default_epochs=default_epochs)

    # -- using a student ---------------------------------------------------------------------------------------

    def evaluate(self, student: str | None = None, *, data: str, baseline: str | None = None,
                 teachers: tuple[str, ...] = (), base: str | None = None, device: str | None = None,
                 task: str | None = None) -> dict:
        """`kamal eval`: accuracy, macro-F1, per-class figures of a student, or of a baseline (ensemble,
        teacher:NAME, merge[:METHOD], zero-shot, prior:DATA); the dict `kamal eval --json` prints."""
        from kamalcli.students.evaluate import evaluate_baseline, evaluate_student

        if student is None and baseline is None:
            raise KamalError("say what to evaluate: a STUDENT, or --baseline ensemble, teacher:NAME, merge, zero-shot "
                             "or prior:DATA")
        if student is not None and baseline is not None:
            raise KamalError("give a STUDENT or --baseline (ensemble, teacher:NAME, merge, zero-shot, prior:DATA), "
                             "not both")
        if teachers and baseline is None:
            raise KamalError("--teacher picks the members of --baseline ensemble; a student has its own teachers")
        if task and baseline is not None:
            raise KamalError("--task picks a task of a student; a baseline's teachers answer one task already")
        if base and baseline is None:
            raise KamalError("--base names the base of --baseline merge, zero-shot or prior:DATA; a student has its own")
        device = self.session.device(device)
        with self.session.writer() as store:
            dataset = store.dataset(data)
            store.claim_inputs(datasets=[dataset])
            if baseline:
                return evaluate_baseline(self.session.workspace, store, baseline, dataset, device=device,
                                         max_length=self.session.workspace.setting("probe", "max_length"),
                                         teacher_names=tuple(teachers), base=base, say=self.say)
            return evaluate_student(store, store.student(student), dataset, device=device, task=task)

    def predict(self, student: str, texts: list[str] | str, *, onnx: bool = False, top: int = 1,
                device: str | None = None) -> list[dict]:
        """`kamal predict --json`: one dict per text, in order (label, probability, top labels; a token student's
        entities)."""
        from kamalcli.students.predict import predict_rows

        texts = [texts] if isinstance(texts, str) else list(texts)
        if top < 1:
            raise KamalError(f"top must be at least 1 (got {top})")
        with self.session.reader() as store:
            found = store.student(student)
            export = store.latest_export(found.id) if onnx else None
        if onnx and export is None:
            raise KamalError(f"student {student} has no ONNX export yet: run `kamal export {student} --onnx`")
        return predict_rows(found, texts, export=export, device=self.session.device(device), top=top)

    def label_queue(self, data: str, n: int, out: str | Path, *, student: str | None = None,
                    strategy: str | None = None, seed: int = 0, encoder: str | None = None, force: bool = False,
                    device: str | None = None) -> list[dict]:
        """`kamal label-queue`: the n rows of data whose labels would help most, written to out (fill in `label`,
        then add_data(out, name="gold", label_column="label") and amalgamate(..., gold="gold")); those rows."""
        from kamalcli.students.label_queue import DEFAULT_STRATEGY, check_queue_file, queue_rows, write_queue

        out = Path(out)
        with self.session.writer() as store:  # teachers' outputs on the data are probed (K = 1) and cached when missing
            check_queue_file(self.session.workspace, store, out, force)
            dataset = store.dataset(data)
            found = store.student(student) if student else None
            store.claim_inputs(datasets=[dataset])
            rows = queue_rows(self.session.workspace, store, dataset, n, student=found,
                              max_length=self.session.workspace.setting("probe", "max_length"),
                              device=self.session.device(device), strategy=strategy or DEFAULT_STRATEGY, seed=seed,
                              encoder=encoder, say=self.say)
        write_queue(rows, out, force=force)
        return rows

    def calibrate(self, student: str, *, data: str, coverage: float = 0.9, device: str | None = None,
                  task: str | None = None) -> dict:
        """`kamal calibrate --json`: the student's conformal threshold for this coverage (a several-task student's:
        of the task whose labels data's are, or task), and the spread of one draw's coverage its rows imply."""
        from kamalcli.students.trust import calibrate_student
        from kamalcli.trust.conformal import check_coverage, coverage_spread

        check_coverage(coverage)
        with self.session.writer() as store:
            found = store.student(student)
            dataset = store.dataset(data)
            store.claim("student", found.name, exclusive=True)
            store.claim_inputs(datasets=[dataset])
            calibration, notes = calibrate_student(store, found, dataset, coverage=coverage,
                                                   device=self.session.device(device), task=task)
        spread = coverage_spread(calibration.rows, calibration.coverage)
        return {"student": found.name, **calibration.as_json(), "notes": notes,
                "coverage_spread": {"level": 0.9, "low": spread[0], "high": spread[1]} if spread else None}

    def export(self, student: str, *, format: str = "onnx", quantize: str | None = None, out: str | None = None,
               force: bool = False, opset: int = 17) -> dict:
        """`kamal export --onnx` (format "onnx") or `--hf` (format "hf"), checked; the dict `--json` prints."""
        from kamalcli.export.service import export_hf, export_student

        if format not in ("onnx", "hf"):
            raise KamalError(f"format must be onnx or hf (got {format!r})")
        if format == "hf" and quantize:
            raise KamalError("--quantize applies to --onnx only")
        with self.session.writer() as store:
            found = store.student(student)
            if format == "hf":
                return export_hf(self.session.workspace, store, found, out=out, force=force).as_json()
            record, result = export_student(self.session.workspace, store, found, quantize=quantize, out=out,
                                            force=force, opset=opset)
        for warning in result.warnings:
            self.say(f"Warning: {warning}")
        for message in result.notes:
            self.say(f"Note: {message}")
        return {**record.as_json(), "fused_ops": result.fused_op_counts, "warnings": result.warnings}


def default_student_options():
    """The options of kamal's default student (muki-hard, no options): the recipe `report` shows is theirs."""
    from kamalcli.methods import get_method

    return get_method("muki-hard").parse([])


TRAIN_KEYWORDS = frozenset({"epochs", "steps", "batch_size", "lr", "max_length", "seed", "checkpoint_every",
                            "embeddings", "fit"})


def _options(options) -> list[str]:
    """A method's options as `--option` gives them: KEY=VALUE strings, from a dict or strings."""
    if isinstance(options, dict):
        return [f"{key}={str(value).lower() if isinstance(value, bool) else value}" for key, value in options.items()]
    return [options] if isinstance(options, str) else list(options)


def init(path: str | Path = ".", *, force: bool = False, say=None, detail=None) -> Workspace:
    """`kamal init`: a workspace in path (kamal.toml, database, artifact folders), opened."""
    from kamalcli.workspace.folder import init_workspace

    root, backup = init_workspace(str(path), force=force)
    if backup and say:
        say(f"The previous workspace state was moved to {backup}")
    return Workspace(root.root, say=say, detail=detail)


def open(path: str | Path = ".", *, say=None, detail=None) -> Workspace:  # noqa: A001  (kamalcli.open, as in io)
    """The workspace at path (or the one above it, as the commands find it)."""
    return Workspace(path, say=say, detail=detail)
