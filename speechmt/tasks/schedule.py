"""Progressive multi-task schedules: a run is a list of stages, each naming its data streams (a task on a
prepared split, with objective weights), how the streams mix, the parameters it freezes and its end.

In YAML (`train.stages`), e.g. XSTNet's MT-then-everything:

    stages:
      - name: mt
        tasks: [{task: mt, objectives: {ce: 1.0}}]
        updates: 2000
      - name: st+asr+mt
        tasks: [{task: st}, {task: asr}, {task: mt}]
        mix: together

A config without `stages` is one stage of `train.task` with CE (and CTC when train.ctc_weight > 0, as
(1 - w) CE + w CTC), ending at train.max_epochs: today's runs, with the same results.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from speechmt.checks import checked, count_problem, field_problems, number_problem, raise_problems

MIXES = ("together", "sample")


@dataclass
class TaskData:
    """One data stream of a stage: `task` (st, asr or mt) on `split` of the prepared folder `data_dir`
    (empty: data.dir / data.train_split; a relative path is inside data.dir, e.g. "mt-text"), trained with
    `objectives` {name: weight}. `valid_split` (None: data.valid_split for data.dir, no validation for
    another folder) is scored at validation. `ratio` is its share of batches under mix "sample".
    `max_tokens` / `max_sentences` (0: the data section's) size its batches: text streams count source
    tokens where audio streams count 10 ms frames, so they need their own. `ramp` {objective: n} raises that
    objective's weight linearly over the stage's first n updates (weight * min(1, (k + 1) / n) at the stage's
    update k, 0-based), as Chimera's contrastive weight. `parts` (fat and fat_text only; empty: all) keeps
    some of the parts of the stream's examples (speechmt.tasks.tasks.FAT_PARTS): ["speech", "src"] pretrains
    FAT-MLM on ASR pairs, ["speech"] on untranscribed audio, ["src"] or ["tgt"] on monolingual text."""

    task: str = "st"
    objectives: dict[str, float] = field(default_factory=lambda: {"ce": 1.0})
    data_dir: str = ""
    split: str = ""
    valid_split: str | None = None
    ratio: float = checked(1.0, lo=0, lo_in=False)
    max_tokens: int = checked(0, lo=0, note="0: the data section's")
    max_sentences: int = checked(0, lo=0, note="0: the data section's")
    ramp: dict[str, int] = field(default_factory=dict)
    parts: list[str] = field(default_factory=list)

    def __post_init__(self):
        from speechmt.tasks.objectives import OBJECTIVES
        from speechmt.tasks.tasks import FAT_PARTS, TASK_INPUTS

        if self.task not in TASK_INPUTS:
            raise ValueError(f"unknown task {self.task!r}; expected one of {', '.join(TASK_INPUTS)}")
        what = f"task {self.task}"
        if not isinstance(self.objectives, dict) or not self.objectives:
            raise ValueError(f"{what}: objectives must be a mapping {{name: weight}}, got {self.objectives!r}")
        if not isinstance(self.ramp, dict):
            raise ValueError(f"{what}: ramp must be a mapping {{objective: updates}}, got {self.ramp!r}")
        raise_problems(
            what,
            [
                *(
                    f"unknown objective {name!r}; expected one of {', '.join(OBJECTIVES)}"
                    for name in self.objectives
                    if name not in OBJECTIVES
                ),
                *(number_problem(f"objective {name} weight", w) for name, w in self.objectives.items()),
                *field_problems(self),
                *(
                    f"ramp names {name!r}, not one of its objectives"
                    for name in self.ramp
                    if name not in self.objectives
                ),
                *(count_problem(f"ramp of {name}", n, 1, "updates") for name, n in self.ramp.items()),
            ],
        )
        self._check_parts(FAT_PARTS.get(self.task))

    def _check_parts(self, allowed: tuple[str, ...] | None) -> None:
        if not isinstance(self.parts, (list, tuple)) or not all(isinstance(p, str) for p in self.parts):
            raise ValueError(f"task {self.task}: parts must be a list of names, got {self.parts!r}")
        self.parts = list(self.parts)
        bad = [p for p in self.parts if p not in (allowed or ())]
        raise_problems(
            f"task {self.task}",
            [
                self.parts and allowed is None and "parts are for the FAT-MLM tasks fat and fat_text",
                allowed is not None
                and (bad or len(set(self.parts)) != len(self.parts))
                and f"parts must be distinct names among {', '.join(allowed)}, got {self.parts!r}",
            ],
        )

    @property
    def weights(self) -> dict[str, float]:
        """The objectives with a non-zero weight (those computed)."""
        return {k: float(w) for k, w in self.objectives.items() if w > 0}

    def weights_at(self, update: int) -> dict[str, float]:
        """The weights applied at the stage's update `update` (0-based): `weights`, ramped ones scaled by
        min(1, (update + 1) / n)."""
        return {k: w * min(1.0, (update + 1) / self.ramp[k]) if k in self.ramp else w for k, w in self.weights.items()}

    @property
    def key(self) -> str:
        """The stream's name in logs: its task, and its folder/split when they are not the defaults."""
        where = "/".join(x for x in (self.data_dir, self.split) if x)
        task = f"{self.task}[{'+'.join(self.parts)}]" if self.parts else self.task
        return f"{task}@{where}" if where else task


@dataclass
class Stage:
    """Streams trained together until `updates` updates of this stage or `epochs` epochs of its first
    stream (whichever comes first; neither: until train.max_updates, only for the last stage). mix
    "together": each update takes update_freq batches of every stream; "sample": each batch is of one
    stream drawn by the ratios. `freeze`: parameter-name prefixes not trained during the stage."""

    name: str = ""
    tasks: list[TaskData] = field(default_factory=lambda: [TaskData()])
    mix: str = "together"
    updates: int = checked(0, lo=0)
    epochs: int = checked(0, lo=0)
    freeze: list[str] = field(default_factory=list)

    def __post_init__(self):
        if not isinstance(self.tasks, (list, tuple)) or not self.tasks:
            raise ValueError(f"stage {self.name!r}: tasks must be a non-empty list")
        self.tasks = [t if isinstance(t, TaskData) else _task_data(t, self.name) for t in self.tasks]
        keys = [t.key for t in self.tasks]
        if len(set(keys)) != len(keys):
            raise ValueError(f"stage {self.name!r}: a task appears twice on the same data ({', '.join(keys)})")
        raise_problems(
            f"stage {self.name!r}",
            [
                self.mix not in MIXES and f"unknown mix {self.mix!r}; expected one of {', '.join(MIXES)}",
                *field_problems(self),
            ],
        )
        self.freeze = list(self.freeze or [])


def _task_data(d, stage: str) -> TaskData:
    if not isinstance(d, dict):
        raise ValueError(f"stage {stage!r}: each task is a mapping (task, objectives, ...), got {d!r}")
    unknown = sorted(set(d) - set(TaskData.__dataclass_fields__))
    if unknown:
        raise ValueError(f"stage {stage!r}: unknown task option(s): {', '.join(unknown)}")
    return TaskData(**d)


def parse_stages(stages: list) -> list[Stage]:
    """Stage objects from the YAML list (dicts) or Stage objects; every stage but the last must end."""
    if not isinstance(stages, (list, tuple)):
        raise ValueError(f"stages must be a list, got {type(stages).__name__}")
    parsed = []
    for i, s in enumerate(stages):
        if isinstance(s, Stage):
            parsed.append(s)
            continue
        if not isinstance(s, dict):
            raise ValueError(f"stage {i}: expected a mapping, got {s!r}")
        unknown = sorted(set(s) - set(Stage.__dataclass_fields__))
        if unknown:
            raise ValueError(f"stage {i}: unknown option(s): {', '.join(unknown)}")
        parsed.append(Stage(**{"name": str(i), **s}))
    for s in parsed[:-1]:
        if not s.updates and not s.epochs:
            raise ValueError(f"stage {s.name!r} is not the last: give it updates or epochs to end")
    return parsed


def stages_of(train) -> list[Stage]:
    """The stages of a TrainConfig: its `stages`, or the one stage of `task` with CE (+ CTC)."""
    if train.stages:
        return train.stages
    w = train.ctc_weight
    objectives = {"ce": 1.0 - w, "ctc": w} if w > 0 else {"ce": 1.0}
    return [Stage(name=train.task, tasks=[TaskData(train.task, objectives)], epochs=train.max_epochs)]


def all_tasks(stages: list[Stage]) -> list[TaskData]:
    return [t for s in stages for t in s.tasks]
