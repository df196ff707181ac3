"""A student of teachers that answer different tasks (kamalcli/heads.py): a head per task, one training loop.

Each task is amalgamated on its own teachers as a one-task student would be: the method (its recipe decided on
that task's teachers alone), or `multi-label` for a multi-label task, and vanilla-kd for a task with one teacher
(nothing to choose among). The student is one classifier whose columns are the tasks' labels in turn; its loss
per row is the sum of each task's loss on that task's columns. A one-task workspace never comes here: its
students are made as they always were.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from kamalcli.errors import KamalError
from kamalcli.heads import Head, TaskTeachers, tasks_of


def task_job(job, task: TaskTeachers, recipe: dict | None = None):
    """The job of one task: its teachers, its method (multi-label, or vanilla-kd for one teacher) and recipe."""
    from kamalcli.methods import get_method
    from kamalcli.methods.multi_label import MULTI_LABEL
    from kamalcli.students.plan import with_recipe

    method, options = job.method, job.options
    if task.multi_label:
        method, options = MULTI_LABEL, MULTI_LABEL.options()
    elif len(task.teachers) == 1 and job.method.confidences:
        method = get_method("vanilla-kd")
        options = method.options()
    return replace(job, teachers=task.teachers, method=method, options=options,
                   request=with_recipe(job.request, recipe))


def task_jobs(job) -> list:
    """Each task's job, with the recipe the request recorded for it."""
    recipes = (job.request.recipe or {}).get("tasks", {})
    return [task_job(job, task, recipes.get(task.name)) for task in tasks_of(job.teachers)]


def task_name(task_job_) -> str:
    """The task a task_job trains (its teachers all answer it)."""
    return task_job_.teachers[0].head_name


def method_line(task_job_) -> str:
    teachers = ", ".join(t.name for t in task_job_.teachers)
    return f"Task {task_name(task_job_)}: {task_job_.method.name} on {teachers}."


def combined_objective(objectives: list, heads: list[Head]):
    """One objective from each task's: per row, the sum over tasks of weight_t * loss_t on task t's columns.
    Each task's arrays (and weights) are kept under its own prefix."""
    from kamalcli.train.objective import Objective

    arrays, losses = {}, []
    for i, (objective, head) in enumerate(zip(objectives, heads)):
        if objective.auxiliary is not None:
            raise KamalError(f"task {head.name}'s objective trains a module of its own; several tasks take "
                             "output-level methods only")
        prefix = f"{i}:"
        arrays.update({prefix + key: value for key, value in objective.arrays.items()})
        if objective.weights is not None:
            arrays[prefix + "weight"] = np.asarray(objective.weights, dtype=np.float32)
        losses.append((prefix, objective.loss, head.columns, objective.weights is not None))

    def loss(logits, batch):
        total = 0
        for prefix, task_loss, columns, weighted in losses:
            own = {key[len(prefix):]: value for key, value in batch.items() if key.startswith(prefix)}
            term = task_loss(logits[:, columns], own)
            total = total + (term * own["weight"] if weighted else term)
        return total

    info = {"tasks": {head.name: objective.info for objective, head in zip(objectives, heads)}}
    return Objective(arrays, loss, None, info)
