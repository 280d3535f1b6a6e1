"""Training tasks: one function per task, `(model, batch, cfg) -> (loss, stats)`; losses live here."""

from speechmt.tasks.tasks import TASKS, TaskConfig, asr_task, mt_task, st_task

__all__ = ["TASKS", "TaskConfig", "asr_task", "mt_task", "st_task"]
