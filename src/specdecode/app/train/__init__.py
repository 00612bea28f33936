"""Training learned drafting heads (EAGLE, Medusa) by self-distillation from the target.

Modules, in pipeline order: `data` (prompts and the target's greedy answers), `vocab` (the draft
vocabulary), `features` (teacher-forced hidden states), `objectives` (the losses), `loop` (epochs
and checkpoints), `tau` (validation with the real drafter), `run` (the resumable whole).
"""

from .run import TrainOptions, run_training

__all__ = ["TrainOptions", "run_training"]
