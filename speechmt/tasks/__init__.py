"""Training tasks and objectives: a task encodes a batch (speech or text), objectives are small loss
functions over the encoder output (speechmt.tasks.objectives), and a schedule is a list of stages each
naming its data, tasks, objective weights, frozen parameters and end (speechmt.tasks.schedule)."""

from speechmt.tasks.objectives import OBJECTIVES, Objective, ObjectiveSettings
from speechmt.tasks.schedule import Stage, TaskData, stages_of
from speechmt.tasks.tasks import TASK_INPUTS, encode_batch, task_losses

__all__ = [
    "OBJECTIVES",
    "Objective",
    "ObjectiveSettings",
    "Stage",
    "TaskData",
    "TASK_INPUTS",
    "encode_batch",
    "stages_of",
    "task_losses",
]
