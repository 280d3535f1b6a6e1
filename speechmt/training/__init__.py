"""Training: the trainer loop, optimiser and learning-rate schedule, checkpoints."""
