"""Dataset generation: knobs, question families, distractors, question assembly, synthetic world, export."""
