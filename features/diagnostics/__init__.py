"""Bias diagnostics of generated datasets: Hasty Student, the probes, bias metrics, the HTML report."""
